"""The host agent, one per Mininet host, running in the host's network namespace.

    python -m hostagent --run-dir runs/<id> --host h1 --ip 10.0.3.1 --intf h1-eth0

Registers with the controller (address in <run dir>/controller.addr), subscribes to its advice
and applies each RateAdvice to the HTB class of that destination. Advice that is not refreshed
within its valid_ms expires and the destination goes back to line rate; so does everything when
the controller goes away, while the agent reconnects with backoff. The mode sets this namespace's
TCP (hostagent/tcpsettings.py): `ecn` requests ECN, `bbr` makes BBR the congestion control, the
others run cubic. Every applied advice is recorded in <run dir>/hostagents/<host>.csv with the time
it arrived and the time it was in force.
"""

from __future__ import annotations

import argparse
import csv
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import grpc
from pyroute2.netlink.exceptions import NetlinkError

from hostagent.pacer import HtbPacer
from hostagent.tcpsettings import TcpSettingsError, apply_mode
from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc
from wire import adviceclient, runfiles
from wire.fidelity import FidelityWindows, watch_thread_lag

log = logging.getLogger("hostagent")
BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)
LINE_RATE_BPS = 10e9
EXPIRY_TICK_S = 0.05
EXPIRY_FAILURE_LOGS = 5  # netlink errors logged in full; the rest counted


class Agent:
    def __init__(self, run_dir: Path, host: str, ip: str, pacer: HtbPacer) -> None:
        self.run_dir, self.host, self.ip, self.pacer = run_dir, host, ip, pacer
        self.expiry: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.call: grpc.Call | None = None  # the advice stream, cancelled by stop()
        (run_dir / runfiles.HOSTAGENTS).mkdir(exist_ok=True)
        self.record = (run_dir / runfiles.HOSTAGENTS / f"{host}.csv").open("a", newline="")
        self.writer = csv.writer(self.record)
        if self.record.tell() == 0:
            self.writer.writerow(["received", "applied", "dst", "rate_bps", "epoch", "apply_ms", "event"])
        self.applied = 0
        self.expiry_failures = 0

    def set_mode(self, mode: str) -> None:
        try:
            ecn, cc = apply_mode(mode)
        except TcpSettingsError as exc:  # the host keeps running, its TCP settings as they were
            log.error("%s: mode %s: %s", self.host, mode, exc)
            return
        log.info("%s: mode %s (tcp_ecn %s, congestion control %s)", self.host, mode, ecn, cc)
        runfiles.write_agent_mode(self.run_dir, self.host, mode)

    def apply(self, advice: pb.RateAdvice, received: float) -> None:
        started = time.perf_counter()
        with self.lock:
            try:
                self.pacer.set_rate(advice.dst_ip, advice.rate_bps)
            except (NetlinkError, ValueError, KeyError) as exc:  # one bad advice must not end the agent
                log.error("%s: cannot apply %s for %s: %s", self.host, advice.rate_bps, advice.dst_ip, exc)
                return
            if advice.rate_bps:
                self.expiry[advice.dst_ip] = time.monotonic() + advice.valid_ms / 1000
            else:
                self.expiry.pop(advice.dst_ip, None)
        applied = time.time()
        self.applied += 1
        self.writer.writerow([f"{received:.6f}", f"{applied:.6f}", advice.dst_ip, advice.rate_bps, advice.epoch,
                              f"{(time.perf_counter() - started) * 1e3:.3f}", "advice"])
        self.record.flush()

    def expire(self) -> None:
        """Return destinations whose advice ran out to line rate; a failing netlink call is logged
        and retried on the next tick, and nothing ends this thread but stop()."""
        while not self.stopping.wait(EXPIRY_TICK_S):
            try:
                self.expire_due(time.monotonic())
            except Exception:  # noqa: BLE001 - the expiry thread must outlive any error
                log.exception("%s: expiry failed; retrying", self.host)

    def expire_due(self, now: float) -> None:
        with self.lock:
            for dst in [d for d, t in self.expiry.items() if t < now]:
                try:
                    self.pacer.set_rate(dst, 0)
                except (NetlinkError, OSError, ValueError, KeyError) as exc:
                    self.expiry_failures += 1
                    if self.expiry_failures <= EXPIRY_FAILURE_LOGS:
                        log.error("%s: cannot return %s to line rate (retrying): %s", self.host, dst, exc)
                    continue
                del self.expiry[dst]
                self.writer.writerow([f"{time.time():.6f}", f"{time.time():.6f}", dst, 0, "", "", "expired"])
                log.info("%s: advice for %s expired: line rate", self.host, dst)

    def fall_back(self) -> None:
        with self.lock:
            self.expiry.clear()
            try:
                self.pacer.clear()
            except (NetlinkError, OSError) as exc:
                log.error("%s: cannot clear the pacer: %s", self.host, exc)

    def run(self) -> None:
        threading.Thread(target=self.expire, name="expiry", daemon=True).start()
        attempt = 0
        while not self.stopping.is_set():
            try:
                address = adviceclient.address(self.run_dir)
                with grpc.insecure_channel(address) as channel:
                    stub = pb_grpc.AdviceStub(channel)
                    reply = stub.Register(pb.HostInfo(name=self.host, ip=self.ip), timeout=5)
                    self.set_mode(reply.mode)
                    log.info("%s: registered (mode %s)", self.host, reply.mode)
                    attempt = 0
                    updates = stub.Subscribe(pb.SubscribeRequest(host=self.host))
                    self.call = updates
                    for update in updates:
                        if update.WhichOneof("kind") == "mode":
                            self.set_mode(update.mode)
                        else:
                            self.apply(update.advice, time.time())
            except (grpc.RpcError, OSError) as exc:
                if self.stopping.is_set():
                    break
                detail = exc.details() if isinstance(exc, grpc.RpcError) else str(exc)
                log.warning("%s: controller unreachable (%s); line rate, retrying", self.host, detail)
            self.fall_back()
            time.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
            attempt += 1

    def stop(self) -> None:
        self.stopping.set()
        if self.call is not None:
            self.call.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hostagent", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--ip", required=True)
    parser.add_argument("--intf", required=True)
    parser.add_argument("--line-rate-mbps", type=float, default=LINE_RATE_BPS / 1e6)
    parser.add_argument("--fidelity-file", type=Path, help="append this agent's loop lag per 100 ms window here")
    args = parser.parse_args(argv)
    (args.run_dir / runfiles.HOSTAGENTS).mkdir(exist_ok=True)
    logging.basicConfig(filename=args.run_dir / runfiles.HOSTAGENTS / f"{args.host}.log", level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        pacer = HtbPacer(args.intf, args.line_rate_mbps * 1e6)
    except (ValueError, OSError) as exc:
        print(f"hostagent {args.host}: cannot set up pacing on {args.intf}: {exc}", file=sys.stderr)
        return 2
    agent = Agent(args.run_dir, args.host, args.ip, pacer)
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    signal.signal(signal.SIGINT, lambda *_: agent.stop())
    if args.fidelity_file:
        lag = FidelityWindows(args.fidelity_file, args.host, "loop")
        threading.Thread(target=watch_thread_lag, args=(lag, agent.stopping), name="loop-lag", daemon=True).start()
    try:
        agent.run()
    finally:
        pacer.close()
        agent.record.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
