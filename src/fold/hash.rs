//! The hash chain that ties a fold state to the exact messages it folded.
//!
//! `h_0` is 32 zero bytes and `h_i = sha256(h_{i-1} || sha256(bytes_i))`,
//! where `bytes_i` is `serde_json::to_vec` of message `i` after the pinned
//! head (with `preserve_order`, the client's own key order). A state stores
//! `h_covered`; a request matches it when its own prefix hashes to the same
//! value, so an edit anywhere in the covered range breaks the match.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

/// One link of the chain: a SHA-256 value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ChainHash(pub [u8; 32]);

impl ChainHash {
    /// The value before any message: all zeros.
    pub const ZERO: Self = Self([0; 32]);

    /// The next link: `sha256(self || sha256(canonical bytes of message))`.
    pub fn next(&self, message: &Value) -> Self {
        let mut outer = Sha256::new();
        outer.update(self.0);
        outer.update(message_digest(message));
        Self(outer.finalize().into())
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        use fmt::Write;
        self.0.iter().fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }

    /// Parses [`ChainHash::to_hex`] output.
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 64 || !text.is_ascii() {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self(out))
    }
}

impl fmt::Debug for ChainHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChainHash({})", self.to_hex())
    }
}

impl Serialize for ChainHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for ChainHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::from_hex(&text).ok_or_else(|| serde::de::Error::custom("expected 64 hex digits"))
    }
}

/// SHA-256 of a message's canonical bytes (`serde_json::to_vec`).
pub fn message_digest(message: &Value) -> [u8; 32] {
    // Serialising a `Value` cannot fail (its map keys are strings); an empty
    // vector on the impossible error still hashes deterministically.
    let bytes = serde_json::to_vec(message).unwrap_or_default();
    Sha256::digest(&bytes).into()
}

/// The chain over `messages`, from `h_0`.
pub fn chain_of(messages: &[Value]) -> ChainHash {
    messages.iter().fold(ChainHash::ZERO, |h, m| h.next(m))
}

/// Prefix hashes of a request's messages after the pinned head, computed
/// once and extended lazily: `get(k)` is the chain over the first `k`.
#[derive(Debug, Clone)]
pub struct PrefixChain<'m> {
    messages: &'m [Value],
    links: Vec<ChainHash>,
}

impl<'m> PrefixChain<'m> {
    /// Prefixes of `messages` (the request's messages after the pinned head).
    pub fn new(messages: &'m [Value]) -> Self {
        Self {
            messages,
            links: vec![ChainHash::ZERO],
        }
    }

    /// The chain over the first `k` messages, or `None` past the end.
    pub fn get(&mut self, k: usize) -> Option<ChainHash> {
        if k > self.messages.len() {
            return None;
        }
        while self.links.len() <= k {
            let i = self.links.len() - 1;
            let next = self.links[i].next(&self.messages[i]);
            self.links.push(next);
        }
        Some(self.links[k])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prefix_chain_matches_direct_chain() {
        let ms = vec![
            json!({"role":"user","content":"a"}),
            json!({"role":"assistant","content":"b"}),
        ];
        let mut p = PrefixChain::new(&ms);
        assert_eq!(p.get(0), Some(ChainHash::ZERO));
        assert_eq!(p.get(2), Some(chain_of(&ms)));
        assert_eq!(p.get(1), Some(chain_of(&ms[..1])));
        assert_eq!(p.get(3), None);
    }

    #[test]
    fn hex_round_trips_and_key_order_matters() {
        let h = chain_of(&[json!({"role":"user","content":"x"})]);
        assert_eq!(ChainHash::from_hex(&h.to_hex()), Some(h));
        let reordered = chain_of(&[json!({"content":"x","role":"user"})]);
        assert_ne!(h, reordered);
    }
}
