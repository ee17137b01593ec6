"""The testbed's Mininet CLI: Mininet's commands (pingall, iperf, hN cmd ...) plus a banner and the
project's commands, one module per concern — the fabric (fabric.py: switches, servers, queues, int,
advice, mode, fidelity, iperf), workloads (jobs.py: allreduce, incast, flows, job, jobs), faults and their
localisation (faults.py: fail, restore, loss, slow, rate, flap, diagnose), the lab (lab.py:
scenario, report); their arguments (args.py)."""

from __future__ import annotations

from typing import Any

from mininet.cli import CLI

from emulation import budget
from emulation.net import Testbed
from testbed.cli.fabric import FabricCommands
from testbed.cli.faults import FaultCommands
from testbed.cli.jobs import JobCommands
from testbed.cli.lab import LabCommands


def banner(tb: Testbed) -> str:
    topo = tb.topo
    lines = [
        f"StarNet testbed: {topo.name} on the {tb.dataplane} data plane",
        f"  {len(topo.switches)} P4 switches, {len(topo.hosts)} hosts, {len(topo.links)} links, "
        f"programmed over P4Runtime by the controller",
        *([f"  {len(topo.servers)} servers of {'/'.join(sorted({str(len(s.gpus)) for s in topo.servers}))} GPUs, "
           f"each GPU a host on its rail's leaf, a server's GPUs joined by NVLink (try: servers)"]
          if topo.servers else []),
        f"  run directory: {tb.run_dir}",
        f"  switches: {', '.join(sorted({sw.process.scheduling for sw in tb.switches.values()}))} scheduling; "
        f"{budget.full_load(topo).line()}",
        "  logs: switches/<name>.log, controller.log, p4runtime-requests.log",
        f"  Prometheus metrics: {tb.metrics_url or 'not served'}",
        f"  live page: {tb.live_url or 'not served'} (a browser on this machine; README: Live page)",
        "  try: pingall | iperf h1 h8 | h1 ping -c3 h8 | switches | queues s3 | int s3 | advice | mode advice",
        "       allreduce h1 h2 h5 h6 size=8M algo=ring|tree|hd|auto iters=5 [bg] | incast h5 h1 h2 h3 size=1M",
        *(["       allreduce all algo=rings|hier (GPUs server by server; rail-aware ring, NVLink+NET) | servers"]
          if topo.servers else []),
        "       flows all load=0.3 seconds=10 [bg] | job all -- {python} examples/ddp_train.py [bg] | jobs",
        "       fidelity | exit",
    ]
    return "\n".join(lines) + "\n"


class StarNetCLI(FabricCommands, JobCommands, FaultCommands, LabCommands, CLI):
    prompt = "mininet> "

    def __init__(self, tb: Testbed, **kwargs: Any) -> None:
        self.tb = tb
        self.jobs = []
        assert tb.net is not None
        tb.net.stdout_banner = banner(tb)
        super().__init__(tb.net, **kwargs)

    def preloop(self) -> None:
        self.stdout.write(banner(self.tb))
        super().preloop()
