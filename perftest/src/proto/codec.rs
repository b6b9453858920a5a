//! The record of each message: [`encode`] and the strict [`decode`] (see the module's doc).

use verbs_lab::wire::{clip, Reader, Width, WireError, Writer};

use super::*;

// ---- encoding ------------------------------------------------------------------------------

/// Writes text clipped to `max` bytes (at most the width's limit), so it always fits.
fn clipped(w: &mut Writer, width: Width, s: &str, max: usize) {
    w.text(width, clip(s, max.min(width.max())))
        .expect("text clipped to its width fits");
}

/// The record of a message (the payload of one frame).
pub fn encode(msg: &Msg) -> Vec<u8> {
    let mut w = Writer::with_capacity(64);
    w.u8(msg.msg_type().code());
    match msg {
        Msg::Hello(h) => {
            w.raw(&MAGIC);
            w.u16(h.version);
            clipped(&mut w, Width::U8, &h.tool, MAX_NAME);
            w.u8(h.test.code());
            w.u8(h.metric.code());
            let n = h.params.len().min(MAX_PARAMS);
            w.u8(n as u8);
            for (k, v) in &h.params[..n] {
                clipped(&mut w, Width::U8, k, MAX_KEY);
                clipped(&mut w, Width::U8, v, MAX_VALUE);
            }
        }
        Msg::Accept(a) => {
            w.u16(a.version);
            clipped(&mut w, Width::U8, &a.tool, MAX_NAME);
        }
        Msg::Error(text) => {
            let clean: String = text
                .chars()
                .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
                .collect();
            clipped(&mut w, Width::U16, &clean, MAX_TEXT);
        }
        Msg::Endpoints(e) => {
            clipped(&mut w, Width::U8, &e.device, MAX_NAME);
            w.u32(e.active_mtu);
            w.u32(e.max_msg_sz);
            w.u8(e.max_dest_rd_atomic);
            w.u32(e.qkey);
            let n = e.qps.len().min(MAX_QPS);
            w.u16(n as u16);
            for q in &e.qps[..n] {
                w.u32(q.qpn);
                w.u32(q.psn);
                w.u16(q.lid);
                w.raw(&q.gid.0);
                w.u32(q.rkey);
                w.u64(q.addr);
                w.u32(q.slot_stride);
                w.u32(q.slots);
            }
        }
        Msg::Barrier(s) => {
            w.u8(s.phase.code());
            w.u64(s.size);
        }
        Msg::Tally(t) => {
            w.u8(t.phase.code());
            w.u64(t.size);
            let n = t.per_qp.len().min(MAX_QPS);
            w.u16(n as u16);
            for c in &t.per_qp[..n] {
                w.u64(*c);
            }
        }
        Msg::Result(r) => {
            w.u64(r.bytes);
            w.u64(r.iterations);
            w.f64(r.peak_bps);
            w.f64(r.avg_bps);
            w.f64(r.msg_rate_mpps);
            w.u64(r.elapsed_ns);
        }
        // The type byte is the whole record.
        Msg::Heartbeat => {}
    }
    w.into_bytes()
}

// ---- decoding ------------------------------------------------------------------------------

type PResult<T> = Result<T, ProtoError>;

/// A finite, non-negative number.
fn rate(r: &mut Reader<'_>, field: &str) -> PResult<f64> {
    let v = r.f64(field)?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad(
            field,
            format!("{v} is not a finite non-negative number"),
        ));
    }
    Ok(v)
}

/// Text with a one-byte length, at most `max` bytes.
fn str8<'a>(r: &mut Reader<'a>, max: usize, field: &str) -> PResult<&'a str> {
    Ok(r.text(Width::U8, field, max)?)
}

fn bad(field: &str, detail: impl Into<String>) -> ProtoError {
    ProtoError::Wire(WireError::invalid(field, detail))
}

/// A name made of `[a-z0-9_]`, 1..=max characters.
fn check_ident(s: &str, field: &str) -> PResult<()> {
    if s.is_empty() {
        return Err(bad(field, "empty"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
    {
        return Err(bad(
            field,
            format!("character {c:?} is not one of [a-z0-9_]"),
        ));
    }
    Ok(())
}

/// Printable ASCII (what parameter values and device names are made of).
fn check_printable(s: &str, field: &str) -> PResult<()> {
    if s.is_empty() {
        return Err(bad(field, "empty"));
    }
    if let Some(c) = s.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(bad(
            field,
            format!("character {c:?} is not printable ASCII"),
        ));
    }
    Ok(())
}

/// Parses one record. Refuses anything that is not exactly a message of this version.
pub fn decode(buf: &[u8]) -> Result<Msg, ProtoError> {
    if buf.is_empty() {
        return Err(ProtoError::Empty);
    }
    if buf.len() > MAX_FRAME {
        return Err(ProtoError::Wire(WireError::TooLong {
            what: "record".into(),
            len: buf.len(),
            max: MAX_FRAME,
        }));
    }
    let mut r = Reader::new(buf);
    let t = r.u8("type")?;
    let msg = match MsgType::from_code(t).ok_or(ProtoError::UnknownType(t))? {
        MsgType::Hello => Msg::Hello(decode_hello(&mut r)?),
        MsgType::Accept => {
            let version = decode_version(&mut r)?;
            let tool = str8(&mut r, MAX_NAME, "tool name")?;
            check_ident(tool, "tool name")?;
            Msg::Accept(Accept {
                version,
                tool: tool.to_string(),
            })
        }
        MsgType::Error => {
            let text = r.text(Width::U16, "error text", MAX_TEXT)?;
            if text.is_empty() {
                return Err(bad("error text", "empty"));
            }
            if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\n') {
                return Err(bad("error text", format!("control character {c:?}")));
            }
            Msg::Error(text.to_string())
        }
        MsgType::Endpoints => Msg::Endpoints(decode_endpoints(&mut r)?),
        MsgType::Sync => {
            let phase = r.code("phase")?;
            let size = r.u64("size")?;
            Msg::Barrier(Barrier { phase, size })
        }
        MsgType::Tally => {
            let phase = r.code("phase")?;
            let size = r.u64("size")?;
            let n = r.length(Width::U16, "tally", MAX_QPS)?;
            let mut per_qp = Vec::with_capacity(n);
            for _ in 0..n {
                per_qp.push(r.u64("tally count")?);
            }
            Msg::Tally(Tally {
                phase,
                size,
                per_qp,
            })
        }
        MsgType::Result => Msg::Result(WireRow {
            bytes: r.u64("bytes")?,
            iterations: r.u64("iterations")?,
            peak_bps: rate(&mut r, "peak bandwidth")?,
            avg_bps: rate(&mut r, "average bandwidth")?,
            msg_rate_mpps: rate(&mut r, "message rate")?,
            elapsed_ns: r.u64("elapsed time")?,
        }),
        MsgType::Heartbeat => Msg::Heartbeat,
    };
    r.finish()?;
    Ok(msg)
}

/// The protocol version of a HELLO or ACCEPT: only this build's.
fn decode_version(r: &mut Reader<'_>) -> PResult<u16> {
    let version = r.u16("version")?;
    if version != VERSION {
        return Err(ProtoError::Version { peer: version });
    }
    Ok(version)
}

/// HELLO after its type: the magic, the version, the tool and its parameters (each name once).
fn decode_hello(r: &mut Reader<'_>) -> PResult<Hello> {
    let magic = r.array::<4>("magic")?;
    if magic != MAGIC {
        return Err(ProtoError::BadMagic(magic));
    }
    let version = decode_version(r)?;
    let tool = str8(r, MAX_NAME, "tool name")?;
    check_ident(tool, "tool name")?;
    let test = r.code("test kind")?;
    let metric = r.code("metric")?;
    let n = r.length(Width::U8, "parameter list", MAX_PARAMS)?;
    let mut params: Vec<(String, String)> = Vec::with_capacity(n);
    for _ in 0..n {
        let k = str8(r, MAX_KEY, "parameter name")?;
        check_ident(k, "parameter name")?;
        let v = str8(r, MAX_VALUE, "parameter value")?;
        check_printable(v, "parameter value")?;
        if params.iter().any(|(pk, _)| pk == k) {
            return Err(bad("parameter list", format!("'{k}' appears twice")));
        }
        params.push((k.to_string(), v.to_string()));
    }
    Ok(Hello {
        version,
        tool: tool.to_string(),
        test,
        metric,
        params,
    })
}

/// ENDPOINTS after its type: the device's facts, then at least one QP.
fn decode_endpoints(r: &mut Reader<'_>) -> PResult<Endpoints> {
    let device = str8(r, MAX_NAME, "device name")?;
    check_printable(device, "device name")?;
    let active_mtu = r.u32("active MTU")?;
    if Mtu::from_bytes(active_mtu).is_none() {
        return Err(bad("active MTU", format!("{active_mtu} is not an IB MTU")));
    }
    let max_msg_sz = r.u32("max message size")?;
    if max_msg_sz == 0 {
        return Err(bad("max message size", "0"));
    }
    let max_dest_rd_atomic = r.u8("responder resources")?;
    let qkey = r.u32("Q_Key")?;
    let n = r.length(Width::U16, "QP list", MAX_QPS)?;
    if n == 0 {
        return Err(bad("QP list", "no QP"));
    }
    let mut qps = Vec::with_capacity(n);
    for _ in 0..n {
        qps.push(decode_qp_endpoint(r)?);
    }
    Ok(Endpoints {
        device: device.to_string(),
        active_mtu,
        max_msg_sz,
        max_dest_rd_atomic,
        qkey,
        qps,
    })
}

/// One QP of ENDPOINTS: a 24-bit QPN and PSN, and slots that do not wrap the address space.
fn decode_qp_endpoint(r: &mut Reader<'_>) -> PResult<QpEndpoint> {
    let qpn = r.u32("QPN")?;
    let psn = r.u32("PSN")?;
    let lid = r.u16("LID")?;
    let gid = Gid(r.array::<16>("GID")?);
    let rkey = r.u32("rkey")?;
    let addr = r.u64("address")?;
    let slot_stride = r.u32("slot stride")?;
    let slots = r.u32("slot count")?;
    if qpn > 0xff_ffff || qpn == 0 {
        return Err(bad("QPN", format!("{qpn:#x} is not a 24-bit QP number")));
    }
    if psn > 0xff_ffff {
        return Err(bad("PSN", format!("{psn:#x} is wider than 24 bits")));
    }
    if slot_stride == 0 || slots == 0 {
        return Err(bad(
            "slots",
            format!("{slots} slots of {slot_stride} bytes"),
        ));
    }
    let span = u64::from(slot_stride) * u64::from(slots);
    if addr.checked_add(span).is_none() {
        return Err(bad(
            "address",
            format!("{addr:#x} + {span} bytes wraps around"),
        ));
    }
    Ok(QpEndpoint {
        qpn,
        psn,
        lid,
        gid,
        rkey,
        addr,
        slot_stride,
        slots,
    })
}
