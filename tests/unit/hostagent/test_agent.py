"""The host agent's advice handling with a fake pacer (no netlink, no root): set-rate, expiry back
to line rate, and that a failing netlink call neither ends the expiry thread nor loses the expiry."""

from __future__ import annotations

import threading
import time

from pyroute2.netlink.exceptions import NetlinkError

from hostagent.__main__ import Agent
from tests.checks import wait_until
from wire import advice_pb2 as pb


class FakePacer:
    """Records set_rate calls; raises NetlinkError for the next `failures` of them."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.rates: dict[str, float] = {}
        self.calls: list[tuple[str, float]] = []

    def set_rate(self, dst: str, rate_bps: float) -> None:
        self.calls.append((dst, rate_bps))
        if self.failures:
            self.failures -= 1
            raise NetlinkError(16, "Device or resource busy")
        if rate_bps:
            self.rates[dst] = rate_bps
        else:
            self.rates.pop(dst, None)

    def clear(self) -> None:
        self.rates.clear()


def advice(dst: str, rate_bps: int, valid_ms: int) -> pb.RateAdvice:
    return pb.RateAdvice(dst_ip=dst, rate_bps=rate_bps, valid_ms=valid_ms, epoch=1)


def test_advice_sets_a_rate_and_expires_back_to_line_rate(tmp_path):
    pacer = FakePacer()
    agent = Agent(tmp_path, "h1", "10.0.1.1", pacer)
    agent.apply(advice("10.0.2.1", 5_000_000, valid_ms=50), time.time())
    assert pacer.rates == {"10.0.2.1": 5_000_000}
    agent.expire_due(time.monotonic() + 1)
    assert pacer.rates == {} and agent.expiry == {}


def test_a_netlink_error_at_expiry_is_retried_and_the_thread_lives_on(tmp_path):
    pacer = FakePacer()
    agent = Agent(tmp_path, "h1", "10.0.1.1", pacer)
    agent.apply(advice("10.0.2.1", 5_000_000, valid_ms=1), time.time())
    pacer.failures = 3  # the first three returns to line rate fail
    thread = threading.Thread(target=agent.expire, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: "10.0.2.1" not in pacer.rates, 5.0), pacer.calls
        assert thread.is_alive()
        assert pacer.calls.count(("10.0.2.1", 0)) == 4 and agent.expiry_failures == 3
    finally:
        agent.stop()
        thread.join(2)


def test_bad_advice_is_refused_and_later_advice_still_applies(tmp_path):
    pacer = FakePacer(failures=1)
    agent = Agent(tmp_path, "h1", "10.0.1.1", pacer)
    agent.apply(advice("10.0.2.1", 5_000_000, valid_ms=50), time.time())  # netlink refuses it
    assert pacer.rates == {} and agent.expiry == {}
    agent.apply(advice("10.0.2.1", 6_000_000, valid_ms=50), time.time())
    assert pacer.rates == {"10.0.2.1": 6_000_000}


def test_fall_back_clears_every_rate(tmp_path):
    pacer = FakePacer()
    agent = Agent(tmp_path, "h1", "10.0.1.1", pacer)
    agent.apply(advice("10.0.2.1", 5_000_000, valid_ms=5000), time.time())
    agent.fall_back()
    assert pacer.rates == {} and agent.expiry == {}
