//! The bootstrap's records on the wire (in the [`crate::wire`] codec): a rank's [`RankRecord`],
//! the table rank 0 sends or its refusal, and [`admit`], rank 0's check of a rank that joins.

use crate::wire::{Reader, Width, WireError, Writer};

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
        w.u32(self.pid);
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
            pid: r.u32("pid")?,
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
            if n > crate::coll::env::MAX_WORLD as usize {
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
    Ok(())
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
            pid: 1000 + rank,
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
        }
    }

    #[test]
    fn a_record_keeps_its_layout() {
        let b = record(1).encode();
        let mut want = b"VLCB".to_vec();
        want.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 3]);
        want.extend_from_slice(&[0, 0, 0, 6]);
        want.extend_from_slice("hôst1".as_bytes());
        want.extend_from_slice(&1001u32.to_be_bytes());
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
        assert_eq!(b, want);
    }

    #[test]
    fn records_and_tables_round_trip() {
        for rank in 0..3 {
            let r = record(rank);
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
            assert!(
                e.contains("truncated") || e.contains("bad magic"),
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
        t.extend_from_slice(&(crate::coll::env::MAX_WORLD + 1).to_be_bytes());
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
    }
}
