//! Every Redis key foldgate writes, in one place. A conversation's keys
//! (its state, its fold lock, its archive list) all carry the hash tag
//! `{tenant:conversation}`, so on a Redis Cluster they live on one slot
//! and a Lua script or transaction over them never crosses slots. The one
//! global key, the learned windows hash, is a single key: read whole at
//! start, written one field at a time. One pub/sub channel, [`FOLDED`],
//! tells every replica which state changed (a cluster carries a published
//! message to every node).

use crate::state::ConvKey;

/// Prefix of a conversation's fold state.
pub(crate) const STATE: &str = "foldgate:state:";
/// Prefix of a conversation's cross-replica fold lock.
pub(crate) const LOCK: &str = "foldgate:lock:";
/// Prefix of a conversation's archive list.
pub(crate) const ARCHIVE: &str = "foldgate:archive:";
/// The hash of learned context windows, model id → window (no expiry:
/// a model's window outlives any conversation).
pub(crate) const WINDOWS: &str = "foldgate:windows";

/// The channel each state write is announced on, with the state's key.
pub(crate) const FOLDED: &str = "foldgate:folded";

/// `PREFIX{tenant:conversation}`.
pub(crate) fn tagged(prefix: &str, key: &ConvKey) -> String {
    format!("{prefix}{{{}:{}}}", key.tenant, key.conversation)
}

/// The glob matching tagged keys whose tag matches `tag` (itself a glob).
pub(crate) fn pattern(prefix: &str, tag: &str) -> String {
    format!("{prefix}{{{tag}}}")
}

/// The conversation a tagged key belongs to.
pub(crate) fn parse(prefix: &str, raw: &str) -> Option<ConvKey> {
    let tag = raw
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    let (tenant, conversation) = tag.split_once(':')?;
    Some(ConvKey {
        tenant: tenant.to_string(),
        conversation: conversation.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversations_keys_share_one_hash_tag() {
        let key = ConvKey {
            tenant: "t1".into(),
            conversation: "odd}{:id".into(),
        };
        // Redis hashes the text between the first `{` and the next `}`:
        // the same for every prefix, whatever the conversation id holds.
        let tag = |k: &str| {
            let open = k.find('{').unwrap();
            let close = open + 1 + k[open + 1..].find('}').unwrap();
            k[open + 1..close].to_string()
        };
        let keys = [STATE, LOCK, ARCHIVE].map(|p| tagged(p, &key));
        assert_eq!(tag(&keys[0]), "t1:odd");
        assert!(keys.iter().all(|k| tag(k) == tag(&keys[0])), "{keys:?}");
        assert_eq!(parse(STATE, &keys[0]), Some(key.clone()));
        assert_eq!(parse(ARCHIVE, &keys[2]), Some(key));
        assert_eq!(parse(STATE, "foldgate:state:t1:c"), None);
    }
}
