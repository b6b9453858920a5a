//! The rendezvous over loopback TCP (no RDMA needed): the table reaches every rank, and a rank
//! with the wrong world size, a taken number, other terms (options) or a GID of the other
//! family (IPv4 against IPv6) is refused by name; strangers on the master port (closed at once,
//! garbage, a trickle, a vl_* client, another protocol version) are ignored while the world
//! forms; a missing rank is named by
//! number; a rank that dies afterwards is named to the others, and a rank another gave up on is
//! not told that it is gone itself. And world size 1, which needs no NIC, runs every collective.
//! The same star over real POSIX message queues (a local run, `--np`): the table, strings longer
//! than one queue message, the launcher's notice naming a rank that ended, a missing rank named
//! within the bound, no queue left behind.
//! Local ranks as NCCL finds them: ranks on "hosts" of their own (records whose host hash the
//! test chooses) count each other in rank order, over TCP and over queues; a launcher's local
//! rank stays the rank's own; two ranks of one host with the same local rank are refused, naming
//! both; the ranks that two `--nnodes` launchers give their children meet as one world, and two
//! such launchers on one host are refused. The second round ([`Star::complete`]): the endpoints reach every rank, GIDs of two
//! families are refused there with the first round's words, and a rank that fails between the
//! rounds is named to the others at once. A rank gone without a FIN (its socket held open and
//! silent): the ranks stalled behind it in the ring report their silent neighbours, rank 0's
//! verdict names the one that does not answer, and every rank names it; when rank 0 is the one,
//! every rank names rank 0; a silent neighbour that is alive is not called gone.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use verbs_lab::mq::{Queue, MAX_MSG_LEN};
use verbs_lab::verbs::{Gid, RemoteBuf};
use vl_coll::bootstrap::place::host_hash;
use vl_coll::bootstrap::{
    rendezvous, CollError, Place, RankRecord, Star, Via, NO_DEVICE, PROTOCOL_VERSION,
};
use vl_coll::env::{resolve, RankFlags};
use vl_coll::kernels::{count_wrong, expected_value, fill_input, DataType, RedOp};
use vl_coll::launch::NodeRanks;
use vl_coll::mqlink::{gone_notice, QUEUES, QUEUE_DEPTH};
use vl_coll::{Comm, CommOpts};

fn port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn record(rank: u32, world: u32) -> RankRecord {
    RankRecord {
        rank,
        world_size: world,
        version: PROTOCOL_VERSION,
        host: format!("host{rank}"),
        host_hash: u64::from(rank),
        pid: 1000 + rank,
        local_rank: None,
        device: "rxe0".into(),
        cpu: Some(rank),
        lid: 0,
        gid: Gid::ZERO,
        mtu: 1024,
        left_qpn: 0x100 + rank,
        left_psn: 1,
        right_qpn: 0x200 + rank,
        right_psn: 2,
        slots: RemoteBuf {
            addr: 0x1000,
            rkey: 7,
            len: 4096,
        },
        slot_bytes: 512,
        nslots: 8,
        terms: vec![("-e".into(), "64".into()), ("-t".into(), "float".into())],
    }
}

const T: Duration = Duration::from_secs(10);

/// Runs ranks with the given records; rank 0's record is `records[0]`.
fn run(records: Vec<RankRecord>, timeout: Duration) -> Vec<Result<Vec<RankRecord>, CollError>> {
    let p = port();
    let hs: Vec<_> = records
        .into_iter()
        .map(|r| {
            thread::spawn(move || {
                rendezvous(r, Via::Tcp(("127.0.0.1", p)), timeout).map(|mut s| {
                    s.barrier().unwrap();
                    s.table().to_vec()
                })
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn every_rank_gets_the_same_table() {
    let out = run((0..5).map(|r| record(r, 5)).collect(), T);
    let want: Vec<RankRecord> = (0..5).map(|r| record(r, 5)).collect();
    for t in out {
        assert_eq!(t.unwrap(), want);
    }
}

fn rank0_error(out: &[Result<Vec<RankRecord>, CollError>]) -> String {
    out[0].as_ref().expect_err("rank 0 refuses").to_string()
}

#[test]
fn a_taken_master_port_names_the_collectives_options() {
    // Another job's rank 0 (or a second RANK=0) already listens on the master port.
    let taken = verbs_lab::oob::Listener::bind(0).unwrap();
    let e = rendezvous(record(0, 2), Via::Tcp(("127.0.0.1", taken.port())), T)
        .err()
        .expect("the port is taken")
        .to_string();
    assert!(
        e.contains(&format!("TCP port {}", taken.port()))
            && e.contains("--master HOST:PORT or MASTER_PORT")
            && !e.contains("-p"),
        "{e}"
    );
}

#[test]
fn a_wrong_world_size_is_refused_by_name() {
    let out = run(vec![record(0, 3), record(1, 3), record(2, 4)], T);
    let e = rank0_error(&out);
    assert!(
        e.contains("rank 2 (host host2, pid 1002") && e.contains("world size 4"),
        "{e}"
    );
    // The refused rank is told why.
    let e2 = out[2].as_ref().err().unwrap().to_string();
    assert!(
        e2.contains("rank 0 refused the job") && e2.contains("world size 4"),
        "{e2}"
    );
}

#[test]
fn a_duplicate_rank_is_refused_by_name() {
    let mut dup = record(1, 3);
    dup.host = "other".into();
    let out = run(vec![record(0, 3), record(1, 3), dup], T);
    let e = rank0_error(&out);
    assert!(e.contains("rank 1 joined twice"), "{e}");
}

#[test]
fn a_rank_that_finds_nobody_asks_whether_its_world_formed_without_it() {
    // Rank 0 closes its listener when its world is complete: a second "rank 1" started after
    // that finds the port closed, and is told the likely reason, not only "is it running?".
    let p = port();
    let e = match rendezvous(
        record(1, 2),
        Via::Tcp(("127.0.0.1", p)),
        Duration::from_secs(1),
    ) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a rendezvous with nobody listening succeeded"),
    };
    assert!(e.contains("rank 1 cannot reach rank 0: timed out"), "{e}");
    assert!(e.contains("was another process started as rank 1?"), "{e}");
}

/// A process of another build (another protocol version) is not a rank of this job: rank 0
/// tells it why and goes on waiting; the world it cannot form without the real rank 1 names
/// what it ignored meanwhile.
#[test]
fn another_protocol_version_is_told_and_ignored() {
    let mut old = record(1, 2);
    old.version = PROTOCOL_VERSION + 1;
    let out = run(vec![record(0, 2), old], Duration::from_secs(3));
    let e = rank0_error(&out);
    assert!(e.contains("rank 1 of 2 never reached the master"), "{e}");
    assert!(
        e.contains(&format!(
            "bootstrap protocol version {}",
            PROTOCOL_VERSION + 1
        )) && e.contains("were not ranks of this job were ignored"),
        "{e}"
    );
    let told = out[1].as_ref().err().unwrap().to_string();
    assert!(
        told.contains(&format!(
            "version {}, this build speaks version {PROTOCOL_VERSION}",
            PROTOCOL_VERSION + 1
        )),
        "{told}"
    );
}

/// Connects to the master port at `p` once it listens (rank 0 may not have bound it yet).
fn stranger(p: u16) -> std::net::TcpStream {
    for _ in 0..200 {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", p)) {
            return s;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("rank 0 never listened on port {p}");
}

/// The master port survives strangers: while four ranks meet, connections that are not ranks
/// — one that connects and closes, one that sends an HTTP request, one that sends a frame too
/// long for a record, a vl_* benchmark's client with its HELLO, one that sends half a record
/// and closes, and a trickler that sends two bytes and then nothing, holding its connection
/// open until the world has formed — are each dropped without ending the rendezvous, and
/// every rank gets the whole table. (Rank 0 reading the trickler alone, as it once did, would
/// have waited on it until its deadline and failed.)
#[test]
fn strangers_on_the_master_port_are_ignored_and_the_world_forms() {
    use std::io::Write;
    let p = port();
    let zero = thread::spawn(move || {
        rendezvous(record(0, 4), Via::Tcp(("127.0.0.1", p)), T).map(|mut s| {
            s.barrier().unwrap();
            s.table().to_vec()
        })
    });
    let mut trickler = stranger(p);
    trickler.write_all(&[0, 0]).unwrap();
    drop(stranger(p));
    stranger(p)
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    stranger(p).write_all(&u32::MAX.to_be_bytes()).unwrap();
    let mut hello = vec![1u8];
    hello.extend_from_slice(b"VLPT\x00\x01");
    let mut vl_client = stranger(p);
    vl_client
        .write_all(&verbs_lab::oob::frame(&hello, "a HELLO").unwrap())
        .unwrap();
    let rec = record(1, 4).encode();
    let framed = verbs_lab::oob::frame(&rec, "a record").unwrap();
    stranger(p).write_all(&framed[..framed.len() / 2]).unwrap();
    let ranks: Vec<_> = (1..4)
        .map(|r| {
            thread::spawn(move || {
                rendezvous(record(r, 4), Via::Tcp(("127.0.0.1", p)), T).map(|mut s| {
                    s.barrier().unwrap();
                    s.table().to_vec()
                })
            })
        })
        .collect();
    let want: Vec<RankRecord> = (0..4).map(|r| record(r, 4)).collect();
    assert_eq!(zero.join().unwrap().unwrap(), want);
    for r in ranks {
        assert_eq!(r.join().unwrap().unwrap(), want);
    }
    // The trickler was still connected the whole time.
    trickler.write_all(&[0]).ok();
    drop(vl_client);
}

/// A real rank that is wrong is still refused by name while strangers come and go.
#[test]
fn a_wrong_rank_among_strangers_is_still_refused_by_name() {
    let p = port();
    let zero = thread::spawn(move || rendezvous(record(0, 2), Via::Tcp(("127.0.0.1", p)), T).err());
    drop(stranger(p));
    let e1 = rendezvous(record(1, 3), Via::Tcp(("127.0.0.1", p)), T)
        .err()
        .unwrap()
        .to_string();
    let e0 = zero.join().unwrap().unwrap().to_string();
    assert!(e0.contains("world size 3"), "{e0}");
    assert!(
        e1.contains("rank 0 refused the job") && e1.contains("world size 3"),
        "{e1}"
    );
}

#[test]
fn a_rank_with_other_terms_is_refused_naming_the_option_and_both_values() {
    // Rank 2 in before the odd rank 1 arrives, or arriving with it (rank 0 accepts either
    // first): every rank is told.
    for (option, theirs, zeros, late) in [
        ("-e", "1048576", "64", 300),
        ("-t", "int32", "float", 300),
        ("-e", "1048576", "64", 0),
    ] {
        let mut other = record(1, 3);
        for t in other.terms.iter_mut().filter(|t| t.0 == option) {
            t.1 = theirs.into();
        }
        let p = port();
        let start = Instant::now();
        let hs: Vec<_> = [(record(0, 3), 0), (record(2, 3), 0), (other, late)]
            .into_iter()
            .map(|(rec, after)| {
                thread::spawn(move || {
                    thread::sleep(Duration::from_millis(after));
                    rendezvous(rec, Via::Tcp(("127.0.0.1", p)), T).err()
                })
            })
            .collect();
        let out: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(start.elapsed() < T, "refused at the rendezvous, not later");
        let why = format!(
            "rank 1 (host host1, pid 1001, rxe0) runs with {option} {theirs}, rank 0 with \
             {option} {zeros}: give every rank the same options"
        );
        let e0 = out[0].as_ref().expect("rank 0 refuses").to_string();
        assert_eq!(e0, format!("bootstrap failed: {why}"));
        for (i, rank) in [(1, 2), (2, 1)] {
            match &out[i] {
                Some(CollError::Bootstrap(e)) => {
                    assert_eq!(e, &format!("rank 0 refused the job: {why}"), "rank {rank}")
                }
                Some(e) => panic!("rank {rank}: {e}"),
                None => panic!("rank {rank} got a table"),
            }
        }
    }
}

#[test]
fn a_rank_whose_gid_is_ipv4_against_rank_0s_ipv6_is_refused_naming_both_gids() {
    // Rank 0 with -x 0 (the fe80:: link-local GID), rank 1 with -x 1 (the IPv4-mapped one):
    // before, both failed later at the QP connect with EINVAL. Both are refused here, in
    // either order of GIDs.
    let (v4, ll) = ("::ffff:192.168.77.2", "fe80::6cf8:28ff:fe65:d587");
    for (zeros, ones) in [(ll, v4), (v4, ll)] {
        let mut zero = record(0, 2);
        zero.gid = zeros.parse().unwrap();
        let mut one = record(1, 2);
        one.gid = ones.parse().unwrap();
        let (zip, oip) = (zero.gid.to_ip(), one.gid.to_ip());
        let out = run(vec![zero, one], T);
        let e0 = rank0_error(&out);
        assert!(
            e0.starts_with(&format!(
                "bootstrap failed: rank 1 (host host1, pid 1001, rxe0) uses GID {oip} ("
            )) && e0.contains(&format!("rank 0 (host host0, pid 1000, rxe0) GID {zip} ("))
                && e0.contains("give every rank a GID index of the same kind with -x"),
            "{e0}"
        );
        let e1 = out[1].as_ref().expect_err("rank 1 is told").to_string();
        assert_eq!(
            e1,
            e0.replace(
                "bootstrap failed: ",
                "bootstrap failed: rank 0 refused the job: "
            )
        );
    }
    // Two IPv4 GIDs in different subnets, two IPv6 GIDs: the table.
    for (zeros, ones) in [
        ("::ffff:192.168.77.1", "::ffff:10.0.0.2"),
        ("fe80::1", "2001:db8::2"),
    ] {
        let mut zero = record(0, 2);
        zero.gid = zeros.parse().unwrap();
        let mut one = record(1, 2);
        one.gid = ones.parse().unwrap();
        for t in run(vec![zero, one], T) {
            assert!(t.is_ok(), "{zeros} and {ones}: {}", t.unwrap_err());
        }
    }
}

#[test]
fn a_missing_rank_is_named_within_the_timeout() {
    let start = Instant::now();
    let out = run(vec![record(0, 3), record(1, 3)], Duration::from_secs(2));
    assert!(start.elapsed() < Duration::from_secs(8));
    let e = rank0_error(&out);
    assert!(e.contains("rank 2 of 3 never reached the master"), "{e}");
    let e1 = out[1].as_ref().err().unwrap().to_string();
    assert!(e1.contains("rank 2"), "{e1}");
}

/// Rank `r`'s star checked every few milliseconds until it names a rank gone (bounded by `T`).
fn first_error(s: &mut Star, r: u32) -> CollError {
    let start = Instant::now();
    loop {
        if let Err(e) = s.check_alive() {
            return e;
        }
        assert!(start.elapsed() < T, "rank {r} never noticed");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_rank_that_dies_is_named_to_the_others() {
    let p = port();
    let hs: Vec<_> = (0..3)
        .map(|r| {
            thread::spawn(move || {
                let mut s = rendezvous(record(r, 3), Via::Tcp(("127.0.0.1", p)), T).unwrap();
                if r == 2 {
                    drop(s); // closes its socket, as a killed process would
                    return None;
                }
                s.set_timeout(T);
                Some(first_error(&mut s, r))
            })
        })
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        if let Some(e) = h.join().unwrap() {
            match &e {
                CollError::RankGone { rank, who, .. } => {
                    assert_eq!(*rank, 2, "rank {r}: {e}");
                    assert!(who.contains("host host2"), "{e}");
                }
                other => panic!("rank {r}: {other}"),
            }
        }
    }
}

/// Rank 0 finds rank 2 gone and tells rank 1, which ends and closes its socket too. Rank 0's
/// later checks (a collective that failed asks once more who is gone) must still name rank 2,
/// not rank 1, whose socket closed because of it.
#[test]
fn the_first_rank_gone_stays_the_one_named() {
    let p = port();
    let (closed_tx, closed_rx) = std::sync::mpsc::channel();
    let hs: Vec<_> = (0..3)
        .map(|r| {
            let closed_tx = closed_tx.clone();
            thread::spawn(move || {
                let mut s = rendezvous(record(r, 3), Via::Tcp(("127.0.0.1", p)), T).unwrap();
                if r == 2 {
                    drop(s); // closes its socket, as a killed process would
                    return None;
                }
                let e = first_error(&mut s, r);
                if r == 1 {
                    drop(s); // ends on rank 0's word, closing its socket
                    closed_tx.send(()).unwrap();
                    return None;
                }
                Some((e, s))
            })
        })
        .collect();
    let mut hs = hs.into_iter();
    let (first, mut s0) = hs.next().unwrap().join().unwrap().expect("rank 0's error");
    for h in hs {
        h.join().unwrap();
    }
    closed_rx.recv_timeout(T).expect("rank 1 ended");
    // Rank 1's socket is closed now; give its FIN time to reach rank 0.
    thread::sleep(Duration::from_millis(100));
    let later = s0.check_alive().expect_err("a rank is still gone");
    for e in [&first, &later] {
        match e {
            CollError::RankGone { rank, .. } => assert_eq!(*rank, 2, "{e}"),
            other => panic!("{other}"),
        }
    }
}

/// Rank 1 gives up waiting for rank 0 (its timeout ran out while rank 0 was busy in a step rank
/// 1 never took) and says so: rank 0, alive, must not report itself as the rank that is gone.
#[test]
fn a_rank_blamed_by_another_does_not_call_itself_gone() {
    let p = port();
    let hs: Vec<_> = (0..2)
        .map(|r| {
            thread::spawn(move || {
                let mut s = rendezvous(record(r, 2), Via::Tcp(("127.0.0.1", p)), T).unwrap();
                if r == 1 {
                    let who = s.table()[0].who();
                    s.abort(&CollError::RankGone {
                        rank: 0,
                        who,
                        detail: "silent for 30 s while we waited for a broadcast from rank 0"
                            .into(),
                    });
                    thread::sleep(Duration::from_millis(200));
                    return None;
                }
                Some(first_error(&mut s, r))
            })
        })
        .collect();
    let mut hs = hs.into_iter();
    let e = hs.next().unwrap().join().unwrap().expect("rank 0's error");
    hs.next().unwrap().join().unwrap();
    match &e {
        CollError::Failed(m) => assert_eq!(
            m,
            "rank 1 (host host1, pid 1001, rxe0) gave up waiting for rank 0 (host host0, pid \
             1000, rxe0), which is still running (it says: silent for 30 s while we waited for a \
             broadcast from rank 0); the two were not at the same step of the job — check that \
             every rank was given the same options"
        ),
        other => panic!("rank 0 reports {other}"),
    }
    assert!(!e.to_string().contains("is gone"), "{e}");
}

#[test]
fn records_round_trip_and_garbage_is_refused() {
    let r = record(3, 4);
    assert_eq!(RankRecord::decode(&r.encode()).unwrap(), r);
    assert!(RankRecord::decode(b"GET / HTTP/1.1")
        .unwrap_err()
        .contains("bad magic"));
    let mut b = r.encode();
    b.pop();
    assert!(RankRecord::decode(&b).unwrap_err().contains("truncated"));
}

#[test]
fn world_size_one_runs_every_collective_without_a_nic() {
    let info = resolve(&RankFlags::default(), &|_| None).unwrap();
    let mut c = Comm::init(
        info,
        &CommOpts {
            max_bytes: 4096,
            ..Default::default()
        },
    )
    .unwrap();
    let (t, op) = (DataType::I64, RedOp::Max);
    let mut v = vec![0u8; 800];
    fill_input(t, op, 0, 0, &mut v);
    c.write_input(0, &v);
    c.all_reduce(t, op, 100, false).unwrap();
    assert_eq!(
        count_wrong(t, 0, &c.read_output(0..800), |i| expected_value(
            t, op, 1, i
        )),
        0
    );
    c.reduce_scatter(t, op, 100, true).unwrap();
    c.all_gather(t, 100, false).unwrap();
    c.broadcast(t, 100, 0, true).unwrap();
    c.sendrecv(t, 100).unwrap();
    assert_eq!(&c.read_output(0..800), &c.read_input(0..800));
    let e = c.all_reduce(t, op, 1000, true).unwrap_err();
    assert!(e.to_string().contains("do not fit"), "{e}");
    let e = c.broadcast(t, 10, 1, true).unwrap_err();
    assert!(e.to_string().contains("root 1"), "{e}");
    c.finish().unwrap();
}

/// Fresh queues for `world` ranks, as the launcher makes them (not the launcher's name pattern,
/// so that no launcher's orphan sweep takes them for its own).
fn queues(world: u32) -> (String, Vec<Queue>) {
    static N: AtomicU32 = AtomicU32::new(0);
    let base = format!(
        "/vl-colltest-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let qs = QUEUES
        .all(&base, world)
        .iter()
        .map(|n| Queue::create(n, QUEUE_DEPTH, MAX_MSG_LEN).unwrap())
        .collect();
    (base, qs)
}

fn gone_from_dev_mqueue(names: &[String]) -> bool {
    names
        .iter()
        .all(|n| !std::path::Path::new(&format!("/dev/mqueue{n}")).exists())
}

#[test]
fn table_and_long_gathers_arrive_whole_and_the_queues_go() {
    let world = 4;
    let (base, qs) = queues(world);
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let base = base.clone();
            thread::spawn(move || {
                let mut s = rendezvous(record(r, world), Via::Queues(&base), T).unwrap();
                s.barrier().unwrap();
                // Three queue messages' worth from each rank, different per rank.
                let mine: Vec<u8> = (0..20_000u32).map(|i| (i * (r + 1)) as u8).collect();
                let all = s.gather(&mine).unwrap();
                let back = s.broadcast(&[r as u8; 9000]).unwrap();
                s.barrier().unwrap();
                (s.table().to_vec(), all, back)
            })
        })
        .collect();
    let want: Vec<RankRecord> = (0..world).map(|r| record(r, world)).collect();
    for (r, h) in hs.into_iter().enumerate() {
        let (table, all, back) = h.join().unwrap();
        assert_eq!(table, want, "rank {r}");
        assert_eq!(back, vec![0u8; 9000], "rank {r} got rank 0's broadcast");
        if r == 0 {
            let all = all.expect("rank 0 gathers");
            for (from, got) in all.iter().enumerate() {
                let expect: Vec<u8> = (0..20_000u32)
                    .map(|i| (i * (from as u32 + 1)) as u8)
                    .collect();
                assert_eq!(got, &expect, "from rank {from}");
            }
        } else {
            assert!(all.is_none());
        }
    }
    let names = QUEUES.all(&base, world);
    drop(qs);
    assert!(gone_from_dev_mqueue(&names), "{names:?} left behind");
}

#[test]
fn the_launchers_notice_names_the_rank_that_ended() {
    let world = 3;
    let (base, qs) = queues(world);
    let hs: Vec<_> = (0..world - 1)
        .map(|r| {
            let base = base.clone();
            thread::spawn(move || {
                let mut s = rendezvous(record(r, world), Via::Queues(&base), T).unwrap();
                let start = Instant::now();
                let e = first_error(&mut s, r);
                (e, start.elapsed())
            })
        })
        .collect();
    // Rank 2 joins and "dies": the launcher tells the others.
    let s2 = rendezvous(record(2, world), Via::Queues(&base), T).unwrap();
    drop(s2);
    let notice = gone_notice(2, "pid 1002 was killed by SIGKILL");
    for q in &qs[..2] {
        q.send_timeout(&notice, 0, T).unwrap();
    }
    for (r, h) in hs.into_iter().enumerate() {
        let (e, _) = h.join().unwrap();
        match &e {
            CollError::RankGone { rank, who, detail } => {
                assert_eq!(*rank, 2, "rank {r}: {e}");
                assert!(who.contains("host host2"), "{e}");
                assert!(detail.contains("SIGKILL"), "{e}");
            }
            other => panic!("rank {r}: {other}"),
        }
    }
}

#[test]
fn a_missing_rank_is_named_within_the_bound() {
    let world = 3;
    let (base, _qs) = queues(world);
    let start = Instant::now();
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let base = base.clone();
            thread::spawn(move || {
                rendezvous(record(r, world), Via::Queues(&base), Duration::from_secs(2))
            })
        })
        .collect();
    let out: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(start.elapsed() < Duration::from_secs(12));
    let e0 = out[0].as_ref().err().expect("rank 0 fails").to_string();
    assert!(e0.contains("rank 2 of 3 sent no endpoint record"), "{e0}");
    let e1 = out[1].as_ref().err().expect("rank 1 is told").to_string();
    assert!(
        e1.contains("rank 0 refused the job") && e1.contains("rank 2"),
        "{e1}"
    );
}

// ---------------------------------------------------------------------------------------------
// Local ranks from the host names, and the second round

/// Rank `rank` of `world` before it has a device, on the host `host` (name and hash).
fn who(rank: u32, world: u32, host: &str, local_rank: Option<u32>) -> RankRecord {
    RankRecord {
        host: host.into(),
        host_hash: host_hash(host, "boot-id-of-the-test"),
        local_rank,
        device: NO_DEVICE.into(),
        cpu: None,
        gid: Gid::ZERO,
        ..record(rank, world)
    }
}

/// Runs the first round for `records` over TCP or over fresh queues; each rank's place, or its
/// error.
fn places_of(records: Vec<RankRecord>, queues_too: bool) -> Vec<Result<Place, String>> {
    let world = records.len() as u32;
    let p = port();
    let (base, _qs) = queues(world);
    let hs: Vec<_> = records
        .into_iter()
        .map(|rec| {
            let base = base.clone();
            thread::spawn(move || {
                let via = if queues_too {
                    Via::Queues(&base)
                } else {
                    Via::Tcp(("127.0.0.1", p))
                };
                rendezvous(rec, via, T)
                    .map(|s| s.place())
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

fn place(local_rank: u32, local_size: u32, hosts: u32, given: bool) -> Result<Place, String> {
    Ok(Place {
        local_rank,
        local_size,
        hosts,
        given,
    })
}

#[test]
fn ranks_on_two_hosts_count_each_other_in_rank_order_without_a_launchers_local_rank() {
    // The two-guest check of issue 34: ranks 0 and 2 on one host, 1 and 3 on the other, with
    // RANK/WORLD_SIZE/MASTER_* and no LOCAL_RANK. Each pair must get local ranks 0 and 1.
    for queues_too in [false, true] {
        let hosts = ["node1", "node2", "node1", "node2"];
        let recs = (0..4).map(|r| who(r, 4, hosts[r as usize], None)).collect();
        assert_eq!(
            places_of(recs, queues_too),
            [
                place(0, 2, 2, false),
                place(0, 2, 2, false),
                place(1, 2, 2, false),
                place(1, 2, 2, false)
            ],
            "over queues: {queues_too}"
        );
    }
    // Three hosts, unevenly: 0, 3, 4 on a; 1 on b; 2, 5 on c.
    let hosts = ["a", "b", "c", "a", "a", "c"];
    let recs = (0..6).map(|r| who(r, 6, hosts[r as usize], None)).collect();
    let got: Vec<(u32, u32)> = places_of(recs, false)
        .into_iter()
        .map(|p| p.map(|p| (p.local_rank, p.local_size)).unwrap())
        .collect();
    assert_eq!(got, [(0, 3), (0, 1), (0, 2), (1, 3), (2, 3), (1, 2)]);
}

#[test]
fn ranks_on_one_host_count_each_other_and_a_boot_id_tells_twin_host_names_apart() {
    let recs = (0..3).map(|r| who(r, 3, "guest", None)).collect();
    assert_eq!(
        places_of(recs, false),
        [
            place(0, 3, 1, false),
            place(1, 3, 1, false),
            place(2, 3, 1, false)
        ]
    );
    // Two machines that both say "debian": their boot ids differ, so they are two hosts.
    let mut recs: Vec<RankRecord> = (0..2).map(|r| who(r, 2, "debian", None)).collect();
    recs[1].host_hash = host_hash("debian", "another boot");
    assert_eq!(
        places_of(recs, false),
        [place(0, 1, 2, false), place(0, 1, 2, false)]
    );
    // The hash is the same on every build: FNV-1a of the name, a newline and the boot id.
    assert_eq!(host_hash("node1", "b"), host_hash(" node1\n", "b\n"));
    assert_eq!(host_hash("", ""), 0xaf63_c74c_8601_c8dd);
}

#[test]
fn a_launchers_local_rank_stays_the_ranks_own() {
    // Open MPI numbering a host's ranks its own way: its numbers win over the count.
    let given = [1, 0, 0, 1];
    let hosts = ["a", "a", "b", "b"];
    let recs = (0..4)
        .map(|r| who(r, 4, hosts[r as usize], Some(given[r as usize])))
        .collect();
    assert_eq!(
        places_of(recs, true),
        [
            place(1, 2, 2, true),
            place(0, 2, 2, true),
            place(0, 2, 2, true),
            place(1, 2, 2, true)
        ]
    );
}

#[test]
fn two_ranks_of_one_host_with_one_local_rank_are_refused_naming_both() {
    // LOCAL_RANK=0 exported by hand for both ranks of a host.
    let recs = vec![
        who(0, 3, "node1", Some(0)),
        who(1, 3, "node2", Some(0)),
        who(2, 3, "node1", Some(0)),
    ];
    let why = "rank 0 (host node1, pid 1000) and rank 2 (host node1, pid 1002) run on one host \
               with the same local rank 0 (rank 0's given by its launcher, rank 2's given by its \
               launcher): both would pin themselves to one CPU and take one device — give every \
               rank of a host its own local rank (LOCAL_RANK, --local-rank; --nnodes: one \
               launcher per host), or give none and let the rendezvous count the ranks of each \
               host";
    let out = places_of(recs, false);
    assert_eq!(out[0], Err(format!("bootstrap failed: {why}")));
    for r in [1, 2] {
        assert_eq!(
            out[r],
            Err(format!("bootstrap failed: rank 0 refused the job: {why}")),
            "rank {r}"
        );
    }
    // One rank given local rank 1, the other counted as 1 on the same host.
    let recs = vec![who(0, 2, "h", Some(1)), who(1, 2, "h", None)];
    let e = places_of(recs, true)[0].clone().unwrap_err();
    assert!(
        e.contains("same local rank 1 (rank 0's given by its launcher, rank 1's counted from the host names)"),
        "{e}"
    );
}

/// `--rank R --world-size W --local-rank I`, as a launcher gives them to a child, read back.
fn child_flags(flags: &[String; 6]) -> RankFlags {
    let value = |name: &str| {
        let at = flags.iter().position(|f| f == name).expect(name);
        Some(flags[at + 1].parse().expect("a number"))
    };
    RankFlags {
        rank: value("--rank"),
        world_size: value("--world-size"),
        local_rank: value("--local-rank"),
        master: Some("127.0.0.1:29500".into()),
    }
}

#[test]
fn the_ranks_of_two_node_launchers_meet_as_one_world_one_launcher_per_host() {
    // --np 2 --nnodes 2 --node-rank 0 on node1 and --node-rank 1 on node2: each child resolves
    // its flags, and the four meet at rank 0 as ranks 0..3 with the launchers' local ranks.
    let ranks_of = |hosts: [&'static str; 2]| -> Vec<RankRecord> {
        (0..2)
            .flat_map(|k| {
                let node = NodeRanks::new(2, 2, k).unwrap();
                (0..2).map(move |i| {
                    let info = resolve(&child_flags(&node.rank_flags(i)), &|_| None).unwrap();
                    who(
                        info.rank,
                        info.world_size,
                        hosts[k as usize],
                        info.local_rank,
                    )
                })
            })
            .collect()
    };
    assert_eq!(
        places_of(ranks_of(["node1", "node2"]), false),
        [
            place(0, 2, 2, true),
            place(1, 2, 2, true),
            place(0, 2, 2, true),
            place(1, 2, 2, true)
        ]
    );
    // Both launchers on one host give their ranks the same local ranks: refused, naming them.
    let e = places_of(ranks_of(["guest", "guest"]), false)[0]
        .clone()
        .unwrap_err();
    assert!(
        e.contains(
            "rank 0 (host guest, pid 1000) and rank 2 (host guest, pid 1002) run on one host \
             with the same local rank 0"
        ) && e.contains("--nnodes: one launcher per host"),
        "{e}"
    );
}

/// Both rounds for `records` (first as they are, then with `second`'s endpoints): each rank's
/// table, or its error.
fn two_rounds(
    first: Vec<RankRecord>,
    second: Vec<RankRecord>,
) -> Vec<Result<Vec<RankRecord>, String>> {
    let p = port();
    let hs: Vec<_> = first
        .into_iter()
        .zip(second)
        .map(|(a, b)| {
            thread::spawn(move || {
                let mut s =
                    rendezvous(a, Via::Tcp(("127.0.0.1", p)), T).map_err(|e| e.to_string())?;
                s.complete(b).map_err(|e| e.to_string())?;
                s.barrier().map_err(|e| e.to_string())?;
                Ok(s.table().to_vec())
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Rank `r`'s record of the second round: its first, with a device, GID and endpoints.
fn endpoints(first: &RankRecord, gid: &str) -> RankRecord {
    RankRecord {
        device: "rxe0".into(),
        cpu: Some(first.rank),
        gid: gid.parse().unwrap(),
        ..first.clone()
    }
}

#[test]
fn the_second_round_brings_every_ranks_endpoints_and_refuses_gids_of_two_families() {
    let first: Vec<RankRecord> = (0..3).map(|r| who(r, 3, "guest", None)).collect();
    let second: Vec<RankRecord> = first
        .iter()
        .map(|f| endpoints(f, &format!("::ffff:192.168.77.{}", f.rank + 1)))
        .collect();
    for t in two_rounds(first.clone(), second.clone()) {
        assert_eq!(t.unwrap(), second);
    }
    // Rank 2 with a link-local IPv6 GID against rank 0's IPv4 one: the words of the first
    // round's check, told to every rank.
    let mut second = second;
    second[2].gid = "fe80::2".parse().unwrap();
    let out = two_rounds(first, second);
    let why = "rank 2 (host guest, pid 1002, rxe0) uses GID fe80::2 (IPv6), rank 0 (host guest, \
               pid 1000, rxe0) GID 192.168.77.1 (IPv4): an IPv4 and an IPv6 GID cannot address \
               each other";
    let e0 = out[0].as_ref().unwrap_err();
    assert!(e0.starts_with(&format!("bootstrap failed: {why}")), "{e0}");
    for r in [1, 2] {
        let e = out[r].as_ref().unwrap_err();
        assert!(
            e.starts_with(&format!("bootstrap failed: rank 0 refused the job: {why}")),
            "rank {r}: {e}"
        );
    }
}

#[test]
fn a_rank_that_fails_between_the_rounds_is_named_to_the_others_at_once() {
    // Rank 1 cannot open its device: it says so on the star instead of leaving the others to
    // wait for its record until their timeout.
    let p = port();
    let start = Instant::now();
    let hs: Vec<_> = (0..3)
        .map(|r| {
            thread::spawn(move || {
                let first = who(r, 3, "guest", None);
                let mut s = rendezvous(first.clone(), Via::Tcp(("127.0.0.1", p)), T).unwrap();
                if r == 1 {
                    s.abort(&CollError::Failed("no RDMA device".into()));
                    thread::sleep(Duration::from_millis(200));
                    return None;
                }
                Some(
                    s.complete(endpoints(&first, "::ffff:10.0.0.1"))
                        .unwrap_err(),
                )
            })
        })
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        if let Some(e) = h.join().unwrap() {
            assert!(
                e.to_string().starts_with(
                    "rank 1 (host guest, pid 1001) is gone: it failed: no RDMA device"
                ),
                "rank {r}: {e}"
            );
        }
    }
    assert!(start.elapsed() < T / 2, "named at once");
}

/// A rank of `world` over TCP that runs `body` on its star, or — the rank in `dead` — holds
/// its socket open and reads nothing until `release` says the test is over, as a process that
/// was stopped or whose host lost power (no FIN ever comes from it).
fn cascade(world: u32, dead: u32, body: fn(u32, &mut Star) -> CollError) -> Vec<(u32, CollError)> {
    let p = port();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let mut release_rx = Some(release_rx);
    let hs: Vec<_> = (0..world)
        .map(|r| {
            let release = if r == dead { release_rx.take() } else { None };
            thread::spawn(move || {
                let mut s = rendezvous(record(r, world), Via::Tcp(("127.0.0.1", p)), T).unwrap();
                s.set_timeout(T);
                if let Some(release) = release {
                    let _ = release.recv_timeout(T * 6);
                    return None;
                }
                Some((r, body(r, &mut s)))
            })
        })
        .collect();
    let mut hs: Vec<_> = hs.into_iter().map(Some).collect();
    let stopped = hs[dead as usize].take().expect("the dead rank's thread");
    let out = hs
        .into_iter()
        .flatten()
        .map(|h| h.join().unwrap().expect("a live rank's error"))
        .collect();
    release_tx.send(()).unwrap();
    stopped.join().unwrap();
    out
}

/// The rank every surviving rank ends naming.
fn named(out: &[(u32, CollError)]) -> Vec<(u32, u32)> {
    out.iter()
        .map(|(r, e)| match e {
            CollError::RankGone { rank, .. } => (*r, *rank),
            other => panic!("rank {r} ends with {other}"),
        })
        .collect()
}

/// The cascade of a ring whose rank 2 went without a FIN: rank 3 (its right neighbour) waits
/// for data from it, rank 0 waits for rank 3 and rank 1 for rank 0, and their peer timeouts run
/// out at about the same time — the two wrong reports first here. Every rank names rank 2: rank
/// 0 pings each suspect, the live ones answer (rank 3 from its pump's idle checks), rank 2 does
/// not.
#[test]
fn a_rank_gone_without_a_fin_is_named_by_every_rank_not_its_stalled_neighbours() {
    let out = cascade(4, 2, |r, s| {
        if r == 3 {
            // Its pump looks at the star while it waits, and its timeout runs out a little later.
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                if let Err(e) = s.check_alive() {
                    return e;
                }
                thread::sleep(Duration::from_millis(10));
            }
            return s.verdict(2, "no data from it for 20 s (the peer timeout)");
        }
        let left = (r + 3) % 4;
        s.verdict(left, "no data from it for 20 s (the peer timeout)")
    });
    assert_eq!(named(&out), vec![(0, 2), (1, 2), (3, 2)]);
    for (r, e) in &out {
        let e = e.to_string();
        assert!(
            e.starts_with("rank 2 (host host2, pid 1002, rxe0) is gone: "),
            "rank {r}: {e}"
        );
        assert!(
            e.contains("did not answer") && e.contains("within 3 s"),
            "rank {r}: {e}"
        );
    }
    let e = out[0].1.to_string();
    assert!(
        e.ends_with(
            "no data from it for 20 s (the peer timeout), reported rank 3, and it did not answer \
             rank 0's ping within 3 s"
        ),
        "{e}"
    );
}

/// Rank 0's host went: every rank's star connection is silent. Each rank reports its silent
/// neighbour to rank 0, hears no verdict within the bound, and names rank 0.
#[test]
fn when_rank_0_goes_without_a_fin_every_rank_names_rank_0() {
    let out = cascade(3, 0, |r, s| {
        s.verdict(r - 1, "no data from it for 20 s (the peer timeout)")
    });
    assert_eq!(named(&out), vec![(1, 0), (2, 0)]);
    let one = out[0].1.to_string();
    assert!(
        one.starts_with("rank 0 (host host0, pid 1000, rxe0) is gone: no data from it for 20 s")
            && one.contains("no answer on the star within 5 s"),
        "{one}"
    );
    assert_eq!(
        out[1].1.to_string(),
        "rank 0 (host host0, pid 1000, rxe0) is gone: it gave no verdict within 5 s on our \
         report that rank 1 (host host1, pid 1001, rxe0) was silent (no data from it for 20 s \
         (the peer timeout)): its star connection is silent too"
    );
}

/// Nobody is gone: rank 1 reports rank 0, which answers; no rank is found gone within the bound,
/// and rank 1 says that the ranks wait on each other instead of calling a live rank gone.
#[test]
fn a_silent_neighbour_that_is_alive_is_not_called_gone() {
    let p = port();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let zero = thread::spawn(move || {
        let mut s = rendezvous(record(0, 2), Via::Tcp(("127.0.0.1", p)), T).unwrap();
        while done_rx.try_recv().is_err() {
            s.check_alive().expect("nobody is gone while rank 1 waits");
            thread::sleep(Duration::from_millis(10));
        }
    });
    let mut s = rendezvous(record(1, 2), Via::Tcp(("127.0.0.1", p)), T).unwrap();
    let e = s.verdict(
        0,
        "no credits or acknowledgements from it for 20 s (the peer timeout)",
    );
    done_tx.send(()).unwrap();
    zero.join().unwrap();
    match &e {
        CollError::Failed(m) => assert_eq!(
            m,
            "no credits or acknowledgements from it for 20 s (the peer timeout), said of rank 0 \
             (host host0, pid 1000, rxe0); yet it is alive (it answered rank 0), and no rank was \
             found gone within 5 s: the ranks wait on each other — check that every rank runs \
             the same collectives with the same options"
        ),
        other => panic!("rank 1 reports {other}"),
    }
}
