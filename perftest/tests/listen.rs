//! The server's accept loop, fed what a hostile network sends before the real client: a
//! connect-and-close, garbage, a perftest client, a silent connection, a HELLO that trickles.
//! Each is dropped with one line and the server goes on waiting; the real client is then
//! accepted, and a second client is turned away while the first one's run lasts. Also the
//! bounds on a peer that is alive but stuck: heartbeats alone end a wait at the phase limit.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use verbs_lab::oob;
use vl_perftest::conn::listen::{accept_client, server_hello, Greeting, HELLO_WAIT};
use vl_perftest::events::RunFault;
use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::params::{Config, Params, Tool};
use vl_perftest::proto::{encode, ChanError, Channel, Msg};
use vl_perftest::run::our_hello;

const WRITE_BW: Tool = Tool::new(TestKind::Write, Metric::Bw);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn config(args: &str) -> Config {
    let argv = std::iter::once(WRITE_BW.name()).chain(args.split_whitespace().map(String::from));
    let p = Params::try_parse_for(WRITE_BW, argv).unwrap();
    Config::new(WRITE_BW, &p).unwrap()
}

/// What the server answers a client that sends `hello` (None: nothing, just wait).
fn client(port: u16, hello: Option<Vec<u8>>) -> Result<Msg, ChanError> {
    let conn = oob::connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
    let mut ch = Channel::new(conn, "server");
    ch.set_timeout(Duration::from_secs(10)).unwrap();
    if let Some(h) = hello {
        ch.send(&vl_perftest::proto::decode(&h).unwrap())?;
    }
    ch.recv("the server's answer")
}

#[test]
fn strays_are_dropped_and_the_real_client_is_served() {
    let port = free_port();
    let server_cfg = config(&format!("-p {port} --bind 127.0.0.1 --wait 60 -n 5"));
    let client_cfg = config(&format!("-p {port} -n 5 127.0.0.1"));
    let hello = encode(&Msg::Hello(our_hello(&client_cfg)));
    let strays = std::thread::spawn(move || {
        use std::io::Write;
        let addr = ("127.0.0.1", port);
        // Connect and close at once (a port scan).
        let s = loop {
            match std::net::TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        drop(s);
        // Garbage in a well-formed frame; a perftest client's opening text.
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(&[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef]).unwrap();
        let mut s2 = std::net::TcpStream::connect(addr).unwrap();
        s2.write_all(b"0000:000011:abcdef:00000000:").unwrap();
        // A silent connection: the server waits HELLO_WAIT for it, no longer.
        let silent = std::net::TcpStream::connect(addr).unwrap();
        std::thread::sleep(HELLO_WAIT + Duration::from_millis(500));
        drop((s, s2, silent));
        // The real client.
        let got = client(port, Some(hello.clone()));
        assert!(matches!(got, Ok(Msg::Accept(_))), "{got:?}");
        // A second client while the first one's run lasts: refused, and told why.
        let second = client(port, Some(hello));
        match second {
            Err(ChanError::Peer(p)) => assert!(p.text.contains("busy"), "{}", p.text),
            other => panic!("the second client got {other:?}"),
        }
    });
    let start = Instant::now();
    let mut listened = false;
    let accepted = accept_client(
        &server_cfg,
        &our_hello(&server_cfg),
        Duration::from_secs(10),
        || listened = true,
        &RunFault::default(),
    )
    .expect("the real client is accepted after the strays");
    assert!(listened, "the server never said it listens (the banner)");
    assert!(
        start.elapsed() >= HELLO_WAIT,
        "the silent stray was waited for"
    );
    assert_eq!(
        accepted.ch.peer_addr().ip(),
        std::net::IpAddr::from([127, 0, 0, 1])
    );
    strays.join().unwrap();
    drop(accepted);
}

#[test]
fn nothing_but_strays_ends_at_wait() {
    let port = free_port();
    let cfg = config(&format!("-p {port} --bind 127.0.0.1 --wait 2"));
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(std::net::TcpStream::connect(("127.0.0.1", port)).unwrap());
    });
    let start = Instant::now();
    let e = accept_client(
        &cfg,
        &our_hello(&cfg),
        Duration::from_secs(5),
        || {},
        &RunFault::default(),
    )
    .err()
    .expect("no client");
    assert!(format!("{e:#}").contains("a client to connect"), "{e:#}");
    // The whole --wait, not the slice after which the server looks at its device.
    assert!(format!("{e:#}").contains("timed out after 2 s"), "{e:#}");
    assert!(start.elapsed() < Duration::from_secs(4));
    t.join().unwrap();
}

#[test]
fn a_hello_with_other_parameters_is_refused_with_the_difference() {
    let port = free_port();
    let cfg = config(&format!("-p {port} -s 4096"));
    let other = config(&format!("-p {port} -s 8192 127.0.0.1"));
    let hello = encode(&Msg::Hello(our_hello(&other)));
    let t = std::thread::spawn(move || client(port, Some(hello)));
    let conn = oob::accept(port, Duration::from_secs(10)).unwrap();
    let mut ch = Channel::new(conn, "client");
    let e = server_hello(&our_hello(&cfg), &mut ch, || Ok(())).unwrap_err();
    assert!(format!("{e:#}").contains("4096"), "{e:#}");
    match t.join().unwrap() {
        Err(ChanError::Peer(p)) => assert!(p.text.contains("8192"), "{}", p.text),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stray_that_closes_is_named() {
    let port = free_port();
    let cfg = config(&format!("-p {port}"));
    let t = std::thread::spawn(move || {
        drop(oob::connect("127.0.0.1", port, Duration::from_secs(10)).unwrap());
    });
    let conn = oob::accept(port, Duration::from_secs(10)).unwrap();
    let mut ch = Channel::new(conn, "client");
    match server_hello(&our_hello(&cfg), &mut ch, || Ok(())).unwrap() {
        Greeting::Stray(why) => assert!(why.contains("closed"), "{why}"),
        Greeting::Accepted(_) => panic!("accepted a stray"),
    }
    t.join().unwrap();
}

/// A peer that sends heartbeats forever but never the awaited message.
fn heartbeats_only(port: u16, stop: std::sync::mpsc::Receiver<()>) {
    let mut c = oob::connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
    while stop.try_recv().is_err() {
        if c.send_msg(&encode(&Msg::Heartbeat), "beat").is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn heartbeats_alone_end_a_wait_at_the_phase_limit() {
    let port = free_port();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || heartbeats_only(port, stop_rx));
    let conn = oob::accept(port, Duration::from_secs(10)).unwrap();
    let mut ch = Channel::new(conn, "client");
    ch.set_timeout(Duration::from_secs(5)).unwrap();
    ch.set_phase_limit(Duration::from_millis(600));
    let start = Instant::now();
    let e = ch.sync(vl_perftest::proto::Phase::Ready, 64).unwrap_err();
    assert!(matches!(e, ChanError::Stalled { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("ready barrier") && text.contains("only heartbeats"),
        "{text}"
    );
    assert!(start.elapsed() < Duration::from_secs(2));

    // The same for a tally awaited by a running loop.
    let mut watch = vl_perftest::engine::PeerWatch::new(vl_perftest::proto::Phase::Measure, 64);
    let start = Instant::now();
    let e = watch.wait_tally(&mut ch).unwrap_err();
    assert!(format!("{e:#}").contains("tally of the measure"), "{e:#}");
    assert!(start.elapsed() < Duration::from_secs(2));
    let _ = stop_tx.send(());
    t.join().unwrap();
}

#[test]
fn a_half_frame_never_blocks_the_running_loop() {
    let port = free_port();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let mut c = oob::connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        let beat = encode(&Msg::Heartbeat);
        let mut frame = (beat.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&beat);
        // Two bytes of a frame, then nothing until told.
        c.send_raw(&frame[..2], "half").unwrap();
        go_rx.recv().unwrap();
    });
    let conn = oob::accept(port, Duration::from_secs(10)).unwrap();
    let mut ch = Channel::new(conn, "client");
    ch.set_timeout(Duration::from_millis(400)).unwrap();
    let mut watch = vl_perftest::engine::PeerWatch::new(vl_perftest::proto::Phase::Measure, 64);
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    watch
        .check(&mut ch, Instant::now() + Duration::from_secs(1))
        .unwrap();
    assert!(t0.elapsed() < Duration::from_millis(50), "check blocked");
    std::thread::sleep(Duration::from_millis(450));
    let e = watch
        .check(&mut ch, Instant::now() + Duration::from_secs(2))
        .unwrap_err();
    assert!(format!("{e:#}").contains("the rest of"), "{e:#}");
    go_tx.send(()).unwrap();
    t.join().unwrap();
}

#[test]
fn the_phase_limit_follows_the_run() {
    let cq = Duration::from_secs(5);
    let short = vl_perftest::engine::phase_limit(&config("-n 10 -s 64"), cq);
    let long = vl_perftest::engine::phase_limit(&config("-n 10000 -s 64"), cq);
    let timed = vl_perftest::engine::phase_limit(&config("-D 100 -s 64"), cq);
    // Slack: two completion timeouts and 30 s; then the run's own length at the floor rate.
    assert!(
        short >= Duration::from_secs(40) && short < Duration::from_secs(45),
        "{short:?}"
    );
    assert!(long > short + Duration::from_secs(400), "{long:?}");
    assert!(timed >= Duration::from_secs(140), "{timed:?}");
    // Bounded whatever the parameters.
    let huge = vl_perftest::engine::phase_limit(&config("-n 1000000000000 -s 8388608 -q 64"), cq);
    assert!(huge > long);
}

#[test]
fn a_running_loop_gives_up_on_an_alive_peer_at_the_phase_limit() {
    let port = free_port();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || heartbeats_only(port, stop_rx));
    let conn = oob::accept(port, Duration::from_secs(10)).unwrap();
    let mut ch = Channel::new(conn, "client");
    ch.set_phase_limit(Duration::from_millis(300));
    let mut watch = vl_perftest::engine::PeerWatch::new(vl_perftest::proto::Phase::Measure, 64);
    let start = Instant::now();
    let e = loop {
        let now = Instant::now();
        watch.check(&mut ch, now).unwrap();
        watch
            .alive(now, Duration::from_secs(5), "the peer's messages")
            .unwrap();
        if let Err(e) = watch.within_phase(&ch, now, "the peer's messages") {
            break e;
        }
        assert!(start.elapsed() < Duration::from_secs(3), "never gave up");
        std::thread::sleep(Duration::from_millis(5));
    };
    let text = format!("{e:#}");
    assert!(
        text.contains("the peer's messages (the measure") && text.contains("only heartbeats"),
        "{text}"
    );
    let _ = stop_tx.send(());
    t.join().unwrap();
}
