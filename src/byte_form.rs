//! The byte forms' shared frame: the version and the form byte that say
//! which type's bytes they are ([`ByteForm`]), checked by
//! [`versioned_form`] before a type reads its fields.

use crate::error::{Error, Result};

/// The version of every byte form this crate writes and reads (each
/// type's `VERSION`): byte 0 of the form.
pub(crate) const FORM_VERSION: u8 = 2;

/// Which type a byte form is: byte 1 of the form, after the version, so
/// that the bytes of one type are never read as another's (several are 28
/// bytes long).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ByteForm {
    /// An [`Endpoint`](crate::Endpoint)'s.
    Endpoint = 1,
    /// A [`DctEndpoint`](crate::DctEndpoint)'s.
    DctEndpoint = 2,
    /// A [`UdEndpoint`](crate::UdEndpoint)'s.
    UdEndpoint = 3,
    /// A [`RemoteBuf`](crate::RemoteBuf)'s.
    RemoteBuf = 4,
}

impl ByteForm {
    const ALL: [ByteForm; 4] = [
        ByteForm::Endpoint,
        ByteForm::DctEndpoint,
        ByteForm::UdEndpoint,
        ByteForm::RemoteBuf,
    ];

    /// The type's name.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            ByteForm::Endpoint => "Endpoint",
            ByteForm::DctEndpoint => "DctEndpoint",
            ByteForm::UdEndpoint => "UdEndpoint",
            ByteForm::RemoteBuf => "RemoteBuf",
        }
    }

    /// Byte 1 of the form.
    pub(crate) const fn tag(self) -> u8 {
        self as u8
    }

    fn of_tag(tag: u8) -> Option<ByteForm> {
        Self::ALL.into_iter().find(|f| f.tag() == tag)
    }
}

/// A versioned byte form of `N` bytes (an [`Endpoint`]'s, a
/// [`DctEndpoint`](crate::DctEndpoint)'s, ...): exactly `N` bytes, the
/// first [`FORM_VERSION`], the second `form`'s tag; anything else is
/// refused, naming the type (`length` names the length in the error of a
/// wrong one). The bytes of another type's form (its tag, after this
/// version) are refused first, whatever their length, as
/// [`Error::WrongByteForm`] naming both types.
pub(crate) fn versioned_form<'b, const N: usize>(
    bytes: &'b [u8],
    form: ByteForm,
    length: &'static str,
) -> Result<&'b [u8; N]> {
    let (what, version) = (form.name(), FORM_VERSION);
    if let [v, tag, ..] = *bytes {
        match ByteForm::of_tag(tag) {
            Some(found) if v == version && found != form => {
                return Err(Error::WrongByteForm {
                    expected: what,
                    found: found.name(),
                })
            }
            _ => {}
        }
    }
    let b: &[u8; N] = bytes.try_into().map_err(|_| Error::OutOfRange {
        what: length,
        value: bytes.len() as u64,
        limit: format!(
            "exactly {N} bytes for {} (version {version})",
            crate::error::a(what)
        ),
    })?;
    if b[0] != version || b[1] != form.tag() {
        return Err(Error::InvalidArgument(format!(
            "{what} byte form of version {} (form byte {}): this release reads \
             version {version}, form byte {}, only",
            b[0],
            b[1],
            form.tag()
        )));
    }
    Ok(b)
}
