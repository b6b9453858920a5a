//! The table itself: perftest 6.x's options in perftest's usage order, each with what the
//! `vl_*` tools do with it, and the reasons shared by the refused families.

use super::PerftestOption;
use super::Status::{self, NoOp, Refused, Same};

const fn opt(short: char, long: &'static str, takes_value: bool, status: Status) -> PerftestOption {
    PerftestOption {
        short: Some(short),
        long,
        takes_value,
        status,
    }
}

const fn long(long: &'static str, takes_value: bool, status: Status) -> PerftestOption {
    PerftestOption {
        short: None,
        long,
        takes_value,
        status,
    }
}

const GPU: Status = Refused(
    "accelerator memory (CUDA, ROCm, MUSA, Neuron, Habana, MLU, OpenCL, device memory) is not \
     supported: the vl_* tools register host memory only",
);
const RAW: Status = Refused(
    "an option of perftest's raw Ethernet tools (raw_ethernet_*), which verbs-lab does not have",
);
const CRYPTO: Status =
    Refused("mlx5 crypto and signature offload are not supported (no such device here)");
const DC: Status = Refused("the DC transport (mlx5) is not supported; use -c RC, UC or UD");
const COMM_RDMA_CM: Status = Refused(
    "perftest then carries its control exchange (versions, parameters, endpoints, results, \
     barriers) over an rdma_cm connection of its own; the vl_* tools' exchange is TCP only. \
     Use -R to connect the measured QPs through rdma_cm",
);
const MCAST: Status = Refused("multicast is not supported; the send tools run unicast");
const HISTOGRAM: Status = Same(
    "every sample sorted, perftest's \"#, usec\" list, then the separator, header and row; all \
     samples (perftest leaves out the two largest); nothing with -D, as perftest; text layout \
     only (refused with --format table); -n up to 2^24",
);
const TPH: Status = Refused("PCIe TPH hints are not supported");
const MMAP: Status = Refused("buffers from an mmap'd file are not supported");
const RATE: Status =
    Refused("rate limiting is not supported: the vl_* tools always send as fast as the QP allows");

/// perftest 6.29's options (and Debian 12's 6.06 names), in perftest's usage order.
pub const OPTIONS: &[PerftestOption] = &[
    opt(
        'a',
        "all",
        false,
        Same("sizes 2..2^23; accepted by the atomic tools, which run 8 bytes"),
    ),
    opt('A', "atomic_type", true, Same("")),
    opt(
        'b',
        "bidirectional",
        false,
        Same("both sides print the sum of both directions"),
    ),
    opt(
        'c',
        "connection",
        true,
        Same("RC, UC, UD; XRC, DC and SRD are refused by value"),
    ),
    opt(
        'C',
        "report-cycles",
        false,
        Same(
            "cycles from our clock: the monotonic clock's nanoseconds × the CPU's 'cpu MHz' in \
             /proc/cpuinfo (perftest reads the cycle counter); the columns keep perftest's \
             [usec] headings, as perftest's; text only (the report files and gates stay in µs); \
             exit 2 where /proc/cpuinfo has no frequency",
        ),
    ),
    opt('d', "ib-dev", true, Same("")),
    opt('D', "duration", true, Same("")),
    opt(
        'e',
        "events",
        false,
        Same("refused by vl_write_lat, which polls memory"),
    ),
    opt(
        'X',
        "vector",
        true,
        Refused("choosing the completion vector is not supported: the CQ uses vector 0"),
    ),
    opt(
        'f',
        "margin",
        true,
        Same("bandwidth tools, -D only, default a quarter of -D; refused by the latency tools"),
    ),
    opt(
        'F',
        "CPU-freq",
        false,
        NoOp("there is no cycle-counter calibration, so no CPU frequency warning to silence"),
    ),
    opt('g', "mcg", false, MCAST),
    opt('h', "help", false, Same("")),
    opt('H', "report-histogrm", false, HISTOGRAM),
    long("report-histogram", false, HISTOGRAM),
    opt('i', "ib-port", true, Same("")),
    opt(
        'I',
        "inline_size",
        true,
        Same("the size granted by the QP is read back and shown; unlike perftest, honoured on rxe and siw (where the default is none)"),
    ),
    opt('l', "post_list", true, Same("")),
    long(
        "recv_post_list",
        true,
        Same(
            "the send tools' receiver posts consumed receives again N per ibv_post_recv call \
             once N are consumed (the rest of a phase at its end); -n a multiple of N and N up \
             to the rx depth and 256; the header's Recv Post List line; no receives to post in \
             the other bandwidth tools, as perftest",
        ),
    ),
    opt(
        'L',
        "hop_limit",
        true,
        Refused(
            "perftest accepts -L for its raw Ethernet QPs only and refuses it otherwise; the \
         verbs QPs ask for 64, and on RoCE the kernel takes the hop limit from the IP route",
        ),
    ),
    opt('m', "mtu", true, Same("")),
    opt('M', "MGID", true, MCAST),
    long("connectionless", false, MCAST),
    opt('n', "iters", true, Same("")),
    opt('N', "noPeak", false, Same("")),
    opt('o', "outs", true, Same("")),
    opt(
        'O',
        "dualport",
        false,
        Refused(
            "dual-port runs are not supported: run one tool per port (or --procs N on one port)",
        ),
    ),
    opt('p', "port", true, Same("")),
    opt(
        'q',
        "qp",
        true,
        Same("#iterations counts the messages of all QPs, as perftest"),
    ),
    opt(
        'Q',
        "cq-mod",
        true,
        Same(
            "with perftest's rules: 1 for one size over 8 KiB (RC/UC, no -e) unless given, the \
             post list's size with -l unless given, capped by the tx depth",
        ),
    ),
    opt('r', "rx-depth", true, Same("")),
    opt(
        'R',
        "rdma_cm",
        false,
        Same(
            "RC only (as perftest: no UC); the QPs connect through librdmacm, the server's \
         rdma_cm port is -p + 1; unlike perftest's -R, results and barriers stay on the TCP \
         exchange on -p",
        ),
    ),
    opt('s', "size", true, Same("")),
    opt(
        'S',
        "sl",
        true,
        Same("the SL of every QP's address vector (with -R too), read back with ibv_query_qp"),
    ),
    opt('t', "tx-depth", true, Same("")),
    opt(
        'T',
        "tos",
        true,
        Same("with -R only, as perftest (rdma_set_option RDMA_OPTION_ID_TOS)"),
    ),
    opt('u', "qp-timeout", true, Same("")),
    opt(
        'U',
        "report-unsorted",
        false,
        Same(
            "every sample as taken, perftest's \"#, usec\" list, then the separator, header and \
             row; with -n N the client lists N samples (its first round is timed from a clock \
             read before the post), perftest N - 1 (between consecutive posts); the ping-pong \
             server N - 1; nothing with -D, as perftest",
        ),
    ),
    opt('V', "version", false, Same("prints verbs-lab's version")),
    opt(
        'w',
        "limit_bw",
        true,
        Same("a floor on BW average in the report's unit; below it: perftest's error line, exit 3"),
    ),
    opt(
        'W',
        "report-counters",
        true,
        Same("deltas over the whole run, printed once after the rows; see also --counters"),
    ),
    opt('x', "gid-index", true, Same("")),
    opt(
        'y',
        "limit_msgrate",
        true,
        Same("a floor on MsgRate in Mpps, checked on its own (perftest checks it only with -w)"),
    ),
    long(
        "disable_dynamic_polling",
        false,
        NoOp(
            "the CQ is always drained in batches of 32; there is no dynamic adaptation to disable",
        ),
    ),
    long("data_validation", false, Same("the same as our --validate")),
    long(
        "data_validation_debug",
        false,
        Refused("no debug output: --validate names the first bad message and byte"),
    ),
    opt('z', "comm_rdma_cm", false, COMM_RDMA_CM),
    long("com_rdma_cm", false, COMM_RDMA_CM),
    long(
        "out_json",
        false,
        Same("perftest's keys; every size of -a under all_results (perftest keeps the last only)"),
    ),
    long(
        "out_json_file",
        true,
        Same("implies --out_json (perftest writes nothing without --out_json)"),
    ),
    long(
        "cpu_util",
        false,
        Same(
            "with -D, as perftest: per size, user time over user + idle of all CPUs (perftest's \
             formula); the JSON files add this process's CPU time",
        ),
    ),
    long(
        "cqe_poll",
        true,
        Refused("the CQ is always drained in batches of 32"),
    ),
    long("tph_mem", true, TPH),
    long("cpu_id", true, TPH),
    long("ph", true, TPH),
    long(
        "congest_type",
        true,
        Refused("hns congestion control is not supported"),
    ),
    long("pin_cores", true, Same("the same as our --cpu LIST")),
    long(
        "numa_node",
        true,
        Refused("choose CPUs with --cpu LIST (by default the tools pin to a CPU local to the NIC)"),
    ),
    long(
        "disable_numa",
        false,
        Same("no automatic pinning to a CPU local to the NIC"),
    ),
    long(
        "dlid",
        true,
        Refused("the destination LID always comes from the peer (RoCE has no LIDs)"),
    ),
    long(
        "dont_xchg_versions",
        false,
        NoOp("the tools always exchange their HELLO; it carries the version and is needed"),
    ),
    long(
        "force-link",
        true,
        Refused("the link layer is read from the port"),
    ),
    long(
        "use-srq",
        false,
        Same(
            "send tools: one SRQ (ibv_create_srq) of -r receives per QP that every QP draws \
             from, reposted as consumed; a receive counts for the QP that consumed it \
             (wc.qp_num) and --validate checks it as that QP's message; the receiver's choice \
             (not compared in the HELLO); refused by the other tools",
        ),
    ),
    long(
        "no_lock",
        false,
        Refused("thread domains are not supported"),
    ),
    long(
        "no_enhanced_reorder",
        false,
        Refused("mlx5 enhanced reorder is not supported"),
    ),
    long(
        "ipv6",
        false,
        Refused(
            "choose an IPv6 GID with -x IDX (the default is the first RoCE v2 GID with an IPv4 \
         address)",
        ),
    ),
    long(
        "ipv6-addr",
        false,
        NoOp("the TCP exchange resolves the server's name or address, IPv4 or IPv6, by itself"),
    ),
    long(
        "bind_source_ip",
        true,
        Same("with -R, client: the address rdma_cm resolves from (rdma_resolve_addr's source)"),
    ),
    long(
        "inline_recv",
        true,
        Refused("inline receive (mlx5) is not supported"),
    ),
    long(
        "latency_gap",
        true,
        Refused("a delay between latency samples is not supported"),
    ),
    long("mmap", true, MMAP),
    long("mmap-offset", true, MMAP),
    long(
        "mr_per_qp",
        false,
        Same(
            "each QP's source slots get a buffer and MR of their own (the destination is one \
             MR per QP with or without it); the header is unchanged, as perftest's",
        ),
    ),
    long("odp", false, Refused("on-demand paging is not supported")),
    long(
        "output",
        true,
        Same(
            "bandwidth or message_rate (bw tools), latency (lat tools): only that number is \
         printed; our layout selector is --format",
        ),
    ),
    long(
        "payload_file_path",
        true,
        Refused("payloads are our pattern (see --validate); a payload file is not supported"),
    ),
    long(
        "use_old_post_send",
        false,
        Same("the tools always use ibv_post_send"),
    ),
    long(
        "perform_warm_up",
        false,
        Same("warm-up is on by default (--warmup N; 16 iterations, fewer above 64 KiB); the flag keeps it on"),
    ),
    long(
        "pkey_index",
        true,
        Refused("the QP always uses P_Key index 0"),
    ),
    long(
        "report-both",
        false,
        Same(
            "with -b, after the rows (the sum): \"Local results\" and \"Remote results\", one \
             row per size (perftest prints them only without -a); in the text layout only (the \
             report files and --output keep the sum); not with --procs. Without -b it changes \
             nothing, as perftest",
        ),
    ),
    long("report_gbits", false, Same("")),
    long(
        "report-per-port",
        false,
        Refused("dual-port runs are not supported"),
    ),
    long(
        "reversed",
        false,
        Same(
            "on both sides (checked in the HELLO): the server sends and the client receives, \
             the client still connects; the server prints the row it measured, the client the \
             server's (or, for Send, what it received); not with --procs",
        ),
    ),
    long(
        "run_infinitely",
        false,
        Same(
            "a row every -D seconds (5 by default); SIGINT or SIGTERM on the client ends it \
             cleanly after the period under way (exit 0); so does, quietly, a client piped into \
             a head that has left, unless --json, --csv, --out_json, --plot or a gate needs \
             the end (written and checked when a signal ends the run)",
        ),
    ),
    long(
        "retry_count",
        true,
        Same(
            "with -R only, as perftest: the connection's retry count (0..=7); default 6, not \
         perftest's 7, as every QP of ours (README: rxe never counts 7 down)",
        ),
    ),
    long(
        "tclass",
        true,
        Same("every QP's GRH (with -R it overrides the CM's, which -T sets); read back"),
    ),
    long(
        "flow_label",
        true,
        Same("a comma list, QP q takes entry q mod n, as perftest; read back with ibv_query_qp"),
    ),
    long("use_cuda", true, GPU),
    long("cuda_mem_type", true, GPU),
    long("use_cuda_bus_id", true, GPU),
    long("use_cuda_dmabuf", false, GPU),
    long("use_cuda_pcie_mapping", false, GPU),
    long("use_data_direct", false, GPU),
    long("use_musa", true, GPU),
    long("use_musa_bus_id", true, GPU),
    long("use_musa_dmabuf", false, GPU),
    long("use_musa_pcie_mapping", false, GPU),
    long("use_rocm", true, GPU),
    long("use_rocm_dmabuf", false, GPU),
    long("use_neuron", true, GPU),
    long("use_neuron_dmabuf", false, GPU),
    long("use_hl", true, GPU),
    long("use_mlu", true, GPU),
    long("use_mlu_dmabuf", false, GPU),
    long("use_opencl", true, GPU),
    long("opencl_platform_id", true, GPU),
    long("use_ib_dm_dmabuf", true, GPU),
    long("gpu_touch", true, GPU),
    long(
        "use_hugepages",
        false,
        Same(
            "every registered buffer is an mmap of huge pages (MAP_HUGETLB, the default huge \
             page size); with too few reserved the run fails (exit 1) naming the pages needed \
             and `sysctl vm.nr_hugepages=N`",
        ),
    ),
    long(
        "use-null-mr",
        false,
        Refused("null memory regions are not supported"),
    ),
    long("wait_destroy", true, Same("")),
    long(
        "disable_pcie_relaxed",
        false,
        NoOp("memory is never registered with relaxed ordering, so it is always disabled"),
    ),
    long("burst_size", true, RATE),
    long("typical_pkt_size", true, RATE),
    long("rate_limit", true, RATE),
    long("rate_units", true, RATE),
    long("rate_limit_type", true, RATE),
    long(
        "use_ooo",
        false,
        Refused("out-of-order placement (mlx5) is not supported"),
    ),
    long(
        "write_with_imm",
        false,
        Same(
            "IBV_WR_RDMA_WRITE_WITH_IMM (write tools, on both sides: checked in the HELLO); the \
             responder posts receives (-r, default 512 as the send tools), reaps one per write \
             and checks its immediate data (0x564c5054, \"VLPT\"); vl_write_lat then waits for \
             the receive instead of polling memory; the title reads RDMA_Write_imm. Not in \
             Debian 12's perftest 6.06",
        ),
    ),
    long(
        "unsolicited_write",
        false,
        Refused(
            "an option of EFA's SRD transport (write with immediate without a posted receive); \
             the vl_* tools run RC, UC and UD",
        ),
    ),
    long(
        "send_with_imm",
        false,
        Same(
            "IBV_WR_SEND_WITH_IMM; on both sides (checked in the HELLO); every receive must \
             carry it, as perftest checks IBV_WC_WITH_IMM, and ours carries 0x564c5054 \
             (\"VLPT\"), checked too; the title reads Send_imm, as perftest's",
        ),
    ),
    long("log_dci_streams", true, DC),
    long("log_active_dci_streams", true, DC),
    long("aes_xts", false, CRYPTO),
    long("encrypt_on_tx", false, CRYPTO),
    long("sig_before", false, CRYPTO),
    long("aes_block_size", true, CRYPTO),
    long("data_enc_keys_number", true, CRYPTO),
    long("kek_path", true, CRYPTO),
    long("credentials_path", true, CRYPTO),
    long("data_enc_key_app_path", true, CRYPTO),
    long("sig_offload", false, CRYPTO),
    opt('B', "source_mac", true, RAW),
    opt('E', "dest_mac", true, RAW),
    opt('J', "dest_ip", true, RAW),
    opt('j', "source_ip", true, RAW),
    opt('K', "dest_port", true, RAW),
    opt('k', "source_port", true, RAW),
    opt('Y', "ethertype", true, RAW),
    opt('Z', "server", false, RAW),
    opt('P', "client", false, RAW),
    opt('v', "mac_fwd", false, RAW),
    opt('G', "use_rss", false, RAW),
    long("remote_mac", true, RAW),
    long("local_mac", true, RAW),
    long("remote_ip", true, RAW),
    long("local_ip", true, RAW),
    long("remote_port", true, RAW),
    long("local_port", true, RAW),
    long("tcp", false, RAW),
    long("flows", true, RAW),
    long("flows_burst", true, RAW),
    long("reply_every", true, RAW),
    long("vlan_en", false, RAW),
    long("vlan_pcp", true, RAW),
    long("promiscuous", false, RAW),
    long("sniffer", false, RAW),
    long("raw_mcast", false, RAW),
    long("raw_ipv6", false, RAW),
];
