"""What the soft switch's P4Runtime service serves: the switch (its pipeline state, packet-out,
pipeline and probe hooks) and each controller's stream (election id, its outbox of stream messages)."""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from softswitch.runtime_state import RuntimeState
from wire.p4info import P4Schema
from wire.probes import ProbeSchedule, read_device_config
from wire.proto import p4r

log = logging.getLogger("softswitch.p4runtime")

STREAM_QUEUE_LEN = 4096


def election(value: p4r.Uint128) -> int:
    return (value.high << 64) | value.low


@dataclass(eq=False)
class Client:
    arbitrated: bool = False  # sent a MasterArbitrationUpdate that was accepted
    election_id: int | None = None  # None: unset, lower than any (never primary)
    outbox: queue.Queue = field(default_factory=lambda: queue.Queue(STREAM_QUEUE_LEN))
    dropped: int = 0
    end_status: tuple[grpc.StatusCode, str] | None = None  # set: the stream ends with this status

    def end(self, code: grpc.StatusCode, message: str) -> None:
        """Terminate this client's stream with a status (after what is already queued)."""
        self.end_status = (code, message)
        self.outbox.put(None)

    def send(self, message: p4r.StreamMessageResponse) -> bool:
        """Queue a message for the stream; False (and counted) if its queue is full."""
        try:
            self.outbox.put_nowait(message)
        except queue.Full:
            self.dropped += 1
            return False
        return True


class Device:
    """What the service needs of a switch: its pipeline state and packet-out/in hooks."""

    def __init__(self, device_id: int, cpu_port: int,
                 on_pipeline: Callable[[P4Schema, RuntimeState], None],
                 packet_out: Callable[[int, bytes], None],
                 on_probes: Callable[[ProbeSchedule | None], None] = lambda schedule: None,
                 ports: frozenset[int] | None = None) -> None:
        """on_probes: the link probes the switch is to send itself from now on (the device config's,
        wire/probes.py); ports: the switch's ports (None: any port number is taken)."""
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.on_pipeline = on_pipeline
        self.packet_out = packet_out
        self.on_probes = on_probes
        self.ports = ports
        self.schema: P4Schema | None = None
        self.state: RuntimeState | None = None
        self.config = p4r.ForwardingPipelineConfig()
        # VERIFY_AND_SAVE's config, not yet committed: Read and Write use it, the data plane does not.
        self.saved: tuple[P4Schema, RuntimeState, p4r.ForwardingPipelineConfig] | None = None

    def probe_schedule(self, device_config: bytes) -> ProbeSchedule | None:
        """The probes a device config asks for; ValueError naming what is wrong (the caller answers
        INVALID_ARGUMENT)."""
        schedule = read_device_config(device_config)
        if schedule is not None and self.ports is not None and not set(schedule.ports) <= self.ports:
            raise ValueError(f"device config: probes.ports: this switch has no port "
                             f"{min(set(schedule.ports) - self.ports)}")
        return schedule

    def commit(self, schema: P4Schema, state: RuntimeState, config: p4r.ForwardingPipelineConfig) -> None:
        """Realize a config: the data plane runs `state` (and sends the probes of its device config) from now on."""
        self.on_pipeline(schema, state)
        self.on_probes(self.probe_schedule(config.p4_device_config))
        self.schema, self.state, self.saved = schema, state, None
        self.config = p4r.ForwardingPipelineConfig()
        self.config.CopyFrom(config)
        log.info("pipeline set: %d tables, %d actions", len(schema.tables), len(schema.actions))
