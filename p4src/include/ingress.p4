/* StarNet ingress: port roles, packet-out, L3 + ECMP, INT source/sink decisions, fault injection. */
#ifndef STARNET_INGRESS_P4
#define STARNET_INGRESS_P4

control StarIngress(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    counter(512, CounterType.packets_and_bytes) port_rx;
    counter(512, CounterType.packets_and_bytes) fault_drops;
    counter(512, CounterType.packets_and_bytes) malformed;
    // Routed TCP/UDP frames marked with an INT DSCP but carrying no valid INT header: foreign
    // traffic, forwarded as plain (the parser's int_dscp_plain), per ingress port.
    counter(512, CounterType.packets_and_bytes) int_dscp_plain;
    // Every frame the switch drops, by reason (headers.p4 DROP_*): rx = tx + punted + these.
    counter(DROP_REASONS, CounterType.packets_and_bytes) drop_reason;
    // Last routine INT report per flow slot (µs, switch clock).
    register<bit<48>>(REPORT_FLOW_SLOTS) report_last_us;
    // Per flow slot, 1 + a signature of the last watched flow that carried payload through this
    // source: a flow whose signature is not there is new, and its first data packet starts INT, so
    // the controller learns of a new demand from its first packet instead of 1 in 2^sample_log2.
    register<bit<32>>(REPORT_FLOW_SLOTS) int_flow_seen;
    // Flowlet switching (mode flowlet, LetFlow-style, NSDI'17): per flow slot, when its last packet
    // passed (µs) and its flowlet number; a packet more than flowlet_gap_us after the last one starts
    // a new flowlet, which the ECMP selector hashes afresh (meta.flowlet_id is one of its keys).
    register<bit<48>>(REPORT_FLOW_SLOTS) flowlet_last_us;
    register<bit<16>>(REPORT_FLOW_SLOTS) flowlet_ids;

    @max_group_size(16)
    action_selector(HashAlgorithm.crc32, 32w1024, 32w16) ecmp_selector;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action set_port_role(bit<8> role) {
        meta.port_role = role;
    }

    table port_role {
        key = {
            standard_metadata.ingress_port: exact;
        }
        actions = {
            set_port_role;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 512;
    }

    action set_nhop(bit<9> port, mac_addr_t smac, mac_addr_t dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_lpm {
        key = {
            hdr.ipv4.dst_addr: lpm;
            hdr.ipv4.src_addr: selector;
            hdr.ipv4.protocol: selector;
            meta.l4_src_port: selector;
            meta.l4_dst_port: selector;
            meta.flowlet_id: selector;
        }
        actions = {
            set_nhop;
            drop;
        }
        implementation = ecmp_selector;
        default_action = drop();
        size = 4096;
    }

    action set_flowlet_gap(bit<32> gap_us) {
        meta.flowlet_gap_us = gap_us;
    }

    // Keyless: its default action, written by the controller, turns flowlet switching on (a gap
    // above 0) or off (0, or never written).
    table flowlet_config {
        actions = {
            set_flowlet_gap;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 1;
    }

    // Path scheduling (controller/paths.py): one flow pinned to one next hop at a switch where its
    // shortest paths fork. A hit replaces ipv4_lpm's ECMP choice; flows with no entry keep hashing.
    // The controller removes a flow's entries when it ends and rewrites them when a link fails.
    table flow_pin {
        key = {
            hdr.ipv4.dst_addr: exact;
            hdr.ipv4.src_addr: exact;
            hdr.ipv4.protocol: exact;
            meta.l4_src_port: exact;
            meta.l4_dst_port: exact;
        }
        actions = {
            set_nhop;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 1024;
    }

    action int_watch(bit<8> sample_log2) {
        meta.int_watched = 1;
        meta.int_sample_log2 = sample_log2;
    }

    table int_source {
        key = {
            hdr.ipv4.src_addr: ternary;
            hdr.ipv4.dst_addr: ternary;
            hdr.ipv4.protocol: ternary;
            meta.l4_src_port: ternary;
            meta.l4_dst_port: ternary;
        }
        actions = {
            int_watch;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 256;
    }

    action set_int_sink() {
        meta.int_sink = 1;
    }

    // Egress ports where packets leave the fabric (host-facing): INT ends there.
    table int_sink {
        key = {
            standard_metadata.egress_spec: exact;
        }
        actions = {
            set_int_sink;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 512;
    }

    action fault_drop() {
        meta.fault = FAULT_DROP;
    }

    // Drops with probability prob_u16 / 65536.
    action fault_drop_prob(bit<16> prob_u16) {
        meta.fault = FAULT_DROP_PROB;
        meta.fault_prob_u16 = prob_u16;
    }

    table fault_inject {
        key = {
            standard_metadata.ingress_port: ternary;
            hdr.ipv4.src_addr: ternary;
            hdr.ipv4.dst_addr: ternary;
        }
        actions = {
            fault_drop;
            fault_drop_prob;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 256;
    }

    action punt(bit<8> reason) {
        standard_metadata.egress_spec = CPU_PORT;
        meta.cpu_reason = reason;
    }

    action report_int() {
        clone_preserving_field_list(CloneType.I2E, REPORT_SESSION, 1);
    }

    apply {
        meta.orig_ingress_port = (bit<16>)standard_metadata.ingress_port;
        if (!hdr.packet_out.isValid()) {
            // Injected loss is the link's: its frames are lost before the port counts them (so
            // port_rx against the far end's port_tx shows the loss), probes included (they are
            // how the controller finds a direction that loses frames with its carrier up).
            // Entries for a link match the ingress port with the IPv4 fields wildcarded.
            fault_inject.apply();
            if (meta.fault != FAULT_NONE) {
                bit<16> draw;
                random(draw, 16w0, 16w0xFFFF);
                if (meta.fault == FAULT_DROP || draw < meta.fault_prob_u16) {
                    fault_drops.count((bit<32>)standard_metadata.ingress_port);
                    drop_reason.count(DROP_FAULT);
                    drop();
                    exit;
                }
            }
        }
        port_rx.count((bit<32>)standard_metadata.ingress_port);
        if (standard_metadata.parser_error != error.NoError) {
            malformed.count((bit<32>)standard_metadata.ingress_port);
            drop_reason.count(DROP_MALFORMED);
            drop();
            exit;
        }
        if (hdr.packet_out.isValid()) {
            // From the controller: straight to the named port, no tables.
            standard_metadata.egress_spec = (bit<9>)hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
            exit;
        }
        port_role.apply();
        bool probe = hdr.ethernet.ether_type == ETHERTYPE_PROBE;
        if (!probe) {
            if (!hdr.ipv4.isValid()) {
                drop_reason.count(DROP_NON_IPV4);
                drop();
                exit;
            }
            if (hdr.ipv4.ttl <= 1) {
                drop_reason.count(DROP_TTL_EXPIRED);
                drop();
                exit;
            }
        }
        if (probe) {
            punt(REASON_PROBE);
            exit;
        }
        flowlet_config.apply();
        if (meta.flowlet_gap_us != 0 && (hdr.tcp.isValid() || hdr.udp.isValid())) {
            bit<32> flowlet_slot;
            hash(flowlet_slot, HashAlgorithm.crc32, 32w0,
                 { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol, meta.l4_src_port,
                   meta.l4_dst_port },
                 REPORT_FLOW_SLOTS);
            bit<48> last_us;
            bit<16> flowlet;
            flowlet_last_us.read(last_us, flowlet_slot);
            flowlet_ids.read(flowlet, flowlet_slot);
            if (standard_metadata.ingress_global_timestamp - last_us > (bit<48>)meta.flowlet_gap_us) {
                flowlet = flowlet + 1;
                flowlet_ids.write(flowlet_slot, flowlet);
            }
            flowlet_last_us.write(flowlet_slot, standard_metadata.ingress_global_timestamp);
            meta.flowlet_id = flowlet;
        }
        if (!flow_pin.apply().hit) {
            if (!ipv4_lpm.apply().hit) {
                // A miss drops (BMv2 cannot hold a default action for a table with an action profile).
                mark_to_drop(standard_metadata);
            }
        }
        if (standard_metadata.egress_spec == DROP_PORT) {
            // A miss, or an entry's drop action.
            drop_reason.count(DROP_NO_ROUTE);
            exit;
        }
        if (meta.int_dscp_plain == 1) {
            int_dscp_plain.count((bit<32>)standard_metadata.ingress_port);
        }
        if (meta.port_role == ROLE_HOST && !hdr.int_shim.isValid()
                && (hdr.tcp.isValid() || hdr.udp.isValid())) {
            int_source.apply();
            bit<16> header_bytes = ((bit<16>)hdr.ipv4.ihl) << 2;
            if (hdr.tcp.isValid()) {
                header_bytes = header_bytes + (((bit<16>)hdr.tcp.data_offset) << 2);
            } else {
                header_bytes = header_bytes + 8;
            }
            // INT rides on payload (a pure TCP ACK never starts it): a new flow's first data
            // packet, and then one data packet in 2^sample_log2, start INT here.
            if (meta.int_watched == 1 && hdr.ipv4.total_len > header_bytes) {
                bit<32> slot;
                bit<32> signature;
                hash(slot, HashAlgorithm.crc32, 32w0,
                     { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol, meta.l4_src_port,
                       meta.l4_dst_port },
                     REPORT_FLOW_SLOTS);
                hash(signature, HashAlgorithm.crc16, 32w1,
                     { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol, meta.l4_src_port,
                       meta.l4_dst_port },
                     32w65536);
                bit<32> seen;
                int_flow_seen.read(seen, slot);
                if (seen != signature) {
                    int_flow_seen.write(slot, signature);
                    meta.int_source = 1;
                }
                bit<16> draw;
                random(draw, 16w0, 16w0xFFFF);
                if ((draw & ((16w1 << meta.int_sample_log2) - 1)) == 0) {
                    meta.int_source = 1;
                }
            }
        }
        if (hdr.int_shim.isValid() || meta.int_source == 1) {
            int_sink.apply();
        }
        meta.orig_egress_port = (bit<16>)standard_metadata.egress_spec;
        if (meta.int_sink == 1 && (hdr.int_shim.isValid() || meta.int_source == 1)) {
            // Report the stack that arrived (none when this switch is source and sink at once:
            // the clone's egress starts INT on it), at once when a hop flagged congestion (but
            // not within REPORT_CONGESTED_INTERVAL_US of the flow slot's last report), else at
            // most once per REPORT_INTERVAL_US per flow slot.
            bool flagged = hdr.int_shim.isValid() && (hdr.int_md.ds_flags & INT_DS_FLAG_CONGESTED) != 0;
            hash(meta.flow_slot, HashAlgorithm.crc32, 32w0,
                 { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol, meta.l4_src_port,
                   meta.l4_dst_port },
                 REPORT_FLOW_SLOTS);
            bit<48> last;
            report_last_us.read(last, meta.flow_slot);
            bit<48> now = standard_metadata.ingress_global_timestamp;
            if (last == 0 || now - last >= REPORT_INTERVAL_US
                    || (flagged && now - last >= REPORT_CONGESTED_INTERVAL_US)) {
                report_last_us.write(meta.flow_slot, now);
                meta.cpu_reason = REASON_INT_REPORT;
                report_int();
            }
        }
    }
}

#endif
