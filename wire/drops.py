"""Drop reasons: each one's index in starnet.p4's counter StarIngress.drop_reason (headers.p4 DROP_*).

The program counts malformed … fault itself; the rest happen where the P4 pipeline does not
reach (ECMP group with no live member, a punted frame no client takes, egress queue full, a
send on a vanished link) and the soft switch adds them to the same counter.
"""

from __future__ import annotations

DROP_COUNTER = "StarIngress.drop_reason"
DROP_REASONS = ("malformed", "non_ipv4", "ttl_expired", "no_route", "fault", "no_live_member",
                "no_controller", "queue_full", "send_error")
DROP_INDEX = {reason: index for index, reason in enumerate(DROP_REASONS)}


def by_reason(cells: dict[int, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Counter cells (index → (packets, bytes)) as reason → (packets, bytes); every reason listed."""
    return {reason: cells.get(index, (0, 0)) for index, reason in enumerate(DROP_REASONS)}
