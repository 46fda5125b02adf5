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
            let sections: usize = sum
                .sections()
                .iter()
                .flat_map(|(_, items)| items.iter())
                .map(|item| STRING + item.len())
                .sum();
            // The ledger is most of a state's memory: up to a few hundred
            // items, each three strings and its numbers.
            let ledger: usize = s
                .ledger
                .items()
                .iter()
                .map(|i| {
                    LEDGER_ITEM
                        + i.value.len()
                        + i.context.len()
                        + i.clause.len()
                        + 8 * i.numbers.len()
                })
                .sum();
            STATE
                + s.id.len()
                + s.parent.as_ref().map_or(0, String::len)
                + sum.summary.len()
                + sections
                + ledger
        })
        .sum();
    states + 200 * chain.records()
}

/// What a weight counts beside text: a `FoldState` with its fixed fields
/// and vectors, a `String` in a list, a `LedgerItem` (its strings' and
/// vector's headers, kind and flags).
const STATE: usize = 512;
const STRING: usize = 32;
const LEDGER_ITEM: usize = 136;

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

    fn cached_bytes(&self) -> u64 {
        self.cache.weighted_size()
    }
}

#[cfg(test)]
mod tests {
    use super::weight;
    use crate::fold::ledger::{Ledger, LedgerItem};
    use crate::fold::{ChainHash, FoldChain, FoldState, Reason, Summary};

    fn chain(ledger: Ledger) -> FoldChain {
        let mut chain = FoldChain::new();
        chain.push(FoldState {
            id: "s1".into(),
            parent: None,
            depth: 1,
            summary: Summary {
                summary: "the story".into(),
                ..Summary::default()
            },
            ledger,
            covered: 10,
            kept_user: None,
            chain: ChainHash([7; 32]),
            user_turns: 5,
            messages: 14,
            created_at: 1,
            tokens_before: 3000,
            tokens_after: 900,
            reason: Reason::Token,
            summarizer: None,
            api: "chat".into(),
            recall: false,
            retained: Default::default(),
            background: false,
            restub: false,
        });
        chain
    }

    #[test]
    fn a_ledger_weighs_what_its_items_hold() {
        let items: Vec<LedgerItem> = (0..200)
            .map(|i| {
                LedgerItem::new(
                    format!("src/queue/mod{i}.rs"),
                    "where the failing test lives".into(),
                    None,
                )
            })
            .collect();
        let ledger: Ledger = serde_json::from_value(serde_json::to_value(items).unwrap()).unwrap();
        let text: usize = ledger
            .items()
            .iter()
            .map(|i| i.value.len() + i.context.len())
            .sum();
        let extra = weight(&chain(ledger)) - weight(&chain(Ledger::default()));
        assert!(
            extra >= text + 200 * 100,
            "200 items of {text} text bytes weigh only {extra} more"
        );
    }
}
