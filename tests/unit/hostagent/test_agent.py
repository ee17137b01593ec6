"""The host agent's advice handling with a fake pacer (no netlink, no root): set-rate, expiry back
to line rate, that a failing netlink call neither ends the expiry thread nor loses the expiry, and
its session with the real advice API: register, stream, fall back, reconnect."""

from __future__ import annotations

import asyncio
import threading
import time

from pyroute2.netlink.exceptions import NetlinkError

from controller.advice import AdviceLoop
from controller.service import start_server
from controller.telemetry import Collector
from hostagent.__main__ import Agent
from tests.checks import wait_until
from topologies import leafspine
from topologies.addressing import AddressPlan
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


class ControllerApi:
    """The controller's real advice API (controller/service.py) on its own event-loop thread, in a
    run directory of the default fabric: started, stopped and started again like a controller."""

    def __init__(self, run_dir) -> None:
        topo = leafspine()
        self.plan = AddressPlan(topo)
        self.run_dir = run_dir
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.advice = AdviceLoop(topo, self.plan, Collector({}), run_dir, "advice")
        self.server = None

    def call(self, fn, *args):
        async def run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(5)

    def start(self) -> None:
        self.server, _ = asyncio.run_coroutine_threadsafe(
            start_server(self.run_dir, self.advice.collector, self.advice), self.loop).result(5)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(0), self.loop).result(5)

    def close(self) -> None:
        self.stop()
        self.advice.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_the_agent_registers_applies_streamed_advice_falls_back_when_the_controller_goes_and_reconnects(tmp_path):
    api = ControllerApi(tmp_path)
    api.start()
    h1, h5 = api.plan.hosts["h1"].ip, api.plan.hosts["h5"].ip
    pacer = FakePacer()
    agent = Agent(tmp_path, "h1", h1, pacer)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: "h1" in api.advice.subscribers, 5.0), "the agent never subscribed"
        api.call(api.advice._send, {(h1, h5): 4e6}, "change")
        assert wait_until(lambda: pacer.rates == {h5: 4_000_000}, 5.0), pacer.calls
        api.stop()  # the controller goes away: the agent returns to line rate
        assert wait_until(lambda: pacer.rates == {}, 5.0), pacer.calls
        api.advice.subscribers.clear()
        api.start()  # and comes back: the agent registers and subscribes again by itself
        assert wait_until(lambda: "h1" in api.advice.subscribers, 10.0), "the agent did not reconnect"
        api.call(api.advice._send, {(h1, h5): 3e6}, "change")
        assert wait_until(lambda: pacer.rates == {h5: 3_000_000}, 5.0), pacer.calls
    finally:
        agent.stop()
        thread.join(5)
        api.close()
    assert not thread.is_alive()
