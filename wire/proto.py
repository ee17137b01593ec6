"""The P4Runtime protobuf modules, imported once under fixed short names.

The generated code comes from finsy, which bundles current P4Runtime protos built for the
protobuf release we pin (the `p4runtime` wheel's code does not load under current protobuf).

    p4r       p4.v1.p4runtime_pb2
    p4r_grpc  p4.v1.p4runtime_pb2_grpc
    p4i       p4.config.v1.p4info_pb2
    rpc_code  google.rpc.code_pb2
    rpc_status google.rpc.status_pb2
"""

from finsy.proto import p4i, p4r, p4r_grpc, rpc_code, rpc_status

__all__ = ["CLIENT_CHANNEL_OPTIONS", "p4i", "p4r", "p4r_grpc", "rpc_code", "rpc_status"]

# A P4Runtime client's channel options: trailers up to 64 MiB, so a switch run with
# --error-details-bytes 0 can hand over one p4.v1.Error per update of any batch (gRPC's default,
# 8 KiB, holds ~200; beyond it a client gets a bare RESOURCE_EXHAUSTED).
CLIENT_CHANNEL_OPTIONS = (("grpc.max_metadata_size", 64 << 20),)
