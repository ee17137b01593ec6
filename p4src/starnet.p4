/*
 * StarNet testbed switch (P4-16, v1model): L3 + ECMP fabric with INT v2.1 telemetry,
 * ECN marking, fault injection and a CPU port for probes and INT reports.
 * The committed P4Info (starnet.p4info.txtpb) is the contract with the controller and the
 * soft switch; tests/unit/wire/test_p4source.py keeps the two in step.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/headers.p4"
#include "include/parser.p4"
#include "include/ingress.p4"
#include "include/egress.p4"

V1Switch(
    StarParser(),
    StarVerifyChecksum(),
    StarIngress(),
    StarEgress(),
    StarComputeChecksum(),
    StarDeparser()
) main;
