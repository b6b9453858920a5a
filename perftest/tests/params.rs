//! The command line of the vl_* tools: perftest's flags (short and long) mean what they mean in
//! perftest, the tool-dependent defaults are perftest's, and every combination a run cannot
//! honour is refused before any verbs call with a message naming the flag.

use std::time::Duration;

use verbs_lab::verbs::{Mtu, QpType};
use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::params::{AtomicType, Config, Params, RunMode, Sizes, Tool, Warmup};

const WRITE_BW: Tool = Tool::new(TestKind::Write, Metric::Bw);
const WRITE_LAT: Tool = Tool::new(TestKind::Write, Metric::Lat);
const READ_BW: Tool = Tool::new(TestKind::Read, Metric::Bw);
const READ_LAT: Tool = Tool::new(TestKind::Read, Metric::Lat);
const SEND_BW: Tool = Tool::new(TestKind::Send, Metric::Bw);
const SEND_LAT: Tool = Tool::new(TestKind::Send, Metric::Lat);
const ATOMIC_BW: Tool = Tool::new(TestKind::Atomic, Metric::Bw);
const ATOMIC_LAT: Tool = Tool::new(TestKind::Atomic, Metric::Lat);

fn parse(tool: Tool, args: &str) -> Result<Params, clap::Error> {
    let argv = std::iter::once(tool.name()).chain(args.split_whitespace().map(String::from));
    Params::try_parse_for(tool, argv)
}

fn config(tool: Tool, args: &str) -> Result<Config, String> {
    let p = parse(tool, args).map_err(|e| e.to_string())?;
    Config::new(tool, &p)
}

fn ok(tool: Tool, args: &str) -> Config {
    config(tool, args).unwrap_or_else(|e| panic!("{} {args}: {e}", tool.name()))
}

/// The refusal of `args`, which must mention every one of `words`.
fn refused(tool: Tool, args: &str, words: &[&str]) {
    let e = match config(tool, args) {
        Ok(_) => panic!("{} {args} was accepted", tool.name()),
        Err(e) => e,
    };
    for w in words {
        assert!(
            e.contains(w),
            "{} {args}: '{e}' does not mention '{w}'",
            tool.name()
        );
    }
}

#[test]
fn defaults_are_perftests() {
    let c = ok(WRITE_BW, "");
    assert!(c.is_server());
    assert_eq!(c.sizes, Sizes::Single(65536));
    assert_eq!(
        c.timing.mode,
        RunMode::Iters(5000),
        "ib_write_bw runs 5000 iterations"
    );
    assert_eq!(
        (
            c.queues.tx_depth,
            c.queues.cq_mod,
            c.queues.post_list,
            c.qps
        ),
        (128, 1, 1, 1),
        "ib_write_bw's 64 KiB default is over 8 KiB: every request signaled"
    );
    assert_eq!(
        (c.peer.port, c.device.ib_port, c.qp_timeout),
        (18515, 1, 14)
    );
    assert_eq!(c.conn, QpType::Rc);
    assert_eq!(
        c.inline_request(false),
        0,
        "bandwidth tools ask for no inline data"
    );

    let c = ok(READ_BW, "server.example");
    assert_eq!(c.peer.host.as_deref(), Some("server.example"));
    assert_eq!(c.timing.mode, RunMode::Iters(1000));

    let c = ok(SEND_BW, "");
    assert_eq!(c.queues.rx_depth, 512);

    for lat in [WRITE_LAT, SEND_LAT, READ_LAT] {
        let c = ok(lat, "");
        assert_eq!(c.sizes, Sizes::Single(2), "{}", lat.name());
        assert_eq!(c.queues.tx_depth, 1);
        assert_eq!(c.timing.mode, RunMode::Iters(1000));
    }
    assert_eq!(ok(WRITE_LAT, "").inline_request(false), 64);
    assert_eq!(ok(SEND_LAT, "").inline_request(false), 64);
    assert_eq!(ok(READ_LAT, "").inline_request(false), 0);
    // On rxe or siw inline is one more copy: none unless asked for.
    assert_eq!(ok(WRITE_LAT, "").inline_request(true), 0);
    assert_eq!(ok(SEND_LAT, "").inline_request(true), 0);
    assert_eq!(ok(WRITE_LAT, "-I 32").inline_request(true), 32);

    let c = ok(ATOMIC_BW, "");
    assert_eq!(c.sizes, Sizes::Single(8));
    assert_eq!(c.atomic, Some(AtomicType::FetchAndAdd));
    assert_eq!(
        ok(ATOMIC_LAT, "-a").sizes,
        Sizes::Single(8),
        "-a on atomics is 8 only"
    );
    assert_eq!(c.timing.warmup, Warmup::Auto);
}

/// perftest has no warm-up unless asked; ours warms up by default, scaled by the message size
/// so that a large size does not pay 16 messages (`vl_read_lat -s 4M -n 5` outlasted
/// ib_read_lat fourfold).
#[test]
fn the_default_warm_up_scales_with_the_size() {
    let auto = ok(READ_LAT, "-s 4M -n 5").timing.warmup;
    assert_eq!(auto, Warmup::Auto);
    let at = |size| auto.iters(size);
    assert_eq!(
        (
            at(2),
            at(64 << 10),
            at(128 << 10),
            at(1 << 20),
            at(4 << 20),
            at(8 << 20)
        ),
        (16, 16, 8, 1, 1, 1)
    );
    assert_eq!(auto.most(), 16);
    let given = ok(READ_LAT, "-s 4M --warmup 5").timing.warmup;
    assert_eq!((given, given.iters(4 << 20)), (Warmup::Iters(5), 5));
    assert_eq!(ok(WRITE_BW, "--warmup 0").timing.warmup.iters(2), 0);
    // The HELLO says which: a server without --warmup takes the client's number.
    assert_eq!(Warmup::Auto.wire(), "auto");
    assert_eq!(Warmup::from_wire("auto"), Some(Warmup::Auto));
    assert_eq!(Warmup::from_wire("0"), Some(Warmup::Iters(0)));
    assert_eq!(Warmup::from_wire("-1"), None);
}

/// A negative number is the flag's value, refused with what the flag takes — not clap's tip
/// to write `-- -5`, which would make it the SERVER argument.
#[test]
fn negative_numbers_say_what_the_flag_takes() {
    for (tool, args, says) in [
        (
            WRITE_BW,
            "-s -5",
            "'-5' is not a size in bytes: it cannot be negative",
        ),
        (WRITE_BW, "-n -1", "--iters -1: cannot be negative"),
        (
            WRITE_BW,
            "-D -1",
            "--duration -1: cannot be negative; give whole seconds",
        ),
        (SEND_BW, "-r -1", "--rx-depth -1: cannot be negative"),
        (WRITE_BW, "-q -2", "--qp -2: cannot be negative"),
        (WRITE_BW, "--warmup -1", "--warmup -1: cannot be negative"),
        (WRITE_BW, "-p -1", "-p -1: give 1 to 65535"),
        (WRITE_BW, "-u -1", "-u -1: give 0 to 31"),
        (WRITE_BW, "-m -1", "'-1' is not an MTU"),
        (WRITE_BW, "-w -1", "'-1' is not a limit"),
        (WRITE_BW, "--cpu -1", "CPU list '-1'"),
    ] {
        let e = parse(tool, args).expect_err(args).to_string();
        assert!(e.contains(says), "{args}: {e}");
        assert!(!e.contains("use '--"), "{args}: {e}");
    }
}

/// `--serve` is the server's, one client at a time, its rows on stdout.
#[test]
fn serve_is_a_servers_option_without_report_files() {
    assert!(ok(WRITE_BW, "--serve").serve);
    assert!(!ok(WRITE_BW, "").serve);
    refused(WRITE_BW, "--serve host1", &["--serve is for the server"]);
    refused(WRITE_BW, "--serve --procs 2", &["--serve with --procs"]);
    for file in ["--json r.json", "--csv r.csv", "--out_json", "--plot r.svg"] {
        let flag = file.split(' ').next().unwrap();
        refused(
            WRITE_BW,
            &format!("--serve {file}"),
            &[&format!("--serve with {flag}"), "overwrite"],
        );
    }
}

/// `--concurrent N`: with --serve, on the bandwidth tools, 1 to 64, not with -R or
/// --run_infinitely.
#[test]
fn concurrent_is_an_option_of_a_bandwidth_server() {
    assert_eq!(ok(WRITE_BW, "--serve --concurrent 3").concurrent, 3);
    assert_eq!(ok(SEND_BW, "--serve").concurrent, 1);
    assert_eq!(ok(READ_BW, "--concurrent 1").concurrent, 1);
    refused(WRITE_BW, "--concurrent 3", &["is an option of --serve"]);
    refused(
        WRITE_LAT,
        "--serve --concurrent 2",
        &["vl_write_lat", "one after another"],
    );
    refused(WRITE_BW, "--serve --concurrent 2 -R", &["-R", "-p + 1"]);
    refused(
        WRITE_BW,
        "--serve --concurrent 2 --run_infinitely -D 2",
        &["--run_infinitely"],
    );
    for bad in ["0", "65"] {
        assert!(config(WRITE_BW, &format!("--serve --concurrent {bad}")).is_err());
    }
}

/// The port's range is 1..=65535 in every refusal, 0 and 70000 alike.
#[test]
fn a_port_is_1_to_65535() {
    for bad in ["0", "70000", "65536"] {
        let e = parse(WRITE_BW, &format!("-p {bad}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("-p {bad}: give 1 to 65535")), "{e}");
    }
    assert_eq!(ok(WRITE_BW, "-p 65535").peer.port, 65535);
    assert_eq!(ok(WRITE_BW, "-p 1").peer.port, 1);
}

#[test]
fn short_and_long_forms_agree() {
    let short = "-d rxe1 -i 2 -x 1 -s 4096 -n 300 -q 4 -t 64 -r 256 -Q 2 -l 4 -c UC -b -I 32 \
                 -e -m 1024 -u 20 -p 20000 -N -F --warmup 3 host1";
    let long = "--ib-dev rxe1 --ib-port 2 --gid-index 1 --size 4096 --iters 300 --qp 4 \
                --tx-depth 64 --rx-depth 256 --cq-mod 2 --post_list 4 --connection UC \
                --bidirectional --inline_size 32 --events --mtu 1024 --qp-timeout 20 \
                --port 20000 --noPeak --CPU-freq --warmup 3 host1";
    for args in [short, long] {
        let c = ok(WRITE_BW, args);
        assert_eq!(c.device.ib_dev.as_deref(), Some("rxe1"));
        assert_eq!((c.device.ib_port, c.device.gid_index), (2, Some(1)));
        assert_eq!(c.sizes, Sizes::Single(4096));
        assert_eq!(c.timing.mode, RunMode::Iters(300));
        assert_eq!(
            (
                c.qps,
                c.queues.tx_depth,
                c.queues.rx_depth,
                c.queues.cq_mod,
                c.queues.post_list
            ),
            (4, 64, 256, 2, 4)
        );
        assert_eq!(c.conn, QpType::Uc);
        assert!(c.bidirectional && c.events && c.no_peak);
        assert_eq!(c.asked.inline_size, Some(32));
        assert_eq!(c.asked.mtu, Some(Mtu::Mtu1024));
        assert_eq!(
            (c.qp_timeout, c.peer.port, c.timing.warmup),
            (20, 20000, Warmup::Iters(3))
        );
        assert_eq!(c.peer.host.as_deref(), Some("host1"));
        // Both sides derive the same wire parameters from the same flags.
        assert_eq!(c.wire_params(), ok(WRITE_BW, short).wire_params());
    }
    let c = ok(READ_BW, "-o 4");
    assert_eq!(c.asked.outstanding, Some(4));
    let c = ok(ATOMIC_BW, "--outs 2 -A CMP_AND_SWAP");
    assert_eq!(
        (c.asked.outstanding, c.atomic),
        (Some(2), Some(AtomicType::CmpAndSwap))
    );
    assert_eq!(
        ok(ATOMIC_LAT, "--atomic_type fetch_and_add").atomic,
        Some(AtomicType::FetchAndAdd)
    );
    let c = ok(SEND_BW, "-D 3 --cpu 0-1 --validate --report_gbits");
    assert_eq!(c.timing.mode, RunMode::Duration(Duration::from_secs(3)));
    assert_eq!(c.pin.cpu.unwrap().to_string(), "0-1");
    assert!(c.validate && c.report_gbits);
    assert_eq!(ok(WRITE_BW, "-s 64K").sizes, Sizes::Single(65536));
    assert_eq!(ok(WRITE_BW, "-a").sizes, Sizes::Sweep { max: 1 << 23 });
    assert_eq!(ok(SEND_BW, "-a -c UD").sizes, Sizes::Sweep { max: 4096 });
    // UD without -s: the 64 KiB default cannot fit one packet, so the run uses the path MTU
    // (perftest's "Changing to this MTU"); -b alike; the latency default (2) fits.
    for args in ["-c UD", "-c UD -b"] {
        assert_eq!(ok(SEND_BW, args).sizes, Sizes::PathMtu, "{args}");
    }
    assert_eq!(ok(SEND_LAT, "-c UD").sizes, Sizes::Single(2));
    assert_eq!(ok(SEND_BW, "-c UD -s 4096").sizes, Sizes::Single(4096));
    assert_eq!(ok(SEND_LAT, "-c ud -s 1024").conn, QpType::Ud);
}

#[test]
fn output_options_are_shared() {
    let p = parse(
        WRITE_BW,
        "--json out.json --csv out.csv --min-bw 10 --format table -w 5 -y 0.5",
    )
    .unwrap();
    assert_eq!(
        p.output.json.as_deref(),
        Some(std::path::Path::new("out.json"))
    );
    assert_eq!(p.output.min_bw, Some(10.0));
    assert_eq!(
        (p.output.limit_bw, p.output.limit_msgrate),
        (Some(5.0), Some(0.5))
    );
    let p = parse(WRITE_LAT, "--max-lat p99=5 --max-lat max=10").unwrap();
    assert_eq!(p.output.max_lat.len(), 2);
}

#[test]
fn clap_refuses_what_it_cannot_parse() {
    for (tool, args, word) in [
        (WRITE_BW, "-c XRC", "XRC"),
        (WRITE_BW, "-m 1500", "1500"),
        (ATOMIC_BW, "-A SWAP", "SWAP"),
        (WRITE_BW, "-s lots", "lots"),
        (WRITE_BW, "--no-such-flag", "no-such-flag"),
        (WRITE_BW, "-q many", "many"),
        (WRITE_BW, "--cpu 3-1", "backwards"),
        (WRITE_BW, "a b", "b"),
        (
            WRITE_BW,
            "--wait 0",
            "--wait 0: every wait needs at least 1 s",
        ),
        (
            WRITE_LAT,
            "--wait 86401",
            "--wait 86401: longer than a day; give 1 to 86400",
        ),
    ] {
        let e = parse(tool, args).expect_err(args).to_string();
        assert!(e.contains(word), "{args}: {e}");
    }
    let help = parse(SEND_LAT, "--help").unwrap_err().to_string();
    assert!(
        help.contains("vl_send_lat") && help.contains("--rx-depth"),
        "{help}"
    );
}

#[test]
fn impossible_combinations_are_refused_with_the_flag() {
    refused(WRITE_BW, "-s 0", &["-s 0", "1 byte"]);
    refused(WRITE_BW, "-a -s 4096", &["-a", "-s 4096"]);
    refused(WRITE_BW, "-c UD", &["-c UD", "send"]);
    refused(READ_LAT, "-c UD", &["-c UD"]);
    refused(READ_BW, "-c UC", &["-c UC", "RC"]);
    refused(ATOMIC_LAT, "-c UC", &["-c UC"]);
    refused(WRITE_LAT, "-b", &["-b", "bandwidth"]);
    refused(SEND_LAT, "-b", &["-b"]);
    refused(WRITE_BW, "-o 4", &["-o", "vl_write_bw"]);
    refused(SEND_LAT, "-o 4", &["-o"]);
    refused(READ_BW, "-o 0", &["-o 0"]);
    refused(WRITE_BW, "-A FETCH_AND_ADD", &["-A"]);
    refused(ATOMIC_BW, "-s 16", &["-s 16", "8"]);
    refused(WRITE_BW, "-n 10 -D 5", &["-n", "-D"]);
    refused(WRITE_BW, "-n 0", &["-n 0"]);
    refused(WRITE_BW, "-D 0", &["-D 0"]);
    refused(WRITE_BW, "-a -D 5", &["-a", "-D"]);
    refused(WRITE_BW, "-q 0", &["-q 0"]);
    refused(WRITE_LAT, "-q 2", &["-q 2", "one QP"]);
    refused(WRITE_BW, "-t 4 -l 8", &["-l 8", "tx depth 4"]);
    refused(WRITE_BW, "-t 0", &["-t 0"]);
    refused(SEND_BW, "-r 0", &["-r 0"]);
    refused(WRITE_BW, "-Q 0", &["-Q 0"]);
    refused(WRITE_BW, "-l 0", &["-l 0"]);
    refused(SEND_LAT, "-l 2", &["-l 2"]);
    refused(WRITE_LAT, "-e", &["-e", "polling memory"]);
    refused(ATOMIC_BW, "--validate", &["--validate", "atomic"]);
    refused(WRITE_BW, "-u 32", &["-u 32"]);
    refused(READ_BW, "-I 64", &["-I", "inline"]);
    refused(SEND_BW, "-c UD -s 8192", &["-s 8192", "UD", "leave -s out"]);
    refused(SEND_LAT, "-p 0", &["-p 0", "1 to 65535"]);
    refused(WRITE_BW, "--port 0 --procs 2", &["-p 0"]);
    refused(WRITE_BW, "-s 4294967296", &["-s 4294967296"]);
    refused(SEND_BW, "-q 64 -r 512", &["-q 64", "lower"]);
    refused(WRITE_BW, "-i 0", &["-i 0"]);
    refused(WRITE_BW, "-I 100000", &["-I 100000"]);
}

#[test]
fn number_flags_are_refused_with_one_message_that_says_what_to_give() {
    // -i and -u: one check each, with its range and reason, whatever the wrong value.
    for bad in ["0", "256", "300"] {
        refused(
            WRITE_BW,
            &format!("-i {bad}"),
            &[&format!(
                "-i {bad}: give 1 to 255: ports are numbered from 1"
            )],
        );
    }
    for bad in ["32", "40", "99", "300"] {
        refused(
            WRITE_BW,
            &format!("-u {bad}"),
            &[&format!(
                "-u {bad}: give 0 to 31: the QP ack timeout is a 5-bit exponent"
            )],
        );
    }
    assert_eq!(ok(WRITE_BW, "-u 31").qp_timeout, 31);
    // A number that is not one names the flag and the form, not Rust's parse error.
    refused(
        WRITE_BW,
        "-D 1.5",
        &["--duration 1.5: not a whole number; give whole seconds"],
    );
    refused(WRITE_BW, "-n ten", &["--iters ten: not a whole number"]);
    refused(
        WRITE_BW,
        "--procs 2 --procs-start 1e3",
        &["--procs-start 1e3: not a whole number; give whole microseconds"],
    );
    for args in ["-D 1.5", "-n ten", "-q x"] {
        let e = config(WRITE_BW, args).unwrap_err();
        assert!(!e.contains("invalid digit"), "{args}: {e}");
    }
}

#[test]
fn dependent_and_empty_values_are_refused() {
    // --procs-start means nothing without --procs, as -T means nothing without -R.
    refused(WRITE_BW, "--procs-start 100", &["--procs"]);
    assert!(ok(WRITE_BW, "--procs 2 --procs-start 100")
        .procs
        .count
        .is_some());
    // An empty device or server name is a mistake (an unset shell variable), not a default.
    for argv in [vec!["vl_write_bw", "-d", ""], vec!["vl_write_bw", ""]] {
        let e = Params::try_parse_for(WRITE_BW, argv.clone()).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{argv:?}");
        assert!(
            e.to_string().contains("a value is required"),
            "{argv:?}: {e}"
        );
    }
}

#[test]
fn effective_cq_moderation_keeps_a_signal_in_every_full_queue() {
    assert_eq!(ok(WRITE_BW, "-s 4096").queues.effective_cq_mod(), 100);
    assert_eq!(ok(WRITE_BW, "-s 4096 -t 16").queues.effective_cq_mod(), 16);
    assert_eq!(ok(WRITE_BW, "-t 16 -l 8").queues.effective_cq_mod(), 8);
    assert_eq!(ok(WRITE_BW, "-t 10 -l 8 -Q 8").queues.effective_cq_mod(), 3);
    assert_eq!(ok(WRITE_BW, "-Q 1").queues.effective_cq_mod(), 1);
    assert_eq!(ok(WRITE_LAT, "").queues.effective_cq_mod(), 1);
}

/// The latency tools signal as perftest's latency loops do, and a send queue of the tx depth
/// (the QP's `max_send_wr`, the header's TX depth) always holds a signaled request when full.
#[test]
fn latency_tools_signal_as_perftest_does() {
    let period = |tool: Tool, args: &str| {
        let c = ok(tool, args);
        let p = c.queues.signal_period(tool);
        // The QP's send queue is the tx depth the header prints, and the period fits in it.
        let sq = vl_perftest::conn::qp_caps(&c, 512, 0).max_send_wr;
        assert_eq!(sq, c.queues.tx_depth, "{} {args}", tool.name());
        assert!(
            (1..=sq).contains(&p),
            "{} {args}: one signaled request in {p} does not fit a send queue of {sq}",
            tool.name()
        );
        p
    };
    // send_lat: -Q capped by the tx depth — every SEND at the default depth of 1, as
    // ib_send_lat, whose -Q 100 is cut to its tx depth of 1 too.
    assert_eq!(period(SEND_LAT, ""), 1);
    assert_eq!(ok(SEND_LAT, "").queues.tx_depth, 1);
    assert_eq!(period(SEND_LAT, "-Q 100"), 1);
    assert_eq!(period(SEND_LAT, "-t 128"), 100);
    assert_eq!(period(SEND_LAT, "-t 128 -Q 1"), 1);
    assert_eq!(period(SEND_LAT, "-t 16 -Q 100"), 16);
    // -n below the depth cuts the depth, and the period with it.
    assert_eq!(period(SEND_LAT, "-t 128 -n 10"), 10);
    assert_eq!(period(SEND_LAT, "-t 128 -c UD"), 100);
    assert_eq!(period(SEND_LAT, "-t 128 -e"), 100);
    // What scenario 45 runs in the guest.
    assert_eq!(period(SEND_LAT, "-t 4 -Q 4 -s 64 -n 300"), 4);
    assert_eq!(period(SEND_LAT, "-t 4 -Q 2 -e -n 200"), 2);
    assert_eq!(period(SEND_LAT, "-t 4 -Q 4 -c UD -s 512 -n 200"), 4);
    assert_eq!(period(WRITE_LAT, "-t 16 -Q 8 -n 300"), 1);
    // write, read and atomic latency: every request, whatever -t and -Q say (perftest's
    // loops for those set IBV_SEND_SIGNALED on each post and wait for its completion).
    for tool in [WRITE_LAT, READ_LAT, ATOMIC_LAT] {
        for args in ["", "-t 128", "-t 128 -Q 100", "-t 128 -c UC"] {
            if tool != WRITE_LAT && args.contains("UC") {
                continue;
            }
            assert_eq!(period(tool, args), 1, "{} {args}", tool.name());
        }
    }
    // The bandwidth tools keep the effective CQ moderation.
    for (tool, args, want) in [
        (WRITE_BW, "-s 4096", 100),
        (SEND_BW, "-t 16 -l 8", 8),
        (READ_BW, "-Q 1", 1),
        (ATOMIC_BW, "-t 64", 64),
    ] {
        assert_eq!(period(tool, args), want, "{} {args}", tool.name());
    }
}

/// perftest's `force_dependecies` rules for `-Q`, in its order: 1 for one size over 8 KiB on
/// RC/UC without -e unless -Q is given (a note when a given one stays above 1), capped by the
/// tx depth, the post list's size with -l unless given, and a given one must divide the post
/// list.
#[test]
fn cq_moderation_follows_perftests_rules() {
    let cq = |tool: Tool, args: &str| ok(tool, args).queues.cq_mod;
    let notes = |tool: Tool, args: &str| ok(tool, args).notes;
    assert_eq!(cq(WRITE_BW, ""), 1, "the 64 KiB default");
    assert_eq!(cq(WRITE_BW, "-s 8192"), 100, "8 KiB is not over the limit");
    assert_eq!(cq(WRITE_BW, "-s 8193"), 1);
    assert_eq!(cq(SEND_BW, "-s 1M"), 1);
    assert_eq!(cq(READ_BW, "-s 65536 -Q 10"), 10);
    assert!(notes(READ_BW, "-s 65536")
        .iter()
        .all(|n| !n.contains("inaccurate")));
    let n = notes(WRITE_BW, "-s 65536 -Q 10");
    assert!(
        n.len() == 1 && n[0].starts_with("-Q 10 with messages over 8192 bytes"),
        "{n:?}"
    );
    assert!(notes(WRITE_BW, "-s 65536 -Q 1").is_empty());
    // -Q above -t is capped to it, and the note says so (the header shows the capped one).
    assert_eq!(cq(WRITE_BW, "-t 8 -Q 32"), 8);
    let n = notes(WRITE_BW, "-t 8 -Q 32");
    assert!(
        n.len() == 1 && n[0].starts_with("-Q 32, capped to the tx depth 8, with messages"),
        "{n:?}"
    );
    assert!(
        notes(WRITE_BW, "-t 1 -Q 32").is_empty(),
        "capped to 1: every request signaled"
    );
    // Not for a sweep, UD or events, where perftest keeps it too.
    assert_eq!(cq(WRITE_BW, "-a"), 100);
    assert_eq!(cq(WRITE_BW, "-s 65536 -e"), 100);
    assert_eq!(cq(SEND_BW, "-s 65536 -c UC"), 1);
    assert_eq!(cq(SEND_BW, "-s 4096 -c UD"), 100);
    // Capped by the tx depth.
    assert_eq!(cq(WRITE_BW, "-s 64 -t 16"), 16);
    // Post lists: the list's size unless given, and said; a given one must divide it.
    assert_eq!(cq(WRITE_BW, "-l 4"), 4);
    assert!(notes(WRITE_BW, "-l 4")[0].starts_with("-l 4: CQ moderation is the post list's size"));
    assert_eq!(cq(WRITE_BW, "-l 4 -Q 2"), 2);
    assert!(notes(WRITE_BW, "-s 4096 -l 4 -Q 2").is_empty());
    assert_eq!(notes(WRITE_BW, "-l 4 -Q 2").len(), 1, "64 KiB with -Q 2");
    refused(WRITE_BW, "-l 4 -Q 3", &["-l 4 -Q 3", "multiple"]);
    refused(WRITE_BW, "-Q 0", &["-Q 0"]);
}

#[test]
fn wire_parameters_name_every_value_that_must_match() {
    let c = ok(WRITE_BW, "-s 8192 -c UC");
    let w = c.wire_params();
    let get = |k: &str| w.iter().find(|(key, _)| *key == k).map(|(_, v)| v.clone());
    assert_eq!(get("size").as_deref(), Some("8192"));
    assert_eq!(get("connection").as_deref(), Some("UC"));
    assert_eq!(get("iterations").as_deref(), Some("5000"));
    assert_eq!(get("duration").as_deref(), Some("none"));
    assert_eq!(
        ok(WRITE_BW, "-a")
            .wire_params()
            .iter()
            .find(|(k, _)| *k == "size")
            .unwrap()
            .1,
        "sweep 2..8388608"
    );
    let mut keys: Vec<&str> = w.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), w.len(), "keys are unique");
    for (k, v) in &w {
        assert_ne!(
            vl_perftest::params::describe_param(k),
            "parameter",
            "{k} has a description"
        );
        assert!(v.len() <= vl_perftest::proto::MAX_VALUE && !v.is_empty());
    }
    // Options that only tune this side are not compared: device, port, GID, CPU, QP timeout.
    let other_side = ok(
        WRITE_BW,
        "-s 8192 -c UC -d rxe9 -i 2 -x 3 --cpu 1 -u 20 -F host",
    );
    assert_eq!(other_side.wire_params(), w);
}

/// The server's refusal of the finding's command lines: each value says where it came from when
/// the user did not type it, and values equal after capping still agree.
#[test]
fn mismatch_messages_say_where_a_value_came_from() {
    let check = |tool: Tool, server: &str, client: &str| {
        let (s, c) = (ok(tool, server), ok(tool, client));
        vl_perftest::proto::check_hello(
            &vl_perftest::run::our_hello(&s),
            &vl_perftest::run::our_hello(&c),
        )
    };
    let e = check(SEND_BW, "-n 50 -t 16 -r 8", "-n 50 -t 64 -r 512").unwrap_err();
    assert!(
        e.contains("tx depth (-t): client 50 (-t 64 capped to -n), server 16")
            && e.contains("rx depth (-r): client 50 (-r 512 capped to -n), server 8"),
        "{e}"
    );
    let e = check(SEND_BW, "-n 200", "-n 200 -t 64").unwrap_err();
    assert!(e.contains("client 64, server 128 (default)"), "{e}");
    // The -Q default that follows from a different -s is marked so, with both values.
    let e = check(WRITE_BW, "-n 50", "-n 50 -s 4096").unwrap_err();
    assert!(
        e.contains("message size (-s / -a): client 4096, server 65536")
            && e.contains("CQ moderation (-Q): client 100 (default), server 1 (follows from -s)"),
        "{e}"
    );
    // Typed on one side, the same value by default on the other: they agree.
    assert_eq!(check(WRITE_BW, "-n 50", "-n 50 -t 50"), Ok(()));
    assert_eq!(check(SEND_BW, "-n 50 -r 50", "-n 50"), Ok(()));
}

/// A long option abbreviated to a prefix of several is ambiguous, as perftest's getopt_long
/// says, listing them (usage error, exit 2); an unambiguous prefix still works.
#[test]
fn an_ambiguous_prefix_lists_what_it_could_be() {
    let e = parse(WRITE_BW, "--conn UC").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string().starts_with(
            "error: option '--conn' is ambiguous; it abbreviates --connection or \
             --connectionless: give more of its name"
        ),
        "{e}"
    );
    let e = parse(WRITE_BW, "--out=x").unwrap_err().to_string();
    assert!(e.contains("'--out' is ambiguous"), "{e}");
    assert!(e.contains("--output") && e.contains("--outs"), "{e}");
    // One option alone: clap's own refusal, with its guess.
    let e = parse(WRITE_BW, "--nosuch").unwrap_err().to_string();
    assert!(e.contains("unexpected argument '--nosuch'"), "{e}");
    assert_eq!(ok(WRITE_BW, "--siz 64").sizes, Sizes::Single(64));
}
