//! The bootstrap's records on the wire: [`Put`] / [`Get`], a rank's [`RankRecord`], the table
//! rank 0 sends, and [`admit`], rank 0's check of a rank that joins.

use super::*;

// ---------------------------------------------------------------------------------------------
// Encoding

#[derive(Default)]
pub struct Put(pub Vec<u8>);

impl Put {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }
}

pub struct Get<'a> {
    b: &'a [u8],
    what: &'a str,
}

impl<'a> Get<'a> {
    pub fn new(b: &'a [u8], what: &'a str) -> Self {
        Get { b, what }
    }
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err(format!("{} is truncated", self.what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> std::result::Result<u16, String> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }
    pub fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }
    pub fn bytes(&mut self) -> std::result::Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> std::result::Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| format!("{}: not UTF-8", self.what))
    }
    pub fn end(&self) -> std::result::Result<(), String> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(format!("{} has {} bytes too many", self.what, self.b.len()))
        }
    }
}

impl RankRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Put::default();
        p.0.extend_from_slice(MAGIC);
        p.u16(self.version)
            .u32(self.rank)
            .u32(self.world_size)
            .str(&self.host)
            .u32(self.pid)
            .str(&self.device)
            .u32(self.cpu.map_or(u32::MAX, |c| c))
            .u16(self.lid);
        p.0.extend_from_slice(&self.gid.0);
        p.u32(self.mtu)
            .u32(self.left_qpn)
            .u32(self.left_psn)
            .u32(self.right_qpn)
            .u32(self.right_psn)
            .u64(self.slots.addr)
            .u32(self.slots.rkey)
            .u32(self.slots.len)
            .u32(self.slot_bytes)
            .u32(self.nslots);
        p.0
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
        let mut g = Get::new(&b[6..], "an endpoint record");
        let rank = g.u32()?;
        let world_size = g.u32()?;
        let host = g.str()?;
        let pid = g.u32()?;
        let device = g.str()?;
        let cpu = Some(g.u32()?).filter(|c| *c != u32::MAX);
        let lid = g.u16()?;
        let mut gid = [0u8; 16];
        for b in &mut gid {
            *b = g.u8()?;
        }
        let r = RankRecord {
            rank,
            world_size,
            version,
            host,
            pid,
            device,
            cpu,
            lid,
            gid: Gid(gid),
            mtu: g.u32()?,
            left_qpn: g.u32()?,
            left_psn: g.u32()?,
            right_qpn: g.u32()?,
            right_psn: g.u32()?,
            slots: RemoteBuf {
                addr: g.u64()?,
                rkey: g.u32()?,
                len: g.u32()?,
            },
            slot_bytes: g.u32()?,
            nslots: g.u32()?,
        };
        g.end()?;
        Ok(r)
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
    let mut p = Put::default();
    p.u8(b'T').u32(t.len() as u32);
    for r in t {
        p.bytes(&r.encode());
    }
    p.0
}

pub(super) fn decode_reply(b: &[u8]) -> std::result::Result<Vec<RankRecord>, String> {
    let mut g = Get::new(b, "rank 0's table");
    match g.u8()? {
        b'T' => {
            let n = g.u32()? as usize;
            if n > crate::coll::env::MAX_WORLD as usize {
                return Err(format!("a table of {n} ranks"));
            }
            let t = (0..n)
                .map(|_| RankRecord::decode(g.bytes()?))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            g.end()?;
            Ok(t)
        }
        b'F' => Err(format!("rank 0 refused the job: {}", g.str()?)),
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
