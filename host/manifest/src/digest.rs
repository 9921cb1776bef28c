//! SHA-256 digests as a newtype, so a digest is never confused with any other
//! string and always prints as 64 lowercase hex characters.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256Digest([u8; 32]);

impl Sha256Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({self})")
    }
}

/// A string that is not 64 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a SHA-256 digest (want 64 lowercase hex characters): {0:?}")]
pub struct BadDigest(pub String);

impl FromStr for Sha256Digest {
    type Err = BadDigest;

    fn from_str(text: &str) -> Result<Self, BadDigest> {
        let lowercase_hex = text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let mut bytes = [0u8; 32];
        match hex::decode_to_slice(text, &mut bytes) {
            Ok(()) if lowercase_hex => Ok(Self(bytes)),
            _ => Err(BadDigest(text.to_owned())),
        }
    }
}

impl Serialize for Sha256Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Sha256Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_hex() {
        let digest = Sha256Digest::of(b"");
        let text = digest.to_string();
        assert_eq!(text, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(text.parse::<Sha256Digest>(), Ok(digest));
    }

    #[test]
    fn refuses_uppercase_short_and_non_hex() {
        let upper = Sha256Digest::of(b"x").to_string().to_uppercase();
        for bad in [upper.as_str(), "abc", &"g".repeat(64)] {
            assert!(bad.parse::<Sha256Digest>().is_err(), "{bad}");
        }
    }
}
