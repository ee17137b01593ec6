/* StarNet: parser, checksum controls and deparser. */
#ifndef STARNET_PARSER_P4
#define STARNET_PARSER_P4

parser StarParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    // The DSCP values that signal INT, written by the controller (its option int_dscp; empty:
    // nothing is INT). A frame marked with one is INT only if a valid shim and MD header follow its
    // L4 header; any other such frame is foreign traffic, forwarded as plain and counted.
    value_set<bit<6>>(4) int_dscp;
    bit<128> int_peek;

    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }

    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4 && hdr.ipv4.ihl >= 5, error.BadIpv4Header);
        // Options (ihl > 5) are forwarded but not looked into: no L4 ports, no INT.
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (5, PROTO_TCP): parse_tcp;
            (5, PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.l4_src_port = hdr.tcp.src_port;
        meta.l4_dst_port = hdr.tcp.dst_port;
        meta.l4_payload_bytes = hdr.ipv4.total_len - 40;  // by the IPv4 length; options below
        // Options take data_offset - 5 words; an offset below 5 (not a TCP header) has none.
        transition select(hdr.tcp.data_offset) {
            0: parse_l4_done;
            1: parse_l4_done;
            2: parse_l4_done;
            3: parse_l4_done;
            4: parse_l4_done;
            5: parse_l4_done;
            default: parse_tcp_options;
        }
    }

    state parse_tcp_options {
        packet.extract(hdr.tcp_options, (bit<32>)(((bit<16>)hdr.tcp.data_offset - 5) * 32));
        meta.l4_payload_bytes = meta.l4_payload_bytes - (((bit<16>)hdr.tcp.data_offset - 5) << 2);
        transition parse_l4_done;
    }

    state parse_l4_done {
        transition select(hdr.ipv4.dscp) {
            int_dscp: check_int_room;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src_port = hdr.udp.src_port;
        meta.l4_dst_port = hdr.udp.dst_port;
        meta.l4_payload_bytes = hdr.ipv4.total_len - 28;
        transition parse_l4_done;
    }

    // Marked as INT: is there room (by the IPv4 length) for a shim and an MD header? (wire/intmd.py
    // int_offset decides the same way.) A frame shorter than its headers claim is malformed.
    state check_int_room {
        transition select(meta.l4_payload_bytes) {
            0 &&& 0xFFF0: int_dscp_plain;  // below INT_FIXED_BYTES
            default: check_int_header;
        }
    }

    // Type MD, version 2, 8-word hops, a length of the MD header plus 0-6 whole hops, and at most
    // 7 hops remaining (so that the sum below cannot wrap).
    state check_int_header {
        int_peek = packet.lookahead<bit<128>>();
        transition select(int_peek[127:124], int_peek[95:92], int_peek[76:72], int_peek[119:112],
                          int_peek[71:64]) {
            (INT_TYPE_MD, INT_VERSION, INT_HOP_WORDS, 8w0x3B, _): int_dscp_plain;  // 7 hops
            (INT_TYPE_MD, INT_VERSION, INT_HOP_WORDS, 8w0x03 &&& 8w0xC7, 8w0 &&& 8w0xF8): check_int_hops;
            default: int_dscp_plain;
        }
    }

    // Hops carried plus hops remaining stay within the INT_MAX_HOPS budget.
    state check_int_hops {
        meta.int_hop_budget = ((int_peek[119:112] - INT_MD_WORDS) >> 3) + int_peek[71:64];
        transition select(meta.int_hop_budget) {
            7: int_dscp_plain;
            0 &&& 0xF8: parse_int_shim;
            default: int_dscp_plain;
        }
    }

    state int_dscp_plain {
        meta.int_dscp_plain = 1;
        transition accept;
    }

    state parse_int_shim {
        packet.extract(hdr.int_shim);
        packet.extract(hdr.int_md);
        meta.int_words_left = hdr.int_shim.len - INT_MD_WORDS;
        transition select(meta.int_words_left) {
            0: accept;
            default: parse_int_hop;
        }
    }

    // The whole stack is extracted so that the sink can strip it (its length was checked above; a
    // frame that ends before its stack does is PacketTooShort, malformed).
    state parse_int_hop {
        packet.extract(hdr.int_hops.next);
        meta.int_words_left = meta.int_words_left - (bit<8>)INT_HOP_WORDS;
        transition select(meta.int_words_left) {
            0: accept;
            default: parse_int_hop;
        }
    }
}

// Hosts compute their checksums and the fabric does not police them (as most switches don't).
control StarVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control StarComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

control StarDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.tcp);
        packet.emit(hdr.tcp_options);
        packet.emit(hdr.udp);
        packet.emit(hdr.int_shim);
        packet.emit(hdr.int_md);
        packet.emit(hdr.int_hops);
    }
}

#endif
