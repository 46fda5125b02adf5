//! Who is talking, and in which conversation: the tenant (a hash of the
//! credential) and the conversation key (header, else a fingerprint).

use crate::config::{ConversationConfig, Fallback};
use crate::fold::pinned_len;
use crate::state::ConvKey;
use crate::upstream::headers;
use http::HeaderMap;
use serde_json::Value;
use crate::tokens::hash::hash_values;
use sha2::{Digest, Sha256};

/// Longest conversation id accepted from the header; longer ones are hashed.
const MAX_ID_LEN: usize = 200;

/// The tenant of a request: a hex SHA-256 prefix of its credential, so one
/// client never sees another's summaries and no credential is stored.
pub fn tenant(headers: &HeaderMap) -> String {
    match headers::credential(headers) {
        Some(credential) => hex(&Sha256::digest(credential.as_bytes())[..12]),
        None => "anonymous".to_string(),
    }
}

/// The conversation key, or `None` when the request has no header and the
/// fallback is `none` (fold without caching).
pub fn conversation_key(
    headers: &HeaderMap,
    messages: &[Value],
    config: &ConversationConfig,
) -> Option<ConvKey> {
    let from_header = headers
        .get(config.header.as_str())
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
        (None, Fallback::Fingerprint) => fingerprint(messages)?,
        (None, Fallback::None) => return None,
    };
    Some(ConvKey {
        tenant: tenant(headers),
        conversation,
    })
}

/// A hash of the pinned head and the first user message: stable across the
/// turns of one conversation (and across restarts), different between
/// conversations that differ in either. `None` when there is no user
/// message to anchor on. A 128-bit structural xxh3: a key, not a secret.
pub fn fingerprint(messages: &[Value]) -> Option<String> {
    let p = pinned_len(messages);
    let first_user = messages[p..]
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let hash = hash_values(messages[..p].iter().chain([first_user]));
    Some(format!("fp-{hash:032x}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(fallback: Fallback) -> ConversationConfig {
        ConversationConfig {
            header: "x-conversation-id".into(),
            fallback,
        }
    }

    #[test]
    fn header_wins_and_tenants_differ_by_credential() {
        let msgs = vec![json!({"role":"user","content":"hi"})];
        let mut h = HeaderMap::new();
        h.insert("x-conversation-id", "c1".parse().unwrap());
        h.insert("authorization", "Bearer sk-a".parse().unwrap());
        let a = conversation_key(&h, &msgs, &cfg(Fallback::Fingerprint)).unwrap();
        h.insert("authorization", "Bearer sk-b".parse().unwrap());
        let b = conversation_key(&h, &msgs, &cfg(Fallback::Fingerprint)).unwrap();
        assert_eq!(
            (a.conversation.as_str(), b.conversation.as_str()),
            ("c1", "c1")
        );
        assert_ne!(a.tenant, b.tenant);
        assert!(!a.tenant.contains("sk-a"));
    }

    #[test]
    fn fingerprint_is_stable_across_turns_and_none_opts_out() {
        let h = HeaderMap::new();
        let mut msgs = vec![
            json!({"role":"system","content":"s"}),
            json!({"role":"user","content":"task"}),
        ];
        let first = conversation_key(&h, &msgs, &cfg(Fallback::Fingerprint)).unwrap();
        msgs.push(json!({"role":"assistant","content":"ok"}));
        msgs.push(json!({"role":"user","content":"more"}));
        assert_eq!(
            conversation_key(&h, &msgs, &cfg(Fallback::Fingerprint)).unwrap(),
            first
        );
        msgs[1] = json!({"role":"user","content":"other task"});
        assert_ne!(
            conversation_key(&h, &msgs, &cfg(Fallback::Fingerprint)).unwrap(),
            first
        );
        assert!(conversation_key(&h, &msgs, &cfg(Fallback::None)).is_none());
    }
}
