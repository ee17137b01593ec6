"""The CLI's workload commands: allreduce, incast, flows, job (your own program), jobs."""

from __future__ import annotations

import shlex

from testbed.cli.base import Commands
from workloads.allreduce.job import JobSpec, background
from workloads.allreduce.schedule import algorithms
from workloads.command.job import DEFAULT_MASTER_PORT, CommandSpec
from workloads.command.job import background as background_command
from workloads.fabric import FabricView
from workloads.flows.job import background_job
from workloads.flows.schedule import background as background_flows
from workloads.flows.schedule import incast
from workloads.hosts import BackgroundJob, JobError, parse_size


class JobCommands(Commands):
    """Running collectives, flows and programs: allreduce, incast, flows, job, jobs."""

    def _words(self, line: str, allowed: tuple[str, ...]) -> tuple[list[str], dict[str, str], bool]:
        """HOST... key=value... [bg]: the hosts (`all` = every host), the options, and whether in the background."""
        words = line.split()
        hosts = [w for w in words if "=" not in w and w not in ("bg", "&")]
        options = dict(w.split("=", 1) for w in words if "=" in w)
        if hosts == ["all"]:
            hosts = [h.name for h in self.mn.hosts]
        unknown = set(options) - set(allowed)
        if unknown:
            raise ValueError(f"unknown option {', '.join(sorted(unknown))} ({', '.join(allowed)})")
        return hosts, options, "bg" in words or "&" in words

    def _launch(self, job: BackgroundJob, background: bool) -> None:
        self.jobs.append(job)
        if background:
            job.start()
            self.stdout.write(f"{job.name} started in the background (`jobs` shows it)\n")
            return
        job.run(self.say)
        self.stdout.write(job.describe(full=True) + "\n")

    def do_allreduce(self, line: str) -> None:
        """allreduce HOST... [size=8M] [algo=ring|tree|hd|rings|hier|auto] [iters=5] [chunk=256K] [cc=cubic]
        [order=topology|given] [bg]: an all-reduce over the hosts (`all` = every host), printed as an
        nccl-tests table; `bg` runs it in the background (see `jobs`). rings and hier: on multi-GPU
        servers (TOPO=railopt), where split=0.25 sends a quarter of what a server's GPUs exchange
        through their NICs (every collective takes it) and rails=adapt sizes hier's shares by each
        rail's measured rate (a degraded rail carries less)."""
        self._collective(line, "allreduce")

    def do_allgather(self, line: str) -> None:
        """allgather HOST... [size=8M] [algo=ring|rings|hier] [iters=5] [chunk=256K] [cc=…] [order=…] [bg]:
        an all-gather (each rank contributes size/n), as allreduce."""
        self._collective(line, "allgather")

    def do_reducescatter(self, line: str) -> None:
        """reducescatter HOST... [size=8M] [algo=ring|rings|hier] [iters=5] [chunk=256K] [cc=…] [order=…] [bg]:
        a reduce-scatter (each rank ends with its size/n of the sum), as allreduce."""
        self._collective(line, "reducescatter")

    def do_alltoall(self, line: str) -> None:
        """alltoall HOST... [size=8M] [algo=pairwise|pxn] [iters=5] [chunk=256K] [cc=…] [order=…] [bg]:
        an all-to-all (size/n from every rank to every rank; pxn relays over NVLink so nothing crosses
        rails), as allreduce."""
        self._collective(line, "alltoall")

    def _collective(self, line: str, collective: str) -> None:
        try:
            hosts, options, bg = self._words(line, ("size", "algo", "iters", "chunk", "cc", "order", "warmup",
                                                    "split", "rails"))
            if options.get("rails", "equal") not in ("equal", "adapt"):
                raise ValueError(f"rails: equal or adapt, got {options['rails']!r}")
            spec = JobSpec(hosts=hosts, sizes=[parse_size(options.get("size", "8M"))], collective=collective,
                           split=float(options.get("split", 0)), adapt_rails=options.get("rails") == "adapt",
                           algo=options.get("algo", algorithms(collective)[0]), iters=int(options.get("iters", 5)),
                           warmup=int(options.get("warmup", 1)), chunk_bytes=parse_size(options.get("chunk", "256K")),
                           cc=options.get("cc"), order=options.get("order", "topology"),
                           name=f"{collective}{len(self.jobs) + 1}")
            spec.check()
            view = FabricView.of_testbed(self.tb)
            view.endpoints(spec.hosts, spec.order)  # unknown hosts are named here, before anything starts
        except (JobError, ValueError) as exc:
            self.stdout.write(f"{collective}: {exc}\n")
            return
        self._launch(background(spec, view), bg)

    def do_incast(self, line: str) -> None:
        """incast RECEIVER SENDER... [size=1M] [cc=cubic] [bg]: every sender sends size bytes to the
        receiver at once; per-sender completion time and goodput, Jain fairness (see `jobs`)."""
        try:
            hosts, options, bg = self._words(line, ("size", "cc"))
            if len(hosts) < 2:
                raise ValueError("give the receiver, then at least one sender")
            view = FabricView.of_testbed(self.tb)
            view.endpoints(hosts, "given")
            flows = incast(hosts[0], hosts[1:], parse_size(options.get("size", "1M")))
        except (JobError, ValueError) as exc:
            self.stdout.write(f"incast: {exc}\n")
            return
        self._launch(background_job(f"incast{len(self.jobs) + 1}", flows, view, "incast", options.get("cc")), bg)

    def do_flows(self, line: str) -> None:
        """flows HOST...|all [load=0.3] [seconds=10] [seed=1] [min=16K] [max=2M] [cc=cubic] [bg]: background
        flows, Poisson arrivals between random pairs of the hosts offering load of each host's link,
        log-uniform sizes; completion times per size (see `jobs`)."""
        try:
            hosts, options, bg = self._words(line, ("load", "seconds", "seed", "min", "max", "cc"))
            view = FabricView.of_testbed(self.tb)
            view.endpoints(hosts, "given")
            flows = background_flows(hosts, float(options.get("seconds", 10)), float(options.get("load", 0.3)),
                               view.link_mbps(hosts), int(options.get("seed", 1)),
                               parse_size(options.get("min", "16K")), parse_size(options.get("max", "2M")))
        except (JobError, ValueError) as exc:
            self.stdout.write(f"flows: {exc}\n")
            return
        self._launch(background_job(f"flows{len(self.jobs) + 1}", flows, view, "background", options.get("cc")), bg)

    def do_job(self, line: str) -> None:
        """job HOST...|all [name=N] [timeout=600] [port=29500] [order=given|topology] [launcher=direct|mpi] [bg]
        -- PROGRAM [ARGS]: your program on the hosts, one rank each, started in their namespaces with
        RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT (the first host's) and GLOO_SOCKET_IFNAME set
        (launcher=mpi: one mpirun in the first host, a slot per host); per-rank exit codes and output
        tails; a failing rank or the timeout ends the others (see `jobs`)."""
        head, sep, program = line.partition(" -- ")
        if not sep and line.startswith("-- "):
            head, sep, program = "", "--", line[3:]
        try:
            if not sep or not program.split():
                raise ValueError("give the program after ` -- `, e.g. job h1 h2 -- python3 train.py")
            hosts, options, bg = self._words(head, ("name", "timeout", "port", "order", "launcher"))
            view = FabricView.of_testbed(self.tb)
            spec = CommandSpec(argv=shlex.split(program), hosts=hosts,
                               name=options.get("name", f"job{len(self.jobs) + 1}"),
                               order=options.get("order", "given"), timeout_s=float(options.get("timeout", 600)),
                               master_port=int(options.get("port", DEFAULT_MASTER_PORT)),
                               launcher=options.get("launcher", "direct"))
            spec.check()
            view.endpoints(spec.hosts, spec.order)
        except (JobError, ValueError) as exc:
            self.stdout.write(f"job: {exc}\n")
            return
        self._launch(background_command(spec, view), bg)

    def do_jobs(self, line: str) -> None:
        """jobs: the all-reduce and flow jobs started in this session, with their results."""
        if not self.jobs:
            self.stdout.write("no jobs yet (allreduce, incast, flows, job)\n")
        for job in self.jobs:
            self.stdout.write(job.describe() + "\n")
