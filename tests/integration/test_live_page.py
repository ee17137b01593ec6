"""The live page (controller/live.py, web/) in a real browser: Debian's chromium driven by Playwright
for Python. First against a state the test sets (what the page draws from a frame), then on a
running testbed: a utilisation step INT sees recolours its links within LATENCY_GOAL_MS (p95), an
injected link failure shows as injected and as detected, and five open pages cost the controller
little more than one."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from controller.live import LiveServer
from controller.localizer import Suspect
from emulation.faults import Fault, inject
from emulation.net import Testbed
from emulation.traffic import iperf3_tcp
from tests.integration.helpers import wait_until
from tests.unit.controller.test_live import Fabric
from topologies import leafspine
from wire import runfiles

CHROMIUM = Path("/usr/bin/chromium")
LATENCY_GOAL_MS = 300.0  # issue "Live view": a utilisation step INT sees recolours its link within this, p95
LATENCY_BOUND_MS = 600.0  # the test's bound: the goal with a margin for a busy machine (the figure is printed)
STEPS = 6

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: make deps installs Debian's")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


def opened(browser, url: str):
    page = browser.new_page(viewport={"width": 1300, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(url)
    page.wait_for_function("window.starnetLive && window.starnetLive.frames > 1", timeout=15000)
    return page, errors


def test_the_page_draws_what_a_frame_says(browser, tmp_path):
    fabric = Fabric()
    server = LiveServer(fabric.read, leafspine(), faults=tmp_path / runfiles.FAULTS).start()
    try:
        page, errors = opened(browser, f"http://127.0.0.1:{server.server_port}/")
        edge = "window.starnetLive.cy.getElementById('s3-s1')"
        assert page.evaluate(f"{edge}.data('colour')") == "#aab4be"  # 10%: the lowest band
        assert page.evaluate(f"{edge}.data('qa')") == "" and page.evaluate(f"{edge}.data('qb')") == "q 3"
        fabric.util = 0.9
        page.wait_for_function(f"{edge}.data('colour') === '#d0312d'", timeout=5000)
        fabric.up = False
        fabric.suspects = [Suspect("link s1-s3", "loss", 0.8, "2.0% of 1200 frames lost", alert=True)]
        now = time.time()
        runfiles.append_fault(tmp_path, runfiles.FaultRecord(now, now, "link_down", "s3", "s1", {}, "link_down s3-s1"))
        page.wait_for_function(f"{edge}.hasClass('down') && {edge}.hasClass('suspect') && {edge}.hasClass('lossy')",
                               timeout=5000)
        assert "2.0% of 1200 frames lost" in page.inner_text("#suspects")
        timeline = page.inner_text("#timeline")
        assert "link_down s3-s1" in timeline and "link s3-s1 down (controller)" in timeline
        assert "h5 9.5 Mbit/s" in page.inner_text("#advice")
        page.evaluate(f"{edge}.emit('tap')")
        page.wait_for_selector("#series canvas", timeout=5000)
        assert "s3 → s1" in page.inner_text("#selected")
        assert errors == []
        page.close()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def fabric():
    tb = Testbed(leafspine(), dataplane="soft", name="test-live-page").start()
    yield tb
    tb.stop()


def controller_cpu_s(tb: Testbed) -> float:
    fields = Path(f"/proc/{tb.controller.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks of 10 ms


@pytest.mark.root
@pytest.mark.mininet
def test_a_utilisation_step_recolours_its_links_on_the_page(fabric, browser):
    url = fabric.live_url
    assert url and url.startswith("http://127.0.0.1:"), url
    page, errors = opened(browser, url)
    h1, h5 = fabric.host("h1"), fabric.host("h5")
    for step in range(STEPS):  # one second of a TCP flow, then quiet until INT's reports of it are stale
        iperf3_tcp(h1, h5, seconds=1, port=5201 + step)
        time.sleep(2.0)
    changes = page.evaluate("window.starnetLive.colourChanges")
    rising = [c["latency_ms"] for c in changes if c["rising"] and c["latency_ms"] is not None]
    on_path = {c["link"] for c in changes if c["rising"]}
    # h5's link (s4 sends on it) and the uplinks ECMP chose (h1 → s3 is h1's own NIC: no INT port)
    assert "h5-s4" in on_path and len(on_path & {"s3-s1", "s3-s2"}) >= 1, changes
    assert len(on_path & {"s4-s1", "s4-s2"}) >= 1, changes
    p95 = statistics.quantiles(rising, n=20)[-1] if len(rising) >= 2 else max(rising)
    print(f"\nlive page: {len(rising)} rising colour changes over {STEPS} steps; INT report to colour "
          f"median {statistics.median(rising):.0f} ms, p95 {p95:.0f} ms (goal {LATENCY_GOAL_MS:.0f} ms), "
          f"max {max(rising):.0f} ms; {fabric.verdict(fabric.now() - STEPS * 3, fabric.now()).line()}")
    for c in changes:
        if c["rising"] and (c["latency_ms"] or 0) > LATENCY_GOAL_MS:
            print(f"  slow: {c['link']} frame {c['frame']} t {c['t']:.3f} drawn {c['at']:.3f} "
                  f"{c['latency_ms']:.0f} ms ab={c['ab']} ba={c['ba']}")
    assert len(rising) >= STEPS and p95 <= LATENCY_BOUND_MS, rising
    assert errors == []
    page.close()


@pytest.mark.root
@pytest.mark.mininet
def test_a_failed_link_shows_injected_and_detected_and_five_pages_cost_little(fabric, browser):
    def cost(pages: int, seconds: float = 6.0) -> float:
        opened_pages = [opened(browser, fabric.live_url)[0] for _ in range(pages)]
        before, t0 = controller_cpu_s(fabric), time.monotonic()
        time.sleep(seconds)
        used = (controller_cpu_s(fabric) - before) / (time.monotonic() - t0)
        for page in opened_pages:
            page.close()
        return used

    idle, one, five = cost(0), cost(1), cost(5)
    print(f"\nlive page: controller CPU {idle:.3f} of a core with no page, {one:.3f} with one, {five:.3f} with five")
    assert five - idle < 0.25 and five < one + 0.1, (idle, one, five)

    page, errors = opened(browser, fabric.live_url)
    edge = "window.starnetLive.cy.getElementById('s3-s1')"
    inject(fabric, Fault("link_down", ("s3", "s1")))
    try:
        page.wait_for_function(f"{edge}.hasClass('down')", timeout=10000)
        assert wait_until(lambda: "link s3-s1 down (controller)" in page.inner_text("#timeline"), 5.0)
        assert "link_down s3-s1" in page.inner_text("#timeline")
    finally:
        inject(fabric, Fault("link_up", ("s3", "s1")))
    page.wait_for_function(f"!{edge}.hasClass('down')", timeout=15000)
    assert "link s3-s1 up again (controller)" in page.inner_text("#timeline")
    assert errors == []
    page.close()
