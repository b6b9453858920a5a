//! What a worker sends back — [`WorkerReport`]: its pid, its run header, its rows and when
//! each was measured — in a small strict versioned encoding over `verbs_lab::wire`, cut into
//! chunks that fit a `WorkerMsg::Result` ([`chunks`], [`Assembler`]).

use std::time::Duration;

use verbs_lab::mq;
use verbs_lab::wire::{Reader, WireError, Writer};

use crate::measure::result::{BwRow, QpSettings, RunInfo, Span};

/// The first bytes of an encoded [`WorkerReport`].
pub const REPORT_MAGIC: [u8; 4] = *b"VLPR";
/// The encoding version this build writes and the only one it reads (2: with the spans).
pub const REPORT_VERSION: u8 = 2;
/// Bytes of one encoded row: a [`BwRow`] (48) and its [`Span`] (16).
const ROW_LEN: usize = 64;

/// What a worker sends back: its pid, its run's header (with the CPU it ran on), its rows and,
/// for each row, when the measurement ran on the shared monotonic clock.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerReport {
    pub pid: u32,
    pub info: RunInfo,
    pub rows: Vec<BwRow>,
    /// One per row.
    pub spans: Vec<Span>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl WorkerReport {
    /// The wire form (big-endian): magic `VLPR`, version, pid, the rows (count, then for each
    /// bytes, iterations, peak, average, message rate as IEEE-754 bits, elapsed ns, start ns,
    /// end ns), then every field of the header in declaration order (texts as a 16-bit length
    /// and UTF-8, options as a 0/1 tag and the value). Fails on a text longer than 65535 bytes,
    /// or spans that do not match the rows one to one.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        if self.spans.len() != self.rows.len() {
            return Err(WireError::invalid(
                "spans",
                format!("{} spans for {} rows", self.spans.len(), self.rows.len()),
            ));
        }
        let mut w = Writer::with_capacity(512 + self.rows.len() * ROW_LEN);
        w.raw(&REPORT_MAGIC);
        w.u8(REPORT_VERSION);
        w.u32(self.pid);
        w.count(self.rows.len())?;
        for (r, s) in self.rows.iter().zip(&self.spans) {
            w.u64(r.bytes);
            w.u64(r.iterations);
            w.f64(r.peak_bps);
            w.f64(r.avg_bps);
            w.f64(r.msg_rate_mpps);
            w.u64(nanos(r.elapsed));
            w.u64(s.start_ns);
            w.u64(s.end_ns);
        }
        encode_info(&mut w, &self.info)?;
        Ok(w.into_bytes())
    }

    /// Parses exactly one encoded report: a wrong magic or version, a truncation, trailing
    /// bytes, a bad tag or boolean, or text that is not UTF-8 is refused with the reason.
    pub fn decode(b: &[u8]) -> Result<WorkerReport, WireError> {
        let mut r = Reader::new(b);
        let magic = r.take(4, "the magic")?;
        if magic != REPORT_MAGIC {
            return Err(WireError::invalid(
                "the magic",
                format!("bad magic {magic:02x?} (expected \"VLPR\"): not a worker report"),
            ));
        }
        let version = r.u8("the version")?;
        if version != REPORT_VERSION {
            return Err(WireError::invalid(
                "the version",
                format!(
                    "report version {version} is not understood by this build (it reads version \
                     {REPORT_VERSION}): are the workers the same build as the coordinator?"
                ),
            ));
        }
        let pid = r.u32("the pid")?;
        let nrows = r.count("the rows announced", ROW_LEN)?;
        let mut rows = Vec::with_capacity(nrows);
        let mut spans = Vec::with_capacity(nrows);
        for _ in 0..nrows {
            rows.push(BwRow {
                bytes: r.u64("a row's bytes")?,
                iterations: r.u64("a row's iterations")?,
                peak_bps: r.f64("a row's peak")?,
                avg_bps: r.f64("a row's average")?,
                msg_rate_mpps: r.f64("a row's message rate")?,
                elapsed: Duration::from_nanos(r.u64("a row's elapsed time")?),
            });
            spans.push(Span {
                start_ns: r.u64("a row's start")?,
                end_ns: r.u64("a row's end")?,
            });
        }
        let info = decode_info(&mut r)?;
        r.finish()?;
        Ok(WorkerReport {
            pid,
            info,
            rows,
            spans,
        })
    }
}

fn encode_info(w: &mut Writer, i: &RunInfo) -> Result<(), WireError> {
    w.str(&i.tool)?;
    w.str(&i.version)?;
    w.u8(i.test.code());
    w.u8(i.metric.code());
    w.str(&i.role)?;
    w.str(&i.conn_type)?;
    w.str(&i.device)?;
    w.u8(i.ib_port);
    w.str(&i.link_layer)?;
    w.u32(i.gid_index);
    w.str(&i.gid)?;
    w.str(&i.remote_gid)?;
    encode_qp(w, &i.qp);
    w.bool(i.atomic_type.is_some());
    if let Some(a) = &i.atomic_type {
        w.str(a)?;
    }
    w.bool(i.bidirectional);
    w.bool(i.with_imm);
    w.bool(i.use_events);
    w.bool(i.duration.is_some());
    if let Some(d) = i.duration {
        w.u64(nanos(d));
    }
    w.u64(i.iterations);
    w.u64(i.warmup_iterations);
    w.bool(i.cpu.is_some());
    if let Some((cpu, why)) = &i.cpu {
        let c = u32::try_from(*cpu)
            .map_err(|_| WireError::invalid("cpu", format!("CPU {cpu} is out of range")))?;
        w.u32(c);
        w.str(why)?;
    }
    w.bool(i.report_gbits);
    w.u8(i.qp_timeout);
    w.strs(&i.local_endpoints)?;
    w.strs(&i.remote_endpoints)?;
    Ok(())
}

fn decode_info(r: &mut Reader<'_>) -> Result<RunInfo, WireError> {
    let tool = r.str("tool")?;
    let version = r.str("version")?;
    let test = r.code("test")?;
    let metric = r.code("metric")?;
    let role = r.str("role")?;
    let conn_type = r.str("connection type")?;
    let device = r.str("device")?;
    let ib_port = r.u8("ib port")?;
    let link_layer = r.str("link layer")?;
    let gid_index = r.u32("GID index")?;
    let gid = r.str("GID")?;
    let remote_gid = r.str("remote GID")?;
    let qp = decode_qp(r)?;
    let atomic_type = if r.tag("atomic type")? {
        Some(r.str("atomic type")?)
    } else {
        None
    };
    let bidirectional = r.bool("bidirectional")?;
    let with_imm = r.bool("with immediate")?;
    let use_events = r.bool("events")?;
    let duration = if r.tag("duration")? {
        Some(Duration::from_nanos(r.u64("duration")?))
    } else {
        None
    };
    let iterations = r.u64("iterations")?;
    let warmup_iterations = r.u64("warm-up iterations")?;
    let cpu = if r.tag("cpu")? {
        Some((r.u32("cpu")? as usize, r.str("cpu reason")?))
    } else {
        None
    };
    Ok(RunInfo {
        tool,
        version,
        test,
        metric,
        role,
        conn_type,
        device,
        ib_port,
        link_layer,
        gid_index,
        gid,
        remote_gid,
        qp,
        atomic_type,
        bidirectional,
        // --reversed is refused with --procs.
        reversed: false,
        with_imm,
        use_events,
        duration,
        iterations,
        warmup_iterations,
        cpu,
        report_gbits: r.bool("report_gbits")?,
        qp_timeout: r.u8("qp timeout")?,
        // -R is refused with --procs, so a worker's run never uses it.
        rdma_cm: false,
        local_endpoints: r.strs("local endpoints")?,
        remote_endpoints: r.strs("remote endpoints")?,
    })
}

/// The QP settings: nine u32s, in declaration order.
fn encode_qp(w: &mut Writer, q: &QpSettings) {
    for v in [
        q.mtu,
        q.qps,
        q.tx_depth,
        q.rx_depth,
        q.post_list,
        q.recv_post_list,
        q.cq_moderation,
        q.max_inline,
        q.outstanding_reads,
    ] {
        w.u32(v);
    }
}

/// [`encode_qp`]'s nine u32s, read in the same order (a struct expression evaluates its
/// fields in the order written).
fn decode_qp(r: &mut Reader<'_>) -> Result<QpSettings, WireError> {
    Ok(QpSettings {
        mtu: r.u32("MTU")?,
        qps: r.u32("QP count")?,
        tx_depth: r.u32("tx depth")?,
        rx_depth: r.u32("rx depth")?,
        post_list: r.u32("post list")?,
        recv_post_list: r.u32("receive post list")?,
        cq_moderation: r.u32("CQ moderation")?,
        max_inline: r.u32("max inline")?,
        outstanding_reads: r.u32("outstanding reads")?,
    })
}

/// Bytes of a chunk's header: its index and the number of chunks (u16 each, big-endian).
pub const CHUNK_HEADER: usize = 4;
/// Bytes of report a chunk carries at most: a chunk fills one `WorkerMsg::Result`.
pub const CHUNK_DATA: usize = mq::MAX_RESULT - CHUNK_HEADER;

/// Cuts an encoded report into `WorkerMsg::Result` payloads: `index, count` then up to
/// [`CHUNK_DATA`] bytes; at least one chunk. Fails beyond 65535 chunks (~470 MB).
pub fn chunks(blob: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let parts: Vec<&[u8]> = if blob.is_empty() {
        vec![blob]
    } else {
        blob.chunks(CHUNK_DATA).collect()
    };
    let count = u16::try_from(parts.len())
        .map_err(|_| format!("a report of {} bytes needs too many chunks", blob.len()))?;
    Ok(parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut c = Vec::with_capacity(CHUNK_HEADER + p.len());
            c.extend_from_slice(&(i as u16).to_be_bytes());
            c.extend_from_slice(&count.to_be_bytes());
            c.extend_from_slice(p);
            c
        })
        .collect())
}

/// Puts chunks back together, strictly in order.
#[derive(Debug, Default)]
pub struct Assembler {
    data: Vec<u8>,
    next: u16,
    count: Option<u16>,
}

impl Assembler {
    /// Takes the next chunk; returns the whole report once the last chunk arrived. A chunk out
    /// of order, a changed count, an empty middle chunk or a chunk after the last is refused.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Option<Vec<u8>>, String> {
        if chunk.len() < CHUNK_HEADER {
            return Err(format!(
                "a result chunk of {} bytes is shorter than its header",
                chunk.len()
            ));
        }
        let index = u16::from_be_bytes([chunk[0], chunk[1]]);
        let count = u16::from_be_bytes([chunk[2], chunk[3]]);
        if count == 0 {
            return Err("a result chunk announces 0 chunks".into());
        }
        match self.count {
            Some(c) if self.next >= c => {
                return Err(format!("result chunk {index} after the last of {c}"))
            }
            Some(c) if c != count => {
                return Err(format!(
                    "result chunk {index} announces {count} chunks, earlier ones {c}"
                ))
            }
            _ => {}
        }
        if index != self.next {
            return Err(format!(
                "result chunk {index} arrived, expected chunk {}",
                self.next
            ));
        }
        let data = &chunk[CHUNK_HEADER..];
        if index + 1 < count && data.len() != CHUNK_DATA {
            return Err(format!(
                "result chunk {index} of {count} carries {} bytes, not {CHUNK_DATA}",
                data.len()
            ));
        }
        self.count = Some(count);
        self.next += 1;
        self.data.extend_from_slice(data);
        Ok((self.next == count).then(|| std::mem::take(&mut self.data)))
    }
}
