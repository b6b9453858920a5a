//! Lesson 02 — the resources every RDMA program creates before it can move a byte.
//!
//! Read top to bottom: a protection domain (PD), memory regions (MRs) with their access flags and
//! keys, a completion queue (CQ) and a queue pair (QP) whose granted capabilities we read back.
//! Then everything is torn down, children before parents. With `--show-errors` the lesson also
//! asks for things the device must refuse, so you see what those refusals look like.
//!
//! One process, no peer: `lesson02_resources -d rxe0`.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use verbs_lab::cli::SizeRange;
use verbs_lab::verbs::{AccessFlags, DeviceList, QpCaps, QpInitAttr, QpType};
use verbs_lab_lessons::{lesson_main, outln, Narrator};

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 02: PD, MR (access flags, lkey/rkey), CQ, QP (requested vs granted caps), tear-down"
)]
struct Args {
    /// RDMA device to use (default: the first one).
    #[arg(short = 'd', long = "ib-dev", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    ib_dev: Option<String>,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1,
          value_parser = verbs_lab::cli::ib_port())]
    ib_port: u8,
    /// Bytes to register in each memory region, 1 to 1G (suffixes K, M, G).
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = SizeRange::new(1..=1u32 << 30))]
    size: u32,
    /// Entries to ask for in the completion queue.
    #[arg(long = "cqe", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..))]
    cqe: u32,
    /// Send-queue depth to ask for.
    #[arg(long = "max-send-wr", default_value_t = 64)]
    max_send_wr: u32,
    /// Receive-queue depth to ask for.
    #[arg(long = "max-recv-wr", default_value_t = 256)]
    max_recv_wr: u32,
    /// Scatter/gather elements per request to ask for (send and receive).
    #[arg(long = "max-sge", default_value_t = 1)]
    max_sge: u32,
    /// Inline payload bytes to ask for.
    #[arg(long = "max-inline", default_value_t = 64)]
    max_inline: u32,
    /// Also make requests the device must refuse, and show the errors.
    #[arg(long = "show-errors")]
    show_errors: bool,
    /// No narration: print only results.
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,
}

fn run(args: &Args) -> Result<()> {
    let n = Narrator { quiet: args.quiet };
    let size = args.size as usize;

    // 1. The device, as lesson 01 showed. Its limits bound every request below.
    n.step(
        1,
        "Open the device (ibv_get_device_list, ibv_open_device, ibv_query_device)",
    );
    let ctx = DeviceList::open(args.ib_dev.as_deref()).context("opening the RDMA device")?;
    let dev = ctx.query_device().context("ibv_query_device")?;
    let port = ctx
        .query_port(args.ib_port)
        .with_context(|| format!("ibv_query_port on {} port {}", ctx.name(), args.ib_port))?;
    n.say(format!(
        "opened {} (port {} is {}, link layer {})",
        ctx.name(),
        args.ib_port,
        port.state,
        port.link_layer
    ));
    n.say(format!(
        "device limits: max_qp_wr {}, max_sge {}, max_cqe {}, max_mr_size {}, max_pd {}, max_qp {}",
        dev.max_qp_wr, dev.max_sge, dev.max_cqe, dev.max_mr_size, dev.max_pd, dev.max_qp
    ));

    // 2. A protection domain: the fence around everything that follows. A QP may use only MRs of
    //    its own PD, so one PD per application (or per tenant) is the usual choice.
    n.step(2, "Allocate a protection domain (ibv_alloc_pd)");
    let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
    n.say(format!(
        "PD handle {} on {}: every MR and QP below belongs to it",
        pd.handle(),
        pd.device_name()
    ));

    // 3. Memory regions. Registration pins the pages and gives the NIC a translation for them;
    //    the access flags say what the NIC may do with them *on its own*:
    //    - no flag at all: the NIC may only read (gather the payload of our SEND or WRITE);
    //    - LOCAL_WRITE: the NIC may write into it for us (incoming SENDs land in posted receive
    //      buffers, RDMA READ results and atomic old values land here);
    //    - REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC: a peer holding the rkey may write, read,
    //      or run atomics on it without our CPU taking part. REMOTE_WRITE and REMOTE_ATOMIC need
    //      LOCAL_WRITE too (ibv_reg_mr(3)).
    n.step(3, "Register memory (ibv_reg_mr)");
    let send_mr = pd
        .reg_mr(size, AccessFlags::EMPTY)
        .context("ibv_reg_mr (send buffer)")?;
    n.say(format!(
        "send MR: {} bytes at {:#x}, access {} — the NIC only reads it (the payload of our sends)",
        send_mr.len(),
        send_mr.addr(),
        send_mr.access()
    ));
    n.say(format!(
        "  lkey {:#010x}  rkey {:#010x}",
        send_mr.lkey(),
        send_mr.rkey()
    ));
    let recv_access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let recv_mr = pd
        .reg_mr(size, recv_access)
        .context("ibv_reg_mr (receive/target buffer)")?;
    n.say(format!(
        "target MR: {} bytes at {:#x}, access {}",
        recv_mr.len(),
        recv_mr.addr(),
        recv_mr.access()
    ));
    n.say("  LOCAL_WRITE : incoming SENDs may land here (posted receives)");
    n.say("  REMOTE_WRITE: a peer with the rkey may RDMA WRITE here");
    n.say("  REMOTE_READ : a peer with the rkey may RDMA READ from here");
    n.say(format!(
        "  lkey {:#010x}  rkey {:#010x}",
        recv_mr.lkey(),
        recv_mr.rkey()
    ));
    n.say("lkey: what OUR work requests put in their scatter/gather elements to name this memory;");
    n.say(
        "rkey: what we hand to a PEER so its RDMA READ/WRITE/atomics can name it. Giving away an",
    );
    n.say("rkey is giving access: only MRs with REMOTE_* flags accept remote requests at all.");
    if send_mr.rkey() == 0 {
        n.say(format!(
            "the send MR's rkey is 0: it allows no remote access, so {} hands out no rkey",
            ctx.name()
        ));
    }
    if recv_mr.lkey() == recv_mr.rkey() {
        n.say(format!(
            "the target MR's lkey equals its rkey on {}; other NICs differ: never use one for the other",
            ctx.name()
        ));
    }

    // 4. A completion queue: where the NIC reports finished work requests. Providers round the
    //    size up, so read back what was granted.
    n.step(4, "Create a completion queue (ibv_create_cq)");
    let cq = ctx.create_cq(args.cqe, None).context("ibv_create_cq")?;
    n.say(format!(
        "CQ: asked for {} entries, granted {}",
        args.cqe,
        cq.capacity()
    ));

    // 5. A queue pair: a send queue and a receive queue, each tied to a CQ (here the same one).
    //    The sizes are a request; the provider may grant more, and ibv_query_qp tells what.
    n.step(
        5,
        "Create a queue pair (ibv_create_qp, then ibv_query_qp for the granted caps)",
    );
    let asked = QpCaps {
        max_send_wr: args.max_send_wr,
        max_recv_wr: args.max_recv_wr,
        max_send_sge: args.max_sge,
        max_recv_sge: args.max_sge,
        max_inline_data: args.max_inline,
    };
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            qp_type: QpType::Rc,
            caps: asked,
            sq_sig_all: false,
        })
        .context("ibv_create_qp")?;
    let got = qp.caps();
    n.say(format!(
        "RC QP number {:#08x}, state {} (lesson 03 walks it to RTS)",
        qp.qpn(),
        qp.state().context("ibv_query_qp")?
    ));
    n.say(format!(
        "{:<16} {:>10} {:>10}",
        "capability", "requested", "granted"
    ));
    for (name, a, g) in [
        ("max_send_wr", asked.max_send_wr, got.max_send_wr),
        ("max_recv_wr", asked.max_recv_wr, got.max_recv_wr),
        ("max_send_sge", asked.max_send_sge, got.max_send_sge),
        ("max_recv_sge", asked.max_recv_sge, got.max_recv_sge),
        (
            "max_inline_data",
            asked.max_inline_data,
            got.max_inline_data,
        ),
    ] {
        n.say(format!("{name:<16} {a:>10} {g:>10}"));
    }
    n.say("post more than the granted depth and ibv_post_send/recv fails with ENOMEM; send");
    n.say("more inline bytes than max_inline_data and ibv_post_send fails too (EINVAL on rxe,");
    n.say("ENOMEM on mlx5: check for failure, not for one errno).");
    if args.quiet {
        // Results only: the granted capabilities and the keys, one line each.
        outln!(
            "qpn {:#x} max_send_wr {} max_recv_wr {} max_send_sge {} max_recv_sge {} max_inline_data {}",
            qp.qpn(),
            got.max_send_wr,
            got.max_recv_wr,
            got.max_send_sge,
            got.max_recv_sge,
            got.max_inline_data
        );
        outln!(
            "send_mr lkey {:#x} rkey {:#x}; target_mr lkey {:#x} rkey {:#x}",
            send_mr.lkey(),
            send_mr.rkey(),
            recv_mr.lkey(),
            recv_mr.rkey()
        );
    }

    // 6. Optional: requests the device or the library must refuse. Each error names the verb,
    //    the errno and what to do.
    if args.show_errors {
        n.step(6, "Requests that must be refused (--show-errors)");
        let too_deep = one_past(dev.max_qp_wr);
        n.say(format!(
            "(a) ibv_create_qp with max_send_wr {too_deep} (device max_qp_wr is {}):",
            dev.max_qp_wr
        ));
        let r = pd.create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            qp_type: QpType::Rc,
            caps: QpCaps {
                max_send_wr: too_deep,
                ..asked
            },
            sq_sig_all: false,
        });
        say_refusal(&n, r.map(|q| format!("QP {:#x}", q.qpn())));

        n.say("(b) ibv_reg_mr with REMOTE_WRITE but without LOCAL_WRITE (the safe layer checks");
        n.say("    this rule of ibv_reg_mr(3) itself, before calling the verb):");
        let r = pd.reg_mr(size, AccessFlags::REMOTE_WRITE);
        say_refusal(&n, r.map(|m| format!("MR lkey {:#x}", m.lkey())));

        let too_many = one_past(dev.max_cqe);
        n.say(format!(
            "(c) ibv_create_cq with {too_many} entries (device max_cqe is {}):",
            dev.max_cqe
        ));
        let r = ctx.create_cq(too_many, None);
        say_refusal(&n, r.map(|c| format!("CQ of {} entries", c.capacity())));
    }

    // 7. Tear-down, children before parents: a QP uses its CQ and PD, an MR belongs to its PD,
    //    everything belongs to the device context. In C, ibv_dealloc_pd with an MR still
    //    registered fails with EBUSY, and ibv_destroy_cq under a live QP too. Here every child
    //    holds an Arc of its parent's handle, so a parent is freed only after its last child:
    //    the wrong order cannot happen even if the drops below were shuffled. We drop explicitly
    //    anyway, to show the order the hardware needs.
    n.step(7, "Tear down, children before parents");
    let qpn = qp.qpn();
    drop(qp);
    n.say(format!(
        "ibv_destroy_qp   QP {qpn:#08x} (releases the CQ and the PD)"
    ));
    drop(cq);
    n.say("ibv_destroy_cq   the CQ (no QP uses it any more)");
    let (l1, l2) = (send_mr.lkey(), recv_mr.lkey());
    drop(send_mr);
    drop(recv_mr);
    n.say(format!(
        "ibv_dereg_mr     MRs lkey {l1:#x} and {l2:#x} (the NIC can no longer reach the buffers, so they are freed)"
    ));
    let handle = pd.handle();
    drop(pd);
    n.say(format!("ibv_dealloc_pd   PD handle {handle}"));
    let name = ctx.name().to_string();
    drop(ctx);
    n.say(format!("ibv_close_device {name}"));
    if !args.quiet {
        outln!("\nDone: all resources created, read back and released in order.");
    }
    Ok(())
}

/// Narrates a request that should have been refused: the error, or a note that it was granted.
/// One more than a device limit (`ibv_device_attr`'s `max_qp_wr`, `max_cqe`): the smallest
/// request the device must refuse.
fn one_past(limit: i32) -> u32 {
    u32::try_from(limit).unwrap_or(u32::MAX).saturating_add(1)
}

fn say_refusal<T: std::fmt::Display>(
    n: &Narrator,
    r: std::result::Result<T, verbs_lab::verbs::VerbsError>,
) {
    match r {
        Err(e) => n.say(format!("    refused: {e}")),
        Ok(what) => n.say(format!(
            "    unexpectedly granted ({what}); this provider is more lenient than the spec"
        )),
    }
}

fn main() -> ExitCode {
    lesson_main(
        "lesson02_resources",
        |_: &Args| Ok(()),
        |a: &Args, ()| run(a),
    )
}
