//! The Redis archive (`state.backend = "redis"`), shared by replicas: one
//! list per conversation (`foldgate:archive:{tenant}:{conversation}`) of
//! JSON rows, trimmed to `archive.max_messages` and expiring
//! `archive.ttl` after the conversation's last fold. Redis has no text
//! index here: a search reads the newest [`SCAN_ROWS`] rows and scores
//! them with BM25 over the query's words ([`query::rank`]). Every command
//! is bounded by `state.timeout`; a failure costs the write or the search,
//! never a request.

use super::query::{self, Query};
use super::{Hit, Row};
use crate::config::{ArchiveConfig, StateConfig};
use crate::state::ConvKey;
use crate::state::redis::{glob_escape, scan_keys};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

/// Rows a search reads at most, newest first.
pub const SCAN_ROWS: isize = 2000;

const PREFIX: &str = "foldgate:archive:";

/// Archived messages in Redis.
#[derive(Clone)]
pub struct RedisArchive {
    conn: ConnectionManager,
    runtime: tokio::runtime::Handle,
    ttl_ms: u64,
    max_messages: isize,
    timeout: Duration,
}

impl std::fmt::Debug for RedisArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisArchive").finish_non_exhaustive()
    }
}

fn list_key(key: &ConvKey) -> String {
    format!("{PREFIX}{}:{}", key.tenant, key.conversation)
}

impl RedisArchive {
    /// Connects lazily to `state.url` (a Redis that is down is no error).
    pub fn open(state: &StateConfig, config: &ArchiveConfig) -> Result<Self, String> {
        let url = state.url.as_ref().map(|u| u.expose()).unwrap_or_default();
        let client = redis::Client::open(url).map_err(|e| format!("state.url: {e}"))?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "the Redis archive must be opened inside the Tokio runtime".to_string())?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(state.timeout))
            .set_response_timeout(Some(state.timeout))
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_lazy_with_config(client, manager)
            .map_err(|e| format!("state.url: {e}"))?;
        Ok(Self {
            conn,
            runtime,
            ttl_ms: u64::try_from(config.ttl.as_millis()).unwrap_or(u64::MAX),
            max_messages: isize::try_from(config.max_messages).unwrap_or(isize::MAX),
            timeout: state.timeout,
        })
    }

    /// Runs one command under the timeout; `None` (and a warning) on failure.
    async fn op<T>(&self, what: &str, f: impl Future<Output = redis::RedisResult<T>>) -> Option<T> {
        let error = match tokio::time::timeout(self.timeout, f).await {
            Ok(Ok(v)) => return Some(v),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        tracing::warn!(target: "foldgate::archive", op = what, error, "Redis archive unavailable");
        None
    }

    /// Appends the rows, trims the list and renews its expiry, atomically,
    /// in a task of its own.
    pub fn record(&self, key: &ConvKey, rows: Vec<Row>) {
        let json: Vec<String> = rows
            .iter()
            .filter_map(|r| serde_json::to_string(r).ok())
            .collect();
        let this = self.clone();
        let list = list_key(key);
        self.runtime.spawn(async move {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .rpush(&list, json)
                .ignore()
                .ltrim(&list, -this.max_messages, -1)
                .ignore()
                .cmd("PEXPIRE")
                .arg(&list)
                .arg(this.ttl_ms)
                .ignore();
            let mut conn = this.conn.clone();
            let _: Option<()> = this.op("archive", pipe.query_async(&mut conn)).await;
        });
    }

    pub async fn hits(&self, key: &ConvKey, query: &Query, limit: usize) -> Vec<Hit> {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("LRANGE")
            .arg(list_key(key))
            .arg(-SCAN_ROWS)
            .arg(-1)
            .clone();
        let raw: Vec<String> = self
            .op("LRANGE", cmd.query_async(&mut conn))
            .await
            .unwrap_or_default();
        // A message folded twice (a rebuild) was pushed twice: keep one.
        let mut seen = HashSet::new();
        let rows: Vec<Row> = raw
            .iter()
            .filter_map(|j| serde_json::from_str::<Row>(j).ok())
            .filter(|r| seen.insert((r.position, r.digest.clone())))
            .collect();
        query::rank(&rows, query, limit)
    }

    pub async fn count(&self, key: &ConvKey) -> u64 {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("LLEN").arg(list_key(key)).clone();
        self.op("LLEN", cmd.query_async(&mut conn))
            .await
            .unwrap_or(0)
    }

    pub async fn tenants(&self, conversation: &str) -> Vec<String> {
        let pattern = format!("*:{}", glob_escape(conversation));
        let mut conn = self.conn.clone();
        let keys = self
            .op("SCAN", scan_keys(&mut conn, PREFIX, &pattern))
            .await
            .unwrap_or_default();
        let mut tenants: Vec<String> = keys
            .into_iter()
            .filter(|k| k.conversation == conversation)
            .map(|k| k.tenant)
            .collect();
        tenants.sort();
        tenants.dedup();
        tenants
    }
}
