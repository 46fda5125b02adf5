//! The in-process archive (`state.backend = "memory"`): each conversation's
//! rows in a moka cache, dropped `archive.ttl` after the last fold and
//! bounded in bytes by `state.cache_bytes`; lost on restart.

use super::query::{self, Query};
use super::{Found, Row};
use crate::config::ArchiveConfig;
use crate::state::ConvKey;
use std::sync::Arc;

/// Archived rows per conversation, oldest first.
#[derive(Debug)]
pub struct MemoryArchive {
    rows: moka::sync::Cache<ConvKey, Arc<Vec<Row>>>,
    max_messages: usize,
}

impl MemoryArchive {
    pub fn new(config: &ArchiveConfig, max_bytes: u64) -> Self {
        let rows = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|key: &ConvKey, rows: &Arc<Vec<Row>>| {
                let bytes = rows.iter().map(Row::weight).sum::<u64>()
                    + (key.tenant.len() + key.conversation.len()) as u64;
                u32::try_from(bytes).unwrap_or(u32::MAX)
            })
            .time_to_live(config.ttl)
            .build();
        Self {
            rows,
            max_messages: config.max_messages,
        }
    }

    /// Adds rows not stored yet (same position and digest), then drops the
    /// oldest beyond `max_messages`. The entry is replaced, not mutated, so
    /// its weight and expiry are renewed.
    pub fn record(&self, key: &ConvKey, new: Vec<Row>) {
        let max = self.max_messages;
        self.rows.entry_by_ref(key).and_upsert_with(|old| {
            let mut rows: Vec<Row> = old.map(|e| e.into_value().to_vec()).unwrap_or_default();
            for row in new {
                let stored = rows
                    .iter()
                    .any(|r| r.position == row.position && r.digest == row.digest);
                if !stored {
                    rows.push(row);
                }
            }
            let excess = rows.len().saturating_sub(max);
            rows.drain(..excess);
            Arc::new(rows)
        });
    }

    pub fn hits(&self, key: &ConvKey, query: &Query, limit: usize) -> Found {
        self.rows
            .get(key)
            .map(|rows| query::rank(&rows, query, limit))
            .unwrap_or_default()
    }

    pub fn count(&self, key: &ConvKey) -> u64 {
        self.rows.get(key).map_or(0, |r| r.len() as u64)
    }

    pub fn tenants(&self, conversation: &str) -> Vec<String> {
        let mut tenants: Vec<String> = self
            .rows
            .iter()
            .filter(|(key, _)| key.conversation == conversation)
            .map(|(key, _)| key.tenant.clone())
            .collect();
        tenants.sort();
        tenants
    }
}
