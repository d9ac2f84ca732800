//! Host tests of the direct path's rings: the WQE bytes each writer
//! produces, the room accounting, the doorbell, and the CQE parser, on
//! rings in ordinary memory shaped as libmlx5's.

use super::batch::DirectBatch;
use super::cq::{status_of, Cqr, DirectWc, Step};
use super::sq::{Slot, Sq};
use crate::ffi;
use crate::mr::{RemoteBuf, Sge, SgeMut};
use crate::qp::ReliableConnection;
use crate::{DirectError, Error, SendFlags, WcOpcode, WcStatus};
use std::ptr::NonNull;

/// A send queue of `cnt` basic blocks over memory of the test's own, of a
/// QP whose only field read is libibverbs' record of its state (RTS until
/// [`Ring::set_state`]).
struct Ring {
    buf: Vec<u128>,
    db: Box<[u32; 2]>,
    bf: Box<[u64; 64]>,
    /// A `struct ibv_qp` of the test's own (from `Box::into_raw`, freed on
    /// drop), written only through this pointer.
    qp: NonNull<ffi::ibv_qp>,
}

impl Ring {
    fn new(cnt: u32) -> Self {
        // SAFETY: `struct ibv_qp` is pointers, integers and pthread
        // objects, for all of which zero bytes are a value.
        let mut qp: Box<ffi::ibv_qp> = Box::new(unsafe { std::mem::zeroed() });
        qp.state = ffi::IBV_QPS_RTS;
        Ring {
            buf: vec![0u128; cnt as usize * 4],
            db: Box::new([0; 2]),
            bf: Box::new([0; 64]),
            qp: NonNull::from(Box::leak(qp)),
        }
    }

    /// Sets libibverbs' record of the QP's state. A completion with an
    /// error status read while it says RTS asks the kernel, which this QP
    /// has none of: the tests that make one set another state first.
    fn set_state(&self, state: crate::QpState) {
        // SAFETY: the test's own QP, live until the ring drops, written
        // only through this pointer, and not read meanwhile.
        unsafe { (*self.qp.as_ptr()).state = state.to_raw() };
    }

    fn sq(&mut self, qpn: u32, bf_size: u32) -> Sq {
        let cnt = (self.buf.len() / 4) as u32;
        Sq {
            buf: NonNull::new(self.buf.as_mut_ptr().cast()).unwrap(),
            mask: (cnt - 1) as u16,
            wqe_cnt: cnt,
            pi: 0,
            ci: 0,
            posted: 0,
            retired: 0,
            dbrec: NonNull::new(&mut self.db[1]).unwrap(),
            bf_reg: NonNull::new(self.bf.as_mut_ptr().cast()).unwrap(),
            bf_size,
            bf_offset: 0,
            qpn8: qpn << 8,
            max_blocks: 4,
            max_inline: 200,
            slots: vec![Slot::default(); cnt as usize].into_boxed_slice(),
            streams: false,
            qp: self.qp,
        }
    }

    fn bytes(&self, block: usize) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (i, w) in self.buf[block * 4..block * 4 + 4].iter().enumerate() {
            out[i * 16..i * 16 + 16].copy_from_slice(&w.to_ne_bytes());
        }
        out
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: made by `Box::leak` in `new`, freed once, here.
        drop(unsafe { Box::from_raw(self.qp.as_ptr()) });
    }
}

fn sge(addr: u64, len: u32, lkey: u32) -> Sge<'static> {
    Sge::from_raw(ffi::ibv_sge {
        addr,
        length: len,
        lkey,
    })
}

fn sge_mut(addr: u64, len: u32, lkey: u32) -> SgeMut<'static> {
    SgeMut::from_raw(ffi::ibv_sge {
        addr,
        length: len,
        lkey,
    })
}

fn remote(addr: u64, len: u64, rkey: u32) -> RemoteBuf {
    RemoteBuf { addr, len, rkey }
}

/// A batch of `sq` made as [`DirectQp::batch`](super::DirectQp::batch)
/// makes it: of room only when the QP's recorded state is RTS.
fn made<T: super::DirectTransport>(sq: &mut Sq) -> DirectBatch<'_, 'static, T> {
    let ready = sq.recorded_state() == ffi::IBV_QPS_RTS;
    DirectBatch::new(sq, ready)
}

/// [`made`] of an RC QP.
fn rc_batch(sq: &mut Sq) -> DirectBatch<'_, 'static, ReliableConnection> {
    made(sq)
}

/// The control segment libmlx5 writes (mlx5dv.h `struct mlx5_wqe_ctrl_seg`).
fn ctrl(idx: u16, opcode: u32, qpn: u32, ds: u32, fm_ce_se: u8, imm: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((u32::from(idx) << 8) | opcode).to_be_bytes());
    v.extend_from_slice(&((qpn << 8) | ds).to_be_bytes());
    v.extend_from_slice(&[0, 0, 0, fm_ce_se]);
    v.extend_from_slice(&imm.to_be_bytes());
    v
}

fn raddr(addr: u64, rkey: u32) -> Vec<u8> {
    let mut v = addr.to_be_bytes().to_vec();
    v.extend_from_slice(&rkey.to_be_bytes());
    v.extend_from_slice(&[0; 4]);
    v
}

fn data(len: u32, lkey: u32, addr: u64) -> Vec<u8> {
    let mut v = len.to_be_bytes().to_vec();
    v.extend_from_slice(&lkey.to_be_bytes());
    v.extend_from_slice(&addr.to_be_bytes());
    v
}

#[test]
fn an_rdma_write_is_the_wqe_libmlx5_writes() {
    let mut ring = Ring::new(8);
    let mut sq = ring.sq(0x1234, 256);
    let mut b = rc_batch(&mut sq);
    b.rdma_write(
        7,
        SendFlags::SIGNALED,
        remote(0xdead_0000, 64, 0x55),
        sge(0x1000, 64, 0x66),
    )
    .unwrap();
    b.rdma_write(
        8,
        SendFlags::FENCE | SendFlags::SOLICITED,
        remote(0xdead_0040, 64, 0x55),
        sge(0x1040, 64, 0x66),
    )
    .unwrap();
    assert_eq!(b.len(), 2);
    assert_eq!(b.room(), 6);
    // SAFETY: nothing reads the test's ring.
    assert_eq!(unsafe { b.ring() }, 2);
    let w0 = ring.bytes(0);
    let want: Vec<u8> = [
        ctrl(0, ffi::MLX5_OPCODE_RDMA_WRITE, 0x1234, 3, 8, 0),
        raddr(0xdead_0000, 0x55),
        data(64, 0x66, 0x1000),
    ]
    .concat();
    assert_eq!(&w0[..48], &want[..]);
    let w1 = ring.bytes(1);
    let want: Vec<u8> = [
        ctrl(1, ffi::MLX5_OPCODE_RDMA_WRITE, 0x1234, 3, 0x80 | 2, 0),
        raddr(0xdead_0040, 0x55),
        data(64, 0x66, 0x1040),
    ]
    .concat();
    assert_eq!(&w1[..48], &want[..]);
    // One doorbell: the record holds the producer index, the register the
    // last WQE's first 8 bytes; the next doorbell goes to the other half.
    assert_eq!(u32::from_be(ring.db[1]), 2);
    assert_eq!(ring.bf[0].to_ne_bytes(), w1[..8]);
    assert_eq!(sq.bf_offset, 256);
    assert_eq!((sq.pi, sq.posted, sq.outstanding()), (2, 2, 2));
}

/// A source known not to be empty (`Sge::non_empty`) writes the same WQEs
/// as the plain entry, for every writer that takes one (on RC: the DCI's
/// are checked against libmlx5's by the bench); its check that remains
/// (the remote length) still refuses; an empty entry has no
/// `NonEmptySge`.
#[test]
fn a_non_empty_source_writes_the_same_wqes_as_its_plain_entry() {
    let write_all = |ne: bool| {
        let mut ring = Ring::new(16);
        let mut sq = ring.sq(0x1234, 256);
        let mut b = rc_batch(&mut sq);
        let e = sge(0x1000, 64, 0x66);
        let n = e.non_empty().expect("64 bytes");
        assert_eq!((n.addr(), n.length(), n.lkey()), (0x1000, 64, 0x66));
        let to = remote(0xdead_0000, 64, 0x55);
        let far = RemoteBuf::unbounded(0xbeef_0000, 0x77);
        let f = SendFlags::SIGNALED;
        if ne {
            b.rdma_write(1, f, to, n).unwrap();
            b.rdma_write(2, f, far, n).unwrap();
            b.rdma_write_imm(3, f, to, 0xabcd, n).unwrap();
            b.send(4, f, n).unwrap();
            b.send_imm(5, f, 0x1234_5678, n).unwrap();
            // The remote buffer's length still counts.
            let short = remote(0xdead_0000, 63, 0x55);
            assert!(matches!(
                b.rdma_write(6, f, short, n),
                Err(Error::Direct(DirectError::RemoteTooShort { len: 64, .. }))
            ));
        } else {
            b.rdma_write(1, f, to, e).unwrap();
            b.rdma_write(2, f, far, e).unwrap();
            b.rdma_write_imm(3, f, to, 0xabcd, e).unwrap();
            b.send(4, f, e).unwrap();
            b.send_imm(5, f, 0x1234_5678, e).unwrap();
        }
        assert_eq!(b.len(), 5);
        // SAFETY: nothing reads the test's ring.
        assert_eq!(unsafe { b.ring() }, 5);
        (0..5)
            .map(|i| ring.bytes(i)[..64].to_vec())
            .collect::<Vec<_>>()
    };
    let plain = write_all(false);
    assert_eq!(write_all(true), plain);
    let want: Vec<u8> = [
        ctrl(1, ffi::MLX5_OPCODE_RDMA_WRITE, 0x1234, 3, 8, 0),
        raddr(0xbeef_0000, 0x77),
        data(64, 0x66, 0x1000),
    ]
    .concat();
    assert_eq!(&plain[1][..48], &want[..]);
    let send: Vec<u8> = [
        ctrl(3, ffi::MLX5_OPCODE_SEND, 0x1234, 2, 8, 0),
        data(64, 0x66, 0x1000),
    ]
    .concat();
    assert_eq!(&plain[3][..32], &send[..]);

    // No NonEmptySge of an empty entry (the plain one is written as no
    // data segment: an_empty_entry_is_no_data_segment_and_the_next_wqe_is_whole
    // and imm_sends_reads_and_atomics_have_their_segments).
    assert!(sge(0x1000, 0, 0x66).non_empty().is_none());
}

#[test]
fn imm_sends_reads_and_atomics_have_their_segments() {
    let mut ring = Ring::new(8);
    let mut sq = ring.sq(0x7, 0);
    let mut b = rc_batch(&mut sq);
    b.rdma_write_imm(
        1,
        SendFlags::empty(),
        remote(0x10, 8, 1),
        0xA1B2_C3D4,
        sge(0x20, 8, 2),
    )
    .unwrap();
    b.send_imm(2, SendFlags::SIGNALED, 0x0102_0304, sge(0x30, 16, 3))
        .unwrap();
    b.rdma_read(
        3,
        SendFlags::empty(),
        remote(0x40, 32, 4),
        sge_mut(0x50, 32, 5),
    )
    .unwrap();
    b.atomic_cmp_swp(
        4,
        SendFlags::empty(),
        remote(0x60, 8, 6),
        11,
        22,
        sge_mut(0x70, 8, 7),
    )
    .unwrap();
    b.atomic_fetch_add(
        5,
        SendFlags::empty(),
        remote(0x80, 8, 8),
        33,
        sge_mut(0x90, 8, 9),
    )
    .unwrap();
    // A zero-length entry is no data segment (a byte count of 0 is 2^31).
    b.send(6, SendFlags::empty(), sge(0xa0, 0, 10)).unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    let w = ring.bytes(0);
    let want = [
        ctrl(0, ffi::MLX5_OPCODE_RDMA_WRITE_IMM, 7, 3, 0, 0xA1B2_C3D4),
        raddr(0x10, 1),
        data(8, 2, 0x20),
    ]
    .concat();
    assert_eq!(&w[..48], &want[..]);
    let w = ring.bytes(1);
    let want = [
        ctrl(1, ffi::MLX5_OPCODE_SEND_IMM, 7, 2, 8, 0x0102_0304),
        data(16, 3, 0x30),
    ]
    .concat();
    assert_eq!(&w[..32], &want[..]);
    let w = ring.bytes(2);
    let want = [
        ctrl(2, ffi::MLX5_OPCODE_RDMA_READ, 7, 3, 0, 0),
        raddr(0x40, 4),
        data(32, 5, 0x50),
    ]
    .concat();
    assert_eq!(&w[..48], &want[..]);
    let w = ring.bytes(3);
    let want = [
        ctrl(3, ffi::MLX5_OPCODE_ATOMIC_CS, 7, 4, 0, 0),
        raddr(0x60, 6),
        [22u64.to_be_bytes(), 11u64.to_be_bytes()].concat(),
        data(8, 7, 0x70),
    ]
    .concat();
    assert_eq!(&w[..], &want[..]);
    let w = ring.bytes(4);
    let want = [
        ctrl(4, ffi::MLX5_OPCODE_ATOMIC_FA, 7, 4, 0, 0),
        raddr(0x80, 8),
        [33u64.to_be_bytes(), 0u64.to_be_bytes()].concat(),
        data(8, 9, 0x90),
    ]
    .concat();
    assert_eq!(&w[..], &want[..]);
    let w = ring.bytes(5);
    assert_eq!(&w[..16], &ctrl(5, ffi::MLX5_OPCODE_SEND, 7, 1, 0, 0)[..]);
}

#[test]
fn inline_data_follows_its_count_and_wraps_at_the_ring_end() {
    let mut ring = Ring::new(4);
    let mut sq = ring.sq(0x9, 0);
    // Three one-block WQEs, then a two-block inline send from block 3:
    // its second block is block 0 of the ring.
    for i in 0..3 {
        let mut b = rc_batch(&mut sq);
        b.send(i, SendFlags::empty(), sge(0x100, 4, 1)).unwrap();
        // SAFETY: nothing reads the test's ring.
        unsafe { b.ring() };
    }
    // Retire them (as a CQE would), freeing blocks 0..3.
    sq.ci = 3;
    sq.retired = 3;
    let payload: Vec<u8> = (0..60u8).collect();
    let mut b = rc_batch(&mut sq);
    b.send_inline(9, SendFlags::SIGNALED, &payload).unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    // DS: control (1) + ceil((4 + 60) / 16) = 5, two blocks.
    let w = ring.bytes(3);
    assert_eq!(&w[..16], &ctrl(3, ffi::MLX5_OPCODE_SEND, 9, 5, 8, 0)[..]);
    assert_eq!(&w[16..20], &(60u32 | ffi::MLX5_INLINE_SEG).to_be_bytes());
    assert_eq!(&w[20..64], &payload[..44]);
    assert_eq!(&ring.bytes(0)[..16], &payload[44..]);
    assert_eq!((sq.pi, sq.slots[3].end), (5, 5));
    // An inline write: control, remote address, inline.
    let mut ring = Ring::new(4);
    let mut sq = ring.sq(0x9, 0);
    let mut b = rc_batch(&mut sq);
    b.rdma_write_inline(1, SendFlags::empty(), remote(0x10, 8, 2), b"abcdefgh")
        .unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    let w = ring.bytes(0);
    assert_eq!(
        &w[..16],
        &ctrl(0, ffi::MLX5_OPCODE_RDMA_WRITE, 9, 3, 0, 0)[..]
    );
    assert_eq!(&w[16..32], &raddr(0x10, 2)[..]);
    assert_eq!(&w[32..36], &(8u32 | ffi::MLX5_INLINE_SEG).to_be_bytes());
    assert_eq!(&w[36..44], b"abcdefgh");
}

#[test]
fn what_would_not_fit_or_is_malformed_is_refused_before_anything_is_written() {
    let mut ring = Ring::new(4);
    let mut sq = ring.sq(0x9, 0);
    let mut b = rc_batch(&mut sq);
    for i in 0..4 {
        b.rdma_write(i, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1))
            .unwrap();
    }
    assert!(matches!(
        b.rdma_write(4, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1)),
        Err(Error::SendQueueFull { batch: 5, depth: 4 })
    ));
    // Longer than the remote buffer; inline past max_inline_data; atomics
    // with a wrong local length or a misaligned remote address.
    assert!(matches!(
        b.rdma_write(5, SendFlags::empty(), remote(0, 4, 1), sge(0, 8, 1)),
        Err(Error::Direct(DirectError::RemoteTooShort {
            len: 8,
            remote_len: 4,
            ..
        }))
    ));
    assert!(matches!(
        b.send_inline(5, SendFlags::empty(), &[0; 201]),
        Err(Error::Direct(DirectError::InlineTooLong { len: 201, .. }))
    ));
    assert!(matches!(
        b.atomic_fetch_add(5, SendFlags::empty(), remote(0, 8, 1), 1, sge_mut(0, 4, 1)),
        Err(Error::Direct(DirectError::AtomicLength { len: 4 }))
    ));
    assert!(matches!(
        b.atomic_fetch_add(5, SendFlags::empty(), remote(4, 8, 1), 1, sge_mut(0, 8, 1)),
        Err(Error::Direct(DirectError::AtomicUnaligned { addr: 4 }))
    ));
    assert!(matches!(
        b.atomic_fetch_add(5, SendFlags::empty(), remote(0, 4, 1), 1, sge_mut(0, 8, 1)),
        Err(Error::Direct(DirectError::AtomicRemoteTooShort {
            remote_len: 4
        }))
    ));
    assert_eq!(b.len(), 4);
    // Dropped without ring: nothing posted, the doorbell untouched.
    drop(b);
    assert_eq!((sq.pi, sq.posted), (0, 0));
    assert_eq!(ring.db[1], 0);
    assert_eq!(ring.bf[0], 0);
    // A WQE of more than 63 units cannot be described by its DS field.
    let mut ring = Ring::new(64);
    let mut sq = ring.sq(0x9, 0);
    sq.max_inline = 4096;
    sq.max_blocks = 64;
    let mut b = rc_batch(&mut sq);
    assert!(matches!(
        b.send_inline(1, SendFlags::empty(), &[0; 1024]),
        Err(Error::Direct(DirectError::TooManyUnits {
            max: 63,
            by_ds_field: true,
            ..
        }))
    ));
}

/// A CQ of `cnt` 64-byte (or 128-byte) entries over memory of the test's
/// own, prepared as libmlx5 prepares it (every opcode invalid).
struct CqMem {
    buf: Vec<u128>,
    db: Box<[u32; 2]>,
    uar: Box<[u64; 8]>,
    size: usize,
}

impl CqMem {
    fn new(cnt: usize, size: usize) -> Self {
        let mut m = CqMem {
            buf: vec![0u128; cnt * size / 16],
            db: Box::new([0; 2]),
            uar: Box::new([0; 8]),
            size,
        };
        for i in 0..cnt {
            m.cqe(i)[63] = (ffi::MLX5_CQE_INVALID as u8) << 4;
        }
        m
    }

    fn cqr(&mut self) -> Cqr {
        let cnt = (self.buf.len() * 16 / self.size) as u32;
        Cqr {
            buf: NonNull::new(self.buf.as_mut_ptr().cast()).unwrap(),
            mask: cnt - 1,
            cqe_cnt: cnt,
            entry: self.size,
            cqe64_at: self.size - 64,
            ci: 0,
            dbrec: NonNull::new(&mut self.db[0]).unwrap(),
            cqn: 0x77,
            uar: self.uar.as_mut_ptr().cast(),
        }
    }

    fn cqe(&mut self, slot: usize) -> &mut [u8] {
        let size = self.size;
        // SAFETY: the vector's bytes, viewed as bytes.
        let all = unsafe {
            std::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast::<u8>(), self.buf.len() * 16)
        };
        &mut all[slot * size + size - 64..slot * size + size]
    }

    /// Writes the `n`-th CQE (counting from 0) as the device would.
    #[allow(clippy::too_many_arguments)]
    fn produce(
        &mut self,
        n: usize,
        opcode: u8,
        wqe_opcode: u8,
        qpn: u32,
        counter: u16,
        byte_cnt: u32,
        synd: u8,
    ) {
        let cnt = self.buf.len() * 16 / self.size;
        let c = self.cqe(n % cnt);
        c[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
        c[55] = synd;
        c[54] = if synd != 0 { 0x42 } else { 0 };
        c[56..60].copy_from_slice(&((u32::from(wqe_opcode) << 24) | qpn).to_be_bytes());
        c[60..62].copy_from_slice(&counter.to_be_bytes());
        c[63] = (opcode << 4) | ((n / cnt) & 1) as u8;
    }
}

fn post_writes(sq: &mut Sq, n: u64, signal_every: u64) {
    let mut b = rc_batch(sq);
    for i in 0..n {
        let f = if (i + 1) % signal_every == 0 {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        b.rdma_write(100 + i, f, remote(0, 8, 1), sge(0, 8, 1))
            .unwrap();
    }
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
}

/// A batch made for a QP not in RTS takes nothing: every writer and its
/// limit are refused with `QpNotReady` (naming the QP and its state)
/// before anything is written, and ringing it posts nothing.
#[test]
fn a_batch_of_a_qp_not_in_rts_refuses_every_work_request_and_writes_nothing() {
    for state in [
        crate::QpState::Reset,
        crate::QpState::Rtr,
        crate::QpState::Err,
        crate::QpState::Sqe,
    ] {
        let mut ring = Ring::new(8);
        let mut sq = ring.sq(0x1234, 256);
        ring.set_state(state);
        let mut b = rc_batch(&mut sq);
        assert_eq!(b.room(), 0);
        let refused = |r: crate::Result<()>| match r {
            Err(Error::QpNotReady {
                what,
                qp_num,
                state: s,
                receive,
            }) => {
                assert_eq!(
                    (what, qp_num, s, receive),
                    ("DirectQp::batch", 0x1234, state, false)
                );
            }
            other => panic!("{state}: expected QpNotReady, got {other:?}"),
        };
        refused(b.limit(1));
        refused(b.rdma_write(1, SendFlags::SIGNALED, remote(0, 8, 1), sge(0, 8, 1)));
        refused(b.send_inline(2, SendFlags::SIGNALED, b"abc"));
        let mut dst = [0u8; 8];
        refused(b.rdma_read(
            3,
            SendFlags::SIGNALED,
            remote(0, 8, 1),
            sge_mut(dst.as_mut_ptr() as u64, 8, 1),
        ));
        let e = b.send(4, SendFlags::empty(), sge(0, 8, 1)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("DirectQp::batch: QP 0x1234 is in {state}")),
            "{e}"
        );
        assert!(b.is_empty());
        // SAFETY: nothing reads the test's ring.
        assert_eq!(unsafe { b.ring() }, 0);
        assert_eq!((sq.pi, sq.posted, sq.room()), (0, 0, 8));
        assert_eq!(ring.db[1], 0, "the doorbell record was written");
        assert!(ring.bf.iter().all(|&w| w == 0), "the doorbell was rung");
        assert!(
            (0..8).all(|i| ring.bytes(i) == [0; 64]),
            "a WQE was written"
        );
    }
}

#[test]
fn a_cqe_retires_every_work_request_up_to_the_one_it_names() {
    let mut ring = Ring::new(64);
    let mut sq = ring.sq(0x33, 0);
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    post_writes(&mut sq, 32, 32);
    assert!(matches!(cq.step_sq(&mut sq), Ok(Step::Empty)));
    mem.produce(
        0,
        ffi::MLX5_CQE_REQ as u8,
        ffi::MLX5_OPCODE_RDMA_WRITE as u8,
        0x33,
        31,
        0,
        0,
    );
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!("no completion")
    };
    assert_eq!(
        (wc.wr_id, wc.covers, wc.qp_num, wc.wqe_index),
        (131, 32, 0x33, 31)
    );
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::SUCCESS, WcOpcode::RDMA_WRITE, 0)
    );
    assert!(wc.ok().is_ok());
    assert_eq!((sq.outstanding(), sq.room(), sq.ci), (0, 64, 32));
    cq.publish();
    assert_eq!(u32::from_be(mem.db[0]), 1);
    assert!(matches!(cq.step_sq(&mut sq), Ok(Step::Empty)));
}

#[test]
fn owner_bits_follow_the_pass_over_the_ring_and_128_byte_entries_their_second_half() {
    for size in [64, 128] {
        let mut ring = Ring::new(16);
        let mut sq = ring.sq(0x1, 0);
        let mut mem = CqMem::new(4, size);
        let mut cq = mem.cqr();
        for n in 0..10usize {
            post_writes(&mut sq, 1, 1);
            // Last pass's CQE in this slot is not the software's.
            if n >= 4 {
                assert!(matches!(cq.step_sq(&mut sq), Ok(Step::Empty)), "entry {n}");
            }
            let idx = (n % 16) as u16;
            mem.produce(n, 0, ffi::MLX5_OPCODE_RDMA_WRITE as u8, 0x1, idx, 0, 0);
            let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
                panic!("entry {n}")
            };
            assert_eq!((wc.wr_id, wc.covers), (100, 1));
        }
        assert_eq!(cq.ci, 10);
    }
}

#[test]
fn error_cqes_name_their_work_request_with_the_mapped_status() {
    let mut ring = Ring::new(16);
    let mut sq = ring.sq(0x2, 0);
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    // Four unsignalled writes: the second fails, the rest are flushed.
    post_writes(&mut sq, 4, 100);
    let err = ffi::MLX5_CQE_REQ_ERR as u8;
    let w = ffi::MLX5_OPCODE_RDMA_WRITE as u8;
    mem.produce(
        0,
        err,
        w,
        0x2,
        1,
        0,
        ffi::MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR as u8,
    );
    mem.produce(
        1,
        err,
        w,
        0x2,
        2,
        0,
        ffi::MLX5_CQE_SYNDROME_WR_FLUSH_ERR as u8,
    );
    mem.produce(
        2,
        err,
        w,
        0x2,
        3,
        0,
        ffi::MLX5_CQE_SYNDROME_WR_FLUSH_ERR as u8,
    );
    ring.set_state(crate::QpState::Err);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!(
        (wc.wr_id, wc.covers, wc.status),
        (101, 2, WcStatus::REM_ACCESS_ERR)
    );
    assert_eq!((wc.syndrome, wc.vendor_err), (0x13, 0x42));
    assert!(matches!(
        wc.ok(),
        Err(Error::WorkCompletion {
            wr_id: 101,
            qp_num: 0x2,
            status: WcStatus::REM_ACCESS_ERR,
            vendor_err: 0x42,
            kind: None
        })
    ));
    for id in [102, 103] {
        let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
            panic!()
        };
        assert_eq!(
            (wc.wr_id, wc.covers, wc.status),
            (id, 1, WcStatus::WR_FLUSH_ERR)
        );
    }
    assert_eq!(sq.outstanding(), 0);
    // Every syndrome of mlx5dv.h maps as libmlx5's mlx5_handle_error_cqe.
    for (s, want) in [
        (
            ffi::MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
            WcStatus::LOC_LEN_ERR,
        ),
        (
            ffi::MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
            WcStatus::LOC_QP_OP_ERR,
        ),
        (
            ffi::MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
            WcStatus::LOC_PROT_ERR,
        ),
        (ffi::MLX5_CQE_SYNDROME_MW_BIND_ERR, WcStatus::MW_BIND_ERR),
        (ffi::MLX5_CQE_SYNDROME_BAD_RESP_ERR, WcStatus::BAD_RESP_ERR),
        (
            ffi::MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR,
            WcStatus::LOC_ACCESS_ERR,
        ),
        (
            ffi::MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
            WcStatus::REM_INV_REQ_ERR,
        ),
        (ffi::MLX5_CQE_SYNDROME_REMOTE_OP_ERR, WcStatus::REM_OP_ERR),
        (
            ffi::MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
            WcStatus::RETRY_EXC_ERR,
        ),
        (
            ffi::MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
            WcStatus::RNR_RETRY_EXC_ERR,
        ),
        (
            ffi::MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR,
            WcStatus::REM_ABORT_ERR,
        ),
        (0x7f, WcStatus::GENERAL_ERR),
    ] {
        assert_eq!(status_of(s as u8), want, "syndrome {s:#x}");
    }
}

#[test]
fn reads_and_atomics_report_their_byte_counts() {
    let mut ring = Ring::new(8);
    let mut sq = ring.sq(0x4, 0);
    let mut mem = CqMem::new(4, 64);
    let mut cq = mem.cqr();
    let mut b = rc_batch(&mut sq);
    b.rdma_read(1, SendFlags::SIGNALED, remote(0, 32, 1), sge_mut(0, 32, 1))
        .unwrap();
    b.atomic_fetch_add(2, SendFlags::SIGNALED, remote(0, 8, 1), 1, sge_mut(0, 8, 1))
        .unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    mem.produce(0, 0, ffi::MLX5_OPCODE_RDMA_READ as u8, 0x4, 0, 32, 0);
    mem.produce(1, 0, ffi::MLX5_OPCODE_ATOMIC_FA as u8, 0x4, 1, 8, 0);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (1, WcOpcode::RDMA_READ, 32)
    );
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (2, WcOpcode::FETCH_ADD, 8)
    );
}

#[test]
fn a_cqe_naming_no_outstanding_wqe_retires_nothing() {
    let mut ring = Ring::new(16);
    let mut sq = ring.sq(0x5, 0);
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    // Two two-block inline sends: WQEs start at 0 and 2.
    let mut b = rc_batch(&mut sq);
    b.send_inline(1, SendFlags::empty(), &[1; 60]).unwrap();
    b.send_inline(2, SendFlags::SIGNALED, &[2; 60]).unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    let s = ffi::MLX5_OPCODE_SEND as u8;
    // Past the producer index; inside a WQE (block 1); neither retires.
    mem.produce(0, 0, s, 0x5, 9, 0, 0);
    mem.produce(1, 0, s, 0x5, 1, 0, 0);
    mem.produce(2, 0, s, 0x5, 2, 0, 0);
    assert!(matches!(
        cq.step_sq(&mut sq),
        Err(Error::Direct(DirectError::CqeNotOutstanding {
            counter: 9,
            ci: 0,
            pi: 4
        }))
    ));
    assert!(matches!(
        cq.step_sq(&mut sq),
        Err(Error::Direct(DirectError::CqeNotOutstanding {
            counter: 1,
            ..
        }))
    ));
    assert_eq!((sq.outstanding(), sq.ci), (2, 0));
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!((wc.wr_id, wc.covers, sq.outstanding(), sq.ci), (2, 2, 0, 4));
    // A responder CQE does not belong on a send CQ: skipped, an error.
    mem.produce(3, ffi::MLX5_CQE_RESP_SEND as u8, 0, 0x5, 0, 4, 0);
    let Err(e) = cq.step_sq(&mut sq) else {
        panic!("a responder CQE was taken")
    };
    assert!(
        matches!(e, Error::Direct(DirectError::StrayCqe { op_own }) if op_own >> 4 == 2),
        "{e}"
    );
    assert!(e.to_string().contains("opcode 0x2"), "{e}");
    assert_eq!(cq.ci, 4);
}

/// A CQE of another QP (a dead QP's, left on the CQ), or a responder's
/// (a receive's flush on a CQ that completes receives too), is never a
/// completion of the direct QP, whatever WQE counter it carries: skipped
/// with an error, the WQE it names still outstanding, until the QP's own
/// CQE retires it. In `step`, `poll` and the slice poll alike.
#[test]
fn a_cqe_of_another_qp_or_a_responder_is_skipped_and_retires_nothing() {
    let mut ring = Ring::new(16);
    let mut sq = ring.sq(0x5, 0);
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    post_writes(&mut sq, 2, 1);
    let w = ffi::MLX5_OPCODE_RDMA_WRITE as u8;
    let flush = ffi::MLX5_CQE_SYNDROME_WR_FLUSH_ERR as u8;
    mem.produce(0, ffi::MLX5_CQE_REQ as u8, w, 0x6, 0, 0, 0);
    mem.produce(1, ffi::MLX5_CQE_RESP_ERR as u8, 0, 0x5, 0, 0, flush);
    mem.produce(2, ffi::MLX5_CQE_REQ_ERR as u8, w, 0x6, 0, 0, flush);
    for at in 0..3 {
        let r = cq.step_sq(&mut sq);
        let Err(e @ Error::Direct(_)) = r else {
            panic!("CQE {at} was taken: {:?}", r.map(|_| ()))
        };
        let text = e.to_string();
        assert!(
            if at == 1 {
                text.contains(&format!("opcode {:#x}", ffi::MLX5_CQE_RESP_ERR))
            } else {
                text.contains("QP 0x6") && text.contains("QP 0x5")
            },
            "{text}"
        );
        assert_eq!((sq.outstanding(), sq.ci), (2, 0));
    }
    // The slice poll and the closure poll read the common kind alike.
    mem.produce(3, ffi::MLX5_CQE_REQ as u8, w, 0x7, 1, 0, 0);
    let mut out = [DirectWc::default(); 2];
    let mut idx = sq.idx();
    let (n, r) = super::cq::poll_into(&mut cq, &mut idx, &mut out, sq.qp);
    sq.put(idx);
    assert!(n == 0 && matches!(r, Err(Error::Direct(_))), "{n} {r:?}");
    assert_eq!(sq.outstanding(), 2);
    mem.produce(4, ffi::MLX5_CQE_REQ as u8, w, 0x5, 0, 0, 0);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!("the QP's own CQE")
    };
    assert_eq!((wc.wr_id, wc.qp_num, sq.outstanding()), (100, 0x5, 1));
}

/// A direct QP refused for its state is told its own way back: it has no
/// `to_init` or `to_rts`, only `reset` and `connect_to` (`ready` for a
/// DCI). The other paths' texts are unchanged.
#[test]
fn a_direct_qp_not_ready_is_told_its_own_way_back() {
    use crate::QpState;
    for state in [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Sqe,
        QpState::Err,
    ] {
        for what in ["DirectQp::post_and_wait", "DirectQp::batch"] {
            let e = Error::QpNotReady {
                what,
                qp_num: 0x12,
                state,
                receive: false,
            }
            .to_string();
            assert!(!e.contains("to_rts") && !e.contains("to_init"), "{e}");
            assert!(e.contains("connect_to") && e.contains("ready"), "{e}");
            assert!(state == QpState::Reset || e.contains("reset()"), "{e}");
            assert!(
                e.starts_with(&format!("{what}: QP 0x12 is in {state}")),
                "{e}"
            );
        }
    }
    let e = Error::QpNotReady {
        what: "post_and_wait",
        qp_num: 0x12,
        state: QpState::Rtr,
        receive: false,
    };
    assert!(e.to_string().contains("(to_rts)"), "{e}");
}

#[test]
fn arming_writes_the_record_and_the_doorbell_as_mlx5_arm_cq() {
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    cq.ci = 0x0123_4567;
    assert!(!cq.ready());
    cq.arm(6, false);
    // sn = 6 & 3 = 2; command 0 (next completion); ci's low 24 bits.
    let db: u32 = (2 << 28) | 0x23_4567;
    assert_eq!(u32::from_be(mem.db[1]), db);
    assert_eq!(u64::from_be(mem.uar[4]), (u64::from(db) << 32) | 0x77);
    cq.arm(1, true);
    let db: u32 = (1 << 28) | ffi::MLX5_CQ_DB_REQ_NOT_SOL | 0x23_4567;
    assert_eq!(u32::from_be(mem.db[1]), db);
}

/// A CQE naming a block inside a rung multi-block WQE must not be taken for
/// the stale slot an abandoned batch left there (it retired a work request
/// that never completed, before the fix).
#[test]
fn a_stale_slot_of_an_abandoned_batch_is_not_an_outstanding_wqe() {
    let mut ring = Ring::new(16);
    let mut sq = ring.sq(5, 0);
    // A batch written and abandoned: one-block WQEs at blocks 0 and 1,
    // sequence numbers 1 and 2.
    {
        let mut a = rc_batch(&mut sq);
        a.send_inline(1, SendFlags::empty(), &[1; 8]).unwrap();
        a.send_inline(2, SendFlags::empty(), &[2; 8]).unwrap();
    }
    // The batch rung: a two-block WQE at 0 (seq 1), a one-block one at 2
    // (seq 2). Block 1 is inside the first WQE.
    let mut b = rc_batch(&mut sq);
    b.send_inline(10, SendFlags::empty(), &[3; 60]).unwrap();
    b.send_inline(11, SendFlags::SIGNALED, &[4; 8]).unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    assert_eq!((sq.pi, sq.outstanding()), (3, 2));
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    let s = ffi::MLX5_OPCODE_SEND as u8;
    mem.produce(0, 0, s, 5, 1, 0, 0);
    assert!(matches!(
        cq.step_sq(&mut sq),
        Err(Error::Direct(DirectError::CqeNotOutstanding {
            counter: 1,
            ..
        }))
    ));
    assert_eq!((sq.retired, sq.ci, sq.outstanding()), (0, 0, 2));
    // The real CQE, naming WR 11's block, retires both.
    mem.produce(1, 0, s, 5, 2, 0, 0);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!((wc.wr_id, wc.covers, sq.outstanding()), (11, 2, 0));
}

/// The slice poll: every kind of CQE stored in order (a good one, an
/// error one, a read with its byte count), as many as fit; a CQE it cannot
/// trust ends the poll with its error after the completions before it, and
/// the next poll goes on after it.
#[test]
fn the_slice_poll_stores_each_kind_and_stops_at_a_stray_cqe() {
    let mut ring = Ring::new(16);
    let mut sq = ring.sq(0x5, 0);
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    post_writes(&mut sq, 6, 1);
    let w = ffi::MLX5_OPCODE_RDMA_WRITE as u8;
    let err = ffi::MLX5_CQE_REQ_ERR as u8;
    mem.produce(0, 0, w, 0x5, 0, 0, 0);
    mem.produce(
        1,
        err,
        w,
        0x5,
        1,
        0,
        ffi::MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR as u8,
    );
    mem.produce(2, 0, w, 0x5, 2, 0, 0);
    // A responder CQE: not a send completion.
    mem.produce(3, ffi::MLX5_CQE_RESP_SEND as u8, 0, 0x5, 0, 4, 0);
    mem.produce(4, 0, w, 0x5, 3, 0, 0);
    ring.set_state(crate::QpState::Err);
    let mut out = [DirectWc::default(); 8];
    // Two fit: the good one and the error one.
    let mut idx = sq.idx();
    let (n, r) = super::cq::poll_into(&mut cq, &mut idx, &mut out[..2], sq.qp);
    sq.put(idx);
    assert!(r.is_ok());
    assert_eq!(n, 2);
    assert_eq!(
        (out[0].wr_id, out[0].status, out[0].covers),
        (100, WcStatus::SUCCESS, 1)
    );
    assert_eq!(
        (out[1].wr_id, out[1].status, out[1].syndrome),
        (
            101,
            WcStatus::REM_ACCESS_ERR,
            ffi::MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR as u8
        )
    );
    // Room for all: one completion, then the stray CQE ends the poll.
    let mut idx = sq.idx();
    let (n, r) = super::cq::poll_into(&mut cq, &mut idx, &mut out, sq.qp);
    sq.put(idx);
    assert_eq!(n, 1);
    assert_eq!(out[0].wr_id, 102);
    assert!(
        matches!(r, Err(Error::Direct(DirectError::StrayCqe { .. }))),
        "{r:?}"
    );
    assert_eq!(cq.ci, 4);
    // The next poll goes on after it; nothing more is there after that.
    let mut idx = sq.idx();
    let (n, r) = super::cq::poll_into(&mut cq, &mut idx, &mut out, sq.qp);
    sq.put(idx);
    assert!(r.is_ok());
    assert_eq!((n, out[0].wr_id, sq.outstanding()), (1, 103, 2));
    let mut idx = sq.idx();
    assert_eq!(
        super::cq::poll_into(&mut cq, &mut idx, &mut out, sq.qp).0,
        0
    );
    // An unwritten entry is never a success.
    assert!(!DirectWc::default().is_success());
}

/// The batch's state word across both wraps at once: the producer index
/// past 2^16 and the sequence number past 2^32 (whose carry lands in the
/// slot's opcode byte before the opcode is written over it). Each slot
/// keeps its own sequence number, end and opcode; a block inside a WQE
/// stays no WQE's start; CQEs retire across both wraps.
#[test]
fn the_state_word_wraps_the_producer_index_and_the_sequence_number() {
    let mut ring = Ring::new(16);
    let mut sq = ring.sq(0x5, 0);
    sq.pi = 0xfffc;
    sq.ci = 0xfffc;
    sq.posted = u32::MAX - 1;
    sq.retired = u32::MAX - 1;
    let mut b = rc_batch(&mut sq);
    // Blocks 0xfffc-0xfffd, 0xfffe, 0xffff-0x0000, 0x0001.
    b.send_inline(1, SendFlags::empty(), &[1; 60]).unwrap();
    b.rdma_write(2, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1))
        .unwrap();
    b.send_inline(3, SendFlags::empty(), &[3; 60]).unwrap();
    b.rdma_write(4, SendFlags::SIGNALED, remote(0, 8, 1), sge(0, 8, 1))
        .unwrap();
    assert_eq!((b.len(), b.pi(), b.room()), (4, 2, 10));
    // SAFETY: nothing reads the test's ring.
    assert_eq!(unsafe { b.ring() }, 4);
    assert_eq!((sq.pi, sq.posted, sq.outstanding()), (2, 2, 4));
    let send = WcOpcode::SEND.to_raw() as u8;
    let write = WcOpcode::RDMA_WRITE.to_raw() as u8;
    let s = |i: u16| sq.slots[usize::from(i & sq.mask)];
    let first = [
        (0xfffc, 1, u32::MAX, 0xfffe, send),
        (0xfffe, 2, 0, 0xffff, write),
        (0xffff, 3, 1, 0x0001, send),
        (0x0001, 4, 2, 0x0002, write),
    ];
    for (at, wr_id, seq, end, opcode) in first {
        let slot = s(at);
        assert_eq!(
            (slot.wr_id, slot.seq, slot.end, slot.opcode, slot._pad),
            (wr_id, seq, end, opcode, 0),
            "slot {at:#x}"
        );
    }
    assert_eq!((s(0xfffd).end, s(0x0000).end), (0xfffd, 0x0000));
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    let w = ffi::MLX5_OPCODE_RDMA_WRITE as u8;
    // The inner block of the WQE that wraps the ring: no start.
    mem.produce(0, 0, w, 0x5, 0x0000, 0, 0);
    assert!(matches!(
        cq.step_sq(&mut sq),
        Err(Error::Direct(DirectError::CqeNotOutstanding {
            counter: 0,
            ..
        }))
    ));
    mem.produce(1, 0, w, 0x5, 0xfffe, 0, 0);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!(
        (wc.wr_id, wc.covers, wc.opcode),
        (2, 2, WcOpcode::RDMA_WRITE)
    );
    assert_eq!((sq.ci, sq.retired, sq.outstanding()), (0xffff, 0, 2));
    mem.produce(2, 0, w, 0x5, 0x0001, 0, 0);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!((wc.wr_id, wc.covers), (4, 2));
    assert_eq!(
        (sq.ci, sq.retired, sq.outstanding(), sq.room()),
        (2, 2, 0, 16)
    );
}

/// The largest batch: 2^15 one-block WQEs filling a ring of 2^15 blocks,
/// started with the producer index and the sequence number both just
/// short of their wraps. One CQE for the last retires them all.
#[test]
fn a_batch_of_the_largest_ring_wraps_both_counters_and_retires_whole() {
    let cnt: u32 = 1 << 15;
    let mut ring = Ring::new(cnt);
    let mut sq = ring.sq(0x5, 0);
    sq.pi = 0xfff0;
    sq.ci = 0xfff0;
    sq.posted = u32::MAX - 7;
    sq.retired = u32::MAX - 7;
    let mut b = rc_batch(&mut sq);
    for i in 0..u64::from(cnt) {
        b.rdma_write(i, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1))
            .unwrap();
    }
    assert_eq!((b.len(), b.room()), (cnt, 0));
    assert!(matches!(
        b.rdma_write(0, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1)),
        Err(Error::SendQueueFull { .. })
    ));
    // SAFETY: nothing reads the test's ring.
    assert_eq!(unsafe { b.ring() }, cnt);
    let last = 0xfff0u16.wrapping_add((cnt - 1) as u16);
    assert_eq!(sq.pi, last.wrapping_add(1));
    assert_eq!(sq.posted, (u32::MAX - 7).wrapping_add(cnt));
    let slot = sq.slots[usize::from(last & sq.mask)];
    assert_eq!(
        (slot.seq, slot.end, slot.opcode, slot._pad),
        (sq.posted, sq.pi, WcOpcode::RDMA_WRITE.to_raw() as u8, 0)
    );
    let mut mem = CqMem::new(8, 64);
    let mut cq = mem.cqr();
    mem.produce(0, 0, ffi::MLX5_OPCODE_RDMA_WRITE as u8, 0x5, last, 0, 0);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!((wc.wr_id, wc.covers), (u64::from(cnt) - 1, cnt));
    assert_eq!((sq.outstanding(), sq.room()), (0, cnt));
}

/// Batches abandoned (one forgotten, one dropped) leave slots past the
/// producer index; later batches rung over them, laid out differently,
/// must not let a CQE naming one of those stale slots retire anything.
#[test]
fn slots_of_forgotten_and_dropped_batches_never_retire() {
    let mut ring = Ring::new(16);
    let mut sq = ring.sq(5, 0);
    // Forgotten: one-block WQEs at 0..8 (sequence numbers 1..=8).
    {
        let mut a = rc_batch(&mut sq);
        for i in 0..8 {
            a.send_inline(100 + i, SendFlags::empty(), &[1; 8]).unwrap();
        }
        // The batch has no `Drop` today: forgotten is dropped; kept should
        // one come.
        #[allow(clippy::forget_non_drop)]
        std::mem::forget(a);
    }
    assert_eq!((sq.pi, sq.posted), (0, 0));
    // Dropped: two-block WQEs at 0, 2, 4, 6.
    {
        let mut a = rc_batch(&mut sq);
        for i in 0..4 {
            a.send_inline(200 + i, SendFlags::empty(), &[1; 60])
                .unwrap();
        }
    }
    // Rung: a one-block WQE at 0, a two-block one at 1.
    let mut b = rc_batch(&mut sq);
    b.send_inline(10, SendFlags::empty(), &[1; 8]).unwrap();
    b.send_inline(11, SendFlags::empty(), &[1; 60]).unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    // Rung: a two-block WQE at 3 (over the dropped batch's 2-3 and 4's
    // first block), one block at 5.
    let mut b = rc_batch(&mut sq);
    b.send_inline(12, SendFlags::empty(), &[1; 60]).unwrap();
    b.send_inline(13, SendFlags::empty(), &[1; 8]).unwrap();
    // SAFETY: as above.
    unsafe { b.ring() };
    assert_eq!((sq.pi, sq.posted, sq.outstanding()), (6, 4, 4));
    let mut mem = CqMem::new(16, 64);
    let mut cq = mem.cqr();
    let s = ffi::MLX5_OPCODE_SEND as u8;
    // Inner blocks (2, 4) and stale slots past the producer index (6, 7):
    // each skipped, nothing retired.
    for (n, counter) in [2u16, 4, 6, 7].into_iter().enumerate() {
        mem.produce(n, 0, s, 5, counter, 0, 0);
        let r = cq.step_sq(&mut sq);
        assert!(
            matches!(r, Err(Error::Direct(DirectError::CqeNotOutstanding { .. }))),
            "counter {counter}"
        );
        assert_eq!((sq.retired, sq.ci), (0, 0));
    }
    mem.produce(4, 0, s, 5, 3, 0, 0);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!((wc.wr_id, wc.covers, sq.ci), (12, 3, 5));
    // Block 1 is retired now: a second CQE for it is not outstanding.
    mem.produce(5, 0, s, 5, 1, 0, 0);
    assert!(cq.step_sq(&mut sq).is_err());
    mem.produce(6, 0, s, 5, 5, 0, 0);
    let Ok(Step::Wc(wc)) = cq.step_sq(&mut sq) else {
        panic!()
    };
    assert_eq!((wc.wr_id, wc.covers, sq.outstanding()), (13, 1, 0));
}

/// Garbage in every byte of every CQE the device handed over: the poll
/// returns errors or completions, never panics, and never retires more
/// than was posted.
#[test]
fn garbage_cqes_never_panic_nor_over_retire() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for size in [64usize, 128] {
        let mut ring = Ring::new(16);
        let mut sq = ring.sq(5, 0);
        let mut mem = CqMem::new(8, size);
        let mut cq = mem.cqr();
        let mut out = [DirectWc::default(); 3];
        for round in 0..4000usize {
            if sq.room() >= 2 && round % 3 == 0 {
                ring.set_state(crate::QpState::Rts);
                let mut b = rc_batch(&mut sq);
                b.send_inline(round as u64, SendFlags::empty(), &[1; 60])
                    .unwrap();
                // SAFETY: nothing reads the test's ring.
                unsafe { b.ring() };
            }
            // Error completions among the garbage: none asks the kernel.
            ring.set_state(crate::QpState::Err);
            let n = cq.ci as usize;
            let c = mem.cqe(n % 8);
            for b in c.iter_mut() {
                *b = next() as u8;
            }
            // Sometimes a plausible counter, sometimes a good opcode.
            if round % 2 == 0 {
                c[60..62].copy_from_slice(&((next() as u16) & 0x1f).to_be_bytes());
            }
            c[63] = (c[63] & !1) | ((n / 8) & 1) as u8;
            if round % 5 == 0 {
                c[63] &= 0x0f;
            }
            let before = sq.outstanding();
            let mut idx = sq.idx();
            let (k, _) = super::cq::poll_into(&mut cq, &mut idx, &mut out, sq.qp);
            sq.put(idx);
            assert!(k <= 1);
            assert!(sq.outstanding() <= before);
            assert!(u32::from(sq.pi.wrapping_sub(sq.ci)) <= 16);
        }
    }
}

/// A DCI's WQE of up to eight units skips the size test (it always fits):
/// `into_direct` takes no DCI send queue of fewer than two blocks, and the
/// WQE size it derives for a DCI is two blocks at least whatever the
/// capabilities. A longer WQE is still tested.
#[test]
fn a_dci_always_has_room_in_its_wqe_for_two_blocks() {
    use crate::qp::{DcInitiator, QpEx};
    let mut ring = Ring::new(2);
    for cnt in [1u32, 2, 4, 1 << 15] {
        let mut dv = ffi::mlx5dv_qp::default();
        dv.sq.buf = ring.buf.as_mut_ptr().cast();
        dv.sq.wqe_cnt = cnt;
        dv.sq.stride = 64;
        dv.dbrec = &mut ring.db[0];
        dv.bf.reg = ring.bf.as_mut_ptr().cast();
        for (inline, sge) in [(0, 0), (0, 1), (12, 1), (1024, 30)] {
            let caps = crate::QpCaps {
                max_send_wr: 1,
                max_recv_wr: 0,
                max_send_sge: sge,
                max_recv_sge: 0,
                max_inline_data: inline,
            };
            match QpEx::<DcInitiator>::take_sq(&dv, ring.qp, caps, "a DCI") {
                Ok(sq) => {
                    assert!(cnt >= 2);
                    assert!(
                        sq.max_blocks >= 2 && sq.max_blocks <= cnt,
                        "{cnt} {inline} {sge}"
                    );
                }
                Err(e) => assert!(cnt < 2 && matches!(e, Error::Unsupported { .. }), "{e}"),
            }
        }
    }
    // The smallest DCI: two blocks, WQEs of two. An RDMA write (6 units
    // with the datagram segment) fits; inline data to 9 units does not.
    let mut sq = ring.sq(5, 0);
    sq.max_blocks = 2;
    sq.max_inline = 64;
    let to = super::DirectDcAddr { words: [0; 6] };
    let mut b = made::<DcInitiator>(&mut sq);
    b.dc(&to)
        .rdma_write(1, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1))
        .unwrap();
    assert_eq!((b.len(), b.room()), (1, 0));
    drop(b);
    let mut b = made::<DcInitiator>(&mut sq);
    // 1 + 3 + ceil((4 + 60) / 16) = 8 units: fits.
    b.dc(&to)
        .send_inline(1, SendFlags::empty(), &[0; 60])
        .unwrap();
    drop(b);
    let mut b = made::<DcInitiator>(&mut sq);
    // 1 + 3 + ceil((4 + 61) / 16) = 9 units: refused by the size test.
    assert!(matches!(
        b.dc(&to).send_inline(1, SendFlags::empty(), &[0; 61]),
        Err(Error::Direct(DirectError::TooManyUnits {
            units: 9,
            max: 8,
            by_ds_field: false
        }))
    ));
}

/// An empty entry is written as no data segment (its WQE one unit
/// shorter), on RC and on a DCI, and the WQE after it is whole again.
#[test]
fn an_empty_entry_is_no_data_segment_and_the_next_wqe_is_whole() {
    use crate::qp::DcInitiator;
    let mut ring = Ring::new(8);
    let mut sq = ring.sq(0x21, 0);
    let mut b = rc_batch(&mut sq);
    b.rdma_write(1, SendFlags::empty(), remote(0x10, 8, 2), sge(0x20, 0, 3))
        .unwrap();
    b.rdma_read(
        2,
        SendFlags::empty(),
        remote(0x10, 8, 2),
        sge_mut(0x20, 0, 3),
    )
    .unwrap();
    b.rdma_write(3, SendFlags::SIGNALED, remote(0x10, 8, 2), sge(0x20, 8, 3))
        .unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    assert_eq!(
        &ring.bytes(0)[..32],
        &[
            ctrl(0, ffi::MLX5_OPCODE_RDMA_WRITE, 0x21, 2, 0, 0),
            raddr(0x10, 2)
        ]
        .concat()[..]
    );
    assert_eq!(
        &ring.bytes(1)[..16],
        &ctrl(1, ffi::MLX5_OPCODE_RDMA_READ, 0x21, 2, 0, 0)[..]
    );
    let whole = [
        ctrl(2, ffi::MLX5_OPCODE_RDMA_WRITE, 0x21, 3, 8, 0),
        raddr(0x10, 2),
        data(8, 3, 0x20),
    ]
    .concat();
    assert_eq!(&ring.bytes(2)[..48], &whole[..]);
    // A DCI: control, datagram (3 units) and remote-address segments.
    let mut ring = Ring::new(8);
    let mut sq = ring.sq(0x22, 0);
    let to = super::DirectDcAddr { words: [0; 6] };
    let mut b = made::<DcInitiator>(&mut sq);
    b.dc(&to)
        .rdma_write(1, SendFlags::empty(), remote(0, 8, 1), sge(0, 0, 1))
        .unwrap();
    b.dc(&to)
        .rdma_write(2, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1))
        .unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    let ds = |block: usize| ring.bytes(block)[7];
    assert_eq!((ds(0), ds(2)), (5, 6));
    // A remote buffer of 4 GiB and more: an empty entry is still none.
    let mut ring = Ring::new(8);
    let mut sq = ring.sq(0x23, 0);
    let mut b = rc_batch(&mut sq);
    b.rdma_write(1, SendFlags::empty(), remote(0, 1 << 33, 1), sge(0, 0, 1))
        .unwrap();
    // SAFETY: nothing reads the test's ring.
    unsafe { b.ring() };
    assert_eq!(ring.bytes(0)[7], 2);
}

/// `limit` holds the batch to as many more work requests (one block each
/// on RC, two on a DCI), checked against the room once; past it a work
/// request is refused, nothing of it written, and the batch stays open.
#[test]
fn a_limit_holds_the_batch_and_is_checked_against_the_room() {
    use crate::qp::DcInitiator;
    let mut ring = Ring::new(8);
    let mut sq = ring.sq(0x9, 0);
    let mut b = rc_batch(&mut sq);
    // More than the ring holds: refused, the batch unchanged.
    assert!(matches!(
        b.limit(9),
        Err(Error::SendQueueFull { batch: 9, depth: 8 })
    ));
    assert!(matches!(
        b.limit(usize::MAX),
        Err(Error::SendQueueFull { depth: 8, .. })
    ));
    assert_eq!(b.room(), 8);
    b.rdma_write(0, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1))
        .unwrap();
    b.limit(3).unwrap();
    assert_eq!((b.len(), b.room()), (1, 3));
    for i in 1..4 {
        b.rdma_write(i, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1))
            .unwrap();
    }
    // The fifth: past the limit of 1 + 3, though the ring has room.
    let before = ring.bytes(4);
    assert!(matches!(
        b.rdma_write(4, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1)),
        Err(Error::BatchLimit { limit: 4 })
    ));
    assert!(matches!(b.limit(1), Err(Error::BatchLimit { limit: 4 })));
    assert_eq!((b.len(), b.room()), (4, 0));
    // A limit of none left is no error.
    b.limit(0).unwrap();
    // SAFETY: nothing reads the test's ring.
    assert_eq!(unsafe { b.ring() }, 4);
    assert_eq!(ring.bytes(4), before);
    assert_eq!((sq.pi, sq.posted), (4, 4));
    // The next batch has the ring's room again: a limit is the batch's.
    let b = rc_batch(&mut sq);
    assert_eq!(b.room(), 4);
    drop(b);
    // On a DCI each work request counts two blocks; a WQE of more takes
    // more of the limit.
    let mut ring = Ring::new(8);
    let mut sq = ring.sq(0x9, 0);
    sq.max_inline = 64;
    let to = super::DirectDcAddr { words: [0; 6] };
    let mut b = made::<DcInitiator>(&mut sq);
    assert!(matches!(
        b.limit(5),
        Err(Error::SendQueueFull { batch: 5, depth: 8 })
    ));
    b.limit(2).unwrap();
    assert_eq!(b.room(), 4);
    // 1 + 3 + 1 + ceil((4 + 40) / 16) = 8 units: two blocks.
    b.dc(&to)
        .rdma_write_inline(1, SendFlags::empty(), remote(0, 64, 1), &[7; 40])
        .unwrap();
    assert_eq!(b.room(), 2);
    // 1 + 3 + ceil((4 + 61) / 16) = 9 units: three blocks, more than left.
    assert!(matches!(
        b.dc(&to).send_inline(2, SendFlags::empty(), &[0; 61]),
        Err(Error::BatchLimit { limit: 2 })
    ));
    b.dc(&to)
        .rdma_write(2, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1))
        .unwrap();
    assert!(matches!(
        b.dc(&to)
            .rdma_write(3, SendFlags::empty(), remote(0, 8, 1), sge(0, 8, 1)),
        Err(Error::BatchLimit { limit: 2 })
    ));
    assert_eq!((b.len(), b.room()), (2, 0));
}
