"""Switch ports' oper-status from netlink: the testbed's analogue of a switch OS streaming port
state to its controller (gNMI's /interfaces/interface/state/oper-status).

The switches' ports are interfaces in the root network namespace, where the controller runs (both
targets: the soft switch's raw sockets and BMv2's); RTM_NEWLINK events for them arrive here within
a few milliseconds of a carrier change, long before probes could be missed.
"""

from __future__ import annotations

import asyncio
import logging
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
