//! UD work requests against the recording provider: the UD address after
//! each builder and its data, and the refusals that reach it not at all.

use super::*;

const QKEY: u32 = 0x1111_1111;

#[test]
fn ud_work_requests_end_with_their_ud_address() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let ah_ptr = &mut *fx.ah_raw as *mut ffi::ibv_ah;
    let mut qp = fx.qp::<UnreliableDatagram>(
        SendOps::SEND | SendOps::SEND_WITH_IMM,
        Mlx5SendOps::empty(),
        None,
    );
    let ah = unsafe {
        crate::addressing::ah::AddressHandle::fake(&fx.pd, NonNull::new(ah_ptr).unwrap())
    };
    let to = UdAddr::new(&ah, 0x00AB_CDEF, QKEY);
    let mut b = qp.batch();
    b.wr(1, to)
        .signaled()
        .send()
        .sge(mr.sge(0..64).unwrap())
        .unwrap();
    b.wr(2, to).send_imm(0x0102_0304).inline(b"hi").unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 2);
    let f = &fx.fq;
    let addr = vec![ptr(ah_ptr), Arg::U32(0x00AB_CDEF), Arg::U32(QKEY)];
    let calls = fx.qp_calls();
    assert_eq!(calls[0], qp_call("wr_start", f, (0, 0), vec![]));
    assert_eq!(calls[1], qp_call("wr_send", f, (1, SIG), vec![]));
    assert_eq!(
        calls[2],
        qp_call(
            "wr_set_sge",
            f,
            (1, SIG),
            vec![Arg::U32(0x1111_2222), Arg::U64(fx.base()), Arg::U32(64)]
        )
    );
    assert_eq!(
        calls[3],
        qp_call("wr_set_ud_addr", f, (1, SIG), addr.clone())
    );
    assert_eq!(
        calls[4],
        qp_call(
            "wr_send_imm",
            f,
            (2, INL),
            vec![Arg::U32(0x0102_0304u32.to_be())]
        )
    );
    assert_eq!(calls[5].entry, "wr_set_inline_data");
    assert_eq!(calls[6], qp_call("wr_set_ud_addr", f, (2, INL), addr));
    assert_eq!(calls[7], qp_call("wr_complete", f, (2, INL), vec![]));
    assert_eq!(calls.len(), 8);
}

#[test]
fn ud_refusals_never_reach_the_provider() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let ah_ptr = &mut *fx.ah_raw as *mut ffi::ibv_ah;
    let other = fx.other_context();
    let mut qp = fx.qp::<UnreliableDatagram>(SendOps::SEND, Mlx5SendOps::empty(), None);
    // As `UdQp::ready` leaves it for a port of MTU 256.
    qp.max_message
        .store(256, std::sync::atomic::Ordering::Relaxed);
    let ah = unsafe {
        crate::addressing::ah::AddressHandle::fake(&fx.pd, NonNull::new(ah_ptr).unwrap())
    };
    let mut other_raw = ffi::ibv_ah {
        context: other.pd.context().as_ptr(),
        ..Default::default()
    };
    let other_ah = unsafe {
        crate::addressing::ah::AddressHandle::fake(&other.pd, NonNull::from(&mut other_raw))
    };
    let to = UdAddr::new(&ah, 0x12, QKEY);
    let mut b = qp.batch();
    let e = b.wr(1, to).send().sge(mr.sge(0..257).unwrap()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                what: "UD message length",
                value: 257,
                ..
            }
        ),
        "{e:?}"
    );
    let list = [mr.sge(0..200).unwrap(), mr.sge(200..300).unwrap()];
    assert!(matches!(
        b.wr(2, to).send().sge_list(&list),
        Err(Error::OutOfRange { value: 300, .. })
    ));
    let e = b
        .wr(3, UdAddr::new(&other_ah, 0x12, QKEY))
        .send()
        .inline(b"x")
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    let e = b
        .wr(4, UdAddr::new(&ah, 0x0100_0000, QKEY))
        .send()
        .inline(b"x")
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                value: 0x0100_0000,
                ..
            }
        ),
        "{e:?}"
    );
    // Not in its send ops.
    assert!(matches!(
        b.wr(5, to).send_imm(1).inline(b"x"),
        Err(Error::Unsupported { .. })
    ));
    // Exactly the MTU is taken.
    b.wr(6, to).send().sge(mr.sge(0..256).unwrap()).unwrap();
    assert_eq!(b.len(), 1);
    drop(b);
    let names: Vec<_> = fx.qp_calls().iter().map(|c| c.entry).collect();
    assert_eq!(
        names,
        [
            "wr_start",
            "wr_send",
            "wr_set_sge",
            "wr_set_ud_addr",
            "wr_abort"
        ]
    );
}

#[test]
fn an_address_handle_of_another_pd_of_the_qps_context_is_refused_and_nothing_posted() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let ah_ptr = &mut *fx.ah_raw as *mut ffi::ibv_ah;
    let second = fx.second_pd();
    let ah = fx.ah();
    let mut qp = fx.qp::<UnreliableDatagram>(SendOps::SEND, Mlx5SendOps::empty(), None);
    assert_eq!(second.pd.context().as_ptr(), qp.pd().context().as_ptr());
    let theirs = UdAddr::new(&second.ah, 0x12, QKEY);
    let other_pd = |e: &Error| {
        matches!(e, Error::InvalidArgument(m)
            if m.starts_with("ibv_wr_set_ud_addr: the UD address's address handle is of \
                              another protection domain than the QP's (of the same device \
                              context)")
                && m.contains("AddressHandle::new(qp.pd(), ..) of the QP that sends"))
    };
    take();
    // In a batch, with an SGE and with inline data: refused before any
    // builder.
    let mut b = qp.batch();
    let e = b
        .wr(1, theirs)
        .send()
        .sge(mr.sge(0..8).unwrap())
        .unwrap_err();
    assert!(other_pd(&e), "{e}");
    let e = b.wr(2, theirs).send().inline(b"x").unwrap_err();
    assert!(other_pd(&e), "{e}");
    drop(b);
    // In a scoped post: refused, nothing posted, the QP left as it is (no
    // move to ERR or RESET).
    let e = qp
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(3, theirs).send().sge(mr.sge(0..8)?)
        })
        .unwrap_err();
    assert!(other_pd(&e), "{e}");
    only_aborted_batches(2);
    // A send through an address handle of the QP's own PD goes.
    let wcs = qp
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(4, UdAddr::new(&ah, 0x12, QKEY))
                .send()
                .sge(mr.sge(0..8)?)
        })
        .unwrap();
    assert_eq!(outcomes(wcs), [(4, WcStatus::SUCCESS)]);
    assert_eq!(
        args_of(&fx, "wr_set_ud_addr"),
        [vec![ptr(ah_ptr), Arg::U32(0x12), Arg::U32(QKEY)]]
    );
    assert!(fx.fcq.violations.is_empty(), "{:?}", fx.fcq.violations);
}

#[test]
fn a_scoped_ud_send_takes_an_address_handle_made_before_the_call() {
    // The address handle outlives the calls (as the scoped post requires:
    // one made or dropped in the closure does not compile), and its address
    // serves several of them.
    let mut fx = Fx::new();
    let mr = fx.mr();
    let ah_ptr = &mut *fx.ah_raw as *mut ffi::ibv_ah;
    let ah = fx.ah();
    let mut qp = fx.qp::<UnreliableDatagram>(
        SendOps::SEND | SendOps::SEND_WITH_IMM,
        Mlx5SendOps::empty(),
        None,
    );
    let to = UdAddr::new(&ah, 0x34, QKEY);
    take();
    for round in 0..2u64 {
        let wcs = qp
            .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
                b.wr(round * 10, to).send().sge(mr.sge(0..16)?)?;
                b.wr(round * 10 + 1, to).send_imm(7).inline(b"hi")
            })
            .unwrap();
        assert_eq!(
            outcomes(wcs),
            [
                (round * 10, WcStatus::SUCCESS),
                (round * 10 + 1, WcStatus::SUCCESS)
            ]
        );
    }
    drop(ah);
    assert_eq!(
        args_of(&fx, "wr_set_ud_addr"),
        vec![vec![ptr(ah_ptr), Arg::U32(0x34), Arg::U32(QKEY)]; 4]
    );
    assert!(fx.fcq.violations.is_empty(), "{:?}", fx.fcq.violations);
}
