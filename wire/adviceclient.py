"""The advice API's client side: where a run's controller listens and the synchronous calls the
console, the lab, the emulation and the tests make. The server is controller/service.py."""

from __future__ import annotations

from pathlib import Path

import grpc

from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc
from wire import runfiles


def address(run_dir: Path) -> str:
    """The controller's address (unix:<run dir>/controller.sock, or a shorter path), as it wrote it."""
    return (run_dir / runfiles.CONTROLLER_ADDR).read_text().strip()


def channel(run_dir: Path) -> grpc.Channel:
    """A channel to the controller of the run in `run_dir`."""
    return grpc.insecure_channel(address(run_dir))


def diagnose(run_dir: Path, timeout_s: float = 3.0) -> pb.Diagnosis:
    """Synchronous Diagnose for the CLI, the evaluation and tests."""
    with channel(run_dir) as ch:
        return pb_grpc.AdviceStub(ch).Diagnose(pb.DiagnoseRequest(), timeout=timeout_s)


def get_state(run_dir: Path, switch: str = "", port: int = 0, include_flows: bool = False,
              timeout_s: float = 3.0) -> pb.State:
    """Synchronous GetState for the CLI and tests."""
    with channel(run_dir) as ch:
        return pb_grpc.AdviceStub(ch).GetState(
            pb.GetStateRequest(switch=switch, port=port, include_flows=include_flows), timeout=timeout_s)


def set_link_loss(run_dir: Path, sender: str, receiver: str, percent: float, timeout_s: float = 5.0) -> float:
    """Synchronous SetLinkLoss: `percent` of the frames sender → receiver lost (0 clears); as installed."""
    with channel(run_dir) as ch:
        reply = pb_grpc.AdviceStub(ch).SetLinkLoss(
            pb.LinkLossRequest(sender=sender, receiver=receiver, percent=percent), timeout=timeout_s)
    return reply.percent
