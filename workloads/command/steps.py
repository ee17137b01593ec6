"""A helper your training script can import: its steps' timings to the controller (ReportSteps), the
same evidence the testbed's own ranks give the fault localiser, so `diagnose` can name a slow host
under your job.

    from workloads.command.steps import StepReporter

    steps = StepReporter()                   # reads STARNET_CONTROLLER, STARNET_IP, RANK, WORLD_SIZE
    for batch in data:
        with steps.step():                   # one training step ...
            loss = model(batch)
            with steps.waiting():            # ... of which this part waits on the network (DDP's
                loss.backward()              #     backward holds the gradients' all-reduce)
            optimiser.step()
    steps.close()

A step's own work (compute_s) is its time less the time it spent in `waiting()` blocks: a rank that
computes slowly shows a larger one than its peers, while the peers it holds up wait longer, not
work longer. Reports go every `report_s` from a thread; without a controller (no
STARNET_CONTROLLER: a run on loopback, say) every call is free and nothing is sent, and a
controller that cannot take them costs the job nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

log = logging.getLogger("workloads.steps")


class StepReporter:
    """controller: the advice API's address (default $STARNET_CONTROLLER); host_ip, rank, world, job:
    default from the launcher's variables; report_s: how often the collected steps are sent."""

    def __init__(self, controller: str | None = None, host_ip: str | None = None, rank: int | None = None,
                 world: int | None = None, job: str | None = None, report_s: float = 0.5) -> None:
        self.address = controller if controller is not None else os.environ.get("STARNET_CONTROLLER", "")
        self.step_index = 0
        self.failures = 0
        self._waited = 0.0
        self._pending: list = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        if not self.address:
            return
        import grpc

        from wire import advice_pb2 as pb
        from wire import advice_pb2_grpc as pb_grpc

        self.pb = pb
        self._rpc_error = grpc.RpcError
        self._channel = grpc.insecure_channel(self.address)
        self._stub = pb_grpc.AdviceStub(self._channel)
        self._report = pb.StepReport(
            host=host_ip or os.environ.get("STARNET_IP", ""), job=job or os.environ.get("STARNET_JOB", "job"),
            rank=int(rank if rank is not None else os.environ.get("RANK", 0)),
            world=int(world if world is not None else os.environ.get("WORLD_SIZE", 1)))
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._report_every, args=(report_s,), daemon=True)
        self._thread.start()

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step: its time, less what it spent in waiting(), is its own work."""
        self._waited = 0.0
        start = time.monotonic()
        try:
            yield
        finally:
            end = time.monotonic()
            self.add(end - start, max(0.0, end - start - self._waited), start)

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """A part of the step that waits on the network (a collective): not the rank's own work."""
        start = time.monotonic()
        try:
            yield
        finally:
            self._waited += time.monotonic() - start

    def add(self, duration_s: float, compute_s: float, start: float | None = None) -> None:
        """A step measured by the caller: its duration and its own work (seconds)."""
        self.step_index += 1
        if self._thread is None:
            return
        begun = (start if start is not None else time.monotonic() - duration_s) - self._start
        item = self.pb.StepTime(step=self.step_index, send=False, bytes=0, start_s=max(0.0, begun),
                                duration_s=max(0.0, duration_s), compute_s=max(0.0, compute_s))
        with self._lock:
            self._pending.append(item)

    def _report_every(self, period_s: float) -> None:
        while not self._stopping.wait(period_s):
            self._send()

    def _send(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        del self._report.steps[:]
        self._report.steps.extend(pending)
        self._report.iteration = self.step_index
        try:
            self._stub.ReportSteps(self._report, timeout=2)
        except self._rpc_error as exc:
            self.failures += 1
            if self.failures == 1:
                log.warning("step timings not reported (the controller said %s); going on without", exc.code())

    def close(self) -> None:
        """Send what is left and stop the reporting thread."""
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join(5)
        self._send()
        self._channel.close()
        self._thread = None

    def __enter__(self) -> StepReporter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
