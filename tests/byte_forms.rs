//! The byte forms of [`Endpoint`], [`DctEndpoint`], [`UdEndpoint`] and
//! [`RemoteBuf`], on the host: each reads back what it wrote, and the
//! bytes of one type are refused by every other type's `from_bytes` with
//! [`Error::WrongByteForm`] naming both, whatever the values (several
//! forms are 28 bytes long, so without their form byte one would read as
//! another).
//!
//! 256 cases per property (`PROPTEST_CASES` overrides).

use mlx5dv::{DctEndpoint, Endpoint, Error, Gid, RemoteBuf, UdEndpoint};
use proptest::prelude::*;

/// The four types' names, and their byte forms read back by each.
const NAMES: [&str; 4] = ["Endpoint", "DctEndpoint", "UdEndpoint", "RemoteBuf"];

/// What `from_bytes` of type `i` (in [`NAMES`]'s order) makes of `bytes`:
/// `Ok` with the value's `Debug`, or the error.
fn read_as(i: usize, bytes: &[u8]) -> Result<String, Error> {
    Ok(match i {
        0 => format!("{:?}", Endpoint::from_bytes(bytes)?),
        1 => format!("{:?}", DctEndpoint::from_bytes(bytes)?),
        2 => format!("{:?}", UdEndpoint::from_bytes(bytes)?),
        _ => format!("{:?}", RemoteBuf::from_bytes(bytes)?),
    })
}

fn gid() -> impl Strategy<Value = Gid> {
    any::<[u8; 16]>().prop_map(Gid)
}

/// One value of each type, as its byte form and its `Debug`.
fn forms() -> impl Strategy<Value = [(Vec<u8>, String); 4]> {
    let qpn = 0u32..1 << 24;
    (
        (qpn.clone(), 0u32..1 << 24, any::<u16>(), gid()),
        (qpn.clone(), any::<u64>(), any::<u16>(), gid()),
        (qpn, any::<u32>(), any::<u16>(), gid()),
        (any::<u64>(), any::<u64>(), any::<u32>()),
    )
        .prop_map(|(e, d, u, r)| {
            let e = Endpoint {
                qpn: e.0,
                psn: e.1,
                lid: e.2,
                gid: e.3,
            };
            let d = DctEndpoint {
                dctn: d.0,
                dc_key: d.1,
                lid: d.2,
                gid: d.3,
            };
            let u = UdEndpoint {
                qpn: u.0,
                qkey: u.1,
                lid: u.2,
                gid: u.3,
            };
            // An end that does not overflow (from_bytes refuses one).
            let r = RemoteBuf {
                addr: r.0,
                len: r.1.min(u64::MAX - r.0),
                rkey: r.2,
            };
            [
                (e.to_bytes().to_vec(), format!("{e:?}")),
                (d.to_bytes().to_vec(), format!("{d:?}")),
                (u.to_bytes().to_vec(), format!("{u:?}")),
                (r.to_bytes().to_vec(), format!("{r:?}")),
            ]
        })
}

proptest! {
    #[test]
    fn each_form_reads_as_its_own_type_only(forms in forms()) {
        for (of, (bytes, debug)) in forms.iter().enumerate() {
            for (reader, reader_name) in NAMES.iter().enumerate() {
                let got = read_as(reader, bytes);
                if reader == of {
                    prop_assert_eq!(got.as_ref().ok(), Some(debug), "{}", reader_name);
                    continue;
                }
                let e = got.expect_err("another type's bytes");
                match &e {
                    Error::WrongByteForm { expected, found } => {
                        prop_assert_eq!(expected, reader_name);
                        prop_assert_eq!(*found, NAMES[of]);
                    }
                    other => prop_assert!(false, "{} read as {reader_name}: {other:?}", NAMES[of]),
                }
                let text = e.to_string();
                let article = |n: &str| if n.starts_with('E') { "an" } else { "a" };
                let want = format!(
                    "these are {} {}'s bytes, not {} {}'s",
                    article(NAMES[of]), NAMES[of], article(reader_name), reader_name
                );
                prop_assert!(text.starts_with(&want), "{text}");
            }
        }
    }
}

#[test]
fn the_forms_carry_version_2_and_a_form_byte_of_their_own() {
    let e = Endpoint {
        qpn: 1,
        psn: 2,
        lid: 3,
        gid: Gid::default(),
    };
    let d = DctEndpoint {
        dctn: 1,
        dc_key: 2,
        lid: 3,
        gid: Gid::default(),
    };
    let u = UdEndpoint {
        qpn: 1,
        qkey: 2,
        lid: 3,
        gid: Gid::default(),
    };
    let r = RemoteBuf {
        addr: 1,
        len: 2,
        rkey: 3,
    };
    let heads = [
        e.to_bytes()[..2].to_vec(),
        d.to_bytes()[..2].to_vec(),
        u.to_bytes()[..2].to_vec(),
        r.to_bytes()[..2].to_vec(),
    ];
    assert_eq!(heads, [[2, 1], [2, 2], [2, 3], [2, 4]]);
    for v in [
        Endpoint::VERSION,
        DctEndpoint::VERSION,
        UdEndpoint::VERSION,
        RemoteBuf::VERSION,
    ] {
        assert_eq!(v, 2);
    }
    // A form of the old layout (version 1, byte 1 zero) or a form byte no
    // type has: refused as a version this release does not read.
    let mut old = e.to_bytes();
    old[..2].copy_from_slice(&[1, 0]);
    let text = Endpoint::from_bytes(&old).unwrap_err().to_string();
    assert!(
        text.contains("version 1") && text.contains("version 2"),
        "{text}"
    );
    let mut unknown = u.to_bytes();
    unknown[1] = 9;
    assert!(matches!(
        UdEndpoint::from_bytes(&unknown),
        Err(Error::InvalidArgument(_))
    ));
    // Another type's bytes cut short still say whose they are.
    assert!(matches!(
        Endpoint::from_bytes(&d.to_bytes()[..10]),
        Err(Error::WrongByteForm {
            expected: "Endpoint",
            found: "DctEndpoint"
        })
    ));
}
