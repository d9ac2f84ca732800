//! Tests of the errors' texts.

use super::*;
use crate::WcStatus;

#[test]
fn eopnotsupp_and_eprotonosupport_are_unsupported() {
    for errno in [libc::EOPNOTSUPP, libc::EPROTONOSUPPORT, -libc::EOPNOTSUPP] {
        let e = Error::verbs("mlx5dv_create_qp", errno, "rxe0");
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        assert!(e.to_string().contains("mlx5dv_create_qp"), "{e}");
    }
}

#[test]
fn other_errnos_name_the_call_and_context() {
    let e = Error::verbs("ibv_create_qp_ex", libc::ENOMEM, "RC QP on rxe0");
    assert_eq!(e.errno(), Some(libc::ENOMEM));
    let text = e.to_string();
    assert!(
        text.starts_with("ibv_create_qp_ex failed (RC QP on rxe0): "),
        "{text}"
    );
}

fn failed(status: WcStatus) -> Error {
    Error::WorkCompletion {
        wr_id: 7,
        qp_num: 0x1a2,
        status,
        vendor_err: 0x88,
        kind: None,
    }
}

#[test]
fn a_failed_completion_of_a_known_kind_gives_that_kinds_hint() {
    use crate::QpKind;
    // A UD receive without room for the GRH: the UD text, not RC's or
    // DCI's recovery.
    let ud = failed(WcStatus::LOC_LEN_ERR)
        .with_qp_kind(QpKind::Ud)
        .to_string();
    assert!(
        ud.contains("UD_GRH_BYTES") && ud.contains("ready(port, qkey, psn)"),
        "{ud}"
    );
    assert!(
        !ud.contains("connect_to") && !ud.contains("ready(psn, &opts)"),
        "{ud}"
    );
    // A DCI whose DC key is wrong: the DC-key text.
    let dci = failed(WcStatus::REM_ACCESS_ERR)
        .with_qp_kind(QpKind::Dci)
        .to_string();
    assert!(
        dci.contains("DC key") && dci.contains("ready(psn, &opts)"),
        "{dci}"
    );
    assert!(!dci.contains("connect_to"), "{dci}");
    // Every kind and status: the text ends with exactly that kind's hint.
    for kind in [
        QpKind::Rc,
        QpKind::Uc,
        QpKind::Xrc,
        QpKind::Dci,
        QpKind::Dct,
        QpKind::Ud,
        QpKind::RdmaCm,
    ] {
        for raw in 0..=25 {
            let status = WcStatus::from_raw(raw);
            let text = failed(status).with_qp_kind(kind).to_string();
            match status.hint_for(kind) {
                Some(hint) => assert!(text.ends_with(&format!(": {hint}")), "{text}"),
                None => assert!(text.ends_with("(vendor error 0x88)"), "{text}"),
            }
        }
    }
    // Without a kind, the generic hint; other errors are unchanged.
    let generic = failed(WcStatus::LOC_LEN_ERR).to_string();
    assert!(
        generic.ends_with(WcStatus::LOC_LEN_ERR.hint().unwrap()),
        "{generic}"
    );
    let other = Error::InvalidArgument("x".into()).with_qp_kind(QpKind::Ud);
    assert!(matches!(other, Error::InvalidArgument(ref s) if s == "x"));
}

#[test]
fn a_failed_completion_says_why_and_what_next() {
    let text = failed(WcStatus::REM_ACCESS_ERR).to_string();
    let prefix =
        "work request 7 on QP 0x1a2 completed with remote access error (vendor error 0x88): ";
    assert!(text.starts_with(prefix), "{text}");
    for word in ["rkey", "REMOTE_WRITE", "reset()"] {
        assert!(text.contains(word), "{word}: {text}");
    }
    let text = failed(WcStatus::WR_FLUSH_ERR).to_string();
    assert!(
        text.starts_with(
            "work request 7 on QP 0x1a2 completed with Work Request Flushed Error \
             (vendor error 0x88): "
        ),
        "{text}"
    );
    assert!(
        text.contains("reset()") && text.contains("ready (DCI, UD)"),
        "{text}"
    );
    // A status without a hint ends at the vendor error.
    assert_eq!(
        failed(WcStatus::from_raw(99)).to_string(),
        format!(
            "work request 7 on QP 0x1a2 completed with {} (vendor error 0x88)",
            WcStatus::from_raw(99)
        )
    );
}

#[test]
fn counts_are_singular_for_one() {
    assert_eq!(count(0, "completion"), "0 completions");
    assert_eq!(count(1, "completion"), "1 completion");
    assert_eq!(count(2, "work request"), "2 work requests");
    let one = Error::SendQueueFull { batch: 1, depth: 0 };
    assert!(
        one.to_string().contains("a batch of 1 work request did"),
        "{one}"
    );
    let three = Error::BatchLimit { limit: 3 };
    assert_eq!(
        three.to_string(),
        "batch full: it was limited to 3 work requests"
    );
}

#[test]
fn out_of_range_qp_and_dct_numbers_are_hex() {
    let qpn = Error::OutOfRange {
        what: "Endpoint QP number",
        value: 0x0100_0000,
        limit: "at most 0xffffff (24 bits)".into(),
    };
    assert_eq!(
        qpn.to_string(),
        "Endpoint QP number = 0x1000000 is out of range: at most 0xffffff (24 bits)"
    );
    let dctn = Error::OutOfRange {
        what: "remote DCT number",
        value: 0x0100_0000,
        limit: String::new(),
    };
    assert!(dctn
        .to_string()
        .starts_with("remote DCT number = 0x1000000 "));
    let len = Error::OutOfRange {
        what: "SGE range end",
        value: 4097,
        limit: "at most 4096".into(),
    };
    assert!(len.to_string().starts_with("SGE range end = 4097 "));
}

#[test]
fn check_maps_zero_to_ok() {
    assert!(check(0, "ibv_modify_qp", || unreachable!()).is_ok());
    let e = check(libc::EINVAL, "ibv_modify_qp", || "to RTR".into()).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL));
}
