//! The archive tier: every message a fold removes from the view, stored
//! verbatim with its tenant, conversation, position, role, tool call id,
//! the fold that removed it and when, and searchable. Nothing a client
//! sent leaves reach: it moves from the view to the summary and here.
//!
//! - `sqlite`: a database file of its own with an FTS5 index (BM25 ranks).
//! - `redis`: one list per conversation, shared by replicas; a bounded scan
//!   scored by [`query`]. Its writes pass through the [`spool`].
//! - [`spool`]: writes Redis has not taken yet, bounded, replayed in order
//!   and searched with it.
//! - `memory`: this process only, scored by [`query`] too.
//! - [`query`]: what a search asks for, scan scoring, excerpts.
//!
//! The backend follows `state.backend`. Writes never wait: SQLite queues
//! them to its own thread, Redis spools them for a writer task of its own.
//! A write the spool cannot hold is refused ([`SpoolFull`]), and the fold
//! that made it is not made: a message leaves the view only once its
//! archive row is held somewhere.

mod memory;
pub mod query;
mod redis;

pub use redis::policy::check as check_redis_eviction;
mod remembered;
pub mod spool;
pub mod sqlite;

pub use spool::SpoolFull;

use crate::config::{Config, StateBackend};
use crate::fold::FoldState;
use crate::fold::extract::message_text;
use crate::message::{self, MessageId};
mod counters;
use crate::state::ConvKey;
use crate::state::StoreError;
pub use counters::ArchiveCounters;
pub use foldgate_core::message::Excerpt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// One archived message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The message's index in the request's messages (for Anthropic and
    /// Responses conversations, in foldgate's normalized messages).
    pub position: usize,
    /// Its role (`user`, `assistant`, `tool`, …).
    pub role: String,
    /// A tool result's `tool_call_id`, or an assistant message's tool call
    /// ids, comma-separated.
    pub tool_call_id: Option<String>,
    /// The id of the fold state that removed it from the view.
    pub fold: String,
    /// The conversation's API: `chat`, `anthropic` or `responses`.
    pub api: String,
    /// Unix seconds when it was archived.
    pub archived_at: i64,
    /// Hex of the message's identity (XXH3-128 of its JSON text): the same
    /// message archived twice (a rebuild folds it again) is stored once.
    pub digest: String,
    /// The searchable text: the tool call id(s), then [`message_text`].
    pub text: String,
    /// The message, as JSON text (chat-completions form).
    pub message: String,
}

impl Row {
    /// The row for `message` at `position` (identity `id`), removed from the
    /// view by fold state `fold` of a conversation speaking `api`, at `now`.
    pub fn of(
        position: usize,
        message: &Value,
        id: MessageId,
        fold: &str,
        api: &str,
        now: i64,
    ) -> Self {
        let tool_call_id = message::tool_call_id(message)
            .map(str::to_string)
            .or_else(|| {
                let ids: Vec<&str> = message::tool_call_ids(message)?.collect();
                (!ids.is_empty()).then(|| ids.join(","))
            });
        // The call ids lead the text, so a search for one finds it.
        let text = match &tool_call_id {
            Some(ids) => format!("{ids}\n{}", message_text(message)),
            None => message_text(message),
        };
        Self {
            position,
            role: message::role(message).unwrap_or("unknown").to_string(),
            tool_call_id,
            fold: fold.to_string(),
            api: api.to_string(),
            archived_at: now,
            digest: format!("{id:032x}"),
            text,
            message: message.to_string(),
        }
    }

    /// Bytes the row takes in memory, about: what the memory archive and
    /// the spool are bounded by.
    pub fn weight(&self) -> u64 {
        (128 + self.text.len() + self.message.len()) as u64
    }
}

/// What a search found: its hits, best first, and the query it searched
/// by after shaping (words too common to search by, and words no archived
/// message holds, left out; a retry's rarest words): the words a hit can
/// be judged by.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    pub hits: Vec<Hit>,
    pub searched: query::Query,
}

/// A search result: a row and its score (higher is better).
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub row: Row,
    pub score: f64,
}

impl Hit {
    /// The hit as the admin search shows it: the metadata and the message.
    pub fn to_json(&self) -> Value {
        let r = &self.row;
        serde_json::json!({
            "position": r.position,
            "role": r.role,
            "tool_call_id": r.tool_call_id,
            "fold": r.fold,
            "api": r.api,
            "archived_at": r.archived_at,
            "score": self.score,
            "message": serde_json::from_str::<Value>(&r.message).unwrap_or(Value::Null),
        })
    }
}

/// The archive of this process, over the state's backend, or off.
#[derive(Debug)]
pub struct Archive {
    backend: Backend,
    /// Messages this process stored for a compression, by
    /// [`Archive::stored_key`]: a conversation's stubs are in every later
    /// view, and are stored once, not on every request.
    compressed: remembered::Remembered,
    /// Counts the rows handed to the backend.
    counters: ArchiveCounters,
}

/// Where the archive lives.
#[derive(Debug)]
enum Backend {
    /// `archive.enabled = false`.
    Off,
    Memory(memory::MemoryArchive),
    Sqlite(sqlite::SqliteArchive),
    Redis(redis::RedisArchive),
}

/// Unix seconds now.
fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Archive {
    /// Opens the archive in the state's backend (Redis inside the runtime);
    /// the spool counts into `counters`.
    pub fn open(config: &Config, counters: ArchiveCounters) -> Result<Self, StoreError> {
        let archive = &config.archive;
        let backend = if !archive.enabled {
            Backend::Off
        } else {
            Backend::open(config, counters.clone())?
        };
        // A forgotten stub is stored again, which the backends keep once
        // but the row counter counts twice (an hour's soak hands some
        // 54,000 stubs; the default keeps 114,688 a generation).
        let remembered = if archive.enabled {
            archive.remembered_bytes
        } else {
            0
        };
        Ok(Self {
            backend,
            compressed: remembered::Remembered::with_bytes(remembered),
            counters,
        })
    }

    /// Compressed messages remembered as stored.
    pub fn remembered(&self) -> usize {
        self.compressed.len()
    }

    /// Bytes the set of remembered compressed messages takes.
    pub fn remembered_bytes(&self) -> u64 {
        self.compressed.bytes()
    }

    /// Whether messages are archived.
    pub fn enabled(&self) -> bool {
        !matches!(self.backend, Backend::Off)
    }

    /// Stores the rows of messages a compression shows as stubs, except
    /// those this process already stored (`id`: each row's message
    /// identity); `rows` makes a row for a position and is called only for
    /// the new ones. Returns at once, the write is queued; refused whole
    /// (and none remembered) when the spool is full.
    pub fn store_compressed(
        &self,
        key: &ConvKey,
        positions: impl IntoIterator<Item = (usize, MessageId)>,
        mut rows: impl FnMut(usize) -> Option<Row>,
    ) -> Result<(), SpoolFull> {
        if !self.enabled() {
            return Ok(());
        }
        let unknown = self.compressed.unknown(
            positions
                .into_iter()
                .map(|(position, id)| (Self::stored_key(key, position, id), position)),
        );
        let (keys, new): (Vec<u128>, Vec<Row>) = unknown
            .into_iter()
            .filter_map(|(k, position)| Some((k, rows(position)?)))
            .unzip();
        let n = new.len() as u64;
        self.store(key, new)?;
        self.counters.rows[1].inc_by(n);
        self.compressed.insert(keys);
        Ok(())
    }

    /// The remembered identity of a stored compressed message.
    fn stored_key(key: &ConvKey, position: usize, id: MessageId) -> u128 {
        let mut h = twox_hash::XxHash3_128::new();
        for part in [
            key.tenant.as_bytes(),
            b"\0",
            key.conversation.as_bytes(),
            b"\0",
        ] {
            h.write(part);
        }
        h.write(&position.to_le_bytes());
        h.write(&id.to_le_bytes());
        h.finish_128()
    }
}

impl Backend {
    /// The state backend's archive (Redis inside the runtime).
    fn open(config: &Config, counters: ArchiveCounters) -> Result<Self, StoreError> {
        let archive = &config.archive;
        Ok(match config.state.backend {
            StateBackend::Memory => Self::Memory(memory::MemoryArchive::new(
                archive,
                config.state.cache_bytes,
            )),
            StateBackend::Sqlite => Self::Sqlite(sqlite::SqliteArchive::open(
                &archive.path_for(&config.state),
                archive,
            )?),
            StateBackend::Redis => {
                Self::Redis(redis::RedisArchive::open(&config.state, archive, counters)?)
            }
        })
    }
}

impl Archive {
    /// Archives the messages `state` folded: `messages[i]` for each `i` in
    /// `folded` (with `ids[i]`, its identity). Returns at once; the write
    /// is queued, or refused when the spool is full: then the fold must
    /// not be made.
    pub fn record(
        &self,
        key: &ConvKey,
        state: &FoldState,
        folded: &[usize],
        messages: &[Value],
        ids: &[MessageId],
    ) -> Result<(), SpoolFull> {
        if !self.enabled() {
            return Ok(());
        }
        let now = now_unix();
        let rows: Vec<Row> = folded
            .iter()
            .filter_map(|&i| {
                Some(Row::of(
                    i,
                    messages.get(i)?,
                    *ids.get(i)?,
                    &state.id,
                    &state.api,
                    now,
                ))
            })
            .collect();
        let n = rows.len() as u64;
        self.store(key, rows)?;
        self.counters.rows[0].inc_by(n);
        Ok(())
    }

    /// Whether [`Archive::record`] of `messages[i]` for each `i` in
    /// `folded` would be taken now: checked before a fold's summarizer
    /// call, so a full spool costs no summary that would be thrown away.
    /// The rows are only weighed when the spool holds something.
    pub fn room(
        &self,
        folded: &[usize],
        messages: &[Value],
        ids: &[MessageId],
    ) -> Result<(), SpoolFull> {
        let Backend::Redis(r) = &self.backend else {
            return Ok(());
        };
        r.room(|| {
            folded
                .iter()
                .filter_map(|&i| Some(Row::of(i, messages.get(i)?, *ids.get(i)?, "", "", 0)))
                .map(|row| row.weight())
                .sum()
        })
    }

    /// Stores rows made elsewhere (a message a compression removes from
    /// the view, a benchmark's); returns at once, the write is queued. A
    /// row already stored (same position and digest) is kept once. Only
    /// Redis can refuse, when its spool is full.
    pub fn store(&self, key: &ConvKey, rows: Vec<Row>) -> Result<(), SpoolFull> {
        if rows.is_empty() {
            return Ok(());
        }
        match &self.backend {
            Backend::Off => {}
            Backend::Memory(m) => m.record(key, rows),
            Backend::Sqlite(s) => s.record(key, rows),
            Backend::Redis(r) => r.record(key, rows)?,
        }
        Ok(())
    }

    /// Rows and bytes of archive writes the backend has not taken yet.
    pub fn spool_depth(&self) -> (u64, u64) {
        match &self.backend {
            Backend::Redis(r) => r.spool_depth(),
            Backend::Off | Backend::Memory(_) | Backend::Sqlite(_) => (0, 0),
        }
    }

    /// The best `limit` distinct messages matching `query` in the
    /// conversation's archive, best first; with an empty query, the
    /// `limit` messages archived last, newest first. The query is shaped
    /// first ([`query::Query::shape`]: stop words dropped; words compared
    /// by stem, those in more than a third of the messages left out while
    /// rarer ones are left,
    /// see [`query::common`]), hits of one message are merged
    /// ([`query::merge`]), those holding more of the names `query` writes
    /// capitalized that were too common to search by come first
    /// ([`query::subject_first`]: a speaker's turns), and the first hits
    /// hold the searched words together ([`query::together`]).
    pub async fn hits(&self, key: &ConvKey, query: &str, limit: usize) -> Vec<Hit> {
        self.found(key, query, limit).await.hits
    }

    /// [`Archive::hits`], with the query searched by ([`Found::searched`]).
    pub async fn found(&self, key: &ConvKey, text: &str, limit: usize) -> Found {
        let query = query::Query::shape(text);
        // Room for hits that merge into others.
        let wanted = limit.saturating_mul(2);
        let mut found = match &self.backend {
            Backend::Off => Found::default(),
            Backend::Memory(m) => m.hits(key, &query, wanted),
            Backend::Sqlite(s) => s.hits(key, &query, wanted).await,
            Backend::Redis(r) => r.hits(key, &query, wanted).await,
        };
        found.hits = query::merge(std::mem::take(&mut found.hits));
        // The searched words held together up front; a query whose words
        // all fell out (too common) is ordered by its own.
        let searched = if found.searched.is_empty() {
            &query
        } else {
            &found.searched
        };
        let wanted = query::query_stems(searched);
        // The names left out as too common (a speaker's) rank the hits of
        // the rest: the subject's turns first.
        let names = query::name_stems(text);
        let common: Vec<String> = query::query_stems(&query)
            .into_iter()
            .filter(|s| !wanted.contains(s) && names.contains(s))
            .collect();
        found.hits = query::subject_first(std::mem::take(&mut found.hits), &common);
        found.hits = query::together(std::mem::take(&mut found.hits), &wanted);
        found.hits.truncate(limit);
        found
    }

    /// Passages of the best matches of `query` in the conversation's
    /// archive, best first, within about `token_budget` tokens in all: what
    /// a recall tool hands the model.
    pub async fn search(&self, key: &ConvKey, query: &str, token_budget: u32) -> Vec<Excerpt> {
        let hits = self.hits(key, query, query::RECALL_HITS).await;
        query::excerpts(&hits, &query::Query::shape(query), token_budget)
    }

    /// Messages archived for the conversation.
    pub async fn count(&self, key: &ConvKey) -> u64 {
        match &self.backend {
            Backend::Off => 0,
            Backend::Memory(m) => m.count(key),
            Backend::Sqlite(s) => s.count(key).await,
            Backend::Redis(r) => r.count(key).await,
        }
    }

    /// The tenants with an archive for this conversation id (admin only).
    pub async fn tenants(&self, conversation: &str) -> Vec<String> {
        match &self.backend {
            Backend::Off => Vec::new(),
            Backend::Memory(m) => m.tenants(conversation),
            Backend::Sqlite(s) => s.tenants(conversation).await,
            Backend::Redis(r) => r.tenants(conversation).await,
        }
    }

    /// At shutdown: waits up to `within` for Redis to take the spool (see
    /// [`redis::RedisArchive::drain`]).
    pub async fn drain(&self, within: Duration) {
        if let Backend::Redis(r) = &self.backend {
            r.drain(within).await;
        }
    }

    /// Waits until every queued write is stored (SQLite; tests and shutdown).
    pub async fn flush(&self) {
        if let Backend::Sqlite(s) = &self.backend {
            s.flush().await;
        }
    }
}

/// `foldgate prune`: deletes messages archived longer ago than
/// `older_than` from the SQLite archive; returns how many.
pub fn prune(config: &Config, older_than: Duration) -> Result<usize, StoreError> {
    let cutoff = now_unix().saturating_sub(i64::try_from(older_than.as_secs()).unwrap_or(i64::MAX));
    sqlite::prune(&config.archive.path_for(&config.state), cutoff)
}
