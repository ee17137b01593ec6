"""Egress queue: a packet-out (the controller's link probe) goes ahead of the data and is never
tail-dropped, so a congested port is not taken for a failed link."""

from __future__ import annotations

from softswitch.egress import EgressQueue


def test_a_control_frame_jumps_a_full_queue_and_leaves_first():
    sent: list[bytes] = []
    queue = EgressQueue(1, lambda f: sent.append(bytes(f)) or len(f), rate_mbps=1.0, depth_pkts=4, now=0.0)
    for i in range(10):  # the first leave on the bucket's burst; the rest fill the queue, then drop
        queue.enqueue(bytes([i]) * 1500, 0.0)
    assert queue.qdepth == 4 and queue.drops > 0
    drops = queue.drops
    queue.enqueue_control(b"probe".ljust(60, b"\0"), 0.0)
    assert queue.qdepth == 5 and queue.drops == drops  # over the limit, not dropped
    before = len(sent)
    queue.service(10.0)  # plenty of time: everything leaves
    assert sent[before].startswith(b"probe")


def test_on_an_idle_port_a_control_frame_leaves_at_once():
    sent: list[bytes] = []
    queue = EgressQueue(1, lambda f: sent.append(bytes(f)) or len(f), rate_mbps=20.0, depth_pkts=64, now=0.0)
    queue.enqueue_control(b"probe".ljust(60, b"\0"), 0.0)
    assert sent and queue.qdepth == 0
