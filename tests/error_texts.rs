//! The texts a program shows when it fails, on the host (no device): an
//! error's `Debug` form (what a `main` or a `#[test]` returning `Result`
//! prints) carries its whole message, the recovery hints offer `reset()`
//! only to the QPs that have one, and the byte forms' refusals and a
//! `RemoteBuf` read as the rest of the crate's messages do.

use mlx5dv::*;

/// `fn main() -> mlx5dv::Result<()>` prints `Error: {:?}`: the Debug form
/// must say what the Display text says (the next step included).
#[test]
fn an_errors_debug_form_carries_its_display_text() {
    let errors = [
        Error::DeviceNotFound {
            name: "mlx5_0".into(),
            found: "none".into(),
        },
        Error::InvalidArgument("a bad value".into()),
        Error::OutOfRange {
            what: "SGE range end",
            value: 9,
            limit: "at most 8".into(),
        },
        Error::Timeout {
            what: "1 completion".into(),
            waited_ms: 5,
        },
        Error::WorkCompletion {
            wr_id: 7,
            qp_num: 0x1a2,
            status: WcStatus::REM_ACCESS_ERR,
            vendor_err: 0,
            kind: None,
        },
        Error::QpNotReady {
            what: "post_and_wait",
            qp_num: 0x1a2b,
            state: QpState::Reset,
            receive: false,
        },
    ];
    for e in &errors {
        let debug = format!("{e:?}");
        let display = e.to_string();
        assert!(debug.contains(&display), "{debug}");
    }
    assert_eq!(
        format!("{:?}", errors[0]),
        format!("DeviceNotFound: {}", errors[0])
    );
    assert!(format!("{:?}", errors[0]).contains("run under"));
    // `{:#?}` still shows the fields.
    let pretty = format!("{:#?}", errors[5]);
    assert!(pretty.contains("qp_num: 0x1a2b"), "{pretty}");
    assert!(pretty.contains("state: Reset"), "{pretty}");
}

/// A DCT and an XRC target have no `reset()`: the texts for a QP of any
/// kind must not offer it to them, and the RC method is `connect_to`.
#[test]
fn recovery_texts_offer_reset_only_where_there_is_one() {
    let flush = WcStatus::WR_FLUSH_ERR.hint().unwrap();
    let err = Error::QpNotReady {
        what: "post_and_wait",
        qp_num: 1,
        state: QpState::Err,
        receive: false,
    }
    .to_string();
    for text in [flush, &err, WcStatus::REM_ACCESS_ERR.hint().unwrap()] {
        assert!(text.contains("RC, UC, DCI, UD: reset() it"), "{text}");
        assert!(
            text.contains("a DCT or an XRC target has no reset(): make a new one"),
            "{text}"
        );
        assert!(!text.contains("DCT, UD: ready"), "{text}");
    }
    let retry = WcStatus::RETRY_EXC_ERR.hint().unwrap();
    assert!(
        retry.contains("the Endpoint given to connect_to"),
        "{retry}"
    );
}

#[test]
fn a_byte_form_of_the_wrong_length_names_the_type_with_its_article() {
    let e = Endpoint::from_bytes(&[0u8; 3]).unwrap_err().to_string();
    assert!(e.contains("bytes for an Endpoint"), "{e}");
    let e = RemoteBuf::from_bytes(&[0u8]).unwrap_err().to_string();
    assert!(e.contains("bytes for a RemoteBuf"), "{e}");
}

#[test]
fn a_remote_bufs_debug_form_is_in_hex() {
    let r = RemoteBuf {
        addr: 0x7f00_1000,
        len: 64,
        rkey: 0x1234,
    };
    assert_eq!(
        format!("{r:?}"),
        "RemoteBuf { addr: 0x7f001000, len: 64, rkey: 0x1234 }"
    );
}
