use super::*;
use crate::error::Error;

#[test]
fn ranges_are_checked_at_the_boundaries() {
    let len = 4096;
    assert_eq!(range_within(len, ..).unwrap(), (0, 4096));
    assert_eq!(range_within(len, 0..4096).unwrap(), (0, 4096));
    assert_eq!(range_within(len, 4096..4096).unwrap(), (4096, 0));
    assert_eq!(range_within(len, 0..=4095).unwrap(), (0, 4096));
    assert_eq!(range_within(len, 100..).unwrap(), (100, 3996));
    assert_eq!(range_within(len, 0..0).unwrap(), (0, 0));
    // limit + 1
    assert!(matches!(
        range_within(len, 0..4097),
        Err(Error::OutOfRange {
            what: "range end",
            value: 4097,
            ..
        })
    ));
    assert!(matches!(
        range_within(len, 0..=4096),
        Err(Error::OutOfRange {
            what: "range end",
            value: 4097,
            ..
        })
    ));
    assert!(matches!(
        range_within(len, 4097..),
        Err(Error::OutOfRange {
            what: "range start",
            value: 4097,
            ..
        })
    ));
    // the type's maximum, without overflow
    assert!(range_within(len, usize::MAX..).is_err());
    assert!(range_within(len, ..=usize::MAX).is_err());
    assert!(range_within(usize::MAX, ..=usize::MAX).is_err());
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 10..5;
    assert!(matches!(
        range_within(len, backwards),
        Err(Error::OutOfRange {
            what: "range start",
            ..
        })
    ));
}

#[test]
fn remote_slices_stay_inside_the_buffer() {
    let r = RemoteBuf {
        addr: 0x1000,
        len: 64,
        rkey: 7,
    };
    assert_eq!(r.slice(0, 64).unwrap(), r);
    assert_eq!(
        r.slice(8, 8).unwrap(),
        RemoteBuf {
            addr: 0x1008,
            len: 8,
            rkey: 7
        }
    );
    assert_eq!(r.slice(64, 0).unwrap().len, 0);
    assert!(matches!(
        r.slice(1, 64),
        Err(Error::OutOfRange { value: 65, .. })
    ));
    assert!(matches!(r.slice(65, 0), Err(Error::OutOfRange { .. })));
    assert!(matches!(
        r.slice(u64::MAX, 1),
        Err(Error::OutOfRange {
            value: u64::MAX,
            ..
        })
    ));
    // Inside the stated length but past the end of the address space
    // (the fields are public): refused, up to the last byte.
    let top = RemoteBuf {
        addr: u64::MAX - 15,
        len: 64,
        rkey: 7,
    };
    assert_eq!(top.slice(0, 15).unwrap().addr, u64::MAX - 15);
    assert_eq!(top.slice(15, 0).unwrap().addr, u64::MAX);
    for (offset, len) in [(0, 16), (8, 8), (16, 0), (1, 63)] {
        assert!(
            matches!(
                top.slice(offset, len),
                Err(Error::OutOfRange {
                    what: "remote range address",
                    value,
                    ..
                }) if value == u64::MAX - 15
            ),
            "{offset} {len}"
        );
    }
    assert!(matches!(
        top.slice(1, 64),
        Err(Error::OutOfRange {
            what: "remote range end",
            value: 65,
            ..
        })
    ));
}
