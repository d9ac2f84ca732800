//! What a failed completion's text says, on an mlx5 device: the errors a
//! newcomer meets first name their cause in the QP type's terms and the
//! call that makes the QP ready again.
//!
//! These tests need an mlx5 device (the software one will do): they are
//! `#[ignore]`d; run them with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_hints -- --ignored`.
//! Without the variable a test fails. Where the device lacks DC, the DC
//! test fails naming it, unless `MLX5DV_TEST_ALLOW_MISSING_CAPS=1` is set.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::time::{Duration, Instant};
use support::hw::*;
use support::rig::{connect_options, pattern, WAIT};

const QKEY: u32 = 0x1111_1111;

/// The first completion on `cq`, waited for up to [`WAIT`].
fn first_completion(cq: &mut CompletionQueue) -> WorkCompletion {
    let start = Instant::now();
    let mut got = Vec::new();
    while got.is_empty() && start.elapsed() < WAIT {
        cq.poll_each(1, |wc| got.push(WorkCompletion::from(wc)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    got.pop().expect("a completion within WAIT")
}

/// A UD receive sized to the message, without room for the 40-byte GRH
/// the device writes first, fails with a local length error whose text
/// names the GRH (`UD_GRH_BYTES`) and that a UD QP is made ready with
/// `ready`, not `connect_to`: read from the CQ, in the words for any QP;
/// as the UD QP's (`ok_for(qp.kind())`), `ready(port, qkey, psn)` only.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_ud_receive_sized_to_the_message_names_the_grh_and_ready() {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
    let opts = connect_options(&ctx);
    let ah = AddressHandle::new(&pd, &local_port_ah(&ctx, &opts).unwrap()).expect("AH");
    let mut cqs: Vec<CompletionQueue> = (0..4)
        .map(|_| CompletionQueue::new(&ctx, 16).expect("CQ"))
        .collect();
    let qp = |send: usize, recv: usize| {
        let qp = QpBuilder::ud(&pd, &cqs[send], &cqs[recv])
            .build()
            .expect("UD QP");
        qp.ready(opts.port, QKEY, 0x77).expect("UD QP to RTS");
        qp
    };
    let (mut a, mut b) = (qp(0, 1), qp(2, 3));
    const LEN: usize = 256;
    let mut mr = MemoryRegion::new(&pd, 2 * LEN, AccessFlags::LOCAL_WRITE).unwrap();
    mr.write_at(0, &pattern(LEN, 3)).unwrap();
    // The receive holds the message, and not the GRH before it.
    let sge = mr.sge_mut(LEN..2 * LEN).unwrap();
    unsafe { b.post_recv(9, &[sge.into()]).unwrap() };
    let to = UdAddr::new(&ah, b.qp_num(), QKEY);
    let sent = a
        .post_and_wait(&mut cqs[0], WAIT, |w| {
            w.wr(1, to).send().sge(mr.sge(0..LEN)?)
        })
        .unwrap();
    assert_eq!(sent[0].status, WcStatus::SUCCESS, "{sent:?}");
    // The send, through the UD QP's scoped post, carries its kind.
    assert_eq!(sent[0].qp_kind, Some(QpKind::Ud), "{sent:?}");
    let wc = first_completion(&mut cqs[3]);
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::LOC_LEN_ERR), "{wc:?}");
    let text = wc.ok().unwrap_err().to_string();
    for word in ["40-byte", "UD_GRH_BYTES", "ready (DCI, UD)"] {
        assert!(text.contains(word), "{word}: {text}");
    }
    assert!(!text.contains("ready for a DCI"), "{text}");
    let hint = wc.status.hint_for(QpKind::Ud).unwrap();
    assert!(
        hint.contains("UD_GRH_BYTES") && hint.contains("ready(port, qkey, psn)"),
        "{hint}"
    );
    assert!(!hint.contains("connect"), "{hint}");
    // The same completion as the UD QP's: its text is the UD hint.
    assert_eq!(wc.qp_kind, None, "read from a CQ: {wc:?}");
    let e = wc.ok_for(b.kind()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::WorkCompletion {
                kind: Some(QpKind::Ud),
                wr_id: 9,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.ends_with(&hint), "{text}");
    for word in ["UD_GRH_BYTES", "ready(port, qkey, psn)"] {
        assert!(text.contains(word), "{word}: {text}");
    }
    assert!(
        !text.contains("connect_to") && !text.contains("ready(psn, &opts)"),
        "{text}"
    );
    drop((a.reset(), b.reset()));
}

/// A DC write whose address carries another key than the DCT's fails with
/// a remote access error whose text names the DC key among short causes,
/// memory windows included; the DCI's own hint leads with the key.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_dci_access_error_names_the_dc_key() {
    let ctx = open();
    let Some(mut p) = DcPair::new(&ctx, SendOps::RDMA_WRITE, &[None]) else {
        return;
    };
    p.client.src.write_at(0, &pattern(MSG, 9)).unwrap();
    let remote = p.server.dst.remote(0..MSG).unwrap();
    let wrong = DcAddr::new(&p.client.ah, p.server.dct.dctn(), DCT_KEY ^ 1);
    let src = &p.client.src;
    let wcs = p.client.dcis[0]
        .post_and_wait(&mut p.client.send_cq, WAIT, |b| {
            b.wr(5, wrong).rdma_write(remote).sge(src.sge(0..MSG)?)
        })
        .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (5, WcStatus::REM_ACCESS_ERR),
        "{wcs:?}"
    );
    let text = wcs[0].ok().unwrap_err().to_string();
    for word in ["remote_dc_key", "DC key", "memory window", "rkey"] {
        assert!(text.contains(word), "{word}: {text}");
    }
    // The scoped post's completion is the DCI's: its own hint and
    // recovery, not RC's.
    assert_eq!(wcs[0].qp_kind, Some(QpKind::Dci));
    assert!(text.contains("ready(psn, &opts)"), "{text}");
    assert!(!text.contains("connect_to"), "{text}");
    let hint = wcs[0].status.hint_for(QpKind::Dci).unwrap();
    assert!(
        hint.starts_with(
            "the DCT refused access: the DcAddr's remote_dc_key is not the DCT's DC key"
        ),
        "{hint}"
    );
    assert!(
        hint.contains("ready(psn, &opts)") && hint.len() <= 300,
        "{hint}"
    );
}
