"""Port state from another server (cluster mode): `ip -o link show` then `ip -o monitor link`, streamed."""

from __future__ import annotations

import asyncio

import pytest

from controller.portstatus import parse_link_line, watch_remote_ports

UP = "5: s3-eth1@if4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc noqueue state UP mode DEFAULT group default"
LOWER = "6: s3-eth2@if7: <NO-CARRIER,BROADCAST,MULTICAST,UP,M-DOWN> mtu 9000 qdisc noqueue state LOWERLAYERDOWN group"
DOWN = "5: s3-eth1@if4: <BROADCAST,MULTICAST> mtu 9000 qdisc noqueue state DOWN group default \\    link/ether 9a:ed"
GONE = "Deleted 6: s3-eth2@NONE: <BROADCAST,MULTICAST> mtu 9000 qdisc noop state DOWN group default"
VXLAN = "7: s3-eth3: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc noqueue state UNKNOWN mode DEFAULT"


def test_a_line_of_ip_link_gives_the_interface_and_its_carrier():
    assert parse_link_line(UP) == ("s3-eth1", True)
    assert parse_link_line(LOWER) == ("s3-eth2", False)
    assert parse_link_line(DOWN) == ("s3-eth1", False)
    assert parse_link_line(GONE) == ("s3-eth2", False)
    assert parse_link_line(VXLAN) == ("s3-eth3", True)  # a tunnel end reports no carrier: UNKNOWN
    assert parse_link_line("    link/ether 9a:ed:78:ba:42:70 brd ff:ff:ff:ff:ff:ff") is None


def fake_server(*lines: str, then: str = "exec sleep 30") -> list[str]:
    """A 'remote' prefix printing `lines` as the server would, then `then` (the script it is given is $1)."""
    printed = "; ".join(f"echo '{line}'" for line in lines)
    return ["sh", "-c", f"{printed}; {then}", "fake"]


def test_changes_from_the_server_are_told_once_each_and_the_watch_ends_when_stopping():
    ports = {"s3-eth1": ("s3", 1), "s3-eth2": ("s3", 2)}
    told: list[tuple[tuple[str, int], bool]] = []

    async def main() -> None:
        stopping = asyncio.Event()
        watch = asyncio.create_task(watch_remote_ports(fake_server(UP, LOWER, DOWN, GONE, VXLAN, UP), ports,
                                                       lambda p, up: told.append((p, up)), stopping))
        for _ in range(100):
            if len(told) == 3:
                break
            await asyncio.sleep(0.02)
        stopping.set()
        await asyncio.wait_for(watch, 5)

    asyncio.run(main())
    # s3-eth1 up at first (as assumed: nothing told), down, up again; s3-eth2 down once (deleted: still down)
    assert told == [(("s3", 2), False), (("s3", 1), False), (("s3", 1), True)]


def test_a_stream_that_ends_is_an_error_naming_the_server_command():
    async def main() -> None:
        await watch_remote_ports(fake_server(UP, then="echo 'Connection closed' >&2; exit 255"), {"s3-eth1": ("s3", 1)},
                                 lambda p, up: None, asyncio.Event())

    with pytest.raises(OSError, match="ended: Connection closed"):
        asyncio.run(main())
