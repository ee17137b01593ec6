"""Memory of a soft switch under a P4Runtime soak: garbage Writes and StreamChannel cycles.

    .venv/bin/python bench/p4rt_soak.py [--writes 10000] [--streams 500] [--seed 18]

One soft switch process with no ports (no root needed), its pipeline set by a primary client.
Then, seeded, `--writes` Write RPCs of 1–50 updates that all fail in the ways a confused or
hostile client makes them fail (unknown table/action/profile ids, bad match widths and values,
values past their bitwidth, duplicate inserts, deletes of what is not there, groups naming
missing or repeated members), a StreamChannel opened, arbitrated and closed after every
writes/streams Writes, a backup arbitrating beside the primary now and then. The switch's RSS
(VmRSS of /proc/PID/status) is printed every 1,000 Writes.

Goal: RSS at the end within 10% of RSS after the first 1,000 Writes (memory levels off).
"""

from __future__ import annotations

import argparse
import queue
import random
import sys
import threading
import time
from pathlib import Path

import grpc
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller import entities as ent  # noqa: E402
from emulation.ports import free_ports  # noqa: E402
from emulation.rundir import clean_run, new_run_dir  # noqa: E402
from emulation.switchproc import SoftSwitchProcess  # noqa: E402
from wire.p4info import P4Schema  # noqa: E402
from wire.proto import p4r, p4r_grpc  # noqa: E402

DEVICE_ID = 1
PRIMARY_ELECTION = 100
REPORT_EVERY = 1000
GOAL_GROWTH = 0.10
console = Console(width=120)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Stream:
    """A StreamChannel that arbitrates with `election_low` and waits for the answer."""

    def __init__(self, stub: p4r_grpc.P4RuntimeStub, election_low: int) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.answers: queue.Queue = queue.Queue()
        self.call = stub.StreamChannel(iter(self.requests.get, None))
        threading.Thread(target=self._pump, daemon=True).start()
        request = p4r.StreamMessageRequest()
        request.arbitration.device_id = DEVICE_ID
        request.arbitration.election_id.low = election_low
        self.requests.put(request)

    def _pump(self) -> None:
        try:
            for response in self.call:
                if response.WhichOneof("update") == "arbitration":
                    self.answers.put(response.arbitration.status.code)
        except grpc.RpcError:
            self.answers.put(None)

    def answer(self, timeout_s: float = 10.0) -> int | None:
        return self.answers.get(timeout=timeout_s)

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()


def garbage_updates(schema: P4Schema, rng: random.Random) -> list[p4r.Update]:
    """1–50 updates, each invalid in one of the ways below."""
    selector = "StarIngress.ecmp_selector"
    out = []
    for _ in range(rng.randint(1, 50)):
        kind = rng.randrange(9)
        if kind == 0:  # unknown table id
            entry = ent.table_entry(schema, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": ("10.0.0.0", 8)},
                                    member_id=1)
            entry.table_id = rng.randrange(1, 1 << 32)
            out.append(ent.insert(entry))
        elif kind == 1:  # LPM value with bits past its prefix
            entry = ent.table_entry(schema, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": ("10.0.0.0", 8)},
                                    member_id=1)
            entry.match[0].lpm.value = rng.randbytes(4)
            entry.match[0].lpm.prefix_len = rng.randrange(0, 8)
            out.append(ent.insert(entry))
        elif kind == 2:  # port past bit<9>
            entry = ent.table_entry(schema, "StarIngress.port_role", {"standard_metadata.ingress_port": 1},
                                    action_call=ent.action(schema, "StarIngress.set_port_role", role=1))
            entry.match[0].exact.value = rng.randbytes(rng.randint(2, 40))
            out.append(ent.insert(entry))
        elif kind == 3:  # unknown action id with random params
            entry = ent.table_entry(schema, "StarIngress.port_role", {"standard_metadata.ingress_port": 2},
                                    action_call=ent.action(schema, "StarIngress.set_port_role", role=1))
            entry.action.action.action_id = rng.randrange(1, 1 << 32)
            entry.action.action.params.add(param_id=rng.randrange(1, 9), value=rng.randbytes(rng.randint(1, 64)))
            out.append(ent.insert(entry))
        elif kind == 4:  # delete of an entry that is not there
            out.append(ent.delete(ent.table_entry(
                schema, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": (f"10.{rng.randrange(256)}.0.0", 16)},
                member_id=1)))
        elif kind == 5:  # group naming members that do not exist, one of them twice
            member = rng.randrange(1000, 2000)
            out.append(ent.insert(ent.group(schema, selector, rng.randrange(1, 1 << 16),
                                            [(member, member), (member + 1, member), (member + 1, member)])))
        elif kind == 6:  # member with an action the profile's table does not take
            out.append(ent.insert(ent.member(schema, selector, rng.randrange(1, 1 << 16),
                                             ent.action(schema, "StarIngress.set_port_role", role=2))))
        elif kind == 7:  # counter write at an index far out of range
            update = p4r.Update(type=p4r.Update.MODIFY)
            counter = update.entity.counter_entry
            counter.counter_id = schema.id_of("StarIngress.port_rx")
            counter.index.index = rng.randrange(512, 1 << 40)
            out.append(update)
        else:  # an Update with no entity, or a type out of the enum
            update = p4r.Update(type=rng.choice([p4r.Update.UNSPECIFIED, 7, 99]))
            out.append(update)
    return out


def run(writes: int, streams: int, seed: int) -> int:
    rng = random.Random(seed)
    schema = P4Schema.load()
    run_dir = new_run_dir("bench-p4rt-soak")
    (grpc_port,) = free_ports(1)
    switch = SoftSwitchProcess("soak", DEVICE_ID, grpc_port, run_dir, [], {}, fidelity=False)
    rows: list[tuple[int, int, float]] = []
    try:
        switch.launch()
        switch.wait_ready()
        assert switch.proc is not None
        pid = switch.proc.pid
        channel = grpc.insecure_channel(switch.grpc_address)
        stub = p4r_grpc.P4RuntimeStub(channel)
        primary = Stream(stub, PRIMARY_ELECTION)
        if primary.answer() != 0:
            raise RuntimeError("the soak's primary client was not made primary")
        request = p4r.SetForwardingPipelineConfigRequest(
            device_id=DEVICE_ID, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
        request.election_id.low = PRIMARY_ELECTION
        request.config.p4info.CopyFrom(schema.p4info)
        stub.SetForwardingPipelineConfig(request)
        rows.append((0, 0, rss_mb(pid)))
        console.print(f"soft switch pid {pid}: RSS {rows[0][2]:.1f} MB with its pipeline set")
        every = max(1, writes // max(1, streams))
        cycled = failed_updates = 0
        started = time.monotonic()
        for n in range(1, writes + 1):
            write = p4r.WriteRequest(device_id=DEVICE_ID)
            write.election_id.low = PRIMARY_ELECTION
            write.updates.extend(garbage_updates(schema, rng))
            try:
                stub.Write(write, timeout=10)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise RuntimeError(f"Write {n} timed out: the switch is wedged") from None
                failed_updates += len(write.updates)
            else:
                raise RuntimeError(f"Write {n} of garbage was accepted")
            if n % every == 0 and cycled < streams:
                backup = Stream(stub, rng.randrange(1, PRIMARY_ELECTION))  # always below the primary
                if backup.answer() is None:
                    raise RuntimeError(f"stream cycle {cycled + 1}: no arbitration answer")
                backup.close()
                cycled += 1
            if n % REPORT_EVERY == 0:
                rows.append((n, cycled, rss_mb(pid)))
                console.print(f"  {n:>6} Writes ({failed_updates} failed updates), {cycled:>4} stream cycles: "
                              f"RSS {rows[-1][2]:.1f} MB  [{time.monotonic() - started:.0f} s]")
        primary.close()
        channel.close()
        if not switch.running:
            raise RuntimeError(f"the switch died: {switch.log_path}")
    finally:
        switch.stop()
        clean_run(run_dir)
    table = Table(title=f"P4Runtime soak, seed {seed}: soft switch RSS")
    for column in ("Writes", "stream cycles", "RSS MB"):
        table.add_column(column, justify="right")
    for n, cycles, rss in rows:
        table.add_row(f"{n:,}", str(cycles), f"{rss:.1f}")
    console.print(table)
    base = next((rss for n, _, rss in rows if n >= REPORT_EVERY), rows[0][2])
    end = rows[-1][2]
    growth = (end - base) / base
    met = growth <= GOAL_GROWTH
    console.print(f"figure: RSS {base:.1f} MB after the first {REPORT_EVERY:,} Writes, {end:.1f} MB after "
                  f"{rows[-1][0]:,} ({growth:+.1%}); goal: at most {GOAL_GROWTH:+.0%}: "
                  f"{'met' if met else 'NOT met'}. Fidelity: not a timing figure (no verdict needed).")
    return 0 if met else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=10_000)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    return run(args.writes, args.streams, args.seed)


if __name__ == "__main__":
    sys.exit(main())
