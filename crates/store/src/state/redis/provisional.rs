//! Folds Redis does not hold: made while the conversation's slot did not
//! answer (the replica folded without the fold lock), or written when
//! Redis did not take the write, or taken and then lost by a failover
//! (the old master acknowledged it and died before its replica had it).
//!
//! Such a fold is provisional. Once the slot answers (this replica tries
//! each provisional conversation every [`RETRY_EVERY`], and reads it again
//! before serving it) the fold is written only if Redis still holds the
//! state it was folded from, or one older than that, and holds it still at
//! the write (compare-and-set, in one script); otherwise Redis holds
//! another replica's fold and this replica adopts it. Either way no replica
//! serves a state older than one it made, so none folds again to make up
//! for it (docs/architecture.md, "What a failover costs").

use super::outage::RETRY_EVERY;
use super::{Inner, keys, state_key, watch};
use crate::fold::FoldChain;
use crate::state::ConvKey;
use std::sync::Weak;

/// Writes the state (`KEYS[1]`: JSON, expiry in ms) and publishes `ARGV[4]`
/// on `ARGV[3]`, as the store's plain write does, only if Redis holds what
/// the replica read: none when `ARGV[5]` is `0`, the bytes `ARGV[6]` when
/// it is `1`. Returns 1 when written.
const WRITE_IF: &str = "local cur = redis.call('get', KEYS[1]) \
    if (ARGV[5] == '0' and not cur) or (ARGV[5] == '1' and cur == ARGV[6]) then \
    redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) redis.pcall('publish', ARGV[3], ARGV[4]) \
    return 1 end return 0";

/// Whether `ours` descends from `theirs`: Redis' newest state is one of
/// ours, not our newest (or Redis holds no state at all). A state of
/// another line (another replica's fold) is never taken for an older one.
pub(super) fn newer(ours: &FoldChain, theirs: &FoldChain) -> bool {
    let Some(mine) = ours.latest() else {
        return false;
    };
    match theirs.latest() {
        None => true,
        Some(them) => them.id != mine.id && ours.states().iter().any(|s| s.id == them.id),
    }
}

/// Writes `chain` if Redis still holds `read` (the bytes read, or nothing):
/// the conversation is settled when written, stays provisional when Redis
/// did not answer, and is read again on the next round when Redis changed
/// meanwhile.
pub(super) async fn write(store: &Inner, key: &ConvKey, chain: &FoldChain, read: Option<&[u8]>) {
    let Ok(json) = serde_json::to_vec(chain) else {
        return;
    };
    let mut conn = store.conn();
    let state = state_key(key);
    let script = redis::Script::new(WRITE_IF);
    let mut call = script.key(&state);
    let call = call
        .arg(json)
        .arg(store.ttl_ms)
        .arg(keys::FOLDED)
        .arg(watch::message(store.watch.origin(), &state))
        .arg(if read.is_some() { "1" } else { "0" })
        .arg(read.unwrap_or_default());
    match store
        .op("save", Some(&state), call.invoke_async::<i64>(&mut conn))
        .await
    {
        Ok(1) => {
            store.settled(key);
            tracing::debug!(target: "foldgate::state", conversation = %key, "wrote a fold Redis did not hold");
        }
        Ok(_) => store.unsettled(key),
        Err(_) => store.unsettled(key),
    }
}

/// Settles every provisional conversation once its slot answers: reads it
/// (which writes ours or adopts Redis', see the store's `load`); first
/// sends again the fold lock releases a failed command followed
/// ([`super::lock::confirm`]). Ends with the store.
pub(super) async fn reconcile(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(RETRY_EVERY).await;
        let Some(store) = inner.upgrade() else { return };
        super::lock::confirm(&store);
        let pending: Vec<ConvKey> = match store.provisional.lock() {
            Ok(pending) => pending.iter().cloned().collect(),
            Err(_) => continue,
        };
        for key in pending {
            store.load(&key).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::FoldState;

    fn chain(ids: &[&str]) -> FoldChain {
        let mut chain = FoldChain::new();
        for (depth, id) in (1..).zip(ids) {
            chain.push(FoldState {
                id: (*id).to_string(),
                parent: None,
                depth,
                summary: crate::fold::Summary::default(),
                ledger: crate::fold::ledger::Ledger::default(),
                covered: 10,
                kept_user: None,
                chain: crate::fold::ChainHash::default(),
                user_turns: 0,
                messages: 20,
                created_at: 0,
                tokens_before: 0,
                tokens_after: 0,
                reason: crate::fold::Reason::Token,
                api: "chat".into(),
                recall: false,
                summarizer: None,
                retained: crate::fold::Retained::default(),
                background: false,
                restub: false,
            });
        }
        chain
    }

    #[test]
    fn only_a_descendant_is_newer() {
        let ours = chain(&["a", "b", "c"]);
        assert!(newer(&ours, &chain(&["a", "b"])), "Redis holds our parent");
        assert!(newer(&ours, &chain(&["a"])), "Redis holds an older state");
        assert!(newer(&ours, &FoldChain::new()));
        assert!(!newer(&ours, &chain(&["a", "b", "c"])), "the same");
        assert!(
            !newer(&ours, &chain(&["a", "b", "x"])),
            "another replica's fold"
        );
        assert!(
            !newer(&chain(&["a"]), &chain(&["a", "b"])),
            "Redis is newer"
        );
    }
}
