/* StarNet egress: port counters, port_config, ECN, INT, packet-in header and INT reports. */
#ifndef STARNET_EGRESS_P4
#define STARNET_EGRESS_P4

#include "int.p4"

control StarEgress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    counter(512, CounterType.packets_and_bytes) port_tx;
    // Per-port state a report needs for the sink's own hop: the report is an ingress clone that
    // leaves through the CPU port, so it reads what the host-facing port last saw (the last packet
    // to leave it, written for every packet; the soft switch writes the sink hop from the packet).
    register<bit<32>>(512) port_tx_bytes;      // cumulative, mod 2^32
    register<bit<32>>(512) port_last_latency_us;
    register<bit<32>>(512) port_last_qdepth_pkts;
    register<bit<48>>(512) port_last_egress_us;
    register<bit<32>>(512) port_capacity_mbps;

    IntSource() int_source;
    IntTransit() int_transit;
    IntTransit() int_report_hop;  // a second instance: each invocation site gets its own
    IntSink() int_sink;

    bit<32> node_id = 0;
    bit<6> int_dscp = DSCP_INT;

    action set_node_id(bit<32> id, bit<6> dscp) {
        node_id = id;
        int_dscp = dscp;
    }

    // Keyless: its default action, written by the controller, names this switch in INT hops and
    // gives the DSCP an INT source marks (the one the parsers' value set int_dscp holds).
    table int_node {
        actions = {
            set_node_id;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 1;
    }

    action set_port_config(bit<32> capacity_mbps, bit<19> ecn_threshold_pkts) {
        meta.capacity_mbps = capacity_mbps;
        meta.ecn_threshold_pkts = ecn_threshold_pkts;
    }

    table port_config {
        key = {
            standard_metadata.egress_port: exact;
        }
        actions = {
            set_port_config;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 512;
    }

    apply {
        int_node.apply();
        if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            // An INT report: the stack as it arrived plus this switch's hop for the port the
            // original left by, then the packet_in header for the controller.
            bit<32> r_port = (bit<32>)meta.orig_egress_port;
            bit<32> r_tx_bytes;
            bit<32> r_latency;
            bit<32> r_qdepth;
            bit<48> r_egress_us;
            bit<32> r_capacity;
            port_tx_bytes.read(r_tx_bytes, r_port);
            port_last_latency_us.read(r_latency, r_port);
            port_last_qdepth_pkts.read(r_qdepth, r_port);
            port_last_egress_us.read(r_egress_us, r_port);
            port_capacity_mbps.read(r_capacity, r_port);
            if (!hdr.int_shim.isValid()) {
                int_source.apply(hdr, int_dscp);  // source and sink on this switch: the report's only hop is ours
            }
            int_report_hop.apply(hdr, node_id, meta.orig_ingress_port, meta.orig_egress_port, r_latency,
                              (bit<24>)r_qdepth, r_egress_us, r_tx_bytes, r_capacity, false);
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = meta.orig_ingress_port;
            hdr.packet_in.reason = REASON_INT_REPORT;
            hdr.packet_in._pad = 0;
            truncate(PACKET_IN_BYTES + REPORT_TRUNCATE_BYTES);
            port_tx.count((bit<32>)standard_metadata.egress_port);
            exit;
        }
        port_tx.count((bit<32>)standard_metadata.egress_port);
        if (standard_metadata.egress_port == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = meta.orig_ingress_port;
            hdr.packet_in.reason = meta.cpu_reason;
            hdr.packet_in._pad = 0;
            exit;
        }
        port_config.apply();
        bit<32> port = (bit<32>)standard_metadata.egress_port;
        bit<32> tx_bytes;
        port_tx_bytes.read(tx_bytes, port);
        tx_bytes = tx_bytes + standard_metadata.packet_length;
        port_tx_bytes.write(port, tx_bytes);
        bool congested = meta.ecn_threshold_pkts != 0
                         && standard_metadata.enq_qdepth >= meta.ecn_threshold_pkts;
        if (congested && hdr.ipv4.isValid() && hdr.ipv4.ecn != 0) {
            hdr.ipv4.ecn = 3;  // CE on ECT(0)/ECT(1) traffic
        }
        if (!hdr.ipv4.isValid()) {
            exit;
        }
        // What a report reads for this port: the packet that left it last, every packet, so that
        // tx_bytes and its timestamp are one pair (a report's rate is the delta of two pairs).
        bit<32> latency = (bit<32>)(standard_metadata.egress_global_timestamp
                                    - standard_metadata.ingress_global_timestamp);
        port_last_latency_us.write(port, latency);
        port_last_qdepth_pkts.write(port, (bit<32>)standard_metadata.enq_qdepth);
        port_last_egress_us.write(port, standard_metadata.egress_global_timestamp);
        port_capacity_mbps.write(port, meta.capacity_mbps);
        if (meta.int_source == 1) {
            int_source.apply(hdr, int_dscp);
        }
        if (hdr.int_shim.isValid()) {
            if (meta.int_sink == 1) {
                int_sink.apply(hdr);
            } else {
                int_transit.apply(hdr, node_id, meta.orig_ingress_port,
                                  (bit<16>)standard_metadata.egress_port, latency,
                                  (bit<24>)standard_metadata.enq_qdepth,
                                  standard_metadata.egress_global_timestamp, tx_bytes,
                                  meta.capacity_mbps, congested);
            }
        }
    }
}

#endif
