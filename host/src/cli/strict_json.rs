//! The one gate every line-oriented surface (`effects serve`, `effects
//! mcp-proxy`) puts before reading a message: a line is read only if every
//! JSON parser would read it the same way. A duplicate key (whose first or
//! last copy parsers disagree on, at any depth), bytes that are not UTF-8,
//! or an escape that is no character (a lone surrogate) could make a more
//! lenient peer, or a lossy decoding here, see another call than the one
//! claimed; such a line is refused whole, never repaired (no U+FFFD in a
//! claimed path). It only reads: it neither keeps nor rewrites the message.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Checks that `bytes` is JSON every parser reads alike: valid UTF-8,
/// every string escape a character (no lone surrogate), and no object with
/// a key twice, at any depth.
pub(crate) fn strict(bytes: &[u8]) -> Result<(), serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|_| ())
}

/// A JSON value walked whole, decoding every string and key.
struct Strict;

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<Strict>()?;
            if !keys.insert(key.clone()) {
                return Err(de::Error::custom(format!("the key {key:?} is given twice")));
            }
        }
        Ok(Strict)
    }
}

#[cfg(test)]
mod tests {
    use super::strict;

    #[test]
    fn strict_refuses_what_parsers_read_differently() {
        assert!(strict(br#"{"method":"ping","params":{"a":[1,{"b":"\ud83d\ude00"}]}}"#).is_ok());
        assert!(strict(br#"{"method":"ping","method":"tools/call"}"#).is_err());
        assert!(strict(br#"{"params":{"arguments":{"x":1,"x":2}}}"#).is_err());
        assert!(strict(br#"{"a":"\ud800"}"#).is_err());
        assert!(strict(b"{\"a\":\"\xff\"}").is_err());
        assert!(strict(br#"{"a":1}{"b":2}"#).is_err());
    }
}
