//! The bootstrap's records on the wire (in the [`verbs_lab::wire`] codec): a rank's [`RankRecord`],
//! the table rank 0 sends or its refusal, and [`admit`], rank 0's check of a rank that joins.
//!
//! A record, big-endian: magic `VLCB`, version u16, rank u32, world size u32, host (u32 length +
//! UTF-8), host hash u64 (version 3), pid u32, the launcher's local rank u32 (version 3;
//! `u32::MAX`: none given), device (u32 length + UTF-8), CPU u32 (`u32::MAX`: none), LID u16,
//! GID 16 bytes, MTU, left QPN, left PSN, right QPN, right PSN (u32 each), slot address u64, slot
//! rkey, slot length, slot bytes, slot count (u32 each), then (version 2) the terms: a u32 count
//! and per term its option and its value (u32 length + UTF-8 each). Nothing follows.

use verbs_lab::wire::{Reader, Width, WireError, Writer};

use super::*;

/// Any length a bootstrap record's text or nested record may have: the bytes that arrived bound
/// it (the [`Reader`] checks a length against them before it allocates).
const ANY: usize = u32::MAX as usize;

/// The error of reading `what` (a record, a table, a message), in words.
pub fn garbled(what: &str) -> impl Fn(WireError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl RankRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(128);
        w.raw(MAGIC);
        w.u16(self.version);
        w.u32(self.rank);
        w.u32(self.world_size);
        w.text(Width::U32, &self.host)
            .expect("a host name fits 4 GiB");
        w.u64(self.host_hash);
        w.u32(self.pid);
        w.u32(self.local_rank.unwrap_or(u32::MAX));
        w.text(Width::U32, &self.device)
            .expect("a device name fits 4 GiB");
        w.u32(self.cpu.map_or(u32::MAX, |c| c));
        w.u16(self.lid);
        w.raw(&self.gid.0);
        for v in [
            self.mtu,
            self.left_qpn,
            self.left_psn,
            self.right_qpn,
            self.right_psn,
        ] {
            w.u32(v);
        }
        w.u64(self.slots.addr);
        for v in [
            self.slots.rkey,
            self.slots.len,
            self.slot_bytes,
            self.nslots,
        ] {
            w.u32(v);
        }
        w.count(self.terms.len()).expect("at most 4 G terms");
        for (option, value) in &self.terms {
            for t in [option, value] {
                w.text(Width::U32, t).expect("a term fits 4 GiB");
            }
        }
        w.into_bytes()
    }

    /// Decodes a record. The magic and version come first, so a record of another version is
    /// refused by its version (with [`RankRecord::peek_version`]) before anything else is read.
    pub fn decode(b: &[u8]) -> std::result::Result<RankRecord, String> {
        let version = Self::peek_version(b)?;
        if version != PROTOCOL_VERSION {
            return Err(format!(
                "bootstrap protocol version {version}, this build speaks version {PROTOCOL_VERSION}"
            ));
        }
        Self::read(&mut Reader::new(&b[6..]), version).map_err(garbled("an endpoint record"))
    }

    /// The fields after the magic and version, to the end of the record.
    fn read(r: &mut Reader<'_>, version: u16) -> std::result::Result<RankRecord, WireError> {
        let rec = RankRecord {
            rank: r.u32("rank")?,
            world_size: r.u32("world size")?,
            version,
            host: r.text(Width::U32, "host", ANY)?.to_string(),
            host_hash: r.u64("host hash")?,
            pid: r.u32("pid")?,
            local_rank: Some(r.u32("local rank")?).filter(|l| *l != u32::MAX),
            device: r.text(Width::U32, "device", ANY)?.to_string(),
            cpu: Some(r.u32("CPU")?).filter(|c| *c != u32::MAX),
            lid: r.u16("LID")?,
            gid: Gid(r.array::<16>("GID")?),
            mtu: r.u32("MTU")?,
            left_qpn: r.u32("left QPN")?,
            left_psn: r.u32("left PSN")?,
            right_qpn: r.u32("right QPN")?,
            right_psn: r.u32("right PSN")?,
            slots: RemoteBuf {
                addr: r.u64("slot address")?,
                rkey: r.u32("slot rkey")?,
                len: r.u32("slot length")?,
            },
            slot_bytes: r.u32("slot bytes")?,
            nslots: r.u32("slot count")?,
            terms: {
                // A term is at least its two lengths.
                let n = r.count("term count", 8)?;
                (0..n)
                    .map(|_| {
                        let option = r.text(Width::U32, "term option", ANY)?.to_string();
                        let value = r.text(Width::U32, "term value", ANY)?.to_string();
                        Ok((option, value))
                    })
                    .collect::<std::result::Result<Vec<_>, WireError>>()?
            },
        };
        r.finish()?;
        Ok(rec)
    }

    /// The protocol version of an encoded record (after checking the magic).
    pub fn peek_version(b: &[u8]) -> std::result::Result<u16, String> {
        if b.len() < 6 || &b[..4] != MAGIC {
            return Err(
                "not a verbs-lab bootstrap record (bad magic): is another program \
                        listening on the master port?"
                    .into(),
            );
        }
        Ok(u16::from_be_bytes([b[4], b[5]]))
    }
}

pub(super) fn encode_table(t: &[RankRecord]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(b'T');
    w.length(Width::U32, t.len(), "a table")
        .expect("a table of at most MAX_WORLD ranks");
    for r in t {
        w.blob(Width::U32, &r.encode())
            .expect("a record fits 4 GiB");
    }
    w.into_bytes()
}

/// Rank 0's refusal of the job: type `F` and why.
pub(super) fn encode_refusal(why: &str) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(b'F');
    w.text(Width::U32, why).expect("a reason fits 4 GiB");
    w.into_bytes()
}

pub(super) fn decode_reply(b: &[u8]) -> std::result::Result<Vec<RankRecord>, String> {
    let what = "rank 0's table";
    let mut r = Reader::new(b);
    match r.u8("message type").map_err(garbled(what))? {
        b'T' => {
            let n = r.u32("rank count").map_err(garbled(what))? as usize;
            if n > crate::env::MAX_WORLD as usize {
                return Err(format!("a table of {n} ranks"));
            }
            let t = (0..n)
                .map(|_| {
                    RankRecord::decode(r.blob(Width::U32, "a record", ANY).map_err(garbled(what))?)
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            r.finish().map_err(garbled(what))?;
            Ok(t)
        }
        b'F' => {
            let why = r
                .text(Width::U32, "the reason", ANY)
                .map_err(garbled(what))?;
            Err(format!("rank 0 refused the job: {why}"))
        }
        t => Err(format!(
            "rank 0 sent message type {t:#04x} instead of the table"
        )),
    }
}

/// Checks a newcomer's record against rank 0's and those already in; `Err` says why not.
pub fn admit(
    table: &[Option<RankRecord>],
    world: u32,
    r: &RankRecord,
) -> std::result::Result<(), String> {
    if r.world_size != world {
        return Err(format!(
            "{} was started with world size {}, rank 0 with {world}: every rank must be given the \
             same world size",
            r.who(),
            r.world_size
        ));
    }
    if r.rank >= world {
        return Err(format!(
            "{} is outside the world of {world} ranks (0..{})",
            r.who(),
            world - 1
        ));
    }
    if let Some(Some(first)) = table.get(r.rank as usize) {
        return Err(format!(
            "rank {} joined twice: first {}, then {} — give every process its own rank",
            r.rank,
            first.who(),
            r.who()
        ));
    }
    if let Some(Some(zero)) = table.first() {
        if let Some(how) = differing_term(&r.terms, &zero.terms) {
            return Err(format!(
                "{} {how}: give every rank the same options",
                r.who()
            ));
        }
    }
    if let Some(why) = table
        .iter()
        .flatten()
        .find(|z| !z.gid.is_zero())
        .and_then(|z| other_gid_kind(r, z))
    {
        return Err(why);
    }
    Ok(())
}

/// Rank 0's check of the whole table in the rendezvous' second round, when every rank has its
/// GID: each against the first rank (in rank order) with one, as [`admit`] checks a newcomer.
pub(super) fn check_gids(table: &[RankRecord]) -> std::result::Result<(), String> {
    let Some(zero) = table.iter().find(|z| !z.gid.is_zero()) else {
        return Ok(());
    };
    match table
        .iter()
        .filter(|r| r.rank != zero.rank)
        .find_map(|r| other_gid_kind(r, zero))
    {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// Whether `later` is the record `first` of the same rank, its endpoints filled in: the same
/// rank, world, host, process, local rank and terms.
pub(super) fn same_rank(first: &RankRecord, later: &RankRecord) -> bool {
    (
        first.rank,
        first.world_size,
        &first.host,
        first.host_hash,
        first.pid,
    ) == (
        later.rank,
        later.world_size,
        &later.host,
        later.host_hash,
        later.pid,
    ) && first.local_rank == later.local_rank
        && first.terms == later.terms
}

/// Why `r` cannot reach `zero` (rank 0, or the lowest rank in with a GID): one GID IPv4-mapped,
/// the other an IPv6 address (link-local or global) — RoCE v2 sends between two addresses of one
/// family, so each side's connect would be refused only after the rendezvous, with EINVAL and no
/// word of why. Two GIDs of one family pass, on different hosts and subnets too (routing is the
/// network's business), and so does a zero GID (a record without a device).
fn other_gid_kind(r: &RankRecord, zero: &RankRecord) -> Option<String> {
    if r.gid.is_zero() || r.gid.is_ipv4_mapped() == zero.gid.is_ipv4_mapped() {
        return None;
    }
    let kind = |g: &Gid| if g.is_ipv4_mapped() { "IPv4" } else { "IPv6" };
    Some(format!(
        "{} uses GID {} ({}), {} GID {} ({}): an IPv4 and an IPv6 GID cannot address \
         each other — give every rank a GID index of the same kind with -x (vl_devinfo lists \
         each index's GID and type), or leave -x out on every rank so that each picks by the same \
         rule (the first RoCE v2 GID with an IPv4 address)",
        r.who(),
        r.gid.to_ip(),
        kind(&r.gid),
        zero.who(),
        zero.gid.to_ip(),
        kind(&zero.gid),
    ))
}

/// How a rank's terms differ from rank 0's, at the first option that does (in rank 0's order,
/// then the options only the rank has): "runs with -e 1048576, rank 0 with -e 64", "runs
/// without -r, rank 0 with -r 1", "runs with -x 1, rank 0 without -x". `None`: they agree.
pub fn differing_term(theirs: &[(String, String)], zeros: &[(String, String)]) -> Option<String> {
    let term = |(option, value): &(String, String)| {
        if value.is_empty() {
            option.clone()
        } else {
            format!("{option} {value}")
        }
    };
    let find =
        |terms: &[(String, String)], option: &str| terms.iter().find(|(o, _)| o == option).cloned();
    for z in zeros {
        match find(theirs, &z.0) {
            Some(t) if t == *z => {}
            Some(t) => return Some(format!("runs with {}, rank 0 with {}", term(&t), term(z))),
            None => return Some(format!("runs without {}, rank 0 with {}", z.0, term(z))),
        }
    }
    theirs
        .iter()
        .find(|t| find(zeros, &t.0).is_none())
        .map(|t| format!("runs with {}, rank 0 without {}", term(t), t.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(rank: u32) -> RankRecord {
        RankRecord {
            rank,
            world_size: 3,
            version: PROTOCOL_VERSION,
            host: format!("hôst{rank}"),
            host_hash: 0x0102_0304_0506_0700 + u64::from(rank),
            pid: 1000 + rank,
            local_rank: (rank == 1).then_some(0),
            device: "rxe0".into(),
            cpu: (rank != 1).then_some(rank),
            lid: 0x0102,
            gid: Gid([rank as u8; 16]),
            mtu: 1024,
            left_qpn: 0x100 + rank,
            left_psn: 1,
            right_qpn: 0x200 + rank,
            right_psn: 2,
            slots: RemoteBuf {
                addr: 0x7f00_0000_1000,
                rkey: 7,
                len: 4096,
            },
            slot_bytes: 512,
            nslots: 8,
            terms: terms(&[("-e", "64"), ("-d", "float")]),
        }
    }

    fn terms(t: &[(&str, &str)]) -> Vec<(String, String)> {
        t.iter()
            .map(|(o, v)| (o.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_record_keeps_its_layout() {
        let b = record(1).encode();
        let mut want = b"VLCB".to_vec();
        want.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 3]);
        want.extend_from_slice(&[0, 0, 0, 6]);
        want.extend_from_slice("hôst1".as_bytes());
        want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 1]); // host hash
        want.extend_from_slice(&1001u32.to_be_bytes());
        want.extend_from_slice(&0u32.to_be_bytes()); // local rank 0, given
        want.extend_from_slice(&[0, 0, 0, 4, b'r', b'x', b'e', b'0']);
        want.extend_from_slice(&u32::MAX.to_be_bytes()); // no CPU
        want.extend_from_slice(&[1, 2]);
        want.extend_from_slice(&[1; 16]);
        for v in [1024u32, 0x101, 1, 0x201, 2] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        want.extend_from_slice(&0x7f00_0000_1000u64.to_be_bytes());
        for v in [7u32, 4096, 512, 8] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        want.extend_from_slice(&[0, 0, 0, 2]); // two terms
        want.extend_from_slice(&[0, 0, 0, 2, b'-', b'e', 0, 0, 0, 2, b'6', b'4']);
        want.extend_from_slice(&[0, 0, 0, 2, b'-', b'd', 0, 0, 0, 5]);
        want.extend_from_slice(b"float");
        assert_eq!(b, want);
        assert_eq!(PROTOCOL_VERSION, 4, "a new layout takes a new version");
    }

    #[test]
    fn records_and_tables_round_trip() {
        for rank in 0..3 {
            let r = record(rank);
            assert_eq!(RankRecord::decode(&r.encode()), Ok(r));
        }
        // No terms, and terms with empty, non-ASCII and repeated texts, in their order.
        for t in [
            terms(&[]),
            terms(&[
                ("the collective", "all_reduce"),
                ("-x", ""),
                ("é", "ü"),
                ("-x", ""),
            ]),
        ] {
            let r = RankRecord {
                terms: t,
                ..record(1)
            };
            assert_eq!(RankRecord::decode(&r.encode()), Ok(r));
        }
        let t: Vec<RankRecord> = (0..3).map(record).collect();
        assert_eq!(decode_reply(&encode_table(&t)), Ok(t));
        assert_eq!(decode_reply(&encode_table(&[])), Ok(vec![]));
        assert_eq!(
            decode_reply(&encode_refusal("world size 4, not 3")),
            Err("rank 0 refused the job: world size 4, not 3".into())
        );
    }

    #[test]
    fn every_cut_and_every_extra_byte_is_refused() {
        let b = record(2).encode();
        for cut in 0..b.len() {
            let e = RankRecord::decode(&b[..cut]).unwrap_err();
            // A cut among the terms leaves fewer bytes than their count needs.
            assert!(
                e.contains("truncated") || e.contains("bad magic") || e.contains("exceeds"),
                "cut at {cut}: {e}"
            );
        }
        let mut longer = b.clone();
        longer.push(0);
        let e = RankRecord::decode(&longer).unwrap_err();
        assert!(e.contains("1 bytes after the end"), "{e}");

        let t = encode_table(&[record(0), record(1)]);
        for cut in 0..t.len() {
            assert!(decode_reply(&t[..cut]).is_err(), "table cut at {cut}");
        }
        let mut longer = t.clone();
        longer.push(0);
        assert!(decode_reply(&longer).unwrap_err().contains("after the end"));
    }

    #[test]
    fn oversized_counts_and_lengths_are_refused_before_allocating() {
        // A table that claims more ranks than a world may have.
        let mut t = vec![b'T'];
        t.extend_from_slice(&(crate::env::MAX_WORLD + 1).to_be_bytes());
        let e = decode_reply(&t).unwrap_err();
        assert!(e.starts_with("a table of"), "{e}");
        // A nested record, or a host name, longer than the bytes that follow.
        let mut t = vec![b'T', 0, 0, 0, 1];
        t.extend_from_slice(&u32::MAX.to_be_bytes());
        let e = decode_reply(&t).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let mut b = record(0).encode();
        b[14..18].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = RankRecord::decode(&b).unwrap_err();
        assert!(e.contains("truncated: host"), "{e}");
        // Another message type, and text that is not UTF-8.
        assert!(decode_reply(b"X").unwrap_err().contains("type 0x58"));
        let mut b = record(0).encode();
        b[18] = 0xff;
        let e = RankRecord::decode(&b).unwrap_err();
        assert!(e.contains("host: not UTF-8"), "{e}");
        // A term count the bytes left cannot hold, and a term longer than the record.
        let b = record(0).encode();
        // The term count, 4 + (4 + 2 + 4 + 2) + (4 + 2 + 4 + 5) bytes from the end.
        let at = b.len() - 31;
        assert_eq!(b[at..at + 8], [0, 0, 0, 2, 0, 0, 0, 2]);
        let mut many = b.clone();
        many[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = RankRecord::decode(&many).unwrap_err();
        assert!(e.contains("term count") && e.contains("exceeds"), "{e}");
        let mut long = b.clone();
        long[at + 4..at + 8].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = RankRecord::decode(&long).unwrap_err();
        assert!(e.contains("truncated: term option"), "{e}");
    }

    fn admitted(zero: &[(&str, &str)], one: &[(&str, &str)]) -> std::result::Result<(), String> {
        let mut table = vec![None; 2];
        table[0] = Some(RankRecord {
            terms: terms(zero),
            ..record(0)
        });
        let r = RankRecord {
            world_size: 2,
            terms: terms(one),
            ..record(1)
        };
        admit(&table, 2, &r)
    }

    #[test]
    fn a_rank_with_other_terms_is_refused_naming_the_first_option_and_both_values() {
        let zero = [("-b", "8"), ("-e", "64"), ("-d", "float")];
        assert_eq!(admitted(&zero, &zero), Ok(()));
        // The same terms in another order agree: each is looked up by its option.
        assert_eq!(
            admitted(&zero, &[("-d", "float"), ("-b", "8"), ("-e", "64")]),
            Ok(())
        );
        assert_eq!(
            admitted(&zero, &[("-b", "8"), ("-e", "1048576"), ("-d", "int32")]),
            Err(
                "rank 1 (host hôst1, pid 1001, rxe0) runs with -e 1048576, rank 0 with -e 64: \
                 give every rank the same options"
                    .into()
            )
        );
        assert_eq!(
            admitted(&zero, &[("-b", "8"), ("-e", "64"), ("-d", "int32")]),
            Err(
                "rank 1 (host hôst1, pid 1001, rxe0) runs with -d int32, rank 0 with -d float: \
                 give every rank the same options"
                    .into()
            )
        );
        // An option one side lacks, either way.
        assert_eq!(
            admitted(&zero, &[("-b", "8"), ("-d", "float")]),
            Err(
                "rank 1 (host hôst1, pid 1001, rxe0) runs without -e, rank 0 with -e 64: give \
                 every rank the same options"
                    .into()
            )
        );
        let e = admitted(
            &zero,
            &[("-b", "8"), ("-e", "64"), ("-d", "float"), ("-r", "1")],
        );
        assert_eq!(
            e,
            Err(
                "rank 1 (host hôst1, pid 1001, rxe0) runs with -r 1, rank 0 without -r: give \
                 every rank the same options"
                    .into()
            )
        );
        assert_eq!(
            differing_term(&terms(&[("--flag", "")]), &terms(&[])).as_deref(),
            Some("runs with --flag, rank 0 without --flag")
        );
        // The world size and the rank are checked first.
        let mut table = vec![None; 2];
        table[0] = Some(record(0));
        let e = admit(&table, 2, &record(1)).unwrap_err();
        assert!(e.contains("world size 3, rank 0 with 2"), "{e}");
    }

    /// Rank 1 joining rank 0, each with the GID given (the same terms).
    fn admitted_gids(zero: &str, one: &str) -> std::result::Result<(), String> {
        let mut table = vec![None; 2];
        table[0] = Some(RankRecord {
            world_size: 2,
            gid: zero.parse().unwrap(),
            ..record(0)
        });
        let r = RankRecord {
            world_size: 2,
            gid: one.parse().unwrap(),
            ..record(1)
        };
        admit(&table, 2, &r)
    }

    #[test]
    fn a_rank_whose_gid_is_of_another_family_than_rank_0s_is_refused_naming_both() {
        let (v4, ll) = ("::ffff:192.168.77.2", "fe80::6cf8:28ff:fe65:d587");
        let advice = "an IPv4 and an IPv6 GID cannot address each other — give every rank a GID \
                      index of the same kind with -x (vl_devinfo lists each index's GID and \
                      type), or leave -x out on every rank so that each picks by the same rule \
                      (the first RoCE v2 GID with an IPv4 address)";
        assert_eq!(
            admitted_gids(ll, v4),
            Err(format!(
                "rank 1 (host hôst1, pid 1001, rxe0) uses GID 192.168.77.2 (IPv4), rank 0 (host \
                 hôst0, pid 1000, rxe0) GID fe80::6cf8:28ff:fe65:d587 (IPv6): {advice}"
            ))
        );
        assert_eq!(
            admitted_gids(v4, ll),
            Err(format!(
                "rank 1 (host hôst1, pid 1001, rxe0) uses GID fe80::6cf8:28ff:fe65:d587 (IPv6), \
                 rank 0 (host hôst0, pid 1000, rxe0) GID 192.168.77.2 (IPv4): {advice}"
            ))
        );
        // A global IPv6 GID is as far from an IPv4 one.
        let e = admitted_gids("2001:db8::2", v4).unwrap_err();
        assert!(
            e.contains("GID 192.168.77.2 (IPv4), rank 0") && e.contains("GID 2001:db8::2 (IPv6)"),
            "{e}"
        );
        // Without rank 0's GID, the first rank in with one is the measure.
        let mut table = vec![None; 3];
        table[0] = Some(RankRecord {
            gid: Gid::ZERO,
            ..record(0)
        });
        table[2] = Some(RankRecord {
            gid: v4.parse().unwrap(),
            ..record(2)
        });
        let e = admit(
            &table,
            3,
            &RankRecord {
                gid: ll.parse().unwrap(),
                ..record(1)
            },
        )
        .unwrap_err();
        assert!(
            e.contains("(IPv6), rank 2 (host hôst2, pid 1002, rxe0) GID 192.168.77.2 (IPv4)"),
            "{e}"
        );
    }

    #[test]
    fn gids_of_one_family_pass_across_hosts_and_subnets_and_a_zero_gid_is_not_compared() {
        for (zero, one) in [
            ("::ffff:192.168.77.1", "::ffff:192.168.77.2"),
            ("::ffff:192.168.77.1", "::ffff:10.1.2.3"),
            ("fe80::1", "fe80::2"),
            ("2001:db8::1", "2001:db8:1::2"),
            ("fe80::1", "2001:db8::2"),
            // A record without a device (Gid::ZERO), on either side.
            ("::", "::ffff:192.168.77.2"),
            ("::", "fe80::2"),
            ("::ffff:192.168.77.1", "::"),
            ("fe80::1", "::"),
            ("::", "::"),
        ] {
            assert_eq!(admitted_gids(zero, one), Ok(()), "{zero} and {one}");
        }
    }
}
