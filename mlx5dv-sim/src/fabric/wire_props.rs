//! Property tests of the fabric's packet encoding ([`super::wire`]): a
//! datagram from another process is never trusted, so [`Packet::decode`]
//! must refuse what it cannot prove and never panic, and what it accepts
//! must be exactly what [`Packet::encode`] writes for the packet it gives
//! (one encoding per packet: a corrupt datagram cannot pass for another).
//!
//! - Arbitrary bytes (and arbitrary bytes after a valid version and kind)
//!   never panic the decoder; whatever decodes re-encodes to those bytes.
//! - Every packet (arbitrary fields and payloads) decodes from its
//!   encoding to itself.
//! - Every truncation of an encoding is refused; every single-byte
//!   mutation is refused or decodes to a packet that re-encodes to the
//!   mutated bytes.
//!
//! The mutation property found two forms that decoded to a packet with
//! other bytes (an absent immediate with nonzero bytes, a NAK reason that
//! is not UTF-8); the decoder refuses them now, and
//! `non_canonical_forms_found_are_refused` keeps them.
//!
//! 2000 cases per property (`PROPTEST_CASES` overrides); under a second
//! in a debug build.

use super::wire::{Op, Packet, Reply, Request, Response, Transport};
use proptest::prelude::*;

/// Payloads of up to 48 bytes: the encoding does not depend on the length
/// beyond its 4-byte prefix, and short ones keep each case cheap.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..48)
}

fn transport() -> impl Strategy<Value = Transport> {
    prop_oneof![
        Just(Transport::Rc),
        Just(Transport::Uc),
        Just(Transport::Dc),
        Just(Transport::Ud),
        any::<u32>().prop_map(|srqn| Transport::Xrc { srqn }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let imm = any::<Option<[u8; 4]>>();
    prop_oneof![
        (
            any::<bool>(),
            any::<u32>(),
            any::<u64>(),
            imm.clone(),
            any::<u32>(),
            payload()
        )
            .prop_map(|(first, rkey, raddr, imm, total, data)| Op::Write {
                first,
                rkey,
                raddr,
                imm,
                total,
                data,
            }),
        (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(rkey, raddr, len)| Op::Read {
            rkey,
            raddr,
            len
        }),
        (
            any::<bool>(),
            any::<bool>(),
            imm,
            any::<Option<u32>>(),
            payload()
        )
            .prop_map(|(first, last, imm, inv, data)| Op::Send {
                first,
                last,
                imm,
                inv,
                data,
            }),
        (
            any::<bool>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(cs, rkey, raddr, swap_add, compare)| Op::Atomic {
                cs,
                rkey,
                raddr,
                swap_add,
                compare,
            }),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    (
        (any::<u16>(), any::<u32>(), any::<u32>(), any::<u32>()),
        transport(),
        (any::<u64>(), any::<u32>(), any::<bool>()),
        op(),
    )
        .prop_map(
            |((src_host, src_qpn, dst_qpn, psn), transport, (dc_key, qkey, solicited), op)| {
                Request {
                    src_host,
                    src_qpn,
                    dst_qpn,
                    psn,
                    transport,
                    dc_key,
                    qkey,
                    solicited,
                    op,
                }
            },
        )
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        payload().prop_map(Reply::Ack),
        (any::<u8>(), ".{0,24}").prop_map(|(s, why)| Reply::Nak(s, why)),
        any::<u8>().prop_map(Reply::Rnr),
    ]
}

fn packet() -> impl Strategy<Value = Packet> {
    prop_oneof![
        request().prop_map(Packet::Request),
        (any::<u32>(), any::<u32>(), reply()).prop_map(|(dst_qpn, psn, reply)| {
            Packet::Response(Response {
                dst_qpn,
                psn,
                reply,
            })
        }),
    ]
}

/// The version byte every encoding starts with.
fn version() -> u8 {
    let p = Packet::Response(Response {
        dst_qpn: 0,
        psn: 0,
        reply: Reply::Rnr(0),
    });
    p.encode()[0]
}

/// Refused, or decoded to a packet whose encoding is `b` itself.
fn refused_or_canonical(b: &[u8]) -> Result<(), TestCaseError> {
    if let Some(p) = Packet::decode(b) {
        prop_assert_eq!(p.encode(), b, "{:?} decoded from {:02x?}", p, b);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
    ))]

    /// Any bytes: no panic; what decodes is canonical.
    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..160)) {
        refused_or_canonical(&b)?;
    }

    /// Any bytes after the version byte and a packet kind, so the decoder
    /// gets past its first checks.
    #[test]
    fn arbitrary_bodies_never_panic(
        kind in 0u8..3,
        body in prop::collection::vec(any::<u8>(), 0..160),
    ) {
        let mut b = vec![version(), kind];
        b.extend(body);
        refused_or_canonical(&b)?;
    }

    /// decode ∘ encode is the identity.
    #[test]
    fn every_packet_decodes_from_its_encoding(p in packet()) {
        prop_assert_eq!(Packet::decode(&p.encode()), Some(p));
    }

    /// Every truncation is refused (lengths are prefixed and the whole
    /// datagram must be used).
    #[test]
    fn truncations_are_refused(p in packet()) {
        let b = p.encode();
        for n in 0..b.len() {
            prop_assert_eq!(Packet::decode(&b[..n]), None, "{:?} cut at {}", p, n);
        }
    }

    /// A changed byte is refused or makes another packet whose encoding is
    /// the changed bytes: never a packet that encodes differently.
    #[test]
    fn single_byte_mutations_are_refused_or_canonical(
        p in packet(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut b = p.encode();
        let i = at.index(b.len());
        b[i] = byte;
        refused_or_canonical(&b)?;
        // A flipped bit is the corruption a wire would give.
        b[i] ^= 1 << (byte & 7);
        refused_or_canonical(&b)?;
    }
}

/// The two forms the mutation property found that decoded to a packet
/// encoding other bytes, now refused: an absent immediate (or invalidated
/// rkey) whose 4 bytes are not zero, and a NAK reason that is not UTF-8
/// (it decoded lossily, as U+FFFD).
#[test]
fn non_canonical_forms_found_are_refused() {
    let send = Packet::Request(Request {
        src_host: 0,
        src_qpn: 0,
        dst_qpn: 0,
        psn: 0,
        transport: Transport::Rc,
        dc_key: 0,
        qkey: 0,
        solicited: false,
        op: Op::Send {
            first: true,
            last: true,
            imm: None,
            inv: None,
            data: vec![],
        },
    });
    let mut b = send.encode();
    // Version, kind, host, QPNs, PSN, transport, DC key, qkey, solicited:
    // 30 bytes; then the opcode, first, last, and the immediate's flag.
    let imm = 30 + 3;
    assert_eq!(b[imm..imm + 5], [0; 5]);
    assert_eq!(Packet::decode(&b), Some(send));
    b[imm + 1] = 1;
    assert_eq!(Packet::decode(&b), None);

    let nak = Packet::Response(Response {
        dst_qpn: 0,
        psn: 0,
        reply: Reply::Nak(0, "!".into()),
    });
    let mut b = nak.encode();
    assert_eq!(Packet::decode(&b), Some(nak));
    *b.last_mut().unwrap() = 0xa1;
    assert_eq!(Packet::decode(&b), None);
}
