//! The in-process layer in front of a durable or shared backend: what the
//! backend last said about each conversation (a chain, or that it has
//! none), and when it said it.

use super::memory::weight;
use super::{ConvKey, ListQuery, Page};
use crate::config::StateConfig;
use crate::fold::FoldChain;
use std::sync::Arc;
use std::time::Instant;

/// One conversation as last read from or written to the backend.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    /// The chain, or `None` when the backend had none.
    pub chain: Option<Arc<FoldChain>>,
    /// When the backend last confirmed this (read, written or touched).
    pub synced: Instant,
    /// For Redis, the invalidation epoch it was read in (see
    /// `redis::watch`); 0, never trusted, elsewhere.
    pub epoch: u64,
    /// False once the backend said it changed ([`Hot::stale`]): read
    /// again, and served only when the backend does not answer.
    pub current: bool,
}

/// Bounded by weight, forgotten after `state.ttl` idle.
#[derive(Debug)]
pub(super) struct Hot {
    cache: moka::sync::Cache<ConvKey, Slot>,
}

impl Hot {
    pub fn new(config: &StateConfig) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(config.cache_bytes)
            .weigher(|key: &ConvKey, slot: &Slot| {
                let bytes = 64
                    + key.tenant.len()
                    + key.conversation.len()
                    + slot.chain.as_deref().map_or(0, weight);
                u32::try_from(bytes).unwrap_or(u32::MAX)
            })
            .time_to_idle(config.ttl)
            .build();
        Self { cache }
    }

    pub fn get(&self, key: &ConvKey) -> Option<Slot> {
        self.cache.get(key)
    }

    /// Records what the backend holds now.
    pub fn put(&self, key: &ConvKey, chain: Option<Arc<FoldChain>>) {
        self.put_at(key, chain, 0);
    }

    /// Records what the backend holds now, read in `epoch`.
    pub fn put_at(&self, key: &ConvKey, chain: Option<Arc<FoldChain>>, epoch: u64) {
        self.cache.insert(
            key.clone(),
            Slot {
                chain,
                synced: Instant::now(),
                epoch,
                current: true,
            },
        );
    }

    /// Keeps a conversation's chain as a fallback only: the next read asks
    /// the backend, and serves this if the backend does not answer (an
    /// older state of a conversation is still a valid view of it, only a
    /// larger one).
    pub fn stale(&self, key: &ConvKey) {
        if let Some(slot) = self.cache.get(key) {
            self.cache.insert(
                key.clone(),
                Slot {
                    current: false,
                    ..slot
                },
            );
        }
    }

    /// Records what the backend said on a miss, unless a newer answer
    /// (a save) landed meanwhile; returns what the layer holds now.
    pub fn fill(&self, key: &ConvKey, chain: Option<Arc<FoldChain>>) -> Option<Arc<FoldChain>> {
        self.cache
            .entry_by_ref(key)
            .or_insert_with(|| Slot {
                chain,
                synced: Instant::now(),
                epoch: 0,
                current: true,
            })
            .into_value()
            .chain
    }

    /// Conversations held, including ones known to have no state.
    pub fn len(&self) -> u64 {
        self.cache.entry_count()
    }

    /// Bytes charged against `state.cache_bytes`.
    pub fn bytes(&self) -> u64 {
        self.cache.weighted_size()
    }

    /// Chains held in memory for a conversation id, of every tenant.
    pub fn find(&self, conversation: &str) -> Vec<(ConvKey, Arc<FoldChain>)> {
        self.cache
            .iter()
            .filter(|(key, _)| key.conversation == conversation)
            .filter_map(|(key, slot)| slot.chain.map(|c| ((*key).clone(), c)))
            .collect()
    }

    /// A page of the chains held in memory (a fallback listing when the
    /// backend does not answer). Renews no entry's idle timer.
    pub fn list(&self, query: &ListQuery) -> Page {
        let entries = self
            .cache
            .iter()
            .filter(|(key, _)| query.admits(key))
            .filter_map(|(key, slot)| slot.chain.map(|c| ((*key).clone(), c)));
        Page::of(entries, query)
    }
}
