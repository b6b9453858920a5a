//! Host tests of `verbs_lab::mq`: the message codec (every type round-trips; truncated, padded,
//! garbage, foreign-version and random input is refused with a reason, never a panic) and real
//! POSIX message queues on this machine (priorities, bounded waits, the errors that name the
//! limit, removal on drop).

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::mqueue::{mq_open, mq_send, MQ_OFlag};
use nix::sys::stat::Mode;
use verbs_lab::mq::{
    check_name, registered_names, unlink_all_registered, CodecError, Limits, MqError, Queue,
    WorkerMsg, COORDINATOR, HEADER_LEN, MAX_MSG_LEN, MAX_RESULT, MAX_TEXT,
};

// ---- the codec ------------------------------------------------------------------------------

fn every_kind() -> Vec<WorkerMsg> {
    vec![
        WorkerMsg::Hello {
            worker: 0,
            pid: 4242,
            cpu: Some(1),
        },
        WorkerMsg::Hello {
            worker: 7,
            pid: u32::MAX,
            cpu: None,
        },
        WorkerMsg::Ready { worker: 3 },
        WorkerMsg::Go { start_at_ns: 0 },
        WorkerMsg::Go {
            start_at_ns: u64::MAX,
        },
        WorkerMsg::Result {
            worker: 1,
            payload: vec![],
        },
        WorkerMsg::Result {
            worker: 2,
            payload: (0..MAX_RESULT).map(|i| (i * 7) as u8).collect(),
        },
        WorkerMsg::error(1, "ibv_reg_mr failed: Cannot allocate memory"),
        WorkerMsg::Error {
            worker: 9,
            message: "x".repeat(MAX_TEXT),
        },
        WorkerMsg::Done { worker: 65_536 },
        WorkerMsg::Barrier {
            worker: 1,
            step: 65_536,
        },
        WorkerMsg::Barrier {
            worker: 0,
            step: u64::MAX,
        },
        WorkerMsg::text(COORDINATOR, "hello from the coordinator"),
        WorkerMsg::text(5, "grüße, ünïcödé ✓"),
        WorkerMsg::Abort {
            reason: "worker 1 died".into(),
        },
        WorkerMsg::Abort {
            reason: String::new(),
        },
    ]
}

#[test]
fn every_type_round_trips() {
    for m in every_kind() {
        let b = m.encode().unwrap_or_else(|e| panic!("{m:?}: {e}"));
        assert!(b.len() <= MAX_MSG_LEN, "{} is {} bytes", m.kind(), b.len());
        assert_eq!(&b[..3], b"VL\x01", "magic and version of {}", m.kind());
        assert_eq!(
            u16::from_be_bytes([b[8], b[9]]) as usize,
            b.len() - HEADER_LEN
        );
        assert_eq!(WorkerMsg::decode(&b).as_ref(), Ok(&m), "{}", m.kind());
    }
}

#[test]
fn long_texts_are_cut_not_refused() {
    let m = WorkerMsg::error(1, "é".repeat(5000));
    let WorkerMsg::Error { message, .. } = &m else {
        unreachable!()
    };
    assert!(message.len() <= MAX_TEXT && message.ends_with('…'));
    assert!(WorkerMsg::decode(&m.encode().unwrap()).is_ok());
}

#[test]
fn encoding_refuses_what_cannot_be_sent() {
    let big = WorkerMsg::Result {
        worker: 0,
        payload: vec![0; MAX_RESULT + 1],
    };
    assert!(
        matches!(big.encode(), Err(CodecError::TooLarge { len, max, .. })
        if len == MAX_RESULT + 1 && max == MAX_RESULT)
    );
    let long = WorkerMsg::Text {
        from: 0,
        text: "y".repeat(MAX_TEXT + 1),
    };
    assert!(long.encode().unwrap_err().to_string().contains("exceeds"));
    let impostor = WorkerMsg::Done {
        worker: COORDINATOR,
    };
    assert!(impostor
        .encode()
        .unwrap_err()
        .to_string()
        .contains("coordinator's id"));
    let reserved = WorkerMsg::Hello {
        worker: 0,
        pid: 1,
        cpu: Some(u32::MAX),
    };
    assert!(reserved
        .encode()
        .unwrap_err()
        .to_string()
        .contains("reserved"));
}

fn refused(bytes: &[u8]) -> String {
    match WorkerMsg::decode(bytes) {
        Ok(m) => panic!("{bytes:?} decoded as {m:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn truncated_and_padded_input_is_refused() {
    for m in every_kind() {
        let b = m.encode().unwrap();
        for cut in 0..b.len() {
            let why = refused(&b[..cut]);
            assert!(
                why.contains("shorter than the 10-byte") || why.contains("truncated or padded"),
                "{} cut to {cut}: {why}",
                m.kind()
            );
        }
        let mut padded = b.clone();
        padded.push(0);
        assert!(refused(&padded).contains("truncated or padded"));
    }
}

#[test]
fn garbage_and_foreign_input_is_refused_with_the_reason() {
    let good = WorkerMsg::Go { start_at_ns: 5 }.encode().unwrap();
    let with = |i: usize, v: u8| {
        let mut b = good.clone();
        b[i] = v;
        b
    };
    assert!(refused(&with(0, b'X')).contains("bad magic"));
    let v2 = refused(&with(2, 2));
    assert!(
        v2.contains("version 2") && v2.contains("speaks version 1"),
        "{v2}"
    );
    assert!(refused(&with(3, 99)).contains("unknown message type 99"));
    assert!(refused(&with(3, 0)).contains("unknown message type 0"));
    // A Go from a worker: only the coordinator starts workers.
    let mut from_worker = good.clone();
    from_worker[4..8].copy_from_slice(&1u32.to_be_bytes());
    assert!(refused(&from_worker).contains("only the coordinator"));
    // A Hello with a 4-byte payload (length field consistent with it).
    let mut hello = WorkerMsg::Hello {
        worker: 1,
        pid: 2,
        cpu: None,
    }
    .encode()
    .unwrap();
    hello.truncate(HEADER_LEN + 4);
    hello[8..10].copy_from_slice(&4u16.to_be_bytes());
    assert!(refused(&hello).contains("4 payload bytes, expected 8"));
    // Text that is not UTF-8.
    let mut text = WorkerMsg::text(1, "abc").encode().unwrap();
    text[HEADER_LEN + 1] = 0xff;
    assert!(refused(&text).contains("not UTF-8"));
    // A Result larger than allowed, with a consistent header.
    let mut big = vec![b'V', b'L', 1, 4, 0, 0, 0, 1];
    big.extend_from_slice(&((MAX_RESULT + 1) as u16).to_be_bytes());
    big.extend(std::iter::repeat(0).take(MAX_RESULT + 1));
    assert!(refused(&big).contains("exceeds its limit"));
    assert!(refused(b"").contains("0 bytes are shorter"));
    assert!(refused(b"hello, world!").contains("bad magic"));
}

/// The codecs' reproducible stream (no `rand` crate), drawing `usize`s.
struct Rng(verbs_lab::wire::XorShift);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

#[test]
fn random_bytes_never_panic_and_what_decodes_is_canonical() {
    let mut rng = Rng(verbs_lab::wire::XorShift(0x9e37_79b9_7f4a_7c15));
    let valid: Vec<Vec<u8>> = every_kind().iter().map(|m| m.encode().unwrap()).collect();
    let mut decoded = 0;
    for round in 0..60_000 {
        let bytes: Vec<u8> = if round % 2 == 0 {
            // Pure noise, sometimes with a valid-looking header start.
            let len = rng.below(40);
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if round % 4 == 0 && b.len() >= 4 {
                b[..3].copy_from_slice(b"VL\x01");
                b[3] = 1 + rng.below(10) as u8;
            }
            b
        } else {
            // A valid message with 1 to 3 bytes changed, or cut, or extended.
            let mut b = valid[rng.below(valid.len())].clone();
            match rng.below(3) {
                0 => {
                    for _ in 0..1 + rng.below(3) {
                        let i = rng.below(b.len());
                        b[i] = rng.next() as u8;
                    }
                }
                1 => b.truncate(rng.below(b.len())),
                _ => b.extend((0..1 + rng.below(4)).map(|_| rng.next() as u8)),
            }
            b
        };
        if let Ok(m) = WorkerMsg::decode(&bytes) {
            decoded += 1;
            assert_eq!(
                m.encode().as_deref(),
                Ok(&bytes[..]),
                "not canonical: {m:?}"
            );
        }
    }
    // Mutations of text payloads and of sender ids often stay valid: the loop saw both kinds.
    assert!(decoded > 0 && decoded < 60_000, "{decoded}");
}

// ---- real queues on this host ---------------------------------------------------------------

/// The queue tests share the per-user queue budget and the process-wide registry: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn qname(tag: &str) -> String {
    format!("/vl-test-{}-{tag}", std::process::id())
}

/// A raw open of `name`, as a process that knows only the name would try.
fn raw_open(name: &str) -> nix::Result<()> {
    mq_open(name, MQ_OFlag::O_RDONLY, Mode::empty(), None).map(|q| {
        let _ = nix::mqueue::mq_close(q);
    })
}

#[test]
fn higher_priority_is_received_first_and_equal_ones_in_order() {
    let _s = serial();
    let q = Queue::create(&qname("prio"), 8, 256).unwrap();
    let a = q.attr().unwrap();
    assert_eq!((a.maxmsg, a.msgsize, a.curmsgs), (8, 256, 0));
    assert!(a.nonblocking, "a Queue's descriptor is O_NONBLOCK");
    for (text, prio) in [
        ("low", 1),
        ("high-1", 7),
        ("mid", 3),
        ("high-2", 7),
        ("zero", 0),
    ] {
        q.send(&WorkerMsg::text(0, text), prio).unwrap();
    }
    assert_eq!(q.attr().unwrap().curmsgs, 5);
    let mut got = Vec::new();
    for _ in 0..5 {
        let (m, p) = q.recv_with_priority(Duration::from_secs(1)).unwrap();
        let WorkerMsg::Text { text, .. } = m else {
            panic!("{m:?}")
        };
        got.push((text, p));
    }
    let want = [
        ("high-1", 7),
        ("high-2", 7),
        ("mid", 3),
        ("low", 1),
        ("zero", 0),
    ];
    assert_eq!(
        got,
        want.map(|(t, p)| (t.to_string(), p)),
        "priority order, FIFO within a priority"
    );
    assert!(
        q.send(&WorkerMsg::text(0, "x"), 32768).is_err(),
        "MQ_PRIO_MAX"
    );
}

#[test]
fn waits_are_bounded_and_nonblocking_calls_do_not_wait() {
    let _s = serial();
    let q = Queue::create(&qname("bounded"), 2, 64).unwrap();
    let t = Instant::now();
    let e = q.recv_timeout(Duration::from_millis(300)).unwrap_err();
    let waited = t.elapsed();
    assert!(e.is_timeout(), "{e}");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(1500),
        "recv_timeout(300 ms) took {waited:?}"
    );
    assert!(e.to_string().contains("no message within 0.3 s"), "{e}");
    let e = q.try_recv().unwrap_err();
    assert!(matches!(e, MqError::WouldBlock { .. }) && e.to_string().contains("empty"));

    // Fill it, then a send waits for room only as long as told.
    q.try_send(&WorkerMsg::Done { worker: 1 }, 0).unwrap();
    q.try_send(&WorkerMsg::Done { worker: 2 }, 0).unwrap();
    let e = q.try_send(&WorkerMsg::Done { worker: 3 }, 0).unwrap_err();
    assert!(e.to_string().contains("full"), "{e}");
    let t = Instant::now();
    let e = q
        .send_timeout(
            &WorkerMsg::Done { worker: 3 },
            0,
            Duration::from_millis(200),
        )
        .unwrap_err();
    assert!(
        e.is_timeout() && t.elapsed() < Duration::from_millis(1500),
        "{e}"
    );
    assert!(e.to_string().contains("room for a message"), "{e}");
    // A receive makes room.
    assert_eq!(q.try_recv().unwrap().0, WorkerMsg::Done { worker: 1 });
    q.send_timeout(
        &WorkerMsg::Done { worker: 3 },
        0,
        Duration::from_millis(200),
    )
    .unwrap();
}

#[test]
fn a_message_larger_than_the_queue_is_refused_before_the_call() {
    let _s = serial();
    let q = Queue::create(&qname("small"), 1, 64).unwrap();
    let e = q
        .send(
            &WorkerMsg::Result {
                worker: 0,
                payload: vec![1; 100],
            },
            0,
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("Result message of 110 bytes does not fit the queue's msgsize of 64"),
        "{e}"
    );
}

#[test]
fn garbage_in_the_queue_is_reported_not_decoded() {
    let _s = serial();
    let name = qname("garbage");
    let q = Queue::create(&name, 2, 64).unwrap();
    let raw = mq_open(name.as_str(), MQ_OFlag::O_WRONLY, Mode::empty(), None).unwrap();
    mq_send(&raw, b"not a message at all", 0).unwrap();
    let e = q.recv_timeout(Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, MqError::Codec { .. }), "{e:?}");
    assert!(e.to_string().contains(&name) && e.to_string().contains("bad magic"));
    nix::mqueue::mq_close(raw).unwrap();
}

#[test]
fn eexist_says_a_previous_run_may_have_crashed() {
    let _s = serial();
    let name = qname("twice");
    let _first = Queue::create(&name, 2, 64).unwrap();
    let e = Queue::create(&name, 2, 64).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EEXIST));
    let text = e.to_string();
    assert!(
        text.contains("a queue of that name exists: a previous run crashed?"),
        "{text}"
    );
    assert!(text.contains(&format!("/dev/mqueue{name}")), "{text}");
}

#[test]
fn limits_refusals_name_the_limit() {
    let _s = serial();
    let l = Limits::read();
    let (msg_max, msgsize_max) = (l.msg_max.unwrap(), l.msgsize_max.unwrap());
    let name = qname("limits");
    let e = Queue::create(&name, msg_max as usize + 1, 8192.min(msgsize_max as usize)).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    let text = e.to_string();
    let want = format!(
        "mq_open({name}) refused maxmsg={} msgsize={}: /proc/sys/fs/mqueue/msg_max is {msg_max} \
         and msgsize_max is {msgsize_max} (root without CAP_SYS_RESOURCE is bound too)",
        msg_max + 1,
        8192.min(msgsize_max)
    );
    assert!(
        text.replace(" (EINVAL)", "").contains(&want),
        "{text}\nwant: {want}"
    );
    assert!(text.contains(&format!("maxmsg {} is above msg_max", msg_max + 1)));
    let e = Queue::create(&name, 1, msgsize_max as usize + 1).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL));
    assert!(e.to_string().contains("is above msgsize_max"), "{e}");
    // The kernel defaults (Linux: fs.mqueue.msg_max 10, msgsize_max 8192), which most hosts keep.
    if msg_max == 10 && msgsize_max == 8192 {
        let e = Queue::create(&name, 11, 8192).unwrap_err();
        assert!(e.to_string().contains(
            "refused maxmsg=11 msgsize=8192 (EINVAL): /proc/sys/fs/mqueue/msg_max is 10 and \
             msgsize_max is 8192 (root without CAP_SYS_RESOURCE is bound too)"
        ));
    }
    assert!(!Queue::exists(&name).unwrap(), "nothing was created");
}

#[test]
fn the_owner_removes_the_queue_on_drop_and_others_do_not() {
    let _s = serial();
    let name = qname("drop");
    let q = Queue::create(&name, 2, 64).unwrap();
    assert!(q.is_owner());
    assert!(registered_names().contains(&name));
    {
        let other = Queue::open(&name).unwrap();
        assert!(!other.is_owner());
        assert_eq!(other.capacity(), (2, 64));
        other.send(&WorkerMsg::Ready { worker: 4 }, 0).unwrap();
    }
    assert_eq!(
        raw_open(&name),
        Ok(()),
        "a non-owner's drop leaves the queue"
    );
    assert_eq!(
        q.recv_timeout(Duration::from_secs(1)).unwrap(),
        WorkerMsg::Ready { worker: 4 }
    );
    drop(q);
    assert_eq!(
        raw_open(&name),
        Err(Errno::ENOENT),
        "the owner's drop unlinks"
    );
    assert!(!Queue::exists(&name).unwrap());
    assert!(!registered_names().contains(&name));
    let e = Queue::open(&name).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENOENT));
    assert!(e.to_string().contains("no queue of that name"), "{e}");
}

#[test]
fn unlink_all_registered_removes_every_created_name() {
    let _s = serial();
    let (a, b) = (qname("reg-a"), qname("reg-b"));
    let qa = Queue::create(&a, 1, 32).unwrap();
    let qb = Queue::create(&b, 1, 32).unwrap();
    assert_eq!(unlink_all_registered(), 2);
    assert_eq!(raw_open(&a), Err(Errno::ENOENT));
    assert_eq!(raw_open(&b), Err(Errno::ENOENT));
    // The descriptors still work after the names are gone.
    qa.send(&WorkerMsg::Done { worker: 0 }, 0).unwrap();
    assert_eq!(
        qa.recv_timeout(Duration::from_secs(1)).unwrap(),
        WorkerMsg::Done { worker: 0 }
    );
    drop((qa, qb)); // unlinking again on drop is harmless
    assert!(registered_names().is_empty());
}

#[test]
fn names_are_checked_before_any_call() {
    for (bad, why) in [
        ("noslash", "must start with '/'"),
        ("/", "1 to 254 bytes"),
        ("/a/b", "no '/'"),
    ] {
        let e = check_name(bad).unwrap_err();
        assert!(e.to_string().contains(why), "{bad}: {e}");
        assert!(Queue::create(bad, 1, 1).is_err());
    }
    let long = format!("/{}", "n".repeat(255));
    assert!(check_name(&long).is_err());
    assert!(check_name("/vl-ok.name_1").is_ok());
    assert!(Queue::create("/vl-zero", 0, 64)
        .unwrap_err()
        .to_string()
        .contains("at least 1"));
}
