//! The server's side of meeting a client: listen (`--bind`, `-p`), take connections until one
//! opens with a valid HELLO, and turn away every other client while the run lasts.
//!
//! A connection that is not a verbs-lab client — a port scan that connects and closes, bytes
//! that are not a frame, a perftest `ib_*` client, a connection that stays silent — is logged in
//! one line (its address and why) and dropped; the server goes on waiting until `--wait` runs
//! out. A HELLO whose parameters differ from ours is a real client with another command line:
//! it is told which parameters differ and the server stops, as before. Once a client is
//! accepted, a second one gets an ERROR saying the server is busy; the run is not touched.
//! (`--serve --concurrent N` keeps one listener and reads each HELLO with [`server_hello`] on a
//! thread of the connection's own, see [`crate::serve`].)

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use verbs_lab::oob::{Listener, OobError, Refuser};
use verbs_lab::wire::WireError;

use crate::events::RunFault;
use crate::params::Config;
use crate::proto::{
    check_hello, encode, Accept, ChanError, Channel, Hello, Msg, ProtoError, VERSION,
};

/// How long a new connection has to deliver its whole HELLO.
pub const HELLO_WAIT: Duration = Duration::from_secs(5);

/// While no client has come, the server looks this often at whether its device's watch saw an
/// event that ends the run ([`RunFault`]): a device being removed (`rdma link delete` waits
/// for every process to close it) or a port gone down ends the wait, named, instead of keeping
/// the device open for a client that may never come. No measurement runs in this process then.
const FAULT_LOOK: Duration = Duration::from_millis(250);

/// An error this side already sent to the peer (a refused HELLO): not to be sent again.
#[derive(Debug)]
pub struct Notified(pub String);

impl std::fmt::Display for Notified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Notified {}

/// What a new connection turned out to be.
#[derive(Debug)]
pub enum Greeting {
    /// A verbs-lab client with our parameters: ACCEPT was sent. Its HELLO, for what the server
    /// settles from it (the warm-up).
    Accepted(Hello),
    /// Not a client of ours: why, in a few words.
    Stray(String),
}

/// The accepted client's channel and HELLO, and the guard that turns other clients away until
/// dropped.
pub struct Accepted {
    pub ch: Channel,
    pub hello: Hello,
    pub refuser: Refuser,
}

/// Listens on `cfg.peer.bind`, port `cfg.peer.port`, and returns the first connection that
/// opens with a valid HELLO, within `cfg.peer.wait` in all. `listening` is called once the
/// port is bound, as the wait begins (perftest's banner). Strays are logged on stderr
/// (`tool: ignored ...`). An event of the device that ends the run (`fault`, looked at every
/// 250 ms while no client is there) ends the wait with that event as the error.
pub fn accept_client(
    cfg: &Config,
    ours: &Hello,
    timeout: Duration,
    listening: impl FnOnce(),
    fault: &RunFault,
) -> Result<Accepted> {
    let listener = Listener::bind_on(cfg.peer.bind, cfg.peer.port)
        .with_context(|| format!("listening for a client on TCP port {}", cfg.peer.port))?;
    listening();
    let tool = cfg.tool.name();
    let port = cfg.peer.port;
    let start = Instant::now();
    loop {
        fault.check()?;
        let left = cfg.peer.wait.saturating_sub(start.elapsed());
        let conn = match listener.accept_conn(left.min(FAULT_LOOK), HELLO_WAIT) {
            Ok(conn) => conn,
            Err(OobError::Timeout { .. }) if left > FAULT_LOOK => continue,
            Err(OobError::Timeout { what, .. }) => {
                return Err(OobError::Timeout {
                    what,
                    after: cfg.peer.wait,
                })
                .with_context(|| format!("waiting for a client on TCP port {port}"))
            }
            Err(e) => {
                return Err(e).with_context(|| format!("waiting for a client on TCP port {port}"))
            }
        };
        let peer = conn.peer();
        let mut ch = Channel::new(conn, "client");
        match server_hello(ours, &mut ch, || Ok(()))? {
            Greeting::Accepted(hello) => {
                ch.set_timeout(timeout)?;
                let busy = encode(&Msg::Error(format!(
                    "the server is busy with a run for {peer}; start this client again when \
                     that run has ended, or use another -p"
                )));
                let refuser = listener
                    .refuse_others(busy, move |other| {
                        verbs_lab::eprintln_whole!(
                            "{tool}: refused a second client {other}: busy with the run for {peer}"
                        )
                    })
                    .context("starting the thread that turns away further clients")?;
                return Ok(Accepted { ch, hello, refuser });
            }
            Greeting::Stray(why) => {
                let left = cfg.peer.wait.saturating_sub(start.elapsed());
                verbs_lab::eprintln_whole!(
                    "{tool}: ignored a connection from {peer}: {why}; still waiting for a client \
                     ({:.0} s left)",
                    left.as_secs_f64()
                );
            }
        }
    }
}

/// Reads the opening message of a new connection (within its channel's timeout) and answers
/// it: ACCEPT for a matching HELLO that `admit` lets in; an ERROR naming the differences for a
/// HELLO with other parameters or another protocol version, or saying why `admit` did not let
/// it in (returned as an error: the run stops); nothing but a [`Greeting::Stray`] for anything
/// that is not a verbs-lab client.
pub fn server_hello(
    ours: &Hello,
    ch: &mut Channel,
    admit: impl FnOnce() -> Result<(), String>,
) -> Result<Greeting> {
    let client = ch.peer_addr();
    let refuse = |ch: &mut Channel, why: String| -> anyhow::Error {
        ch.send_error(&why);
        anyhow::Error::new(Notified(format!("refused the client {client}: {why}")))
    };
    let stray = |s: String| Ok(Greeting::Stray(s));
    match ch.recv("the client's HELLO") {
        Ok(Msg::Hello(h)) => {
            if let Err(why) = check_hello(ours, &h).and_then(|()| admit()) {
                return Err(refuse(ch, why));
            }
            ch.send(&Msg::Accept(Accept {
                version: VERSION,
                tool: ours.tool.clone(),
            }))?;
            Ok(Greeting::Accepted(h))
        }
        Ok(other) => {
            ch.send_error("expected HELLO: this is a verbs-lab vl_* server");
            stray(format!("it opened with {}, not HELLO", other.name()))
        }
        Err(ChanError::Proto {
            err: ProtoError::Version { peer },
            ..
        }) => Err(refuse(
            ch,
            format!(
                "protocol version mismatch: the client speaks version {peer}, the server \
                 version {VERSION}; run the same verbs-lab release on both sides"
            ),
        )),
        Err(ChanError::Proto { err, .. }) => {
            ch.send_error("not a verbs-lab HELLO: this is a verbs-lab vl_* server");
            stray(match err {
                ProtoError::Wire(WireError::Invalid { what, .. }) if what == "frame length" => {
                    "it does not speak the verbs-lab protocol (a perftest ib_* client?)".into()
                }
                e => format!("its opening bytes are not a HELLO ({e})"),
            })
        }
        Err(ChanError::Peer(p)) => stray(format!("it opened with an ERROR: {}", p.text)),
        Err(ChanError::Oob(OobError::Closed { got: 0, .. })) => {
            stray("it closed the connection without a word".into())
        }
        Err(ChanError::Oob(OobError::Closed { got, .. })) => stray(format!(
            "it sent {got} byte(s) of a HELLO, then closed the connection"
        )),
        Err(ChanError::Oob(OobError::Timeout { what, .. })) => stray(format!(
            "no whole HELLO within {} s (waited for {what})",
            HELLO_WAIT.as_secs()
        )),
        Err(e) => stray(e.to_string()),
    }
}
