//! The hash chain that ties a fold state to the exact messages it folded.
//!
//! Each message has one identity, [`MessageId`]: the XXH3-128 of its JSON
//! text as the client sent it (the same hash the token cache keys on, so
//! the request path hashes each message once), or of `serde_json`'s
//! encoding for a message that only exists as a value. `h_0` is zero and
//! `h_i` is two XXH3-128 lanes, under different seeds, of
//! `h_{i-1} || id_i`, where `id_i` is the identity of message `i` after the
//! pinned head. A state stores `h_covered`; a request matches it when its
//! own prefix hashes to the same value, so an edit anywhere in the covered
//! range breaks the match. The hashes are not cryptographic: a chain is
//! only ever compared within one tenant's conversation, where a crafted
//! collision could only mislead the client that crafted it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use twox_hash::XxHash3_128;

pub use crate::message::{MessageId, ids_of, message_id};

/// One link of the chain: 32 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ChainHash(pub [u8; 32]);

/// Seeds of the two lanes of a link.
const LANES: [u64; 2] = [0x666f_6c64_6761_7465, 0x6368_6169_6e5f_7632];

impl ChainHash {
    /// The value before any message: all zeros.
    pub const ZERO: Self = Self([0; 32]);

    /// The next link, after the message with identity `id`.
    pub fn next(&self, id: MessageId) -> Self {
        let mut input = [0u8; 48];
        input[..32].copy_from_slice(&self.0);
        input[32..].copy_from_slice(&id.to_le_bytes());
        let mut out = [0u8; 32];
        for (lane, seed) in out.chunks_exact_mut(16).zip(LANES) {
            lane.copy_from_slice(&XxHash3_128::oneshot_with_seed(seed, &input).to_le_bytes());
        }
        Self(out)
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
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

/// The chain over `messages` (values), from `h_0`.
pub fn chain_of(messages: &[Value]) -> ChainHash {
    messages
        .iter()
        .fold(ChainHash::ZERO, |h, m| h.next(message_id(m)))
}

/// Prefix hashes of a request's messages after the pinned head, given by
/// identity, extended lazily: `get(k)` is the chain over the first `k`.
#[derive(Debug, Clone)]
pub struct PrefixChain<'m> {
    ids: &'m [MessageId],
    links: Vec<ChainHash>,
}

impl<'m> PrefixChain<'m> {
    /// Prefixes of the messages with identities `ids` (the request's
    /// messages after the pinned head).
    pub fn new(ids: &'m [MessageId]) -> Self {
        Self {
            ids,
            links: vec![ChainHash::ZERO],
        }
    }

    /// The chain over the first `k` messages, or `None` past the end.
    pub fn get(&mut self, k: usize) -> Option<ChainHash> {
        if k > self.ids.len() {
            return None;
        }
        while self.links.len() <= k {
            let i = self.links.len() - 1;
            let next = self.links[i].next(self.ids[i]);
            self.links.push(next);
        }
        Some(self.links[k])
    }
}

/// `bytes` in lower-case hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// Appends `bytes` in lower-case hex to `out` (a table, not a formatter:
/// this runs on every request's conversation key).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Identities, chains and fingerprints are stored (archives, fold
    /// states, conversation keys), so the hash must stay XXH3 as its
    /// reference computes it, whatever crate computes it: these values
    /// came from another implementation (xxhash-rust 0.8).
    #[test]
    fn xxh3_gives_the_reference_values() {
        use std::hash::Hasher;
        use twox_hash::XxHash3_64;
        let long: String = (0..300)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let hex = |v: u128| format!("{v:032x}");
        assert_eq!(
            hex(XxHash3_128::oneshot(
                r#"{"role":"user","content":"é"}"#.as_bytes()
            )),
            "bea332dd06c6797a91507f499287456c"
        );
        let seed = XxHash3_64::oneshot(b"chat");
        assert_eq!(
            hex(XxHash3_128::oneshot_with_seed(seed, long.as_bytes())),
            "dba6f4a8d7f41b82d478fbe1b1017a7b"
        );
        let mut streamed = XxHash3_128::new();
        for part in [&b"chat\x1e"[..], long.as_bytes(), b"\x1e", b"x"] {
            streamed.write(part);
        }
        assert_eq!(
            hex(streamed.finish_128()),
            "ac28485e752833d42666d36e479f24b8"
        );
        let mut short = XxHash3_64::new();
        short.write(long.as_bytes());
        assert_eq!(short.finish(), 0x7f72_0c1f_731c_9648);
        assert_eq!(XxHash3_64::oneshot(long.as_bytes()), 0x7f72_0c1f_731c_9648);
    }

    #[test]
    fn prefix_chain_matches_direct_chain() {
        let ms = vec![
            json!({"role":"user","content":"a"}),
            json!({"role":"assistant","content":"b"}),
        ];
        let ids = ids_of(&ms);
        let mut p = PrefixChain::new(&ids);
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

    #[test]
    fn identity_is_the_value_however_it_was_spelled() {
        let compact: Value = serde_json::from_str(r#"{"role":"user","content":"é"}"#).unwrap();
        let spaced: Value =
            serde_json::from_str(r#"{ "role": "user", "content": "\u00e9" }"#).unwrap();
        assert_eq!(message_id(&compact), message_id(&spaced));
        assert_eq!(
            message_id(&compact),
            twox_hash::XxHash3_128::oneshot(r#"{"role":"user","content":"é"}"#.as_bytes())
        );
        let pair = [compact.clone(), spaced];
        assert_ne!(crate::message::unit_id(&pair), message_id(&compact));
        assert_ne!(ChainHash::ZERO.next(1), ChainHash::ZERO.next(2));
        assert_ne!(
            ChainHash::ZERO.next(1).next(2),
            ChainHash::ZERO.next(2).next(1)
        );
    }
}
