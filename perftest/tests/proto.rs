//! The out-of-band protocol's codec and channel, fed what a confused or hostile peer might send:
//! truncated records, oversized lengths and counts, garbage, a perftest tool, an ERROR. Every
//! such input is refused with an error that says what was wrong — never a panic, never a hang.

use std::net::TcpListener;
use std::time::Duration;

use verbs_lab::oob;
use verbs_lab::verbs::Gid;
use verbs_lab::wire::{WireError, XorShift};
use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::proto::{
    check_hello, decode, encode, Accept, Barrier, ChanError, Channel, Endpoints, Hello, Msg, Phase,
    ProtoError, QpEndpoint, Tally, WireRow, MAGIC, MAX_FRAME, MAX_KEY, MAX_NAME, MAX_PARAMS,
    MAX_QPS, MAX_TEXT, MAX_VALUE, VERSION,
};

fn hello(params: &[(&str, &str)]) -> Hello {
    Hello {
        version: VERSION,
        tool: "vl_write_bw".into(),
        test: TestKind::Write,
        metric: Metric::Bw,
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn endpoint(qpn: u32) -> QpEndpoint {
    QpEndpoint {
        qpn,
        psn: 0x12_3456,
        lid: 0,
        gid: "::ffff:192.168.77.2".parse::<Gid>().unwrap(),
        rkey: 0x2e8,
        addr: 0x7f8e_afcd_d000,
        slot_stride: 65536,
        slots: 1,
    }
}

/// One of every message, with realistic contents.
fn samples() -> Vec<Msg> {
    vec![
        Msg::Hello(hello(&[
            ("size", "65536"),
            ("connection", "RC"),
            ("iterations", "5000"),
        ])),
        Msg::Accept(Accept {
            version: VERSION,
            tool: "vl_write_bw".into(),
        }),
        Msg::Error("parameter mismatch: message size (-s / -a): client 8192, server 4096".into()),
        Msg::Endpoints(Endpoints {
            device: "rxe1".into(),
            active_mtu: 4096,
            max_msg_sz: 1 << 31,
            max_dest_rd_atomic: 128,
            qkey: 0x1111_1111,
            qps: (1..=4).map(endpoint).collect(),
        }),
        Msg::Barrier(Barrier {
            phase: Phase::Ready,
            size: 65536,
        }),
        Msg::Tally(Tally {
            phase: Phase::Measure,
            size: 65536,
            per_qp: vec![5000, 5000, 4999],
        }),
        Msg::Result(WireRow {
            bytes: 65536,
            iterations: 5000,
            peak_bps: 1.1e10,
            avg_bps: 1.05e10,
            msg_rate_mpps: 0.17,
            elapsed_ns: 31_000_000,
        }),
        Msg::Heartbeat,
    ]
}

#[test]
fn every_message_survives_the_round_trip() {
    for m in samples() {
        assert_eq!(decode(&encode(&m)), Ok(m.clone()), "{}", m.name());
    }
}

#[test]
fn every_truncation_is_refused() {
    for m in samples() {
        let rec = encode(&m);
        for cut in 0..rec.len() {
            let e = decode(&rec[..cut]).expect_err(&format!("{} cut at {cut}", m.name()));
            assert!(
                matches!(
                    e,
                    ProtoError::Wire(WireError::Truncated { .. }) | ProtoError::Empty
                ),
                "{} cut at {cut}: {e}",
                m.name()
            );
            assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    for m in samples() {
        let mut rec = encode(&m);
        rec.push(0);
        assert_eq!(
            decode(&rec),
            Err(ProtoError::Wire(WireError::Trailing { extra: 1 })),
            "{}",
            m.name()
        );
    }
}

#[test]
fn oversized_counts_and_lengths_are_refused_before_allocating() {
    // A HELLO announcing 255 parameters (limit 64).
    let mut rec = vec![1];
    rec.extend_from_slice(&MAGIC);
    rec.extend_from_slice(&VERSION.to_be_bytes());
    rec.push(11);
    rec.extend_from_slice(b"vl_write_bw");
    rec.extend_from_slice(&[1, 1, 255]);
    assert!(matches!(
        decode(&rec),
        Err(ProtoError::Wire(WireError::TooLong { what, len: 255, max }))
            if what == "parameter list" && max == MAX_PARAMS
    ));

    // An ENDPOINTS announcing 65535 QPs.
    let mut rec = encode(&Msg::Endpoints(Endpoints {
        device: "x".into(),
        active_mtu: 1024,
        max_msg_sz: 1,
        max_dest_rd_atomic: 1,
        qkey: 0,
        qps: vec![endpoint(1)],
    }));
    let count_at = 1 + 1 + 1 + 4 + 4 + 1 + 4;
    rec[count_at..count_at + 2].copy_from_slice(&u16::MAX.to_be_bytes());
    assert!(matches!(
        decode(&rec),
        Err(ProtoError::Wire(WireError::TooLong { len: 65535, max, .. })) if max == MAX_QPS
    ));

    // An ERROR whose text claims 65535 bytes (limit 4096).
    let mut rec = vec![3];
    rec.extend_from_slice(&u16::MAX.to_be_bytes());
    rec.extend_from_slice(&[b'a'; 100]);
    assert!(matches!(
        decode(&rec),
        Err(ProtoError::Wire(WireError::TooLong { what, .. })) if what == "error text"
    ));

    // A record longer than a frame may be.
    let big = vec![8u8; MAX_FRAME + 1];
    assert!(matches!(
        decode(&big),
        Err(ProtoError::Wire(WireError::TooLong { what, .. })) if what == "record"
    ));
}

#[test]
fn bad_values_are_named() {
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut rec = encode(&samples()[0]);
        f(&mut rec);
        decode(&rec)
    };
    // Magic and version.
    assert!(matches!(
        with(&|r| r[1] = b'X'),
        Err(ProtoError::BadMagic(_))
    ));
    let e = with(&|r| r[5..7].copy_from_slice(&7u16.to_be_bytes())).unwrap_err();
    assert_eq!(e, ProtoError::Version { peer: 7 });
    assert!(
        e.to_string().contains("version 7")
            && e.to_string().contains(&format!("version {VERSION}"))
    );
    // The test kind.
    let tool_end = 1 + 4 + 2 + 1 + "vl_write_bw".len();
    assert!(matches!(
        with(&|r| r[tool_end] = 9),
        Err(ProtoError::Wire(WireError::Invalid { what, .. })) if what == "test kind"
    ));

    // Duplicate parameter names.
    let dup = encode(&Msg::Hello(hello(&[("size", "1"), ("size", "2")])));
    assert!(decode(&dup).unwrap_err().to_string().contains("twice"));
    // Parameter values must be printable ASCII; names [a-z0-9_].
    let esc = encode(&Msg::Hello(hello(&[("size", "1\u{1b}[2J")])));
    assert!(decode(&esc).unwrap_err().to_string().contains("printable"));
    let upper = encode(&Msg::Hello(hello(&[("Size", "1")])));
    assert!(decode(&upper)
        .unwrap_err()
        .to_string()
        .contains("parameter name"));
    // Text that is not UTF-8.
    let mut bad = vec![3, 0, 2, 0xff, 0xfe];
    assert!(decode(&bad).unwrap_err().to_string().contains("UTF-8"));
    bad[3] = 0x1b;
    bad[4] = b'x';
    assert!(decode(&bad)
        .unwrap_err()
        .to_string()
        .contains("control character"));

    // QP numbers are 24 bits; slots must exist; the MTU must be an IB MTU.
    let ep = |f: &dyn Fn(&mut Endpoints)| {
        let mut e = match samples().remove(3) {
            Msg::Endpoints(e) => e,
            _ => unreachable!(),
        };
        f(&mut e);
        decode(&encode(&Msg::Endpoints(e)))
    };
    assert!(ep(&|e| e.qps[0].qpn = 1 << 24)
        .unwrap_err()
        .to_string()
        .contains("QPN"));
    assert!(ep(&|e| e.qps[0].psn = 1 << 24)
        .unwrap_err()
        .to_string()
        .contains("PSN"));
    assert!(ep(&|e| e.qps[0].slots = 0)
        .unwrap_err()
        .to_string()
        .contains("slots"));
    assert!(ep(&|e| e.qps[0].addr = u64::MAX - 10)
        .unwrap_err()
        .to_string()
        .contains("wraps"));
    assert!(ep(&|e| e.active_mtu = 1500)
        .unwrap_err()
        .to_string()
        .contains("1500"));
    assert!(ep(&|e| e.qps.clear())
        .unwrap_err()
        .to_string()
        .contains("no QP"));

    // Phases and numbers.
    let mut s = encode(&samples()[4]);
    s[1] = 42;
    assert!(decode(&s).unwrap_err().to_string().contains("phase"));
    let r = encode(&Msg::Result(WireRow {
        bytes: 1,
        iterations: 1,
        peak_bps: f64::NAN,
        avg_bps: 1.0,
        msg_rate_mpps: 1.0,
        elapsed_ns: 1,
    }));
    assert!(decode(&r)
        .unwrap_err()
        .to_string()
        .contains("peak bandwidth"));
    assert_eq!(decode(&[99]), Err(ProtoError::UnknownType(99)));
    assert_eq!(decode(&[]), Err(ProtoError::Empty));
}

/// The codecs' deterministic generator (no crate), with the draws these tests need.
struct Rng(XorShift);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
}

#[test]
fn garbage_never_panics() {
    let mut rng = Rng(XorShift(0x9e37_79b9_7f4a_7c15));
    let valid: Vec<Vec<u8>> = samples().iter().map(encode).collect();
    let mut accepted = 0;
    for round in 0..200_000 {
        let rec: Vec<u8> = if round % 2 == 0 {
            // Random bytes, often starting with a valid type byte.
            let len = (rng.next() % 200) as usize;
            let mut v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if let Some(b) = v.first_mut() {
                *b = (*b % 10).max(1);
            }
            v
        } else {
            // A valid record with a few bytes flipped.
            let mut v = valid[(rng.next() % valid.len() as u64) as usize].clone();
            for _ in 0..1 + rng.next() % 3 {
                let i = (rng.next() % v.len() as u64) as usize;
                v[i] ^= 1 << (rng.next() % 8);
            }
            v
        };
        // Must return, Ok or Err; whatever is accepted must encode back to the same bytes
        // (the codec has one spelling per message).
        if let Ok(m) = decode(&rec) {
            accepted += 1;
            assert_eq!(encode(&m), rec, "round {round}: {m:?}");
        }
    }
    assert!(
        accepted > 0,
        "some flipped records are still valid (e.g. a changed size)"
    );
}

#[test]
fn hello_mismatches_name_the_parameter_and_both_values() {
    let server = hello(&[("size", "4096"), ("connection", "RC"), ("qps", "1")]);
    let client = hello(&[("size", "8192"), ("connection", "UC"), ("qps", "1")]);
    let e = check_hello(&server, &client).unwrap_err();
    assert!(
        e.contains("message size (-s / -a): client 8192, server 4096"),
        "{e}"
    );
    assert!(
        e.contains("connection type (-c): client UC, server RC"),
        "{e}"
    );
    assert!(!e.contains("qps"), "equal parameters are not listed: {e}");

    let mut other = hello(&[("size", "4096"), ("connection", "RC"), ("qps", "1")]);
    other.test = TestKind::Send;
    other.tool = "vl_send_bw".into();
    let e = check_hello(&server, &other).unwrap_err();
    assert!(e.contains("vl_send_bw") && e.contains("vl_write_bw"), "{e}");

    let missing = hello(&[("size", "4096"), ("connection", "RC")]);
    assert!(check_hello(&server, &missing)
        .unwrap_err()
        .contains("did not send"));
    let extra = hello(&[
        ("size", "4096"),
        ("connection", "RC"),
        ("qps", "1"),
        ("zz", "1"),
    ]);
    assert!(check_hello(&server, &extra).unwrap_err().contains("'zz'"));
    assert_eq!(check_hello(&server, &server.clone()), Ok(()));
}

/// A connected pair of channels over loopback TCP: (server side, client side).
fn pair() -> (Channel, oob::OobConn) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = std::thread::spawn(move || oob::accept(port, Duration::from_secs(10)).unwrap());
    let client = oob::connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
    let mut server = Channel::new(t.join().unwrap(), "client");
    server.set_timeout(Duration::from_secs(5)).unwrap();
    (server, client)
}

#[test]
fn channel_refuses_a_perftest_peer_and_garbage() {
    // perftest's exchange starts with ASCII text, which reads as an enormous frame length.
    let (mut server, mut raw) = pair();
    raw.send_raw(b"0000:000011:abcdef:00000000", "perftest record")
        .unwrap();
    let e = server.recv("the client's HELLO").unwrap_err().to_string();
    assert!(e.contains("does not speak the verbs-lab protocol"), "{e}");
    // One sentence naming what was awaited (not "refused the peer's the client's HELLO").
    assert!(e.starts_with("the client's HELLO is malformed: "), "{e}");

    // A well-framed record that is garbage.
    let (mut server, mut raw) = pair();
    raw.send_msg(&[1, b'N', b'O', b'P', b'E'], "junk").unwrap();
    let e = server.recv("the client's HELLO").unwrap_err();
    assert!(
        matches!(
            e,
            ChanError::Proto {
                err: ProtoError::BadMagic(_),
                ..
            }
        ),
        "{e}"
    );

    // A peer that sends half a frame and goes silent: bounded by the timeout.
    let (mut server, mut raw) = pair();
    server.set_timeout(Duration::from_millis(300)).unwrap();
    raw.send_raw(&[0, 0, 0, 10, 1, 2], "half a frame").unwrap();
    let t0 = std::time::Instant::now();
    let e = server.recv("the client's HELLO").unwrap_err().to_string();
    assert!(e.contains("timed out") && e.contains("HELLO"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(3));

    // A peer that closes.
    let (mut server, raw) = pair();
    drop(raw);
    let e = server.recv("the client's HELLO").unwrap_err().to_string();
    assert!(e.contains("closed"), "{e}");
}

#[test]
fn channel_turns_errors_and_out_of_step_messages_into_errors() {
    let (mut server, mut raw) = pair();
    assert!(!server.readable(Duration::ZERO).unwrap());
    raw.send_msg(&encode(&Msg::Heartbeat), "beat").unwrap();
    raw.send_msg(
        &encode(&Msg::Barrier(Barrier {
            phase: Phase::Done,
            size: 2,
        })),
        "sync",
    )
    .unwrap();
    assert!(server.readable(Duration::from_secs(2)).unwrap());
    // A barrier skips heartbeats but wants the same phase and size.
    let e = server.sync(Phase::Ready, 2).unwrap_err().to_string();
    assert!(
        e.contains("SYNC(ready, size 2)") && e.contains("SYNC(done, size 2)"),
        "{e}"
    );

    raw.send_msg(
        &encode(&Msg::Error("validation failed at byte 9".into())),
        "error",
    )
    .unwrap();
    match server.recv("anything") {
        Err(ChanError::Peer(p)) => {
            assert_eq!(p.text, "validation failed at byte 9");
            assert!(p.to_string().contains("the client reported"));
        }
        other => panic!("{other:?}"),
    }
    raw.send_msg(&encode(&Msg::Error("late".into())), "error")
        .unwrap();
    let p = server
        .pending_peer_error(Duration::from_secs(2))
        .expect("pending error");
    assert_eq!(p.text, "late");
    assert!(server
        .pending_peer_error(Duration::from_millis(50))
        .is_none());
}

// ---- property tests: random valid messages, random mutations, semantically bad records ----

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    /// 0..=max, with the edges (0, 1, max) more often than chance would give them.
    fn upto(&mut self, max: u64) -> u64 {
        match self.below(8) {
            0 => 0,
            1 => max.min(1),
            2 => max,
            _ => self.next() % max.saturating_add(1).max(1),
        }
    }
    fn ident(&mut self, max: usize) -> String {
        const SET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_";
        let n = 1 + self.below(max as u64) as usize;
        (0..n)
            .map(|_| SET[self.below(SET.len() as u64) as usize] as char)
            .collect()
    }
    fn printable(&mut self, max: usize) -> String {
        let n = 1 + self.below(max as u64) as usize;
        (0..n)
            .map(|_| (b' ' + self.below(95) as u8) as char)
            .collect()
    }
    fn phase(&mut self) -> Phase {
        let all = [
            Phase::Connected,
            Phase::Ready,
            Phase::WarmUp,
            Phase::Measure,
            Phase::Done,
            Phase::Finish,
            Phase::Period,
        ];
        all[self.below(all.len() as u64) as usize]
    }
    fn rate(&mut self) -> f64 {
        match self.below(4) {
            0 => 0.0,
            1 => f64::MAX,
            _ => (self.next() >> 11) as f64 / 1e3,
        }
    }
}

/// A random message that is valid by construction: every field within its limits.
fn random_msg(rng: &mut Rng) -> Msg {
    let kinds = [
        TestKind::Write,
        TestKind::Read,
        TestKind::Send,
        TestKind::Atomic,
    ];
    match rng.below(8) {
        0 => {
            let mut params: Vec<(String, String)> = Vec::new();
            for _ in 0..rng.upto(MAX_PARAMS as u64) {
                let k = rng.ident(MAX_KEY);
                if params.iter().all(|(p, _)| *p != k) {
                    params.push((k, rng.printable(MAX_VALUE)));
                }
            }
            Msg::Hello(Hello {
                version: VERSION,
                tool: rng.ident(MAX_NAME),
                test: kinds[rng.below(4) as usize],
                metric: if rng.below(2) == 0 {
                    Metric::Bw
                } else {
                    Metric::Lat
                },
                params,
            })
        }
        1 => Msg::Accept(Accept {
            version: VERSION,
            tool: rng.ident(MAX_NAME),
        }),
        2 => Msg::Error(rng.printable(MAX_TEXT)),
        3 => {
            let n = 1 + rng.upto(MAX_QPS as u64 - 1) as usize;
            let qps = (0..n)
                .map(|_| {
                    let slot_stride = 1 + rng.upto(u64::from(u32::MAX) - 1) as u32;
                    let slots = 1 + rng.upto(u64::from(u32::MAX) - 1) as u32;
                    let span = u64::from(slot_stride) * u64::from(slots);
                    let mut gid = [0u8; 16];
                    gid.iter_mut().for_each(|b| *b = rng.next() as u8);
                    QpEndpoint {
                        qpn: 1 + rng.upto(0xff_fffe) as u32,
                        psn: rng.upto(0xff_ffff) as u32,
                        lid: rng.next() as u16,
                        gid: Gid(gid),
                        rkey: rng.next() as u32,
                        addr: rng.upto(u64::MAX - span),
                        slot_stride,
                        slots,
                    }
                })
                .collect();
            Msg::Endpoints(Endpoints {
                device: rng.printable(MAX_NAME),
                active_mtu: 256 << rng.below(5),
                max_msg_sz: 1 + rng.upto(u64::from(u32::MAX) - 1) as u32,
                max_dest_rd_atomic: rng.next() as u8,
                qkey: rng.next() as u32,
                qps,
            })
        }
        4 => Msg::Barrier(Barrier {
            phase: rng.phase(),
            size: rng.upto(u64::MAX),
        }),
        5 => Msg::Tally(Tally {
            phase: rng.phase(),
            size: rng.upto(u64::MAX),
            per_qp: (0..rng.upto(MAX_QPS as u64))
                .map(|_| rng.upto(u64::MAX))
                .collect(),
        }),
        6 => Msg::Result(WireRow {
            bytes: rng.upto(u64::MAX),
            iterations: rng.upto(u64::MAX),
            peak_bps: rng.rate(),
            avg_bps: rng.rate(),
            msg_rate_mpps: rng.rate(),
            elapsed_ns: rng.upto(u64::MAX),
        }),
        _ => Msg::Heartbeat,
    }
}

#[test]
fn random_valid_messages_round_trip_within_a_frame() {
    let mut rng = Rng(XorShift(0x0123_4567_89ab_cdef));
    for round in 0..5_000 {
        let m = random_msg(&mut rng);
        let rec = encode(&m);
        assert!(rec.len() <= MAX_FRAME, "round {round}: {} bytes", rec.len());
        assert_eq!(decode(&rec), Ok(m.clone()), "round {round}: {m:?}");
    }
}

/// One random mutation of a record: a cut, an insertion, a deletion, a duplicated or spliced
/// stretch, a byte or a 2/4/8-byte field set to an edge value (0, all ones, one more).
fn mutate(rng: &mut Rng, rec: &mut Vec<u8>, other: &[u8]) {
    let at = |rng: &mut Rng, len: usize| rng.below(len as u64 + 1) as usize;
    match rng.below(7) {
        0 => {
            let n = at(rng, rec.len());
            rec.truncate(n);
        }
        1 => {
            let i = at(rng, rec.len());
            let n = 1 + rng.below(8) as usize;
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            rec.splice(i..i, bytes);
        }
        2 => {
            let i = at(rng, rec.len());
            let j = (i + 1 + rng.below(8) as usize).min(rec.len());
            rec.drain(i..j);
        }
        3 => {
            let i = at(rng, rec.len());
            let j = (i + rng.below(16) as usize).min(rec.len());
            let copy = rec[i..j].to_vec();
            rec.splice(j..j, copy);
        }
        4 => {
            let i = at(rng, rec.len());
            let k = at(rng, other.len());
            rec.truncate(i);
            rec.extend_from_slice(&other[k..]);
        }
        _ => {
            let w = [1usize, 2, 4, 8][rng.below(4) as usize];
            if rec.len() >= w {
                let i = rng.below((rec.len() - w + 1) as u64) as usize;
                let field = &mut rec[i..i + w];
                match rng.below(3) {
                    0 => field.fill(0),
                    1 => field.fill(0xff),
                    _ => {
                        // One more than the field holds now (a count or length off by one).
                        for b in field.iter_mut().rev() {
                            *b = b.wrapping_add(1);
                            if *b != 0 {
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn mutated_frames_decode_or_are_refused_never_panic() {
    let mut rng = Rng(XorShift(0xdead_beef_0bad_f00d));
    let (mut accepted, mut refused) = (0u32, 0u32);
    for round in 0..10_000 {
        let mut rec = encode(&random_msg(&mut rng));
        let other = encode(&random_msg(&mut rng));
        for _ in 0..1 + rng.below(3) {
            mutate(&mut rng, &mut rec, &other);
        }
        match decode(&rec) {
            // One spelling per message: what is accepted encodes back to the same bytes.
            Ok(m) => {
                accepted += 1;
                assert_eq!(encode(&m), rec, "round {round}: {m:?}");
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty(), "round {round}: an empty error");
            }
        }
    }
    // Both outcomes occur, or the mutations test nothing.
    assert!(
        accepted > 100 && refused > 1000,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn semantically_bad_records_are_refused_where_they_are_used() {
    // A HELLO or ACCEPT from a future release: refused by the codec, naming both versions.
    for future in [VERSION + 1, u16::MAX] {
        let mut h = hello(&[("size", "8")]);
        h.version = future;
        let e = decode(&encode(&Msg::Hello(h))).unwrap_err();
        assert_eq!(e, ProtoError::Version { peer: future });
        let t = e.to_string();
        assert!(
            t.contains(&format!("version {future}")) && t.contains(&format!("version {VERSION}")),
            "{t}"
        );
        let a = Msg::Accept(Accept {
            version: future,
            tool: "vl_write_bw".into(),
        });
        assert_eq!(
            decode(&encode(&a)),
            Err(ProtoError::Version { peer: future })
        );
    }

    // A tally of u64::MAX messages: the codec carries it, the engine refuses it (and sums of
    // accepted tallies cannot overflow).
    let t = Tally {
        phase: Phase::Measure,
        size: 8,
        per_qp: vec![3, u64::MAX],
    };
    assert_eq!(
        decode(&encode(&Msg::Tally(t.clone()))),
        Ok(Msg::Tally(t.clone()))
    );
    let e = vl_perftest::engine::check_tally(&t, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("QP 1") && e.contains("protocol error"), "{e}");

    // Slots smaller than the message (stride < size), or none: an RDMA test refuses the peer
    // before it posts anything.
    use vl_perftest::params::{Config, Params, Tool};
    let tool = Tool::new(TestKind::Write, Metric::Bw);
    let argv = ["vl_write_bw", "-s", "65536", "127.0.0.1"];
    let cfg = Config::new(tool, &Params::try_parse_for(tool, argv).unwrap()).unwrap();
    let eps = |stride: u32, slots: u32| Endpoints {
        device: "rxe0".into(),
        active_mtu: 4096,
        max_msg_sz: 1 << 31,
        max_dest_rd_atomic: 16,
        qkey: 0,
        qps: vec![QpEndpoint {
            slot_stride: stride,
            slots,
            ..endpoint(1)
        }],
    };
    let check = vl_perftest::conn::check_remote_slots;
    assert!(check(&cfg, &eps(65536, 1), 65536).is_ok());
    let e = check(&cfg, &eps(4096, 16), 65536).unwrap_err().to_string();
    assert!(e.contains("16 slot(s) of 4096 bytes"), "{e}");
    assert!(e.contains("too small for messages of 65536 bytes"), "{e}");
    assert!(check(&cfg, &eps(65536, 0), 65536).is_err());
}

/// The bytes of each message, spelled out field by field as docs/oob-protocol.md lays them out:
/// a change of the codec that moves a byte fails here.
#[test]
fn every_message_keeps_its_layout() {
    let hello = encode(&Msg::Hello(hello(&[("size", "8")])));
    let mut want = vec![1];
    want.extend_from_slice(b"VLPT");
    want.extend_from_slice(&VERSION.to_be_bytes());
    want.push(11);
    want.extend_from_slice(b"vl_write_bw");
    want.extend_from_slice(&[1, 1, 1, 4]);
    want.extend_from_slice(b"size");
    want.extend_from_slice(&[1, b'8']);
    assert_eq!(hello, want);

    let mut want = vec![3, 0, 5];
    want.extend_from_slice(b"a b\nc");
    assert_eq!(encode(&Msg::Error("a\u{7}b\nc".into())), want);

    let e = encode(&Msg::Endpoints(Endpoints {
        device: "rxe0".into(),
        active_mtu: 1024,
        max_msg_sz: 1 << 20,
        max_dest_rd_atomic: 16,
        qkey: 0x1111_1111,
        qps: vec![endpoint(0x11)],
    }));
    let mut want = vec![4, 4];
    want.extend_from_slice(b"rxe0");
    want.extend_from_slice(&1024u32.to_be_bytes());
    want.extend_from_slice(&(1u32 << 20).to_be_bytes());
    want.push(16);
    want.extend_from_slice(&0x1111_1111u32.to_be_bytes());
    want.extend_from_slice(&[0, 1, 0, 0, 0, 0x11, 0, 0x12, 0x34, 0x56, 0, 0]);
    want.extend_from_slice(&"::ffff:192.168.77.2".parse::<Gid>().unwrap().0);
    want.extend_from_slice(&0x2e8u32.to_be_bytes());
    want.extend_from_slice(&0x7f8e_afcd_d000u64.to_be_bytes());
    want.extend_from_slice(&65536u32.to_be_bytes());
    want.extend_from_slice(&1u32.to_be_bytes());
    assert_eq!(e, want);

    let t = encode(&Msg::Tally(Tally {
        phase: Phase::Measure,
        size: 2,
        per_qp: vec![7],
    }));
    assert_eq!(
        t,
        [6, 4, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7]
    );
    let b = encode(&Msg::Barrier(Barrier {
        phase: Phase::Ready,
        size: 1,
    }));
    assert_eq!(b, [5, 2, 0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(encode(&Msg::Heartbeat), [8]);
}

/// The one table of test and metric codes (the HELLO and a `--procs` worker's report both use
/// it): the codes the wire has always carried, each read back as its test, no other code taken.
#[test]
fn test_and_metric_codes_are_the_wires() {
    let tests = [
        (TestKind::Write, 1),
        (TestKind::Read, 2),
        (TestKind::Send, 3),
        (TestKind::Atomic, 4),
    ];
    for (t, c) in tests {
        assert_eq!(t.code(), c, "{t:?}");
        assert_eq!(TestKind::from_code(c), Some(t));
    }
    for (m, c) in [(Metric::Bw, 1), (Metric::Lat, 2)] {
        assert_eq!(m.code(), c, "{m:?}");
        assert_eq!(Metric::from_code(c), Some(m));
    }
    for c in [0u8, 5, 255] {
        assert_eq!(TestKind::from_code(c), None, "test code {c}");
    }
    for c in [0u8, 3, 255] {
        assert_eq!(Metric::from_code(c), None, "metric code {c}");
    }
}
