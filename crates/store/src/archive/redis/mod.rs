//! The Redis archive (`state.backend = "redis"`, in `archive.url`'s Redis,
//! else `state.url`'s), shared by replicas: one
//! list per conversation (`foldgate:archive:{tenant:conversation}`, hash
//! tagged like the conversation's other keys) of
//! JSON rows, trimmed to `archive.max_messages` and expiring
//! `archive.ttl` after the conversation's last fold. Redis has no text
//! index here: a search reads the newest [`SCAN_ROWS`] rows and scores
//! them with BM25 over the query's words ([`query::rank`]). Every command
//! is bounded by `state.timeout`; a failed search answers from the spool
//! alone, never fails a request. An outage is told once ([`Outage`]): while
//! Redis is known down a search does not wait for it (it is tried again
//! every half second) and answers from the spool without a log line.
//!
//! The archive's keys carry an expiry (`archive.ttl`), so a Redis that
//! evicts anything (`maxmemory-policy` other than `noeviction`) may drop
//! them: [`policy`] asks at start-up and warns.
//!
//! Writes go through the [`Spool`]: one [`writer`] task hands its oldest
//! batches to Redis in order, and while Redis is unreachable keeps them,
//! retrying with backoff. Searches read Redis and the spool, merged.

pub mod policy;
mod writer;

use super::ArchiveCounters;
use super::query::{self, Query};
use super::spool::{Spool, SpoolFull};
use super::{Found, Row};
use crate::config::{ArchiveConfig, StateConfig};
use crate::state::ConvKey;
use crate::state::StoreError;
use crate::state::redis::{Conn as Client, Outage, glob_escape, keys, scan_keys};
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Rows a search reads at most, newest first.
pub const SCAN_ROWS: isize = 2000;

/// Archived messages in Redis, and the writes it has not taken yet.
pub struct RedisArchive {
    conn: Conn,
    spool: Arc<Spool>,
    /// Stops the writer when the archive goes.
    _writer: DropGuard,
}

/// The connection and the bounds every command and write obeys.
#[derive(Clone)]
struct Conn {
    conn: Client,
    /// This Redis' outages, told once (shared with the state store when
    /// they share a Redis).
    outage: Arc<Outage>,
    ttl_ms: u64,
    max_messages: isize,
    timeout: Duration,
}

impl Conn {
    /// Runs one command under the timeout; `None` on failure (told once
    /// per outage, see [`Outage`]).
    async fn op<T>(&self, what: &str, f: impl Future<Output = redis::RedisResult<T>>) -> Option<T> {
        let error = match tokio::time::timeout(self.timeout, f).await {
            Ok(Ok(v)) => {
                self.outage.answered();
                return Some(v);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        self.outage.failed("archive", what, &error);
        None
    }

    /// A read: [`Self::op`], unless Redis is known down and was tried
    /// within the last half second (then `None` at once, no log line).
    async fn read<T>(
        &self,
        what: &str,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Option<T> {
        if !self.outage.should_try() {
            return None;
        }
        self.op(what, f).await
    }
}

impl std::fmt::Debug for RedisArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisArchive").finish_non_exhaustive()
    }
}

fn list_key(key: &ConvKey) -> String {
    keys::tagged(keys::ARCHIVE, key)
}

impl RedisArchive {
    /// Connects lazily to `archive.url`, else `state.url` (a Redis that is
    /// down is no error), starts the writer and asks the Redis for its
    /// eviction policy (a warning if it may evict archive keys).
    pub fn open(
        state: &StateConfig,
        config: &ArchiveConfig,
        counters: ArchiveCounters,
    ) -> Result<Self, StoreError> {
        let url = config.redis_url(state);
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::NoRuntime("the Redis archive"))?;
        let conn = Client::open(url, state.timeout)?;
        let key = if config.url.is_some() {
            "archive.url"
        } else {
            "state.url"
        };
        runtime.spawn(policy::warn_if_evicting(conn.clone(), state.timeout, key));
        let conn = Conn {
            outage: Outage::shared(url),
            conn,
            ttl_ms: u64::try_from(config.ttl.as_millis()).unwrap_or(u64::MAX),
            max_messages: isize::try_from(config.max_messages).unwrap_or(isize::MAX),
            timeout: state.timeout,
        };
        let spool = Arc::new(Spool::open(
            config.spool_bytes,
            config.spool_path.as_deref(),
            counters,
        )?);
        let stop = CancellationToken::new();
        runtime.spawn(writer::run(conn.clone(), spool.clone(), stop.clone()));
        Ok(Self {
            conn,
            spool,
            _writer: stop.drop_guard(),
        })
    }

    /// Queues the rows for the writer; refused whole when the spool is full.
    pub fn record(&self, key: &ConvKey, rows: Vec<Row>) -> Result<(), SpoolFull> {
        self.spool.push(key, rows)
    }

    /// Whether rows of about `bytes` would be queued now.
    pub fn room(&self, bytes: impl FnOnce() -> u64) -> Result<(), SpoolFull> {
        self.spool.room(bytes)
    }

    /// Rows and bytes waiting for Redis.
    pub fn spool_depth(&self) -> (u64, u64) {
        self.spool.depth()
    }

    /// At shutdown: waits up to `within` for the writer to hand Redis what
    /// is queued, unless Redis is down (then waiting gains nothing); says
    /// what is left and whether the spool file keeps it.
    pub async fn drain(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.spool.depth().0 > 0
            && !self.spool.backend_down()
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (rows, _) = self.spool.depth();
        if rows > 0 {
            let kept = self.spool.on_disk();
            tracing::warn!(target: "foldgate::archive", rows, kept_in_spool_file = kept, "archive rows not yet in Redis at shutdown");
        }
    }

    /// Matches in Redis and in the spool, merged: a row in both (written,
    /// not yet let go) or pushed twice (a rebuild folds it again) counts once.
    pub async fn hits(&self, key: &ConvKey, query: &Query, limit: usize) -> Found {
        let c = &self.conn;
        let mut conn = c.conn.clone();
        let cmd = redis::cmd("LRANGE")
            .arg(list_key(key))
            .arg(-SCAN_ROWS)
            .arg(-1)
            .clone();
        let raw: Vec<String> = c
            .read("LRANGE", cmd.query_async(&mut conn))
            .await
            .unwrap_or_default();
        let mut seen = HashSet::new();
        let rows: Vec<Row> = raw
            .iter()
            .filter_map(|j| serde_json::from_str::<Row>(j).ok())
            .chain(self.spool.rows(key))
            .filter(|r| seen.insert((r.position, r.digest.clone())))
            .collect();
        query::rank(&rows, query, limit)
    }

    /// Rows in Redis plus rows queued (a batch being written may count
    /// twice for a moment).
    pub async fn count(&self, key: &ConvKey) -> u64 {
        let c = &self.conn;
        let mut conn = c.conn.clone();
        let cmd = redis::cmd("LLEN").arg(list_key(key)).clone();
        let stored: u64 = c
            .read("LLEN", cmd.query_async(&mut conn))
            .await
            .unwrap_or(0);
        stored + self.spool.rows(key).len() as u64
    }

    pub async fn tenants(&self, conversation: &str) -> Vec<String> {
        let pattern = format!("*:{}", glob_escape(conversation));
        let c = &self.conn;
        let mut conn = c.conn.clone();
        let keys = c
            .read("SCAN", scan_keys(&mut conn, keys::ARCHIVE, &pattern))
            .await
            .unwrap_or_default();
        let mut tenants: Vec<String> = keys
            .into_iter()
            .filter(|k| k.conversation == conversation)
            .map(|k| k.tenant)
            .chain(self.spool.tenants(conversation))
            .collect();
        tenants.sort();
        tenants.dedup();
        tenants
    }
}
