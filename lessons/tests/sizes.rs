//! Every lesson with a size flag reads it the one way (`verbs_lab::cli::SizeRange`): digits with
//! an optional K, M or G, within the lesson's range, checked as clap parses the command line. A
//! size outside it, or not a size at all, is a usage error (exit 2) that names the flag, says
//! what is wrong and gives the range in the same form as `--help` does; a size within it gets
//! past the flags (to the device, which this test names wrongly on purpose: exit 1).

use std::time::Duration;

mod common;
use common::{run_bounded, text};

/// One lesson's size flag: the binary, the flag, its range as `--help` and a refusal say it,
/// sizes it takes (plain integers too: lessons 04, 11 and 12 speak to the rdma-core
/// ping-pongs, whose `-s` is one), the first size past the top (in digits and with a suffix),
/// the size below the bottom, and flags that make the lesson stop at its device.
struct Sized {
    bin: &'static str,
    flag: &'static str,
    range: &'static str,
    takes: Sizes,
    above: Sizes,
    below: &'static str,
    stop: &'static [&'static str],
}

/// An RDMA device no machine has: a lesson given it stops at opening the device (exit 1).
const NO_DEV: &[&str] = &["-d", "nosuchdev0"];
/// The same for the lessons that hold both ends in one process.
const NO_DEV_A: &[&str] = &["--dev-a", "nosuchdev0"];

/// The common case: `-s`, at least 1 byte, a lesson that stops at `-d nosuchdev0`.
const fn s(bin: &'static str, range: &'static str, takes: Sizes, above: Sizes) -> Sized {
    Sized {
        bin,
        flag: "-s",
        range,
        takes,
        above,
        below: "0",
        stop: NO_DEV,
    }
}

type Sizes = &'static [&'static str];

const LESSONS: &[Sized] = &[
    s(
        env!("CARGO_BIN_EXE_lesson02_resources"),
        "1 to 1G",
        &["4K", "64k", "1g", "4096"],
        &["1073741825", "2G"],
    ),
    s(
        env!("CARGO_BIN_EXE_lesson04_send_recv"),
        "1 to 1G",
        &["4K", "64k", "1G", "4096", "1"],
        &["1073741825", "2G"],
    ),
    s(
        env!("CARGO_BIN_EXE_lesson05_rdma_write"),
        "1 to 1M",
        &["4K", "64k", "1m", "1048576"],
        &["1048577", "2M"],
    ),
    // With -o 1: -s times -o must fit the buffer too (a check of its own).
    Sized {
        stop: &["-o", "1", "-d", "nosuchdev0"],
        ..s(
            env!("CARGO_BIN_EXE_lesson06_rdma_read"),
            "1 to 1M",
            &["4K", "64k", "1048576"],
            &["1048577", "2M"],
        )
    },
    s(
        env!("CARGO_BIN_EXE_lesson07_events"),
        "1 to 64K",
        &["4K", "64k", "65536"],
        &["65537", "1M"],
    ),
    Sized {
        stop: NO_DEV_A,
        ..s(
            env!("CARGO_BIN_EXE_lesson09_affinity"),
            "1 to 64K",
            &["4K", "64k", "65536"],
            &["65537", "1M"],
        )
    },
    s(
        env!("CARGO_BIN_EXE_lesson11_ud"),
        "1 to 4K",
        &["4K", "4k", "2048", "4096"],
        &["4097", "64k"],
    ),
    s(
        env!("CARGO_BIN_EXE_lesson12_srq_events"),
        "1 to 64K",
        &["4K", "64k", "4096", "65536"],
        &["65537", "1M"],
    ),
    // A client of a host that cannot exist: it stops at resolving it, or (without RDMA) at the
    // connection manager.
    Sized {
        flag: "-S",
        below: "25",
        stop: &["-q", "no.such.host.invalid"],
        ..s(
            env!("CARGO_BIN_EXE_lesson13_rdma_cm"),
            "26 to 65535",
            &["4K", "63k", "26", "65535"],
            &["65536", "64k"],
        )
    },
    Sized {
        below: "7",
        stop: NO_DEV_A,
        ..s(
            env!("CARGO_BIN_EXE_lesson14_tuning"),
            "8 to 4K",
            &["4K", "4k", "8", "4096"],
            &["4097", "64k"],
        )
    },
];

/// The form every refusal shows after the range.
const FORM: &str = "bytes (digits, optionally followed by K, M or G for KiB, MiB or GiB: e.g. \
                    4096, 64K, 1M)";

fn run(bin: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let (o, _) = run_bounded(bin, args, Duration::from_secs(30));
    (o.status.code(), text(&o.stdout), text(&o.stderr))
}

#[test]
fn every_size_flag_takes_suffixes_within_its_range_and_says_the_range_when_refusing() {
    for l in LESSONS {
        let name = l.bin.rsplit('/').next().unwrap();
        let (code, help, _) = run(l.bin, &["--help"]);
        assert_eq!(code, Some(0), "{name} --help");
        assert!(
            help.contains(&format!("{} (suffixes K, M, G)", l.range)),
            "{name} --help does not give the range {}: {help}",
            l.range
        );

        let mut refused = vec![
            (l.below, "too small"),
            ("1.5K", "expected a whole number"),
            ("64KB", "expected a whole number"),
            ("lots", "expected a whole number"),
        ];
        refused.extend(l.above.iter().map(|a| (*a, "too large")));
        for (size, why) in refused {
            let (code, out, err) = run(l.bin, &[l.flag, size]);
            let program = std::path::Path::new(l.bin)
                .file_name()
                .unwrap()
                .to_string_lossy();
            let want = format!(
                "{program}: error: {} {size}: {why}; give {} {FORM}",
                l.flag, l.range
            );
            assert_eq!(code, Some(2), "{name} {} {size}: {err}", l.flag);
            assert!(
                err.starts_with(&want),
                "{name}: expected '{want}' in: {err}"
            );
            assert!(
                out.is_empty(),
                "{name} {} {size}: a step ran: {out}",
                l.flag
            );
        }

        for size in l.takes {
            let args = [&[l.flag, size][..], l.stop].concat();
            let (code, _, err) = run(l.bin, &args);
            assert_eq!(code, Some(1), "{name} {args:?}: {err}");
            assert!(
                !err.contains(&format!("{} {size}", l.flag)),
                "{name} {args:?}: the size was refused: {err}"
            );
        }
    }
}
