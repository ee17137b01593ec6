"""The live page's server (controller/live.py): 127.0.0.1 only, the page and its installed libraries,
the topology to draw, and frames pushed by Server-Sent Events — built only while a page watches,
with the faults the testbed injected and the changes the controller detected on one timeline.
The page itself, in a real browser: tests/integration/test_live_page.py."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.live import LiveServer, following, missing_libraries, topology_view
from controller.localizer import Suspect
from controller.metrics import FabricState
from topologies import fattree, leafspine, railopt
from wire import runfiles
from wire.fidelity import WINDOW_S, FidelityWindows, create_file


class Fabric:
    """A state that the test changes between frames, counting how often it is read."""

    def __init__(self) -> None:
        self.reads = 0
        self.util = 0.1
        self.up = True
        self.suspects: list[Suspect] = []

    def read(self) -> FabricState:
        self.reads += 1
        now = time.time()
        return FabricState(ports={("s1", 1, "s3"): (3.0, self.util, 1e-4, 20e6)}, seen={("s1", 1, "s3"): now},
                           links={("s3", "s1"): self.up, ("h1", "s3"): True}, advice={("h1", "h5"): 9.5e6},
                           suspects=self.suspects)


def events(url: str, count: int, timeout: float = 10.0) -> Iterator[dict]:
    """The first `count` frames of the event stream."""
    with urllib.request.urlopen(url + "events", timeout=timeout) as stream:
        got = 0
        for line in stream:
            if line.startswith(b"data: "):
                yield json.loads(line[6:])
                got += 1
                if got == count:
                    return


@pytest.fixture()
def served(tmp_path):
    fabric = Fabric()
    fidelity = tmp_path / runfiles.FIDELITY
    create_file(fidelity)
    server = LiveServer(fabric.read, leafspine(), frames=following(fidelity, tmp_path / runfiles.FAULTS)).start()
    yield fabric, server, f"http://127.0.0.1:{server.server_port}/", tmp_path
    server.stop()


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_the_page_and_its_libraries_are_served_on_the_loopback_only(served):
    _, server, url, _ = served
    assert server.server_address[0] == "127.0.0.1"
    status, kind, body = get(url)
    assert status == 200 and kind.startswith("text/html") and b"/lib/cytoscape.min.js" in body
    assert missing_libraries() == [], "make deps installs them (npm ci in web/)"
    for lib in ("cytoscape.min.js", "uPlot.iife.min.js", "uPlot.min.css"):
        status, _, body = get(url + "lib/" + lib)
        assert status == 200 and len(body) > 1000, lib
    assert get(url + "lib/../package.json")[0] == 404
    assert get(url + "controller.sock")[0] == 404


def test_the_topology_places_hosts_below_leaves_below_spines():
    view = topology_view(leafspine())
    y = {n["name"]: n["y"] for n in view["nodes"]}
    assert y["h1"] > y["s3"] > y["s1"] and y["s1"] == y["s2"] and y["s3"] == y["s4"]
    assert {link["id"] for link in view["links"]} >= {"h1-s3", "s3-s1"}
    tree = topology_view(fattree(4))
    tiers = {n["tier"] for n in tree["nodes"]}
    assert tiers == {0, 1, 2, 3} and len(tree["nodes"]) == 36
    places = [(n["x"], n["y"]) for n in tree["nodes"]]
    assert len(set(places)) == len(places)  # no two nodes on one spot
    assert tree["servers"] == [] and {n["server"] for n in tree["nodes"]} == {None}
    rails = topology_view(railopt(servers=2, gpus=2, spines=1, nvlink_ratio=4))
    assert rails["servers"] == [{"name": "srv1", "gpus": ["h1", "h2"], "nvlink_bps": 80e6},
                                {"name": "srv2", "gpus": ["h3", "h4"], "nvlink_bps": 80e6}]
    gpus = sorted((n["x"], n["name"], n["server"]) for n in rails["nodes"] if n["kind"] == "host")
    assert [server for _, _, server in gpus] == ["srv1", "srv1", "srv2", "srv2"]  # a server's GPUs side by side


def test_frames_carry_the_state_and_follow_it(served):
    fabric, _, url, _ = served
    stream = events(url, 1000)
    first = next(stream)
    assert first["ports"][0][:5] == ["s1", 1, "s3", 0.1, 3.0] and abs(first["ports"][0][6] - time.time()) < 5
    assert first["advice"] == {"h1": {"h5": 9.5e6}}
    assert {(link["a"], link["b"]): link["up"] for link in first["links"]} == {("s3", "s1"): True, ("h1", "s3"): True}
    fabric.util, fabric.up = 0.9, False
    fabric.suspects = [Suspect("link s1-s3", "loss", 0.8, "2.0% of 1200 frames lost", alert=True)]
    frame = next(f for f in stream if not f["links"][1]["up"])
    assert frame["ports"][0][3] == 0.9 and frame["links"][1]["lossy"]
    assert frame["suspects"][0]["evidence"] == "2.0% of 1200 frames lost"
    texts = [e["text"] for e in frame["events"]]
    assert "link s3-s1 down (controller)" in texts and "loss at link s1-s3 (localiser)" in texts


def test_no_frame_is_built_while_no_page_watches(served):
    fabric, _, url, _ = served
    time.sleep(0.5)
    assert fabric.reads == 0
    for _ in events(url, 3):
        pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the stream's thread notices the closed page at its next frame
        reads = fabric.reads
        time.sleep(0.5)
        if fabric.reads == reads:
            break
    assert fabric.reads == reads, "frames still built with no page open"


def test_several_pages_share_one_frame_per_period(served):
    fabric, _, url, _ = served
    seen: list[list[int]] = [[] for _ in range(5)]

    def watch(i: int) -> None:
        seen[i] = [f["frame"] for f in events(url, 10)]

    threads = [threading.Thread(target=watch, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    frames = {n for got in seen for n in got}
    assert all(len(got) == 10 for got in seen)
    assert fabric.reads <= len(frames) + 2  # a read per frame, not per page


def test_faults_injected_and_the_fidelity_of_the_last_seconds(served):
    _, _, url, run_dir = served
    now = time.time()
    runfiles.append_fault(run_dir, runfiles.FaultRecord(now, now, "loss", "s3", "s1", {"percent": 5.0},
                                                        "loss 5% of frames s3 -> s1"))
    windows = FidelityWindows(run_dir / runfiles.FIDELITY, "s3", "switch")
    start = now - 3.0
    for i in range(10):  # ten windows 3 s ago, one of them 40 ms late
        t = start + i * WINDOW_S
        windows.tick(t)
        windows.events += 1
        windows.late(0.040 if i == 4 else 0.0001, t)
    windows.close(start + 10 * WINDOW_S)
    frame = next(events(url, 1))
    assert {"t": pytest.approx(now), "kind": "injected", "text": "loss 5% of frames s3 -> s1"} in frame["events"]
    assert [link["lossy"] for link in frame["links"]] == [False, True]  # s3-s1: the injected loss
    fidelity = frame["fidelity"]
    assert fidelity["worst_ms"] == 40.0 and fidelity["worst_at"] == "s3"
    assert 1 <= fidelity["late"] <= 3 and fidelity["windows"] == 50  # the late window and its drain


def test_the_faults_file_reads_back_what_was_appended(tmp_path: Path):
    record = runfiles.FaultRecord(1.5, 2.5, "flap", "s3", "s1", {"count": 2, "period_s": 1.0}, "flap s3-s1 2 times")
    runfiles.append_fault(tmp_path, record)
    runfiles.append_fault(tmp_path, record)
    assert runfiles.read_faults(tmp_path) == [record, record]
