//! Who is talking, and in which conversation: the tenant (a hash of the
//! credential) and the conversation key (header, else a fingerprint).

use crate::config::{ConversationConfig, Fallback};
use crate::error::ApiError;
use crate::fold::hash::{hex, push_hex};
use crate::message::{MessageId, Role, pinned_count};
use crate::state::ConvKey;
use crate::upstream::headers;
use http::HeaderMap;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use twox_hash::XxHash3_128;

/// The client's address, set by the listener as a request extension.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub std::net::SocketAddr);

impl PeerAddr {
    /// Whether the client is on this machine.
    pub fn is_loopback(&self) -> bool {
        self.0.ip().is_loopback()
    }
}

/// Longest conversation id kept as it is; longer ones are hashed.
const MAX_ID_LEN: usize = 200;

/// Longest conversation header accepted at all, in bytes.
pub const MAX_HEADER_LEN: usize = 1024;

/// Refuses a conversation header longer than [`MAX_HEADER_LEN`].
pub fn check_header(headers: &HeaderMap, config: &ConversationConfig) -> Result<(), ApiError> {
    match headers.get(&config.header) {
        Some(v) if v.len() > MAX_HEADER_LEN => Err(ApiError::BadRequest {
            message: format!(
                "the {} header is {} bytes long; at most {MAX_HEADER_LEN} are accepted",
                config.header,
                v.len()
            ),
            param: None,
        }),
        _ => Ok(()),
    }
}

/// The tenant of a request: a hex SHA-256 prefix of its credential, so one
/// client never sees another's summaries and no credential is stored.
/// Each thread remembers the last credential's tenant (by a 128-bit xxh3
/// of it, not the credential), so a client's stream of requests hashes
/// its key once, not on every request.
pub fn tenant(headers: &HeaderMap) -> String {
    thread_local! {
        static LAST: RefCell<Option<(u128, String)>> = const { RefCell::new(None) };
    }
    let Some(credential) = headers::credential(headers) else {
        return "anonymous".to_string();
    };
    let seen = XxHash3_128::oneshot(credential.as_bytes());
    LAST.with_borrow_mut(|last| match last {
        Some((id, tenant)) if *id == seen => tenant.clone(),
        _ => {
            let tenant = hex(&Sha256::digest(credential.as_bytes())[..12]);
            *last = Some((seen, tenant.clone()));
            tenant
        }
    })
}

/// The conversation key, or `None` when the request has no header and the
/// fallback is `none` (fold without caching). `fingerprint` is computed
/// only when needed.
pub fn conversation_key(
    headers: &HeaderMap,
    fingerprint: impl FnOnce() -> Option<String>,
    config: &ConversationConfig,
) -> Option<ConvKey> {
    let from_header = headers
        .get(&config.header)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| {
            if v.len() > MAX_ID_LEN {
                format!("h-{}", hex(&Sha256::digest(v.as_bytes())[..16]))
            } else {
                v.to_string()
            }
        });
    let conversation = match (from_header, config.fallback) {
        (Some(id), _) => id,
        (None, Fallback::Fingerprint) => fingerprint()?,
        (None, Fallback::None) => return None,
    };
    Some(ConvKey {
        tenant: tenant(headers),
        conversation,
    })
}

/// The fingerprint of a conversation whose engine messages have these
/// roles and identities: a hash of the pinned head's and the first user
/// message's identities. Stable across the turns of one conversation
/// (and across restarts, and however the client spaces its JSON),
/// different between conversations that differ in either; `None` when
/// no user message is there yet. The fast path and the decoder give the
/// same identities, so one conversation has one fingerprint. A 128-bit
/// xxh3: a key, not a secret.
pub fn fingerprint(roles: &[Role], ids: &[MessageId]) -> Option<String> {
    let pinned = pinned_count(roles.iter().copied().map(Some));
    let first_user = roles.get(pinned..)?.iter().position(|r| *r == Role::User)? + pinned;
    let head = ids.get(..pinned)?.iter().chain(ids.get(first_user));
    let bytes: Vec<u8> = head.flat_map(|id| id.to_le_bytes()).collect();
    let mut id = String::with_capacity(35);
    id.push_str("fp-");
    push_hex(&mut id, &XxHash3_128::oneshot(&bytes).to_be_bytes());
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(fallback: Fallback) -> ConversationConfig {
        ConversationConfig {
            header: http::HeaderName::from_static("x-conversation-id"),
            fallback,
        }
    }

    #[test]
    fn header_wins_and_tenants_differ_by_credential() {
        let mut h = HeaderMap::new();
        h.insert("x-conversation-id", "c1".parse().unwrap());
        h.insert("authorization", "Bearer sk-a".parse().unwrap());
        let a = conversation_key(&h, || None, &cfg(Fallback::Fingerprint)).unwrap();
        h.insert("authorization", "Bearer sk-b".parse().unwrap());
        let b = conversation_key(&h, || None, &cfg(Fallback::Fingerprint)).unwrap();
        assert_eq!(
            (a.conversation.as_str(), b.conversation.as_str()),
            ("c1", "c1")
        );
        assert_ne!(a.tenant, b.tenant);
        assert!(!a.tenant.contains("sk-a"));
        // Back to the first key: its own tenant, not the last one's.
        h.insert("authorization", "Bearer sk-a".parse().unwrap());
        let again = conversation_key(&h, || None, &cfg(Fallback::Fingerprint)).unwrap();
        assert_eq!(again.tenant, a.tenant);
        assert_eq!(a.tenant, hex(&Sha256::digest(b"sk-a")[..12]));
    }

    #[test]
    fn fingerprint_reads_the_pinned_head_and_first_user_message_only() {
        use Role::{Assistant, Pinned, User};
        let one = fingerprint(&[Pinned, User, Assistant], &[1, 2, 3]).unwrap();
        assert_eq!(
            Some(&one),
            fingerprint(&[Pinned, User, Assistant, User], &[1, 2, 4, 5]).as_ref()
        );
        assert_ne!(Some(&one), fingerprint(&[Pinned, User], &[1, 9]).as_ref());
        assert_ne!(Some(&one), fingerprint(&[Pinned, User], &[9, 2]).as_ref());
        assert_ne!(Some(&one), fingerprint(&[User], &[2]).as_ref());
        assert_eq!(fingerprint(&[Pinned, Assistant], &[1, 2]), None);
        // Stored keys name conversations across restarts: the values stay
        // (XXH3-128 of the identities' little-endian bytes, in hex).
        assert_eq!(one, "fp-c88e3255b4546aadee3fb5249c767bd2");
        assert_eq!(
            fingerprint(&[Assistant, User], &[3, 7]).as_deref(),
            Some("fp-0ab34a2c5f4265696a13a265f6ff14ad")
        );
        let h = HeaderMap::new();
        let key = conversation_key(&h, || Some(one.clone()), &cfg(Fallback::Fingerprint)).unwrap();
        assert_eq!(key.conversation, one);
        assert!(conversation_key(&h, || Some(one.clone()), &cfg(Fallback::None)).is_none());
    }
}
