"""A post-mortem of a running fabric: every switch's tables, action profiles, clone sessions and
non-zero counters read over P4Runtime, the soft switches' own port stats, and the controller's
collector state and advice. Written when an integration test fails (tests/integration/conftest.py)
and by anyone holding a Testbed through `dump_fabric`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from google.protobuf import text_format
from google.protobuf.message import Message

from emulation import p4read
from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc
from wire import runfiles
from wire.adviceclient import channel as controller_channel
from wire.adviceclient import get_state
from wire.p4info import P4Schema
from wire.proto import p4r

if TYPE_CHECKING:
    from emulation.net import Testbed

READ_TIMEOUT_S = 3.0


def _line(message: Message) -> str:
    return text_format.MessageToString(message, as_one_line=True)


def switch_dump(name: str, address: str, device_id: int, schema: P4Schema) -> list[str]:
    """The switch's P4Runtime state as text lines, tables and counters named from the P4Info."""
    lines = [f"== switch {name} (device {device_id}, {address})"]
    queries = [("table entries", p4r.Entity(table_entry=p4r.TableEntry())),
               ("action profile members", p4r.Entity(action_profile_member=p4r.ActionProfileMember())),
               ("action profile groups", p4r.Entity(action_profile_group=p4r.ActionProfileGroup())),
               ("clone sessions", p4r.Entity(packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                   clone_session_entry=p4r.CloneSessionEntry()))),
               ("counter cells (non-zero ones listed)", p4r.Entity(counter_entry=p4r.CounterEntry()))]
    for title, query in queries:
        try:
            entities = p4read.read(address, device_id, query)
        except grpc.RpcError as exc:
            lines.append(f"-- {title}: read failed: {exc.code().name} {exc.details()}")
            continue
        lines.append(f"-- {title}: {len(entities)}")
        for e in entities:
            if e.HasField("table_entry"):
                table = schema.tables.get(e.table_entry.table_id)
                lines.append(f"{table.name if table else e.table_entry.table_id}: {_line(e.table_entry)}")
            elif e.HasField("counter_entry"):
                c = e.counter_entry
                if c.data.packet_count or c.data.byte_count:
                    counter = schema.counters.get(c.counter_id)
                    lines.append(f"{counter.name if counter else c.counter_id}[{c.index.index}]: "
                                 f"{c.data.packet_count} pkts {c.data.byte_count} bytes")
            else:
                lines.append(_line(e))
    return lines


def controller_dump(run_dir: Path) -> list[str]:

    lines = ["== controller"]
    try:
        lines.append("-- collector state")
        lines.append(text_format.MessageToString(get_state(run_dir, include_flows=True)))
        with controller_channel(run_dir) as ch:
            table = pb_grpc.AdviceStub(ch).GetAdvice(pb.GetAdviceRequest(), timeout=READ_TIMEOUT_S)
        lines.append("-- advice")
        lines.append(text_format.MessageToString(table))
    except (OSError, grpc.RpcError) as exc:
        lines.append(f"controller not reachable: {exc}")
    return lines


def dump_fabric(tb: Testbed, path: Path, reason: str = "") -> Path:
    """Write the fabric's state to `path` (text); never raises for an unreachable component."""
    schema = P4Schema.load()
    lines = [f"# dump of {tb.run_dir} at {time.strftime('%Y-%m-%d %H:%M:%S')}" + (f": {reason}" if reason else "")]
    for name, switch in tb.switches.items():
        proc = switch.process
        try:
            lines += switch_dump(name, proc.grpc_address, proc.device_id, schema)
        except Exception as exc:  # noqa: BLE001 - a post-mortem reports what it could not read
            lines.append(f"== switch {name}: {type(exc).__name__}: {exc}")
        stats = tb.run_dir / runfiles.switch_stats(name)
        if stats.exists():
            lines.append("-- soft switch stats")
            lines.append(json.dumps(json.loads(stats.read_text()), indent=1, sort_keys=True))
    lines += controller_dump(tb.run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
