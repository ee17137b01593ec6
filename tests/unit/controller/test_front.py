"""The web front (controller/front.py): a process of its own serving /metrics and the live page from
the states the controller's side hands it when it asks; recorded in the run directory while it runs,
gone when stopped or when the controller's end of the pair closes; a port it cannot take is a clear
error naming it."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.front import Front, FrontError
from controller.localizer import Suspect
from controller.metrics import LATENCY_BUCKETS_US, FabricState
from emulation.waiting import wait_until
from topologies import leafspine
from wire import runfiles
from wire.runfiles import process_start_time


class Asked:
    """The controller's side of the test: counts the states asked for, with or without histograms."""

    def __init__(self) -> None:
        self.asked = {True: 0, False: 0}
        self.threads: set[str] = set()
        self.queue = 4.0

    def read(self, histograms: bool) -> FabricState:
        self.asked[histograms] += 1
        self.threads.add(threading.current_thread().name)
        key = ("s1", 1, "s3")
        return FabricState(ports={key: (self.queue, 0.5, 1e-4, 20e6)}, seen={key: time.time()},
                           counters={key: (10, 20, 3000)}, links={("s3", "s1"): True},
                           suspects=[Suspect("link s3-s1", "loss", 0.8, "3 of 40 probes lost", alert=True)],
                           latency={key: ((1,) + (0,) * len(LATENCY_BUCKETS_US), 100)} if histograms else {})


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / runfiles.PIDS).mkdir()
    (tmp_path / runfiles.TOPOLOGY).write_text(leafspine().to_yaml())
    return tmp_path


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def test_the_front_serves_metrics_and_frames_from_the_states_it_asks_for(run_dir):
    asked = Asked()
    front = Front(run_dir, asked.read, 0, 0).launch()
    try:
        served = front.wait_ready()
        pid = front.proc.pid
        assert (run_dir / runfiles.PIDS / "front.pid").read_text().split()[0] == str(pid)
        assert asked.asked == {True: 0, False: 0}, "nothing is asked for while nobody looks"
        families = {f.name: f for f in text_string_to_metric_families(
            get(f"http://127.0.0.1:{served['metrics_port']}/metrics").decode())}
        [queue] = families["starnet_port_queue_packets"].samples
        assert queue.labels == {"switch": "s1", "port": "1", "peer": "s3"} and queue.value == 4.0
        assert families["starnet_suspect_alert"].samples[0].labels == {"target": "link s3-s1", "fault": "loss"}
        latency = families["starnet_hop_latency_seconds"].samples
        assert any(s.name == "starnet_hop_latency_seconds_count" and s.value == 1 for s in latency)
        assert asked.asked[True] >= 1 and asked.threads == {"front-states"}
        web = f"http://127.0.0.1:{served['web_port']}/"
        assert json.loads(get(web + "topology.json"))["name"] == leafspine().name
        asked.queue = 9.0
        with urllib.request.urlopen(web + "events", timeout=10) as stream:
            for line in stream:
                if line.startswith(b"data: "):
                    frame = json.loads(line[6:])
                    break
        assert frame["ports"][0][:5] == ["s1", 1, "s3", 0.5, 9.0]
        assert frame["suspects"][0]["target"] == "link s3-s1"
        assert asked.asked[False] >= 1, "a page's frames come from states without histograms"
    finally:
        front.stop()
    assert process_start_time(pid) is None, "the front ended with stop()"
    assert not (run_dir / runfiles.PIDS / "front.pid").exists()


def test_the_front_ends_by_itself_when_the_controllers_end_closes(run_dir):
    front = Front(run_dir, Asked().read, 0, None).launch()
    served = front.wait_ready()
    assert served["web_port"] is None and not (run_dir / runfiles.LIVE_ADDR).exists()
    pid = front.proc.pid
    assert front.sock is not None
    front.sock.shutdown(socket.SHUT_RDWR)  # as when the controller dies: its end closes with it
    assert wait_until(lambda: front.proc.poll() is not None, 10.0), "the front outlived its controller"
    assert front.proc.returncode == 0
    front.stop()
    assert process_start_time(pid) is None
    assert "the controller closed its end" in (run_dir / runfiles.FRONT_LOG).read_text()


def test_a_port_the_front_cannot_take_is_an_error_naming_it(run_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        front = Front(run_dir, Asked().read, port, None).launch()
        with pytest.raises(FrontError, match="did not start.*Address already in use"):
            front.wait_ready()
    assert front.proc.poll() is not None
    assert not (run_dir / runfiles.PIDS / "front.pid").exists()
