/* StarNet INT (v2.1 INT-MD over TCP/UDP): source, transit hop push, sink strip, report. */
#ifndef STARNET_INT_P4
#define STARNET_INT_P4

// INT sits between the L4 header and the payload, so IPv4 and UDP lengths grow with it; the TCP
// and UDP checksums are left alone: the sink restores every byte they cover.
control IntGrow(inout headers_t hdr, in bit<16> bytes) {
    apply {
        hdr.ipv4.total_len = hdr.ipv4.total_len + bytes;
        if (hdr.udp.isValid()) {
            hdr.udp.len = hdr.udp.len + bytes;
        }
    }
}

control IntSource(inout headers_t hdr, in bit<6> dscp) {
    IntGrow() grow;

    apply {
        hdr.int_shim.setValid();
        hdr.int_shim.int_type = INT_TYPE_MD;
        hdr.int_shim.npt = 0;
        hdr.int_shim.rsvd = 0;
        hdr.int_shim.len = INT_MD_WORDS;
        hdr.int_shim.rsvd2 = 0;
        hdr.int_shim.orig_dscp = hdr.ipv4.dscp;
        hdr.int_md.setValid();
        hdr.int_md.ver = INT_VERSION;
        hdr.int_md.d = 0;
        hdr.int_md.e = 0;
        hdr.int_md.m = 0;
        hdr.int_md.rsvd = 0;
        hdr.int_md.hop_ml = INT_HOP_WORDS;
        hdr.int_md.remaining_hop_cnt = INT_MAX_HOPS;
        hdr.int_md.instruction_bitmap = INT_INSTRUCTIONS;
        hdr.int_md.domain_specific_id = INT_DS_ID;
        hdr.int_md.ds_instruction = INT_DS_INSTRUCTIONS;
        hdr.int_md.ds_flags = 0;
        hdr.ipv4.dscp = dscp;
        grow.apply(hdr, INT_FIXED_BYTES);
    }
}

// Push this switch's hop in front of the stack (newest first), or set E when no room is left.
control IntTransit(inout headers_t hdr, in bit<32> node_id, in bit<16> ingress_port,
                   in bit<16> egress_port, in bit<32> hop_latency_us, in bit<24> qdepth_pkts,
                   in bit<48> egress_ts_us, in bit<32> tx_bytes, in bit<32> capacity_mbps,
                   in bool congested) {
    IntGrow() grow;

    apply {
        if (hdr.int_md.remaining_hop_cnt == 0) {
            hdr.int_md.e = 1;
        } else {
            hdr.int_hops.push_front(1);
            hdr.int_hops[0].setValid();
            hdr.int_hops[0].node_id = node_id;
            hdr.int_hops[0].ingress_port = ingress_port;
            hdr.int_hops[0].egress_port = egress_port;
            hdr.int_hops[0].hop_latency_us = hop_latency_us;
            hdr.int_hops[0].queue_id = 0;
            hdr.int_hops[0].queue_occupancy_pkts = qdepth_pkts;
            hdr.int_hops[0].egress_ts_us = (bit<64>)egress_ts_us;
            hdr.int_hops[0].tx_bytes = tx_bytes;
            hdr.int_hops[0].capacity_mbps = capacity_mbps;
            hdr.int_md.remaining_hop_cnt = hdr.int_md.remaining_hop_cnt - 1;
            hdr.int_shim.len = hdr.int_shim.len + (bit<8>)INT_HOP_WORDS;
            grow.apply(hdr, INT_HOP_BYTES);
        }
        if (congested) {
            hdr.int_md.ds_flags = hdr.int_md.ds_flags | INT_DS_FLAG_CONGESTED;
        }
    }
}

// Leave the fabric without INT: restore DSCP and lengths, drop shim, MD header and every hop.
control IntSink(inout headers_t hdr) {
    apply {
        bit<16> int_bytes = ((bit<16>)hdr.int_shim.len << 2) + 4;
        hdr.ipv4.dscp = hdr.int_shim.orig_dscp;
        hdr.ipv4.total_len = hdr.ipv4.total_len - int_bytes;
        if (hdr.udp.isValid()) {
            hdr.udp.len = hdr.udp.len - int_bytes;
        }
        hdr.int_shim.setInvalid();
        hdr.int_md.setInvalid();
        hdr.int_hops[0].setInvalid();
        hdr.int_hops[1].setInvalid();
        hdr.int_hops[2].setInvalid();
        hdr.int_hops[3].setInvalid();
        hdr.int_hops[4].setInvalid();
        hdr.int_hops[5].setInvalid();
    }
}

#endif
