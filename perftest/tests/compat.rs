//! perftest compatibility, table-driven: every option of perftest 6.x (the checked-in list
//! `tests/perftest-options`, derived from perftest's usage text) is accepted by the `vl_*` parser
//! with perftest's meaning, or refused by name with a reason; `docs/perftest-compat.md` shows
//! exactly the table the parser uses ([`compat::OPTIONS`]). Run with `UPDATE_GOLDEN=1` to
//! rewrite the page's table from the code after a deliberate change, then review the diff.

use std::path::PathBuf;
use std::time::Duration;

use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::output::Verbosity;
use vl_perftest::params::compat::{self, Status};
use vl_perftest::params::{Config, Params, Tool, Warmup};

const KINDS: [TestKind; 4] = [
    TestKind::Write,
    TestKind::Read,
    TestKind::Send,
    TestKind::Atomic,
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One line of `tests/perftest-options`.
#[derive(Debug)]
struct Listed {
    short: Option<char>,
    long: String,
    value: Option<String>,
    context: Vec<String>,
    tools: Vec<Tool>,
}

fn kind_of(word: &str) -> Option<TestKind> {
    KINDS.into_iter().find(|k| k.name() == word)
}

/// `all`, `bw`, `lat`, kinds joined with `+`, `-KIND` to remove one, or a tool like `send_bw`.
fn tools_of(expr: &str) -> Vec<Tool> {
    let all: Vec<Tool> = KINDS
        .into_iter()
        .flat_map(|k| [Tool::new(k, Metric::Bw), Tool::new(k, Metric::Lat)])
        .collect();
    let mut parts = expr.split('-');
    let first = parts.next().unwrap();
    let mut set: Vec<Tool> = first
        .split('+')
        .flat_map(|w| -> Vec<Tool> {
            match w {
                "all" => all.clone(),
                "bw" => all
                    .iter()
                    .copied()
                    .filter(|t| t.metric == Metric::Bw)
                    .collect(),
                "lat" => all
                    .iter()
                    .copied()
                    .filter(|t| t.metric == Metric::Lat)
                    .collect(),
                _ => match kind_of(w) {
                    Some(k) => vec![Tool::new(k, Metric::Bw), Tool::new(k, Metric::Lat)],
                    None => {
                        let t = all
                            .iter()
                            .copied()
                            .find(|t| t.name() == format!("vl_{w}"))
                            .unwrap_or_else(|| panic!("unknown tools '{w}' in '{expr}'"));
                        vec![t]
                    }
                },
            }
        })
        .collect();
    for minus in parts {
        let k = kind_of(minus).unwrap_or_else(|| panic!("unknown kind '{minus}' in '{expr}'"));
        set.retain(|t| t.kind != k);
    }
    assert!(!set.is_empty(), "'{expr}' names no tool");
    set
}

fn listed() -> Vec<Listed> {
    let path = repo().join("tests/perftest-options");
    let text = std::fs::read_to_string(&path).expect("tests/perftest-options");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "4 columns expected: {l}");
            Listed {
                short: (f[0] != "-").then(|| f[0].chars().next().unwrap()),
                long: f[1].to_string(),
                // "-" is a flag; "-,CTX" a flag that needs the options CTX.
                value: (f[2] != "-" && !f[2].starts_with("-,")).then(|| f[2].to_string()),
                context: f[2]
                    .strip_prefix("-,")
                    .map(|c| c.split(',').map(String::from).collect())
                    .unwrap_or_default(),
                tools: tools_of(f[3]),
            }
        })
        .collect()
}

fn config(tool: Tool, args: &[String]) -> Result<Config, String> {
    let argv = std::iter::once(tool.name()).chain(args.iter().cloned());
    let p = Params::try_parse_for(tool, argv).map_err(|e| e.to_string())?;
    Config::new(tool, &p)
}

#[test]
fn every_perftest_option_is_accepted_or_refused_by_name() {
    let listed = listed();
    assert!(listed.len() > 150, "the list looks truncated");
    let mut checked = 0;
    for l in &listed {
        let o = compat::find(&l.long).unwrap_or_else(|| {
            panic!(
                "--{} is in tests/perftest-options, not in compat::OPTIONS",
                l.long
            )
        });
        assert_eq!(o.short, l.short, "--{}: short letter", l.long);
        assert_eq!(o.takes_value, l.value.is_some(), "--{}: value", l.long);
        if matches!(o.long, "help" | "version") {
            continue; // clap prints and exits (tested by clap).
        }
        let mut spellings = vec![format!("--{}", l.long)];
        spellings.extend(l.short.map(|c| format!("-{c}")));
        for spelled in &spellings {
            // A value with commas carries the context the option needs: "1,-D,4".
            let mut args = vec![spelled.clone()];
            args.extend(l.value.iter().flat_map(|v| v.split(',').map(String::from)));
            args.extend(l.context.iter().cloned());
            for &tool in &l.tools {
                let got = config(tool, &args);
                match o.status {
                    // A note that says "refused by" names tools that refuse it by name.
                    Status::Same(note) if note.contains("refused by") => {
                        if let Err(e) = got {
                            assert!(
                                e.contains(spelled.as_str())
                                    || e.contains(&format!("--{}", l.long)),
                                "{} {args:?}: the refusal must name the option: {e}",
                                tool.name()
                            );
                        }
                    }
                    Status::Same(_) | Status::NoOp(_) => {
                        if let Err(e) = got {
                            panic!(
                                "{} {args:?}: perftest accepts it, we refuse: {e}",
                                tool.name()
                            )
                        }
                    }
                    Status::Refused(why) => {
                        let e = match got {
                            Ok(_) => panic!(
                                "{} {args:?}: accepted, but the table refuses it",
                                tool.name()
                            ),
                            Err(e) => e,
                        };
                        assert!(
                            e.contains(&format!("--{}", l.long))
                                && e.contains("refused")
                                && e.contains(why),
                            "{} {args:?}: the refusal must name the option and say why: {e}",
                            tool.name()
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "{checked}");
    // And nothing in the table that perftest does not have.
    for o in compat::OPTIONS {
        assert!(
            listed.iter().any(|l| l.long == o.long),
            "--{} is in compat::OPTIONS but not in tests/perftest-options",
            o.long
        );
    }
}

#[test]
fn perftest_meanings() {
    let a = |t: Tool, s: &str| -> Params {
        let argv = std::iter::once(t.name()).chain(s.split_whitespace().map(String::from));
        Params::try_parse_for(t, argv).unwrap_or_else(|e| panic!("{s}: {e}"))
    };
    let wbw = Tool::new(TestKind::Write, Metric::Bw);
    let wlat = Tool::new(TestKind::Write, Metric::Lat);
    let p = a(wbw, "-w 9.5 -y 0.25 --output=message_rate");
    assert_eq!(p.output.limit_bw, Some(9.5));
    assert_eq!(p.output.limit_msgrate, Some(0.25));
    assert_eq!(p.output.verbosity, Some(Verbosity::MessageRate));
    let p = a(wbw, "--limit_bw=3 --limit_msgrate 1 --output bandwidth");
    assert_eq!(
        (p.output.limit_bw, p.output.limit_msgrate),
        (Some(3.0), Some(1.0))
    );
    assert_eq!(p.output.verbosity, Some(Verbosity::Bandwidth));
    assert_eq!(
        a(wlat, "--output=latency").output.verbosity,
        Some(Verbosity::Latency)
    );
    // getopt_long takes unambiguous prefixes; so do we.
    assert!(a(wbw, "--report_gbit").output.report_gbits);
    assert_eq!(a(wbw, "--limit_b 2").output.limit_bw, Some(2.0));
    let c = Config::new(
        wbw,
        &a(wbw, "--pin_cores 0-1 --data_validation --wait_destroy 2"),
    )
    .unwrap();
    assert_eq!(c.pin.cpu.unwrap().to_string(), "0-1");
    assert!(c.validate);
    assert_eq!(c.wait_destroy, Some(Duration::from_secs(2)));
    let c = Config::new(wbw, &a(wbw, "--disable_numa --perform_warm_up")).unwrap();
    assert!(!c.pin.auto);
    assert_eq!(c.timing.warmup, Warmup::Auto);
    assert_eq!(
        Config::new(wbw, &a(wbw, "--warmup 0"))
            .unwrap()
            .timing
            .warmup,
        Warmup::Iters(0)
    );
    // What perftest refuses, we refuse, naming it.
    for (t, args, says) in [
        (wbw, "--output=latency", "--output=latency"),
        (wlat, "--output=bandwidth", "--output=bandwidth"),
        (wlat, "-w 5", "-w 5"),
        (wbw, "--perform_warm_up --warmup 0", "--perform_warm_up"),
        (wbw, "--output=bandwidth --format table", "--format table"),
    ] {
        let e = Config::new(t, &a(t, args)).expect_err(args);
        assert!(e.contains(says), "{args}: {e}");
    }
    let e = Params::try_parse_for(wbw, ["vl_write_bw", "--output", "table"]).unwrap_err();
    assert!(e.to_string().contains("table"), "{e}");
    let e = Params::try_parse_for(wbw, ["vl_write_bw", "--limit_bw=-3"]).unwrap_err();
    assert!(e.to_string().contains("not a limit"), "{e}");
}

/// The table of `docs/perftest-compat.md`, between its markers, as the code says it must be.
fn expected_table() -> String {
    let mut s = String::from("| perftest option | here | note or reason |\n|---|---|---|\n");
    for o in compat::OPTIONS {
        s.push_str(&format!(
            "| `{}` | {} | {} |\n",
            compat::spell(o),
            o.status.word(),
            o.status.text()
        ));
    }
    s
}

#[test]
fn the_compatibility_page_shows_the_parsers_table() {
    const BEGIN: &str = "<!-- options: generated from perftest/src/params/compat/table.rs, checked by perftest/tests/compat.rs -->\n";
    const END: &str = "<!-- /options -->";
    let path = repo().join("docs/perftest-compat.md");
    let page = std::fs::read_to_string(&path).expect("docs/perftest-compat.md");
    let (head, rest) = page
        .split_once(BEGIN)
        .expect("the page has the BEGIN marker");
    let (table, tail) = rest.split_once(END).expect("the page has the END marker");
    let want = expected_table();
    if table != want {
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, format!("{head}{BEGIN}{want}{END}{tail}")).unwrap();
            return;
        }
        let diff: Vec<String> = want
            .lines()
            .filter(|l| !table.lines().any(|t| t == *l))
            .map(|l| format!("  missing or different: {l}"))
            .chain(
                table
                    .lines()
                    .filter(|t| !want.lines().any(|l| l == *t))
                    .map(|t| format!("  not in the code: {t}")),
            )
            .collect();
        panic!(
            "docs/perftest-compat.md disagrees with compat::OPTIONS (UPDATE_GOLDEN=1 rewrites it):\n{}",
            diff.join("\n")
        );
    }
    // Every status word is explained on the page, and no option is left silent.
    for w in ["same", "no-op", "refused"] {
        assert!(
            head.contains(&format!("**{w}**")),
            "the page explains '{w}'"
        );
    }
    assert!(compat::OPTIONS.iter().all(|o| match o.status {
        Status::NoOp(t) | Status::Refused(t) => !t.is_empty(),
        Status::Same(_) => true,
    }));
}

#[test]
fn run_infinitely_and_margins() {
    let wbw = Tool::new(TestKind::Write, Metric::Bw);
    let cfg = |s: &str| -> Result<Config, String> {
        let args: Vec<String> = s.split_whitespace().map(String::from).collect();
        config(wbw, &args)
    };
    let c = cfg("--run_infinitely").unwrap();
    assert!(c.timing.run_infinitely);
    assert_eq!(
        c.timing.mode,
        vl_perftest::params::RunMode::Duration(Duration::from_secs(5))
    );
    assert_eq!(c.timing.margin, None, "every period is measured whole");
    let c = cfg("--run_infinitely -D 2").unwrap();
    assert_eq!(
        c.timing.mode,
        vl_perftest::params::RunMode::Duration(Duration::from_secs(2))
    );
    for (args, says) in [
        ("--run_infinitely -n 100", "leave out -n"),
        ("--run_infinitely -a", "leave out -a"),
        ("--run_infinitely -D 4 -f 1", "leave out -f"),
    ] {
        let e = cfg(args).expect_err(args);
        assert!(
            e.contains("--run_infinitely") && e.contains(says),
            "{args}: {e}"
        );
    }
    let e = config(
        Tool::new(TestKind::Write, Metric::Lat),
        &["--run_infinitely".into()],
    )
    .unwrap_err();
    assert!(e.contains("--run_infinitely"), "{e}");
    // perftest's margins: a quarter of -D by default, whole seconds; both must fit.
    assert_eq!(
        cfg("-D 8").unwrap().timing.margin,
        Some(Duration::from_secs(2))
    );
    assert_eq!(cfg("-D 3").unwrap().timing.margin, None);
    assert_eq!(cfg("-D 8 -f 0").unwrap().timing.margin, None);
    assert_eq!(
        cfg("-D 8 -f 3").unwrap().timing.margin,
        Some(Duration::from_secs(3))
    );
    assert!(cfg("-D 4 -f 2").unwrap_err().contains("-f 2"));
    assert!(cfg("-n 10 -f 1").unwrap_err().contains("add -D"));
    // Both sides must agree on them.
    let keys: Vec<&str> = cfg("-D 8")
        .unwrap()
        .wire_params()
        .iter()
        .map(|(k, _)| *k)
        .collect();
    assert!(keys.contains(&"margin") && keys.contains(&"run_infinitely"));
}

/// [`config`] of a command line written as one string.
fn cfg(tool: Tool, line: &str) -> Result<Config, String> {
    let args: Vec<String> = line.split_whitespace().map(String::from).collect();
    config(tool, &args)
}

#[test]
fn report_both_and_reversed() {
    let wbw = Tool::new(TestKind::Write, Metric::Bw);
    let sbw = Tool::new(TestKind::Send, Metric::Bw);
    let wlat = Tool::new(TestKind::Write, Metric::Lat);
    // --reversed: the server posts, the client receives; the TCP roles do not change.
    let server = cfg(wbw, "--reversed").unwrap();
    assert!(server.is_server() && server.is_requester());
    let client = cfg(sbw, "--reversed 10.0.0.1").unwrap();
    assert!(!client.is_server() && !client.is_requester());
    let plain = cfg(wbw, "10.0.0.1").unwrap();
    assert!(plain.is_requester() && !cfg(wbw, "").unwrap().is_requester());
    // Both sides must give it: it travels in the HELLO.
    let on = |c: &Config| {
        c.wire_params()
            .into_iter()
            .find(|(k, _)| *k == "reversed")
            .map(|(_, v)| v)
    };
    assert_eq!(on(&server).as_deref(), Some("on"));
    assert_eq!(on(&plain).as_deref(), Some("off"));
    // --report-both is the printing side's own business: accepted with or without -b.
    for args in [
        "--report-both",
        "-b --report-both",
        "-b --report-both -a 10.0.0.1",
    ] {
        let argv = std::iter::once(wbw.name()).chain(args.split_whitespace().map(String::from));
        let p = Params::try_parse_for(wbw, argv).unwrap();
        assert!(p.output.report_both, "{args}");
        Config::new(wbw, &p).unwrap_or_else(|e| panic!("{args}: {e}"));
    }
    // Where they cannot apply, the refusal names the option and says why.
    for (t, args, says) in [
        (wlat, "--reversed", "latency test"),
        (wbw, "--reversed --procs 2", "--procs"),
        (wbw, "-b --report-both --procs 2", "--procs"),
    ] {
        let e = cfg(t, args).expect_err(args);
        let flag = args
            .split_whitespace()
            .find(|a| a.starts_with("--r"))
            .unwrap();
        assert!(e.contains(flag) && e.contains(says), "{args}: {e}");
    }
    // The latency tools' parsers do not know --report-both (perftest's usage lists it for the
    // bandwidth tools only): it is refused as a bandwidth option.
    let e = cfg(wlat, "--report-both").unwrap_err();
    assert!(e.contains("--report-both"), "{e}");
}

#[test]
fn latency_sample_reports() {
    let wbw = Tool::new(TestKind::Write, Metric::Bw);
    let rlat = Tool::new(TestKind::Read, Metric::Lat);
    let slat = Tool::new(TestKind::Send, Metric::Lat);
    // -H and -U keep every sample of a -n run; -C alone keeps none; -D keeps none (perftest
    // prints no samples in duration mode).
    for (args, keeps) in [
        ("-H -n 100", true),
        ("-U", true),
        ("--report-histogrm -U -C", true),
        ("-C", false),
        ("-H -D 2", false),
        ("", false),
    ] {
        let c = cfg(rlat, args).unwrap_or_else(|e| panic!("{args}: {e}"));
        assert_eq!(c.keep_samples, keeps, "{args}");
    }
    let argv = ["vl_send_lat", "-H", "-U", "-C"];
    let p = Params::try_parse_for(slat, argv).unwrap();
    assert!(p.output.report_histogram && p.output.report_unsorted && p.output.report_cycles);
    // Refused by name where they cannot apply.
    for (t, args, says) in [
        (wbw, "-H", "-H/--report-histogram"),
        (wbw, "-U", "-U/--report-unsorted"),
        (wbw, "-C", "-C/--report-cycles"),
        (slat, "-H --format table", "--format table"),
        (slat, "-U -n 20000000", "at most 16777216"),
    ] {
        let e = cfg(t, args).expect_err(args);
        assert!(e.contains(says), "{args}: {e}");
    }
}

/// The value of `key` in the HELLO `c` sends.
fn hello(c: &Config, key: &str) -> String {
    let (_, v) = c
        .wire_params()
        .into_iter()
        .find(|(k, _)| *k == key)
        .unwrap_or_else(|| panic!("{key} is not in the HELLO"));
    v
}

#[test]
fn send_with_immediate() {
    let sbw = Tool::new(TestKind::Send, Metric::Bw);
    let slat = Tool::new(TestKind::Send, Metric::Lat);
    for t in [sbw, slat] {
        let c = cfg(t, "--send_with_imm").unwrap();
        assert!(c.send_with_imm);
        assert_eq!(hello(&c, "send_with_imm"), "on");
    }
    for t in [
        Tool::new(TestKind::Write, Metric::Bw),
        Tool::new(TestKind::Read, Metric::Lat),
    ] {
        let e = cfg(t, "--send_with_imm").unwrap_err();
        assert!(
            e.contains("--send_with_imm") && e.contains("sends none"),
            "{e}"
        );
    }
}

#[test]
fn receive_post_lists() {
    let sbw = Tool::new(TestKind::Send, Metric::Bw);
    let wbw = Tool::new(TestKind::Write, Metric::Bw);
    let c = cfg(sbw, "--recv_post_list 12 -r 32 -n 204").unwrap();
    assert_eq!(c.queues.recv_post_list, 12);
    assert_eq!(cfg(sbw, "").unwrap().queues.recv_post_list, 1);
    // No receives in an RDMA Write test: accepted, as perftest accepts it.
    assert_eq!(
        cfg(wbw, "--recv_post_list 4")
            .unwrap()
            .queues
            .recv_post_list,
        4
    );
    for (t, args, says) in [
        (sbw, "--recv_post_list 0", "1..=256"),
        (sbw, "--recv_post_list 512 -r 1024", "1..=256"),
        (sbw, "--recv_post_list 8 -n 100", "multiple"),
        (sbw, "--recv_post_list 8 -r 4 -n 64", "rx depth 4"),
        (
            Tool::new(TestKind::Send, Metric::Lat),
            "--recv_post_list 2",
            "bandwidth tools",
        ),
    ] {
        let e = cfg(t, args).expect_err(args);
        assert!(
            e.contains("--recv_post_list") && e.contains(says),
            "{args}: {e}"
        );
    }
}

#[test]
fn write_with_imm_srq_mr_per_qp_hugepages() {
    use vl_perftest::conn::Layout;
    let wbw = Tool::new(TestKind::Write, Metric::Bw);
    let wlat = Tool::new(TestKind::Write, Metric::Lat);
    let sbw = Tool::new(TestKind::Send, Metric::Bw);
    let slat = Tool::new(TestKind::Send, Metric::Lat);
    // --write_with_imm: the write tools post receives (512 by default, as the send tools) and
    // both sides must say it.
    for t in [wbw, wlat] {
        let c = cfg(t, "--write_with_imm").unwrap();
        assert!(c.write_with_imm && c.posts_receives());
        assert_eq!(c.queues.rx_depth, 512);
        assert_eq!(hello(&c, "write_with_imm"), "on");
    }
    assert!(!cfg(wbw, "").unwrap().posts_receives());
    assert_eq!(cfg(wbw, "").unwrap().queues.rx_depth, 1);
    for t in [sbw, Tool::new(TestKind::Read, Metric::Bw)] {
        let e = cfg(t, "--write_with_imm").unwrap_err();
        assert!(
            e.contains("--write_with_imm") && e.contains("writes none"),
            "{e}"
        );
    }
    // --use-srq: the send tools only.
    for t in [sbw, slat] {
        assert!(cfg(t, "--use-srq").unwrap().use_srq);
    }
    for t in [wbw, Tool::new(TestKind::Atomic, Metric::Bw)] {
        let e = cfg(t, "--use-srq").unwrap_err();
        assert!(
            e.contains("--use-srq") && e.contains("posts no receives"),
            "{e}"
        );
    }
    // --mr_per_qp: each QP's source slots start at 0 of a region of their own.
    let shared = Layout::new(&cfg(wbw, "-q 3 --validate").unwrap(), 4096);
    let own = Layout::new(&cfg(wbw, "-q 3 --validate --mr_per_qp").unwrap(), 4096);
    assert_eq!((shared.src_mrs(3), own.src_mrs(3)), (1, 3));
    assert_eq!(shared.src_total(3), 3 * own.src_total(3));
    assert_eq!(own.src(2, 1), own.src(0, 1));
    assert_eq!(shared.src(2, 0), 2 * shared.src_total(1));
    assert_eq!(own.src_region(2), 0..own.src_total(1));
    // --use_hugepages: accepted by every tool, the buffers' matter alone.
    for t in [wbw, wlat, sbw, slat] {
        assert!(cfg(t, "--use_hugepages").unwrap().use_hugepages);
    }
}
