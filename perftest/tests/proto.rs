//! The out-of-band protocol's codec and channel, fed what a confused or hostile peer might send:
//! truncated records, oversized lengths and counts, garbage, a perftest tool, an ERROR. Every
//! such input is refused with an error that says what was wrong — never a panic, never a hang.

use std::net::TcpListener;
use std::time::Duration;

use verbs_lab::oob;
use verbs_lab::verbs::Gid;
use vl_perftest::proto::{
    check_hello, decode, encode, Accept, ChanError, Channel, Endpoints, Hello, Msg, Phase,
    ProtoError, QpEndpoint, Sync, Tally, WireRow, MAGIC, MAX_FRAME, MAX_PARAMS, MAX_QPS, VERSION,
};
use vl_perftest::result::{Metric, TestKind};

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
        Msg::Sync(Sync {
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
                matches!(e, ProtoError::Truncated { .. } | ProtoError::Empty),
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
            Err(ProtoError::Trailing { extra: 1 }),
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
        Err(ProtoError::TooLong { field: "parameter list", len: 255, max }) if max == MAX_PARAMS
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
        Err(ProtoError::TooLong { len: 65535, max, .. }) if max == MAX_QPS
    ));

    // An ERROR whose text claims 65535 bytes (limit 4096).
    let mut rec = vec![3];
    rec.extend_from_slice(&u16::MAX.to_be_bytes());
    rec.extend_from_slice(&[b'a'; 100]);
    assert!(matches!(
        decode(&rec),
        Err(ProtoError::TooLong {
            field: "error text",
            ..
        })
    ));

    // A record longer than a frame may be.
    let big = vec![8u8; MAX_FRAME + 1];
    assert!(matches!(
        decode(&big),
        Err(ProtoError::TooLong {
            field: "record",
            ..
        })
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
        Err(ProtoError::BadValue {
            field: "test kind",
            ..
        })
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

/// A small deterministic generator (xorshift64*), so the fuzz loop needs no crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn garbage_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
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
        &encode(&Msg::Sync(Sync {
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
