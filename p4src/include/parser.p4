/* StarNet: parser, checksum controls and deparser. */
#ifndef STARNET_PARSER_P4
#define STARNET_PARSER_P4

parser StarParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
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
        transition parse_l4_done;
    }

    state parse_l4_done {
        transition select(hdr.ipv4.dscp) {
            DSCP_INT: parse_int_shim;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src_port = hdr.udp.src_port;
        meta.l4_dst_port = hdr.udp.dst_port;
        transition select(hdr.ipv4.dscp) {
            DSCP_INT: parse_int_shim;
            default: accept;
        }
    }

    state parse_int_shim {
        packet.extract(hdr.int_shim);
        packet.extract(hdr.int_md);
        verify(hdr.int_shim.int_type == INT_TYPE_MD && hdr.int_md.hop_ml == INT_HOP_WORDS
               && hdr.int_shim.len >= INT_MD_WORDS, error.BadIntHeader);
        meta.int_words_left = hdr.int_shim.len - INT_MD_WORDS;
        transition select(meta.int_words_left) {
            0: accept;
            default: parse_int_hop;
        }
    }

    // The whole stack is extracted so that the sink can strip it; a length that is not a whole
    // number of hops runs into the stack bound (error.StackOutOfBounds) and the packet is dropped.
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
