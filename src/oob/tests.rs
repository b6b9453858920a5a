//! The channel against real sockets on loopback: framing, limits, deadlines, listeners.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::*;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A client connected (with `timeout`) on loopback to a server thread that runs `server` on the
/// connection it accepted; join the thread at the end of the test.
fn served(
    timeout: Duration,
    server: impl FnOnce(OobConn) + Send + 'static,
) -> (OobConn, JoinHandle<()>) {
    let port = free_port();
    let t = std::thread::spawn(move || server(accept(port, Duration::from_secs(10)).unwrap()));
    let c = connect("127.0.0.1", port, timeout).unwrap();
    (c, t)
}

#[test]
fn framed_messages_round_trip() {
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        let m = c.recv_msg(100, "hello").unwrap();
        c.send_msg(&m, "echo").unwrap();
        c.barrier("end").unwrap();
    });
    c.send_msg(b"abc", "hello").unwrap();
    assert_eq!(c.recv_msg(100, "echo").unwrap(), b"abc");
    c.barrier("end").unwrap();
    t.join().unwrap();
}

#[test]
fn a_frame_built_by_hand_is_what_recv_msg_reads() {
    // perftest's last-gasp ERROR goes to the socket as `frame(..)` bytes, not through send_msg.
    assert_eq!(frame(b"abc", "x").unwrap(), [0, 0, 0, 3, b'a', b'b', b'c']);
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        c.send_raw(&frame(b"last words", "error").unwrap(), "error")
            .unwrap();
    });
    assert_eq!(c.recv_msg(100, "error").unwrap(), b"last words");
    t.join().unwrap();
}

#[test]
fn oversized_frame_is_refused_before_allocating() {
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        c.send_raw(&u32::MAX.to_be_bytes(), "len").unwrap();
    });
    let e = c.recv_msg(1024, "parameters").unwrap_err();
    assert!(
        matches!(e, OobError::TooLong { len, max: 1024, .. } if len == u32::MAX as usize),
        "{e}"
    );
    t.join().unwrap();
}

#[test]
fn silent_peer_times_out_and_closed_peer_is_named() {
    let (mut c, t) = served(Duration::from_millis(300), move |c| {
        std::thread::sleep(Duration::from_millis(600));
        drop(c);
    });
    let mut b = [0u8; 4];
    let e = c.recv_raw(&mut b, "the server's endpoint").unwrap_err();
    assert!(matches!(e, OobError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("the server's endpoint"));
    c.set_timeout(Duration::from_secs(5)).unwrap();
    let e = c.recv_raw(&mut b, "the server's endpoint").unwrap_err();
    assert!(matches!(e, OobError::Closed { got: 0, .. }), "{e}");
    t.join().unwrap();
}

#[test]
fn poll_readable_waits_its_whole_wait_and_no_timeout_is_too_long() {
    // Duration::MAX: every deadline of the connection saturates instead of overflowing.
    let (mut c, t) = served(Duration::MAX, move |mut c| {
        let go = c.recv_msg(8, "go").unwrap();
        c.send_msg(&go, "echo").unwrap();
    });
    for _ in 0..10 {
        // Rounded down to 0 ms, a 0.6 ms wait would end at once.
        let t0 = Instant::now();
        assert!(!c.poll_readable(Duration::from_micros(600)).unwrap());
        assert!(
            t0.elapsed() >= Duration::from_micros(600),
            "{:?}",
            t0.elapsed()
        );
    }
    c.send_msg(b"go", "go").unwrap();
    assert_eq!(c.recv_msg(8, "echo").unwrap(), b"go");
    t.join().unwrap();
}

#[test]
fn a_peer_that_closes_mid_frame_is_told_apart_from_one_that_closes_between_frames() {
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        // A frame announcing 64 bytes, then 3 of them, then the end of the connection.
        c.send_raw(&[0, 0, 0, 64, 1, 2, 3], "half a frame").unwrap();
    });
    let e = c.recv_msg(1024, "the HELLO").unwrap_err();
    assert!(matches!(e, OobError::Closed { got: 7, .. }), "{e}");
    assert!(
        e.to_string().contains("after 7 byte(s) of the HELLO"),
        "{e}"
    );
    t.join().unwrap();
}

#[test]
fn one_listener_serves_clients_that_connect_early() {
    let port = free_port();
    let l = Listener::bind(port).unwrap();
    // Both clients connect before the server accepts either: both must be served.
    let clients: Vec<_> = (0..2u8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
                c.send_msg(&[i], "id").unwrap();
                c.barrier("done").unwrap();
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut conns: Vec<OobConn> = (0..2)
        .map(|_| l.accept(Duration::from_secs(10)).unwrap())
        .collect();
    let mut ids: Vec<u8> = conns
        .iter_mut()
        .map(|c| c.recv_msg(1, "id").unwrap()[0])
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1]);
    for c in &mut conns {
        c.barrier("done").unwrap();
    }
    for t in clients {
        t.join().unwrap();
    }
}

#[test]
fn an_unknown_host_is_named_with_its_cause_once() {
    let e = connect("no.such.host.invalid", 1, Duration::from_secs(1))
        .err()
        .expect("no such host");
    let once = e.to_string();
    assert!(
        once.starts_with("cannot resolve server 'no.such.host.invalid': "),
        "{once}"
    );
    // The resolver's text is in the Display; anyhow's `{:#}` chain must not add it again.
    assert_eq!(format!("{:#}", anyhow::Error::new(e)), once);
}

#[test]
fn nobody_listening_times_out() {
    let port = free_port();
    let e = connect("127.0.0.1", port, Duration::from_millis(300))
        .err()
        .unwrap();
    assert!(e.to_string().contains("timed out"), "{e}");
    let e = accept(free_port(), Duration::from_millis(200))
        .err()
        .unwrap();
    assert!(e.to_string().contains("a client to connect"), "{e}");
}

/// A client left waiting says so once, after [`NOTE_AFTER`], with whom it tries and why; a
/// quick connection says nothing.
#[test]
fn a_client_left_waiting_is_told_once() {
    let port = free_port();
    let mut notes = Vec::new();
    let t0 = Instant::now();
    let wait = NOTE_AFTER + Duration::from_millis(800);
    let e = connect_noting("127.0.0.1", port, wait, |n| notes.push((n, t0.elapsed())))
        .err()
        .unwrap();
    assert!(e.to_string().contains("timed out"), "{e}");
    assert_eq!(notes.len(), 1, "{notes:?}");
    let (note, at) = &notes[0];
    assert!(*at >= NOTE_AFTER, "noted after {at:?}");
    assert!(
        note.starts_with(&format!(
            "the server at 127.0.0.1:{port} does not accept yet ("
        )),
        "{note}"
    );
    assert!(note.contains("refused"), "{note}");

    let mut told = false;
    let (mut c, t) = {
        let port = free_port();
        let t = std::thread::spawn(move || {
            accept(port, Duration::from_secs(10))
                .unwrap()
                .barrier("end")
                .unwrap()
        });
        let c = connect_noting("127.0.0.1", port, Duration::from_secs(10), |_| told = true);
        (c.unwrap(), t)
    };
    c.barrier("end").unwrap();
    t.join().unwrap();
    assert!(!told, "a connection within {NOTE_AFTER:?} says nothing");
}

/// A client told to stop while no server answers gives up at once (`Ok(None)`), long before
/// its timeout, and asks only between attempts.
#[test]
fn a_client_told_to_stop_gives_up_between_attempts() {
    let port = free_port();
    let t0 = Instant::now();
    let mut asked = 0;
    let got = connect_unless(
        "127.0.0.1",
        port,
        Duration::from_secs(30),
        |_| {},
        || {
            asked += 1;
            asked == 3
        },
    )
    .unwrap();
    assert!(got.is_none());
    assert_eq!(asked, 3);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn a_trickling_peer_is_cut_off_by_the_frame_deadline() {
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        // Announce 8 bytes, then one byte every 100 ms: each byte alone is within the
        // timeout, the frame as a whole is not.
        c.send_raw(&8u32.to_be_bytes(), "len").unwrap();
        for _ in 0..8 {
            std::thread::sleep(Duration::from_millis(100));
            if c.send_raw(b"x", "byte").is_err() {
                break;
            }
        }
    });
    c.set_timeout(Duration::from_millis(350)).unwrap();
    let start = Instant::now();
    let e = c.recv_msg(100, "the tally").unwrap_err();
    assert!(matches!(e, OobError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("the rest of the tally"), "{e}");
    assert!(
        start.elapsed() < Duration::from_millis(700),
        "{:?}",
        start.elapsed()
    );
    t.join().unwrap();
}

#[test]
fn a_frame_begun_late_in_the_wait_gets_its_own_timeout() {
    // The header comes 300 ms into a 400 ms wait, the rest 200 ms after it: late for the wait
    // that began before the header, in time counted from the frame's first byte.
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        std::thread::sleep(Duration::from_millis(300));
        c.send_raw(&3u32.to_be_bytes(), "len").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        c.send_raw(b"abc", "body").unwrap();
    });
    c.set_timeout(Duration::from_millis(400)).unwrap();
    assert_eq!(c.recv_msg(100, "the tally").unwrap(), b"abc");
    t.join().unwrap();
}

#[test]
fn try_recv_keeps_half_a_frame_without_blocking() {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        c.send_raw(&[0, 0, 0, 3, b'a'], "half").unwrap();
        go_rx.recv().unwrap();
        c.send_raw(b"bc", "rest").unwrap();
        c.send_msg(b"next", "next").unwrap();
        go_rx.recv().unwrap();
    });
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    assert_eq!(c.try_recv_msg(100, "m").unwrap(), None);
    assert!(start.elapsed() < Duration::from_millis(50));
    go_tx.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        c.try_recv_msg(100, "m").unwrap().as_deref(),
        Some(&b"abc"[..])
    );
    // The next frame is still whole for a blocking read.
    assert_eq!(c.recv_msg(100, "m").unwrap(), b"next");
    go_tx.send(()).unwrap();
    t.join().unwrap();
}

#[test]
fn try_recv_takes_a_frame_longer_than_its_read_buffer_whole() {
    let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let sent = body.clone();
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        c.send_msg(&sent, "long").unwrap();
        c.send_msg(b"after", "after").unwrap();
    });
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        c.try_recv_msg(20_000, "m").unwrap().as_deref(),
        Some(&body[..])
    );
    assert_eq!(
        c.try_recv_msg(20_000, "m").unwrap().as_deref(),
        Some(&b"after"[..])
    );
    t.join().unwrap();
}

#[test]
fn half_a_frame_left_too_long_is_an_error() {
    let (mut c, t) = served(Duration::from_secs(10), move |mut c| {
        c.send_raw(&[0, 0], "half a length").unwrap();
        std::thread::sleep(Duration::from_millis(800));
    });
    c.set_timeout(Duration::from_millis(200)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c.try_recv_msg(100, "a heartbeat").unwrap(), None);
    std::thread::sleep(Duration::from_millis(250));
    let e = c.try_recv_msg(100, "a heartbeat").unwrap_err();
    assert!(e.to_string().contains("the rest of a heartbeat"), "{e}");
    t.join().unwrap();
}

/// The connection `l` accepts from a client thread that connects to it at `host`.
fn accepted_from(l: &Listener, host: &'static str) -> OobConn {
    let port = l.port();
    let t = std::thread::spawn(move || {
        connect(host, port, Duration::from_secs(5)).unwrap();
    });
    let c = l.accept(Duration::from_secs(5)).unwrap();
    t.join().unwrap();
    c
}

#[test]
fn listens_on_ipv4_ipv6_and_both() {
    // The default takes IPv4 clients too (dual stack), and names them as IPv4.
    let l = Listener::bind(0).unwrap();
    let c = accepted_from(&l, "127.0.0.1");
    assert_eq!(c.peer().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    // A given IPv6 address.
    if let Ok(l) = Listener::bind_on(IpAddr::V6(Ipv6Addr::LOCALHOST), 0) {
        let c = accepted_from(&l, "::1");
        assert_eq!(c.peer().ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
    }
    // A given IPv4 address; an address not of this host is refused with a hint.
    let l = Listener::bind_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
    assert!(l.local_addr().is_ipv4());
    let e = Listener::bind_on("192.0.2.1".parse().unwrap(), 0)
        .err()
        .unwrap();
    assert!(e.to_string().contains("--bind"), "{e}");
}

#[test]
fn a_refuser_answers_later_clients_and_stops() {
    let l = Listener::bind_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
    let port = l.port();
    let (tx, rx) = std::sync::mpsc::channel();
    let guard = l
        .refuse_others(b"busy".to_vec(), move |a| {
            let _ = tx.send(a);
        })
        .unwrap();
    let mut c = connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
    c.send_msg(b"hello", "hello").unwrap();
    assert_eq!(c.recv_msg(100, "the answer").unwrap(), b"busy");
    let logged = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(logged.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    drop(guard);
    // The listener is closed with the guard.
    let e = connect("127.0.0.1", port, Duration::from_millis(300)).err();
    assert!(e.is_some());
}

#[test]
fn a_refuser_stops_at_once_when_dropped() {
    let l = Listener::bind_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
    let guard = l.refuse_others(b"busy".to_vec(), |_| {}).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    drop(guard);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

#[test]
fn accept_times_out_then_takes_a_late_client() {
    let l = Listener::bind_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
    let port = l.port();
    let e = l.accept(Duration::from_millis(120)).err().unwrap();
    assert!(e.to_string().contains("a client"), "{e}");
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        connect("127.0.0.1", port, Duration::from_secs(5)).unwrap()
    });
    let c = l.accept(Duration::from_secs(10)).unwrap();
    drop(c);
    t.join().unwrap();
}
