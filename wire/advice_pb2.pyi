from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HostInfo(_message.Message):
    __slots__ = ("name", "ip")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    name: str
    ip: str
    def __init__(self, name: _Optional[str] = ..., ip: _Optional[str] = ...) -> None: ...

class RegisterReply(_message.Message):
    __slots__ = ("mode", "valid_ms")
    MODE_FIELD_NUMBER: _ClassVar[int]
    VALID_MS_FIELD_NUMBER: _ClassVar[int]
    mode: str
    valid_ms: int
    def __init__(self, mode: _Optional[str] = ..., valid_ms: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("host",)
    HOST_FIELD_NUMBER: _ClassVar[int]
    host: str
    def __init__(self, host: _Optional[str] = ...) -> None: ...

class RateAdvice(_message.Message):
    __slots__ = ("dst_ip", "rate_bps", "epoch", "valid_ms")
    DST_IP_FIELD_NUMBER: _ClassVar[int]
    RATE_BPS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VALID_MS_FIELD_NUMBER: _ClassVar[int]
    dst_ip: str
    rate_bps: int
    epoch: int
    valid_ms: int
    def __init__(self, dst_ip: _Optional[str] = ..., rate_bps: _Optional[int] = ..., epoch: _Optional[int] = ..., valid_ms: _Optional[int] = ...) -> None: ...

class AdviceUpdate(_message.Message):
    __slots__ = ("advice", "mode")
    ADVICE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    advice: RateAdvice
    mode: str
    def __init__(self, advice: _Optional[_Union[RateAdvice, _Mapping]] = ..., mode: _Optional[str] = ...) -> None: ...

class DemandRequest(_message.Message):
    __slots__ = ("src", "dst", "bytes", "rate_bps", "stop", "weight")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    RATE_BPS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    bytes: int
    rate_bps: int
    stop: bool
    weight: float
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ..., bytes: _Optional[int] = ..., rate_bps: _Optional[int] = ..., stop: bool = ..., weight: _Optional[float] = ...) -> None: ...

class DemandReply(_message.Message):
    __slots__ = ("active_demands",)
    ACTIVE_DEMANDS_FIELD_NUMBER: _ClassVar[int]
    active_demands: int
    def __init__(self, active_demands: _Optional[int] = ...) -> None: ...

class GetAdviceRequest(_message.Message):
    __slots__ = ("host",)
    HOST_FIELD_NUMBER: _ClassVar[int]
    host: str
    def __init__(self, host: _Optional[str] = ...) -> None: ...

class AdviceEntry(_message.Message):
    __slots__ = ("src", "dst", "rate_bps", "epoch", "age_s")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    RATE_BPS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    rate_bps: int
    epoch: int
    age_s: float
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ..., rate_bps: _Optional[int] = ..., epoch: _Optional[int] = ..., age_s: _Optional[float] = ...) -> None: ...

class AdviceTable(_message.Message):
    __slots__ = ("mode", "entries", "decisions")
    MODE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    mode: str
    entries: _containers.RepeatedCompositeFieldContainer[AdviceEntry]
    decisions: int
    def __init__(self, mode: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[AdviceEntry, _Mapping]]] = ..., decisions: _Optional[int] = ...) -> None: ...

class ModeRequest(_message.Message):
    __slots__ = ("mode",)
    MODE_FIELD_NUMBER: _ClassVar[int]
    mode: str
    def __init__(self, mode: _Optional[str] = ...) -> None: ...

class ModeReply(_message.Message):
    __slots__ = ("mode",)
    MODE_FIELD_NUMBER: _ClassVar[int]
    mode: str
    def __init__(self, mode: _Optional[str] = ...) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ("switch", "port", "include_flows")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FLOWS_FIELD_NUMBER: _ClassVar[int]
    switch: str
    port: int
    include_flows: bool
    def __init__(self, switch: _Optional[str] = ..., port: _Optional[int] = ..., include_flows: bool = ...) -> None: ...

class PortTelemetry(_message.Message):
    __slots__ = ("switch", "port", "queue_pkts", "hop_latency_us", "has_rate", "tx_rate_mbps", "utilisation", "capacity_mbps", "age_s")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_PKTS_FIELD_NUMBER: _ClassVar[int]
    HOP_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    HAS_RATE_FIELD_NUMBER: _ClassVar[int]
    TX_RATE_MBPS_FIELD_NUMBER: _ClassVar[int]
    UTILISATION_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_MBPS_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    switch: str
    port: int
    queue_pkts: int
    hop_latency_us: int
    has_rate: bool
    tx_rate_mbps: float
    utilisation: float
    capacity_mbps: int
    age_s: float
    def __init__(self, switch: _Optional[str] = ..., port: _Optional[int] = ..., queue_pkts: _Optional[int] = ..., hop_latency_us: _Optional[int] = ..., has_rate: bool = ..., tx_rate_mbps: _Optional[float] = ..., utilisation: _Optional[float] = ..., capacity_mbps: _Optional[int] = ..., age_s: _Optional[float] = ...) -> None: ...

class FlowHop(_message.Message):
    __slots__ = ("switch", "ingress_port", "egress_port")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    INGRESS_PORT_FIELD_NUMBER: _ClassVar[int]
    EGRESS_PORT_FIELD_NUMBER: _ClassVar[int]
    switch: str
    ingress_port: int
    egress_port: int
    def __init__(self, switch: _Optional[str] = ..., ingress_port: _Optional[int] = ..., egress_port: _Optional[int] = ...) -> None: ...

class FlowPath(_message.Message):
    __slots__ = ("src", "dst", "protocol", "src_port", "dst_port", "hops", "age_s")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    protocol: int
    src_port: int
    dst_port: int
    hops: _containers.RepeatedCompositeFieldContainer[FlowHop]
    age_s: float
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ..., protocol: _Optional[int] = ..., src_port: _Optional[int] = ..., dst_port: _Optional[int] = ..., hops: _Optional[_Iterable[_Union[FlowHop, _Mapping]]] = ..., age_s: _Optional[float] = ...) -> None: ...

class State(_message.Message):
    __slots__ = ("ports", "flows", "reports", "bad_reports")
    PORTS_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    BAD_REPORTS_FIELD_NUMBER: _ClassVar[int]
    ports: _containers.RepeatedCompositeFieldContainer[PortTelemetry]
    flows: _containers.RepeatedCompositeFieldContainer[FlowPath]
    reports: int
    bad_reports: int
    def __init__(self, ports: _Optional[_Iterable[_Union[PortTelemetry, _Mapping]]] = ..., flows: _Optional[_Iterable[_Union[FlowPath, _Mapping]]] = ..., reports: _Optional[int] = ..., bad_reports: _Optional[int] = ...) -> None: ...
