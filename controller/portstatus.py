"""Switch ports' oper-status from netlink: the testbed's analogue of a switch OS streaming port
state to its controller (gNMI's /interfaces/interface/state/oper-status).

The switches' ports are interfaces in the root network namespace, where the controller runs (both
targets: the soft switch's raw sockets and BMv2's); RTM_NEWLINK events for them arrive here within
a few milliseconds of a carrier change, long before probes could be missed.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.rtnl import RTMGRP_LINK

from wire.linkstate import carrier_up, read_carrier

log = logging.getLogger("controller.portstatus")

Port = tuple[str, int]  # (switch, port)


async def watch_ports(ports: dict[str, Port], on_change: Callable[[Port, bool], None],
                      stopping: asyncio.Event) -> None:
    """Call on_change(port, up) for every change of a watched interface's carrier (iface → port),
    starting from what sysfs says now; runs until `stopping` is set."""
    state = {iface: read_carrier(iface) for iface in ports}
    async with AsyncIPRoute() as ipr:
        await ipr.bind(groups=RTMGRP_LINK)
        for iface, up in state.items():  # a change between the read above and the bind
            now = read_carrier(iface)
            if now != up:
                state[iface] = now
                on_change(ports[iface], now)
        while not stopping.is_set():
            async for msg in ipr.get():
                if msg.get("event") != "RTM_NEWLINK":
                    continue
                iface = msg.get_attr("IFLA_IFNAME")
                if iface not in ports:
                    continue
                up = carrier_up(msg.get_attr("IFLA_OPERSTATE"))
                if state.get(iface) != up:
                    state[iface] = up
                    log.info("port %s (%s:%d) carrier %s", iface, *ports[iface], "up" if up else "down")
                    on_change(ports[iface], up)


LINK_LINE = re.compile(r"^(?P<deleted>Deleted )?\d+: (?P<name>[^:@\s]+)(@\S+)?: .* state (?P<state>\S+)")
REMOTE_SCRIPT = "ip -o link show && exec ip -o monitor link"


def parse_link_line(line: str) -> tuple[str, bool] | None:
    """(interface, carrier up) from a line of `ip -o link show` or `ip -o monitor link` (a deleted
    interface is down); None for any other line."""
    m = LINK_LINE.match(line.strip())
    if m is None:
        return None
    return m["name"], not m["deleted"] and carrier_up(m["state"])


async def watch_remote_ports(remote: list[str], ports: dict[str, Port], on_change: Callable[[Port, bool], None],
                             stopping: asyncio.Event) -> None:
    """watch_ports for ports on another server (cluster mode): `remote` is the command prefix that runs
    a shell command line there (ssh with the run's config, ending in `--`); `ip -o link show`, then
    `ip -o monitor link`, streamed back — the port state a switch OS would stream from that server.
    A port is up until the server says otherwise; OSError if the stream ends before `stopping`."""
    state: dict[str, bool] = {}
    proc = await asyncio.create_subprocess_exec(*remote, REMOTE_SCRIPT, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    stop = asyncio.ensure_future(stopping.wait())
    try:
        while True:
            read = asyncio.ensure_future(proc.stdout.readline())
            await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                read.cancel()
                return
            line = read.result()
            if not line:
                err = (await proc.stderr.read()).decode(errors="replace").strip() if proc.stderr else ""
                raise OSError(f"port status from {' '.join(remote)} ended: {err or f'exit {await proc.wait()}'}")
            parsed = parse_link_line(line.decode(errors="replace"))
            if parsed is None or parsed[0] not in ports:
                continue
            iface, up = parsed
            before = state.get(iface, True)  # up until told otherwise, as the controller starts
            state[iface] = up
            if before != up:
                log.info("port %s (%s:%d) carrier %s (remote)", iface, *ports[iface], "up" if up else "down")
                on_change(ports[iface], up)
    finally:
        stop.cancel()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
