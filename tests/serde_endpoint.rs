//! The `serde` feature: `Endpoint` and `Gid` in a human-readable format
//! (JSON) and a compact one (serde_test's token stream, as bincode sees
//! it), and what reading refuses. Host only: no device.
#![cfg(feature = "serde")]

use mlx5dv::{DctEndpoint, Endpoint, Gid, RemoteBuf, UdEndpoint};
use serde_test::{assert_tokens, Configure, Token};

fn roce_gid() -> Gid {
    Gid::from("::ffff:10.99.0.1".parse::<std::net::Ipv6Addr>().unwrap())
}

fn endpoint() -> Endpoint {
    Endpoint {
        qpn: 0x00ab_cdef,
        psn: 0x0012_3456,
        lid: 7,
        gid: roce_gid(),
    }
}

#[test]
fn an_endpoint_round_trips_through_json_with_its_gid_as_ipv6_text() {
    let json = serde_json::to_string(&endpoint()).unwrap();
    assert_eq!(
        json,
        r#"{"qpn":11259375,"psn":1193046,"lid":7,"gid":"::ffff:10.99.0.1"}"#
    );
    assert_eq!(serde_json::from_str::<Endpoint>(&json).unwrap(), endpoint());
    // A link-local GID is written in the usual IPv6 form.
    let mut ll = [0u8; 16];
    ll[0] = 0xfe;
    ll[1] = 0x80;
    ll[15] = 1;
    assert_eq!(serde_json::to_string(&Gid(ll)).unwrap(), r#""fe80::1""#);
    assert_eq!(
        serde_json::from_str::<Gid>(r#""fe80::1""#).unwrap(),
        Gid(ll)
    );
}

#[test]
fn json_fields_may_come_in_any_order() {
    let json = r#"{"gid":"::ffff:10.99.0.1","lid":7,"psn":1193046,"qpn":11259375}"#;
    assert_eq!(serde_json::from_str::<Endpoint>(json).unwrap(), endpoint());
}

#[test]
fn a_compact_format_carries_the_gid_as_16_bytes() {
    let gid = roce_gid();
    let raw: &'static [u8] = Box::leak(Box::new(gid.0));
    assert_tokens(&gid.compact(), &[Token::Bytes(raw)]);
    assert_tokens(
        &endpoint().compact(),
        &[
            Token::Struct {
                name: "Endpoint",
                len: 4,
            },
            Token::Str("qpn"),
            Token::U32(0x00ab_cdef),
            Token::Str("psn"),
            Token::U32(0x0012_3456),
            Token::Str("lid"),
            Token::U16(7),
            Token::Str("gid"),
            Token::Bytes(raw),
            Token::StructEnd,
        ],
    );
}

#[test]
fn a_sequence_form_is_read_as_bincode_writes_structs() {
    // bincode and postcard write a struct as its fields in order.
    let json = r#"[11259375,1193046,7,"::ffff:10.99.0.1"]"#;
    assert_eq!(serde_json::from_str::<Endpoint>(json).unwrap(), endpoint());
}

fn refused(json: &str) -> String {
    match serde_json::from_str::<Endpoint>(json) {
        Ok(e) => panic!("{json} was read as {e:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn qp_numbers_and_psns_past_24_bits_are_refused() {
    let e = refused(r#"{"qpn":16777216,"psn":0,"lid":0,"gid":"::"}"#);
    assert!(e.contains("qpn 0x1000000 out of range"), "{e}");
    let e = refused(r#"{"qpn":1,"psn":4294967295,"lid":0,"gid":"::"}"#);
    assert!(e.contains("psn 0xffffffff out of range"), "{e}");
    let e = refused(r#"[1,16777216,0,"::"]"#);
    assert!(e.contains("psn 0x1000000 out of range"), "{e}");
}

#[test]
fn missing_unknown_and_repeated_fields_are_refused() {
    let e = refused(r#"{"qpn":1,"psn":2,"lid":0}"#);
    assert!(e.contains("missing field `gid`"), "{e}");
    let e = refused(r#"{"qpn":1,"psn":2,"lid":0,"gid":"::","port":1}"#);
    assert!(e.contains("unknown field `port`"), "{e}");
    let e = refused(r#"{"qpn":1,"qpn":2,"psn":2,"lid":0,"gid":"::"}"#);
    assert!(e.contains("duplicate field `qpn`"), "{e}");
    let e = refused(r#"[1,2,0]"#);
    assert!(e.contains("invalid length 3"), "{e}");
}

#[test]
fn a_gid_that_is_not_ipv6_text_or_16_bytes_is_refused() {
    let e = refused(r#"{"qpn":1,"psn":2,"lid":0,"gid":"10.99.0.1"}"#);
    assert!(e.contains("invalid value"), "{e}");
    let short: &'static [u8] = &[1, 2, 3];
    serde_test::assert_de_tokens_error::<serde_test::Compact<Gid>>(
        &[Token::Bytes(short)],
        "invalid length 3, expected a GID: IPv6 text such as \"::ffff:10.99.0.1\", or 16 bytes",
    );
    // The lid is 16 bits.
    let e = refused(r#"{"qpn":1,"psn":2,"lid":65536,"gid":"::"}"#);
    assert!(e.contains("invalid value"), "{e}");
}

#[test]
fn the_serde_form_and_the_byte_form_agree() {
    let e = endpoint();
    let via_bytes = Endpoint::from_bytes(&e.to_bytes()).unwrap();
    let via_json: Endpoint = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
    assert_eq!(via_bytes, via_json);
}

#[test]
fn a_dct_endpoint_and_a_remote_buffer_round_trip_and_agree_with_their_byte_forms() {
    let dct = DctEndpoint {
        dctn: 0x12,
        dc_key: 0x1ee7_c0de,
        lid: 3,
        gid: roce_gid(),
    };
    let json = serde_json::to_string(&dct).unwrap();
    assert_eq!(
        json,
        r#"{"dctn":18,"dc_key":518504670,"lid":3,"gid":"::ffff:10.99.0.1"}"#
    );
    assert_eq!(serde_json::from_str::<DctEndpoint>(&json).unwrap(), dct);
    let shuffled = r#"{"gid":"::ffff:10.99.0.1","lid":3,"dc_key":518504670,"dctn":18}"#;
    assert_eq!(serde_json::from_str::<DctEndpoint>(shuffled).unwrap(), dct);
    let seq = r#"[18,518504670,3,"::ffff:10.99.0.1"]"#;
    assert_eq!(serde_json::from_str::<DctEndpoint>(seq).unwrap(), dct);

    let buf = RemoteBuf {
        addr: 0x7f00_0000_1000,
        len: 4096,
        rkey: 0x1234,
    };
    let json = serde_json::to_string(&buf).unwrap();
    assert_eq!(json, r#"{"addr":139637976731648,"len":4096,"rkey":4660}"#);
    assert_eq!(serde_json::from_str::<RemoteBuf>(&json).unwrap(), buf);
    assert_eq!(RemoteBuf::from_bytes(&buf.to_bytes()).unwrap(), buf);
    let raw: &'static [u8] = Box::leak(Box::new(roce_gid().0));
    assert_tokens(
        &dct.compact(),
        &[
            Token::Struct {
                name: "DctEndpoint",
                len: 4,
            },
            Token::Str("dctn"),
            Token::U32(0x12),
            Token::Str("dc_key"),
            Token::U64(0x1ee7_c0de),
            Token::Str("lid"),
            Token::U16(3),
            Token::Str("gid"),
            Token::Bytes(raw),
            Token::StructEnd,
        ],
    );
}

#[test]
fn what_the_byte_forms_refuse_serde_refuses_too() {
    let e =
        serde_json::from_str::<DctEndpoint>(r#"{"dctn":16777216,"dc_key":1,"lid":0,"gid":"::"}"#)
            .unwrap_err()
            .to_string();
    assert!(e.contains("DCT number") && e.contains("24 bits"), "{e}");
    let e = serde_json::from_str::<DctEndpoint>(r#"{"dctn":1,"dc_key":1,"lid":0}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing field `gid`"), "{e}");
    let e =
        serde_json::from_str::<DctEndpoint>(r#"{"dctn":1,"dctn":1,"dc_key":1,"lid":0,"gid":"::"}"#)
            .unwrap_err()
            .to_string();
    assert!(e.contains("duplicate field `dctn`"), "{e}");
    let e = serde_json::from_str::<RemoteBuf>(r#"{"addr":18446744073709551615,"len":2,"rkey":1}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("address space"), "{e}");
    let e = serde_json::from_str::<RemoteBuf>(r#"{"addr":1,"len":2,"rkey":1,"lkey":3}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `lkey`"), "{e}");
    let e = serde_json::from_str::<RemoteBuf>(r#"[1,2]"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid length 2"), "{e}");
}

#[test]
fn a_ud_endpoint_round_trips_and_refuses_what_its_byte_form_refuses() {
    let ud = UdEndpoint {
        qpn: 0x00ab_cdef,
        qkey: 0x1111_1111,
        lid: 7,
        gid: roce_gid(),
    };
    let json = serde_json::to_string(&ud).unwrap();
    assert_eq!(
        json,
        r#"{"qpn":11259375,"qkey":286331153,"lid":7,"gid":"::ffff:10.99.0.1"}"#
    );
    assert_eq!(serde_json::from_str::<UdEndpoint>(&json).unwrap(), ud);
    let shuffled = r#"{"gid":"::ffff:10.99.0.1","lid":7,"qkey":286331153,"qpn":11259375}"#;
    assert_eq!(serde_json::from_str::<UdEndpoint>(shuffled).unwrap(), ud);
    assert_eq!(
        UdEndpoint::from_bytes(
            &serde_json::from_str::<UdEndpoint>(&json)
                .unwrap()
                .to_bytes()
        )
        .unwrap(),
        ud
    );
    let err = serde_json::from_str::<UdEndpoint>(r#"{"qpn":16777216,"qkey":1,"lid":0,"gid":"::"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("UdEndpoint QP number"), "{err}");
    for bad in [
        r#"{"qpn":1,"lid":0,"gid":"::"}"#,
        r#"{"qpn":1,"qkey":1,"lid":0,"gid":"::","psn":0}"#,
        r#"{"qpn":1,"qkey":1,"qkey":2,"lid":0,"gid":"::"}"#,
    ] {
        assert!(serde_json::from_str::<UdEndpoint>(bad).is_err(), "{bad}");
    }
}
