//! The in-process store: a moka cache with idle expiry, bounded by weight.

use super::{BoxFuture, ConvKey, Flights, FoldGuard, ListQuery, Page, Store};
use crate::config::StateConfig;
use crate::fold::FoldChain;
use std::sync::Arc;

/// Fold chains in memory; lost on restart.
#[derive(Debug)]
pub struct MemoryStore {
    cache: moka::sync::Cache<ConvKey, Arc<FoldChain>>,
    flights: Flights,
}

impl MemoryStore {
    /// A store with the configured idle expiry and memory bound.
    pub fn new(config: &StateConfig) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(config.cache_bytes)
            .weigher(|key: &ConvKey, chain: &Arc<FoldChain>| {
                let bytes = key.tenant.len() + key.conversation.len() + weight(chain);
                u32::try_from(bytes).unwrap_or(u32::MAX)
            })
            .time_to_idle(config.ttl)
            .build();
        Self {
            cache,
            flights: Flights::default(),
        }
    }
}

/// Approximate bytes held by a chain: its summaries' text plus a fixed
/// cost per state and per audit record.
pub(super) fn weight(chain: &FoldChain) -> usize {
    let states: usize = chain
        .states()
        .iter()
        .map(|s| {
            let sum = &s.summary;
            256 + sum.summary.len()
                + sum
                    .sections()
                    .iter()
                    .flat_map(|(_, items)| items.iter())
                    .map(String::len)
                    .sum::<usize>()
        })
        .sum();
    states + 200 * chain.records()
}

impl Store for MemoryStore {
    fn load<'a>(&'a self, key: &'a ConvKey) -> BoxFuture<'a, Option<Arc<FoldChain>>> {
        Box::pin(async move { self.cache.get(key) })
    }

    fn save<'a>(&'a self, key: &'a ConvKey, chain: Arc<FoldChain>) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.cache.insert(key.clone(), chain) })
    }

    fn lock<'a>(&'a self, key: &'a ConvKey) -> BoxFuture<'a, FoldGuard> {
        Box::pin(async move { Box::new(self.flights.lock(key).await) as FoldGuard })
    }

    fn find<'a>(&'a self, conversation: &'a str) -> BoxFuture<'a, Vec<(ConvKey, Arc<FoldChain>)>> {
        Box::pin(async move {
            self.cache
                .iter()
                .filter(|(key, _)| key.conversation == conversation)
                .map(|(key, chain)| ((*key).clone(), chain))
                .collect()
        })
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Page> {
        // Iterating renews no entry's idle timer (a `get` would).
        Box::pin(async move {
            let entries = self
                .cache
                .iter()
                .filter(|(key, _)| query.admits(key))
                .map(|(key, chain)| ((*key).clone(), chain));
            Page::of(entries, query)
        })
    }

    fn count(&self) -> u64 {
        self.cache.entry_count()
    }
}
