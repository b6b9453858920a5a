//! The command line every lesson shares: the two-sided lessons' [`CommonArgs`] (perftest-style:
//! the server is started without a host, the client with the server's), the ping-pong lessons'
//! [`PingPongArgs`], the one-process lessons' [`DevicePairArgs`], and the checks that refuse a
//! flag before any verbs call ([`check_range`] for a number outside its range).

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use verbs_lab::verbs::DeviceList;

use crate::Narrator;

/// The flags every two-sided lesson takes, perftest-style: the server is started without a
/// host, the client with the server's host.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Server to connect to; without it this process is the server.
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub host: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515,
          value_parser = verbs_lab::cli::tcp_port())]
    pub port: u16,
    /// RDMA device to use (default: the first one).
    #[arg(short = 'd', long = "ib-dev",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub ib_dev: Option<String>,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1,
          value_parser = verbs_lab::cli::ib_port())]
    pub ib_port: u8,
    /// GID index (default: chosen automatically, the same way on both sides).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u32>,
    /// QP ack timeout exponent: 4.096 µs × 2^N before a retransmit.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 18,
          value_parser = verbs_lab::cli::qp_timeout())]
    pub qp_timeout: u8,
    /// Seconds to wait for the peer at any one step before giving up.
    #[arg(long = "wait", default_value_t = 30, value_parser = verbs_lab::cli::WaitSecs)]
    pub wait_secs: u64,
    /// No narration: print only results.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
}

impl CommonArgs {
    pub fn role(&self) -> Role {
        match &self.host {
            Some(h) => Role::Client(h.clone()),
            None => Role::Server,
        }
    }
    pub fn wait(&self) -> Duration {
        Duration::from_secs(self.wait_secs)
    }
    pub fn narrator(&self) -> Narrator {
        Narrator { quiet: self.quiet }
    }
    /// Refuses common flags that cannot work, before any verbs call (so it needs no device).
    pub fn check(&self) -> Result<()> {
        check_gid_idx(self.gid_idx)
    }
}

/// The flags of the ping-pong lessons (04, 11, 12) that mean the same in all three, as in
/// `ibv_rc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong`: the common flags, `-n` and `-r`.
/// (`-s` and `-m` differ in default or range from lesson to lesson: each lesson declares its own;
/// lesson 12 rewords the help of `-n` and `-r`, which count over its QPs and fill its SRQ.)
#[derive(Args, Debug, Clone)]
pub struct PingPongArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Number of exchanges (round trips).
    #[arg(short = 'n', long = "iters", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=100_000_000))]
    pub iters: u32,
    /// Receives kept posted at all times.
    // No range here: each lesson has its own, checked by `PingPongArgs::check`.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
}

impl PingPongArgs {
    /// [`CommonArgs::check`], and `-r` within `rx_depth`, the receives the lesson can post
    /// (lesson 11 keeps at least 2, lesson 12's SRQ holds at most 16384).
    pub fn check(&self, rx_depth: RangeInclusive<u32>) -> Result<()> {
        self.common.check()?;
        check_range("-r", self.rx_depth, rx_depth, "receives to post")
    }
}

/// The devices of the lessons that hold both ends in one process (09, 14): a QP on `--dev-a`
/// (the client, which sends) connected to a QP on `--dev-b` (the server), both on port `-i`
/// with GID index `-g`.
#[derive(Args, Debug, Clone)]
pub struct DevicePairArgs {
    /// Device of the client (sending) QP (default: the first device)
    #[arg(long = "dev-a", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub dev_a: Option<String>,
    /// Device of the server (receiving) QP (default: the second device, or the first again if
    /// there is one)
    #[arg(long = "dev-b", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub dev_b: Option<String>,
    /// Port of both devices
    #[arg(short = 'i', long = "ib-port", default_value_t = 1,
          value_parser = verbs_lab::cli::ib_port())]
    pub ib_port: u8,
    /// GID index on both devices (default: chosen automatically)
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u32>,
}

impl DevicePairArgs {
    /// The two devices' names: `--dev-a` or the first device, `--dev-b` or the second (the
    /// first again when there is only one). With no device at all, says how to get one and
    /// how to run `program` where there is one.
    pub fn names(&self, program: &str) -> Result<(String, String)> {
        let names = DeviceList::new().context("listing RDMA devices")?.names();
        let a = match &self.dev_a {
            Some(d) => d.clone(),
            None => names.first().cloned().ok_or_else(|| {
                anyhow::anyhow!(
                    "no RDMA device: get one with scripts/softroce-up (a kernel with rdma_rxe) \
                     or run in the guest: scripts/softroce-vm run -- {program}"
                )
            })?,
        };
        let b = match &self.dev_b {
            Some(d) => d.clone(),
            None => names.get(1).cloned().unwrap_or_else(|| a.clone()),
        };
        Ok((a, b))
    }

    /// Refuses a `-g` that cannot work, before any verbs call, as [`CommonArgs::check`] does
    /// for the two-sided lessons. (`-i`, `-u` and `--wait` are checked as they are parsed:
    /// `verbs_lab::cli::ib_port`, `qp_timeout`, `WaitSecs`.)
    pub fn check(&self) -> Result<()> {
        check_gid_idx(self.gid_idx)
    }
}

/// Which side of the exchange this process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Server,
    Client(String),
}

impl Role {
    pub fn is_server(&self) -> bool {
        *self == Role::Server
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Server => f.write_str("server"),
            Role::Client(h) => write!(f, "client of {h}"),
        }
    }
}

/// Refuses a GID index (`-g`) that cannot work, before any verbs call: [`CommonArgs::check`]
/// and [`DevicePairArgs::check`]. (`-i` and `-u` are checked as they are parsed.)
fn check_gid_idx(gid_idx: Option<u32>) -> Result<()> {
    if let Some(g) = gid_idx {
        if g > 255 {
            bail!(
                "-g {g}: unusable GID index: the source GID index of an address vector is \
                 8 bits (0..=255); `lesson01_devices` lists the populated ones"
            );
        }
    }
    Ok(())
}

/// Refuses `value` of `flag` outside `range`, before any verbs call, with the range taken from
/// `range` itself (so the message cannot drift from the check) and `what` it counts:
/// `check_range("-r", 0, 1..=100, "rounds")` fails with `-r 0: give 1 to 100 rounds`.
pub fn check_range<T: PartialOrd + fmt::Display>(
    flag: &str,
    value: T,
    range: RangeInclusive<T>,
    what: &str,
) -> Result<()> {
    if !range.contains(&value) {
        bail!(
            "{flag} {value}: give {} to {} {what}",
            range.start(),
            range.end()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        c: CommonArgs,
    }

    #[test]
    fn common_flags_are_checked_without_a_device() {
        let ok = T::parse_from(["x", "-g", "1"]);
        assert!(ok.c.check().is_ok());
        let e = T::parse_from(["x", "-g", "300"]).c.check().unwrap_err();
        assert!(e.to_string().contains("GID index"), "{e}");
        // -u, -i and --wait are refused as they are parsed (verbs_lab::cli::qp_timeout,
        // ib_port, WaitSecs).
        assert!(T::try_parse_from(["x", "-u", "32"]).is_err());
        assert_eq!(T::parse_from(["x", "-u", "31"]).c.qp_timeout, 31);
        assert!(T::try_parse_from(["x", "-i", "0"]).is_err());
        assert!(T::try_parse_from(["x", "-d", ""]).is_err());
        assert!(T::try_parse_from(["x", ""]).is_err());
        assert!(T::try_parse_from(["x", "--wait", "0"]).is_err());
        assert_eq!(
            T::parse_from(["x", "--wait", "86400"]).c.wait().as_secs(),
            86_400
        );
    }

    #[test]
    fn ranges_are_refused_with_their_own_bounds() {
        assert!(check_range("-r", 1, 1..=100, "rounds").is_ok());
        assert!(check_range("-r", 100, 1..=100, "rounds").is_ok());
        let e = check_range("-r", 0, 1..=100, "rounds").unwrap_err();
        assert_eq!(e.to_string(), "-r 0: give 1 to 100 rounds");
        let e = check_range("-s", 70_000usize, 1..=65_536, "bytes").unwrap_err();
        assert_eq!(e.to_string(), "-s 70000: give 1 to 65536 bytes");
    }
}
