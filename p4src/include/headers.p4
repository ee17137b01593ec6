/* StarNet: constants, headers and metadata (P4-16, v1model). DESIGN.md "INT wire format". */
#ifndef STARNET_HEADERS_P4
#define STARNET_HEADERS_P4

const bit<9>  CPU_PORT = 255;             // BMv2 --cpu-port; the soft switch uses the same number
const bit<9>  DROP_PORT = 511;            // egress_spec after v1model mark_to_drop() (simple_switch)
const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_PROBE = 0x88B5;   // IEEE local experimental: controller link probes
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;

const bit<8> ROLE_HOST = 1;
const bit<8> ROLE_FABRIC = 2;

const bit<2> FAULT_NONE = 0;
const bit<2> FAULT_DROP = 1;
const bit<2> FAULT_DROP_PROB = 2;

// packet_in.reason (wire/cpu.py PacketInReason)
const bit<8> REASON_INT_REPORT = 1;
const bit<8> REASON_PROBE = 2;

// INT v2.1, INT-MD over TCP/UDP, signalled by DSCP. Instruction bits are numbered from the MSB.
// DSCP_INT is the default marking (CS4); the controller writes the one in use into the parser's
// value set int_dscp and int_node's set_node_id.
const bit<6>  DSCP_INT = 0x20;
const bit<4>  INT_TYPE_MD = 1;
const bit<4>  INT_VERSION = 2;
const bit<5>  INT_HOP_WORDS = 8;          // 32 B per hop
const bit<8>  INT_MAX_HOPS = 6;           // RemainingHopCnt at the source; also the parser's stack
const bit<8>  INT_MD_WORDS = 3;           // MD header, 12 B
const bit<16> INT_INSTRUCTIONS = 0xF400;  // bits 0,1,2,3,5: node id, ports, latency, queue, egress ts
const bit<16> INT_DS_ID = 0x5354;         // "ST"
const bit<16> INT_DS_INSTRUCTIONS = 0xC000;  // DS bit 0: egress tx bytes, bit 1: capacity Mbps
const bit<16> INT_DS_FLAG_CONGESTED = 0x8000;  // DSFlags bit 0: some hop saw queue >= threshold
const bit<16> INT_FIXED_BYTES = 16;       // shim + MD header
const bit<16> INT_HOP_BYTES = 32;

// Drop reasons: the index into StarIngress.drop_reason (softswitch/pipeline.py DROP_REASONS, same
// order). The program counts the first five itself; the rest happen outside the P4 pipeline — in
// the traffic manager (queue full), on the wire (send error) or in the packet-in path (no client
// takes a punted frame) — and the soft switch adds them to the same counter; BMv2 leaves them 0.
const bit<32> DROP_MALFORMED = 0;         // parser_error != NoError (also a truncated INT stack)
const bit<32> DROP_NON_IPV4 = 1;
const bit<32> DROP_TTL_EXPIRED = 2;
const bit<32> DROP_NO_ROUTE = 3;          // ipv4_lpm miss or its drop action
const bit<32> DROP_FAULT = 4;             // fault_inject
const bit<32> DROP_NO_LIVE_MEMBER = 5;    // an ECMP group whose watch ports are all down
const bit<32> DROP_NO_CONTROLLER = 6;     // punted (probe, INT report) with no primary client
const bit<32> DROP_QUEUE_FULL = 7;        // egress queue tail drop
const bit<32> DROP_SEND_ERROR = 8;        // the port's link went away under the frame
const bit<32> DROP_REASONS = 9;

const bit<32> REPORT_SESSION = 500;       // clone session to the CPU port, set by the controller
const bit<48> REPORT_INTERVAL_US = 10000; // at most one routine report per flow slot per 10 ms
const bit<48> REPORT_CONGESTED_INTERVAL_US = 2500; // congested: at once, not within 2.5 ms of the last
const bit<32> REPORT_FLOW_SLOTS = 1024;
// A report carries the first REPORT_TRUNCATE_BYTES of the frame (headers and the INT stack, not
// the payload). The program truncates it itself (v1model truncate(), which BMv2 supports where its
// PI does not support truncating clone sessions); the packet_in header is counted on top.
const bit<32> REPORT_TRUNCATE_BYTES = 512;
const bit<32> PACKET_IN_BYTES = 4;

// standard_metadata.instance_type values of BMv2's simple_switch (not named by v1model.p4).
const bit<32> PKT_INSTANCE_TYPE_NORMAL = 0;
const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;

error {
    BadIpv4Header
}

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;

@controller_header("packet_in")
header packet_in_t {
    bit<16> ingress_port;
    bit<8>  reason;
    bit<8>  _pad;
}

@controller_header("packet_out")
header packet_out_t {
    bit<16> egress_port;
    bit<16> _pad;
}

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header tcp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<32> seq_no;
    bit<32> ack_no;
    bit<4>  data_offset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgent_ptr;
}

// TCP options (data_offset > 5): INT goes after them, after the whole L4 header (DESIGN.md).
header tcp_options_t {
    varbit<320> options;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> len;
    bit<16> checksum;
}

// INT shim for TCP/UDP (4 B). len: 4-byte words of MD header + hop stack (not the shim itself).
header int_shim_t {
    bit<4>  int_type;
    bit<2>  npt;
    bit<2>  rsvd;
    bit<8>  len;
    bit<10> rsvd2;
    bit<6>  orig_dscp;
}

// INT-MD metadata header (12 B).
header int_md_t {
    bit<4>  ver;
    bit<1>  d;
    bit<1>  e;
    bit<1>  m;
    bit<12> rsvd;
    bit<5>  hop_ml;
    bit<8>  remaining_hop_cnt;
    bit<16> instruction_bitmap;
    bit<16> domain_specific_id;
    bit<16> ds_instruction;
    bit<16> ds_flags;
}

// One hop's metadata (32 B), in instruction-bit order, then the domain-specific fields.
header int_hop_t {
    bit<32> node_id;
    bit<16> ingress_port;
    bit<16> egress_port;
    bit<32> hop_latency_us;
    bit<8>  queue_id;
    bit<24> queue_occupancy_pkts;
    bit<64> egress_ts_us;
    bit<32> tx_bytes;
    bit<32> capacity_mbps;
}

struct headers_t {
    packet_in_t  packet_in;
    packet_out_t packet_out;
    ethernet_t   ethernet;
    ipv4_t       ipv4;
    tcp_t        tcp;
    tcp_options_t tcp_options;
    udp_t        udp;
    int_shim_t   int_shim;
    int_md_t     int_md;
    int_hop_t[6] int_hops;   // INT_MAX_HOPS
}

struct metadata_t {
    bit<16> l4_src_port;
    bit<16> l4_dst_port;
    bit<8>  port_role;
    bit<8>  int_words_left;  // parser: hop words still to extract
    bit<16> l4_payload_bytes; // parser: IPv4 length less the IPv4 and L4 headers (mod 2^16)
    bit<8>  int_hop_budget;  // parser: hops carried + hops remaining of a would-be INT header
    bit<1>  int_dscp_plain;  // marked with an INT DSCP, but no valid INT header: plain traffic
    bit<1>  int_watched;     // int_source matched: sample with int_sample_log2
    bit<8>  int_sample_log2;
    bit<1>  int_source;      // this switch starts INT on the packet
    bit<1>  int_sink;        // the packet leaves the fabric here: strip INT, report
    bit<2>  fault;           // FAULT_* from fault_inject
    bit<16> fault_prob_u16;
    @field_list(1)
    bit<8>  cpu_reason;
    @field_list(1)
    bit<16> orig_ingress_port;
    @field_list(1)
    bit<16> orig_egress_port;
    bit<32> flow_slot;
    bit<32> flowlet_gap_us;  // flowlet_config: 0 = flowlet switching off
    bit<16> flowlet_id;      // the packet's flowlet (a selector key of ipv4_lpm; 0 when off)
    bit<32> capacity_mbps;
    bit<19> ecn_threshold_pkts;
}

#endif
