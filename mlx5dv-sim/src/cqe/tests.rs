//! Round trips and byte layouts of the CQE encoders.

use super::*;

/// libmlx5's `get_sw_cqe` test: CQE number `n` is software-owned when
/// its opcode is not INVALID and its owner bit equals `!!(n & ncqe)`.
fn sw_owned(bytes: &[u8; CQE_SIZE], n: u32, ncqe: u32) -> bool {
    let op_own = bytes[offset::OP_OWN];
    op_own >> 4 != opcode::INVALID && (op_own & 1 == 1) == (n & ncqe != 0)
}

#[test]
fn op_own_owner_and_slot() {
    assert_eq!(op_own(opcode::REQ, false), 0x00);
    assert_eq!(op_own(opcode::REQ_ERR, true), 0xd1);
    assert_eq!(op_own(opcode::INVALID, false), 0xf0);
    let owners: Vec<bool> = (0..10).map(|pi| owner_bit(pi, 4)).collect();
    assert_eq!(
        owners,
        [false, false, false, false, true, true, true, true, false, false]
    );
    assert_eq!(
        (0..6).map(|pi| slot(pi, 4)).collect::<Vec<_>>(),
        [0, 1, 2, 3, 0, 1]
    );
    // Every CQE the device writes is software-owned at its own number,
    // and not at the number one lap earlier or later.
    for pi in 0..64 {
        let img = Requester::default().encode(owner_bit(pi, 8)).to_bytes();
        assert!(sw_owned(&img, pi, 8), "pi {pi}");
        assert!(!sw_owned(&img, pi + 8, 8), "pi {pi} + one lap");
    }
}

#[test]
fn requester_bytes_and_round_trip() {
    let r = Requester {
        wqe_opcode: 0x10,
        qpn: 0x12_3456,
        wqe_counter: 0xbeef,
        user_index: 0x00ab_cdef,
        byte_cnt: 4096,
        timestamp: 0x0102_0304_0506_0708,
    };
    let img = r.encode(true);
    assert_eq!(img.op_own, 0x01);
    let b = img.to_bytes();
    assert_eq!(&b[32..36], &[0x00, 0xab, 0xcd, 0xef]);
    assert_eq!(&b[44..48], &[0, 0, 0x10, 0]);
    assert_eq!(&b[48..56], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        &b[56..64],
        &[0x10, 0x12, 0x34, 0x56, 0xbe, 0xef, 0x00, 0x01]
    );
    assert!(b[..32].iter().all(|&x| x == 0));
    assert_eq!(
        decode(&b).unwrap(),
        Decoded {
            cqe: Cqe::Requester(r),
            owner: true
        }
    );
}

#[test]
fn user_index_and_qpn_are_24_bits() {
    let r = Requester {
        qpn: 0xff12_3456,
        user_index: 0xff00_0001,
        ..Requester::default()
    };
    let b = r.encode(false).to_bytes();
    assert_eq!(&b[32..36], &[0, 0, 0, 1]);
    assert_eq!(&b[56..60], &[0, 0x12, 0x34, 0x56]);
}

#[test]
fn responder_round_trips_each_kind() {
    for kind in [
        RespKind::Send,
        RespKind::SendImm,
        RespKind::SendInv,
        RespKind::WriteImm,
    ] {
        let r = Responder {
            kind,
            qpn: 0x77,
            user_index: 9,
            wqe_counter: 3,
            byte_cnt: 100,
            imm_inval_pkey: 0xdead_beef,
            src_qpn: 0x0abc_def0 & 0xff_ffff,
            sl: 5,
            grh: true,
            slid: 0x1234,
            path_bits: 0x7f,
            solicited: kind == RespKind::SendImm,
            timestamp: 42,
        };
        let b = r.encode(false).to_bytes();
        assert_eq!(b[63] >> 4, kind.opcode());
        assert_eq!(&b[36..40], &[0xde, 0xad, 0xbe, 0xef]);
        // flags_rqpn as libmlx5 reads it: SL 27:24, g 29:28, src QP 23:0.
        let flags = u32::from_be_bytes(b[24..28].try_into().unwrap());
        assert_eq!((flags >> 24) & 0xf, 5);
        assert_ne!((flags >> 28) & 3, 0);
        assert_eq!(flags & 0xff_ffff, 0xbc_def0);
        assert_eq!(
            decode(&b).unwrap(),
            Decoded {
                cqe: Cqe::Responder(r),
                owner: false
            }
        );
    }
    assert_eq!(RespKind::WriteImm.opcode(), 1);
    assert_eq!(RespKind::Send.opcode(), 2);
    assert_eq!(RespKind::SendImm.opcode(), 3);
    assert_eq!(RespKind::SendInv.opcode(), 4);
}

#[test]
fn error_cqe_layout_and_round_trip() {
    let e = ErrorCqe {
        responder: false,
        syndrome: syndrome::REMOTE_ACCESS_ERR,
        vendor_err_synd: 0x88,
        wqe_opcode: 0x08,
        qpn: 0x42,
        wqe_counter: 7,
        user_index: 5,
    };
    let b = e.encode(true).to_bytes();
    assert_eq!(b[63], 0xd1);
    assert_eq!(b[54], 0x88);
    assert_eq!(b[55], 0x13);
    assert_eq!(&b[56..62], &[0x08, 0, 0, 0x42, 0, 7]);
    assert_eq!(
        decode(&b).unwrap(),
        Decoded {
            cqe: Cqe::Error(e),
            owner: true
        }
    );
    let r = ErrorCqe {
        responder: true,
        syndrome: syndrome::WR_FLUSH_ERR,
        ..e
    };
    let b = r.encode(false).to_bytes();
    assert_eq!(b[63], 0xe0);
    assert_eq!(decode(&b).unwrap().cqe, Cqe::Error(r));
}

#[test]
fn decode_invalid_and_refusals() {
    let mut b = [0u8; CQE_SIZE];
    b[63] = op_own(opcode::INVALID, false);
    assert_eq!(
        decode(&b).unwrap(),
        Decoded {
            cqe: Cqe::Invalid,
            owner: false
        }
    );
    b[63] = op_own(5, false);
    assert_eq!(decode(&b), Err(CqeDecodeError::Opcode(5)));
    b[63] = op_own(opcode::REQ, false) | 0x08;
    assert_eq!(decode(&b), Err(CqeDecodeError::Format(0x08)));
}
