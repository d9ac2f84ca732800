//! `serde` support (feature `serde`): [`Endpoint`], [`Gid`],
//! [`DctEndpoint`], [`UdEndpoint`] and [`RemoteBuf`].
//!
//! - A [`Gid`] is its IPv6 text (`"::ffff:10.99.0.1"`, `"fe80::1"`) in
//!   human-readable formats (JSON, TOML, YAML) and 16 bytes, in wire order,
//!   in binary ones (bincode, postcard).
//! - An [`Endpoint`] is a struct of `qpn`, `psn`, `lid` and `gid`. Reading
//!   one checks what [`Endpoint::from_bytes`] checks: the QP number and PSN
//!   fit in 24 bits; a missing or unknown field is refused.
//! - A [`DctEndpoint`] is a struct of `dctn`, `dc_key`, `lid` and `gid`,
//!   a [`UdEndpoint`] one of `qpn`, `qkey`, `lid` and `gid`, and a
//!   [`RemoteBuf`] one of `addr`, `len` and `rkey`; reading one checks
//!   what its `from_bytes` checks of the fields (a DCT or QP number of 24
//!   bits; a buffer whose end, `addr + len`, does not overflow 2^64), and
//!   refuses a missing, unknown or repeated field. (The byte forms'
//!   version and check guard the bytes; the serde formats carry no
//!   version.)
//!
//! The example is on [`Endpoint`].

use crate::{DctEndpoint, Endpoint, Gid, RemoteBuf, UdEndpoint};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv6Addr;

impl Serialize for Gid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

struct GidVisitor;

impl<'de> Visitor<'de> for GidVisitor {
    type Value = Gid;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a GID: IPv6 text such as \"::ffff:10.99.0.1\", or 16 bytes")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Gid, E> {
        v.parse::<Ipv6Addr>()
            .map(Gid::from)
            .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Gid, E> {
        <[u8; 16]>::try_from(v)
            .map(Gid)
            .map_err(|_| E::invalid_length(v.len(), &self))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Gid, A::Error> {
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = seq
                .next_element()?
                .ok_or_else(|| de::Error::invalid_length(i, &self))?;
        }
        if seq.next_element::<u8>()?.is_some() {
            return Err(de::Error::invalid_length(17, &self));
        }
        Ok(Gid(raw))
    }
}

impl<'de> Deserialize<'de> for Gid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            d.deserialize_str(GidVisitor)
        } else {
            d.deserialize_bytes(GidVisitor)
        }
    }
}

const FIELDS: &[&str] = &["qpn", "psn", "lid", "gid"];

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Endpoint", FIELDS.len())?;
        st.serialize_field("qpn", &self.qpn)?;
        st.serialize_field("psn", &self.psn)?;
        st.serialize_field("lid", &self.lid)?;
        st.serialize_field("gid", &self.gid)?;
        st.end()
    }
}

/// The QP number and PSN are 24-bit values; a larger one is refused as
/// [`Endpoint::from_bytes`] refuses it.
fn check_24<E: de::Error>(field: &'static str, v: u32) -> Result<u32, E> {
    if v > 0x00FF_FFFF {
        return Err(E::custom(format!(
            "Endpoint {field} {v:#x} out of range: at most 0xffffff (24 bits)"
        )));
    }
    Ok(v)
}

struct EndpointVisitor;

impl<'de> Visitor<'de> for EndpointVisitor {
    type Value = Endpoint;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an Endpoint (qpn, psn, lid, gid)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Endpoint, A::Error> {
        let qpn: u32 = seq_field(&mut seq, 0, &self)?;
        let psn: u32 = seq_field(&mut seq, 1, &self)?;
        let lid: u16 = seq_field(&mut seq, 2, &self)?;
        let gid: Gid = seq_field(&mut seq, 3, &self)?;
        Ok(Endpoint {
            qpn: check_24("qpn", qpn)?,
            psn: check_24("psn", psn)?,
            lid,
            gid,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Endpoint, A::Error> {
        let (mut qpn, mut psn, mut lid, mut gid) = (None, None, None, None);
        while let Some(key) = map.next_key::<Field>()? {
            let dup = match key {
                Field::Qpn => qpn.replace(map.next_value::<u32>()?).is_some(),
                Field::Psn => psn.replace(map.next_value::<u32>()?).is_some(),
                Field::Lid => lid.replace(map.next_value::<u16>()?).is_some(),
                Field::Gid => gid.replace(map.next_value::<Gid>()?).is_some(),
            };
            if dup {
                return Err(de::Error::duplicate_field(key.name()));
            }
        }
        Ok(Endpoint {
            qpn: check_24("qpn", qpn.ok_or_else(|| de::Error::missing_field("qpn"))?)?,
            psn: check_24("psn", psn.ok_or_else(|| de::Error::missing_field("psn"))?)?,
            lid: lid.ok_or_else(|| de::Error::missing_field("lid"))?,
            gid: gid.ok_or_else(|| de::Error::missing_field("gid"))?,
        })
    }
}

fn seq_field<'de, A: SeqAccess<'de>, T: Deserialize<'de>>(
    seq: &mut A,
    i: usize,
    exp: &EndpointVisitor,
) -> Result<T, A::Error> {
    seq.next_element()?
        .ok_or_else(|| de::Error::invalid_length(i, exp))
}

/// A field name of the struct form.
#[derive(Clone, Copy)]
enum Field {
    Qpn,
    Psn,
    Lid,
    Gid,
}

impl Field {
    fn name(self) -> &'static str {
        FIELDS[self as usize]
    }
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one of qpn, psn, lid, gid")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                match v {
                    "qpn" => Ok(Field::Qpn),
                    "psn" => Ok(Field::Psn),
                    "lid" => Ok(Field::Lid),
                    "gid" => Ok(Field::Gid),
                    other => Err(E::unknown_field(other, FIELDS)),
                }
            }
        }
        d.deserialize_identifier(FieldVisitor)
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("Endpoint", FIELDS, EndpointVisitor)
    }
}

/// `Serialize` and `Deserialize` for a struct of plain fields, written as a
/// struct of its fields in order (a map in human-readable formats, a
/// sequence in bincode's and postcard's), and read back through `check`,
/// which refuses what the type's byte form refuses.
macro_rules! struct_form {
    ($ty:ident { $($f:ident: $t:ty),* $(,)? }, $check:expr) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                const FIELDS: &[&str] = &[$(stringify!($f)),*];
                let mut st = s.serialize_struct(stringify!($ty), FIELDS.len())?;
                $( st.serialize_field(stringify!($f), &self.$f)?; )*
                st.end()
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                const FIELDS: &[&str] = &[$(stringify!($f)),*];
                struct FormVisitor;

                impl<'de> Visitor<'de> for FormVisitor {
                    type Value = $ty;

                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        write!(f, "a {} ({})", stringify!($ty), FIELDS.join(", "))
                    }

                    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<$ty, A::Error> {
                        let mut read = 0;
                        $(
                            let $f: $t = seq
                                .next_element()?
                                .ok_or_else(|| de::Error::invalid_length(read, &self))?;
                            read += 1;
                        )*
                        let _ = read;
                        ($check)($ty { $($f),* }).map_err(de::Error::custom)
                    }

                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<$ty, A::Error> {
                        $( let mut $f: Option<$t> = None; )*
                        while let Some(key) = map.next_key::<String>()? {
                            match key.as_str() {
                                $(
                                    stringify!($f) => {
                                        if $f.replace(map.next_value()?).is_some() {
                                            return Err(de::Error::duplicate_field(stringify!($f)));
                                        }
                                    }
                                )*
                                other => return Err(de::Error::unknown_field(other, FIELDS)),
                            }
                        }
                        let value = $ty {
                            $( $f: $f.ok_or_else(|| de::Error::missing_field(stringify!($f)))?, )*
                        };
                        ($check)(value).map_err(de::Error::custom)
                    }
                }

                d.deserialize_struct(stringify!($ty), FIELDS, FormVisitor)
            }
        }
    };
}

struct_form!(
    DctEndpoint {
        dctn: u32,
        dc_key: u64,
        lid: u16,
        gid: Gid
    },
    |e: DctEndpoint| DctEndpoint::from_bytes(&e.to_bytes())
);

struct_form!(
    UdEndpoint {
        qpn: u32,
        qkey: u32,
        lid: u16,
        gid: Gid
    },
    |e: UdEndpoint| UdEndpoint::from_bytes(&e.to_bytes())
);

struct_form!(
    RemoteBuf {
        addr: u64,
        len: u64,
        rkey: u32
    },
    |r: RemoteBuf| RemoteBuf::from_bytes(&r.to_bytes())
);
