//! The SQLite archive: rows in the `archive` table of its own database
//! file (`archive.path`, by default beside `state.path`, so its writes never
//! hold the state database's write lock), ranked by an FTS5 index with
//! BM25. Every query runs on one dedicated thread with its own connection;
//! writes are queued to it and the fold does not wait for them. The queue
//! is drained when the archive is dropped.

use super::query::{self, Query};
use super::{Found, Hit, Row};
use crate::config::ArchiveConfig;
use crate::state::ConvKey;
use crate::state::StoreError;
use rusqlite::{Connection, params};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use twox_hash::XxHash3_64;

/// Schema steps, applied in order (see `state::sqlite::db::open_with`).
/// Append, never edit: a database carries the steps it has seen.
const MIGRATIONS: &[&str] = &[
    // 1: the rows, and an FTS5 index kept in step by triggers; `scope` is
    // one token per tenant and conversation, so a search reads one
    // conversation's postings.
    "CREATE TABLE archive (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        conversation TEXT NOT NULL,
        position INTEGER NOT NULL,
        role TEXT NOT NULL,
        tool_call_id TEXT,
        fold TEXT NOT NULL,
        api TEXT NOT NULL,
        archived_at INTEGER NOT NULL,
        digest TEXT NOT NULL,
        scope TEXT NOT NULL,
        text TEXT NOT NULL,
        message TEXT NOT NULL,
        UNIQUE (tenant, conversation, position, digest)
    );
    CREATE INDEX archive_conversation ON archive (conversation, tenant);
    CREATE INDEX archive_archived_at ON archive (archived_at);
    CREATE VIRTUAL TABLE archive_fts USING fts5(scope, text, content = 'archive', content_rowid = 'id');
    CREATE TRIGGER archive_fts_insert AFTER INSERT ON archive BEGIN
        INSERT INTO archive_fts (rowid, scope, text) VALUES (new.id, new.scope, new.text);
    END;
    CREATE TRIGGER archive_fts_delete AFTER DELETE ON archive BEGIN
        INSERT INTO archive_fts (archive_fts, rowid, scope, text) VALUES ('delete', old.id, old.scope, old.text);
    END;",
    // 2: the index stems words (FTS5's `porter` tokenizer over `unicode61`),
    // rebuilt from the rows an archive of step 1 holds.
    "DROP TRIGGER archive_fts_insert;
    DROP TRIGGER archive_fts_delete;
    DROP TABLE archive_fts;
    CREATE VIRTUAL TABLE archive_fts USING fts5(scope, text, content = 'archive', content_rowid = 'id',
        tokenize = 'porter unicode61');
    CREATE TRIGGER archive_fts_insert AFTER INSERT ON archive BEGIN
        INSERT INTO archive_fts (rowid, scope, text) VALUES (new.id, new.scope, new.text);
    END;
    CREATE TRIGGER archive_fts_delete AFTER DELETE ON archive BEGIN
        INSERT INTO archive_fts (archive_fts, rowid, scope, text) VALUES ('delete', old.id, old.scope, old.text);
    END;
    INSERT INTO archive_fts (archive_fts) VALUES ('rebuild');",
];

/// Opens (creating and migrating) the archive database at `path`.
fn open(path: &Path) -> Result<Connection, StoreError> {
    crate::state::sqlite::db::open_with(path, "archive.path", MIGRATIONS)
}

/// How long a search waits for the database before answering nothing.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the thread deletes expired rows.
const HOUSEKEEPING: Duration = Duration::from_secs(60);

/// Work for the archive's thread.
enum Cmd {
    Record {
        key: ConvKey,
        rows: Vec<Row>,
    },
    Hits {
        key: ConvKey,
        query: Query,
        limit: usize,
        reply: oneshot::Sender<Found>,
    },
    Count {
        key: ConvKey,
        reply: oneshot::Sender<u64>,
    },
    Tenants {
        conversation: String,
        reply: oneshot::Sender<Vec<String>>,
    },
    Flush {
        reply: oneshot::Sender<()>,
    },
}

/// Archived messages in the SQLite state database.
#[derive(Debug)]
pub struct SqliteArchive {
    tx: Option<mpsc::Sender<Cmd>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl SqliteArchive {
    /// Opens (creating and migrating) the archive database at `path`.
    pub fn open(path: &Path, config: &ArchiveConfig) -> Result<Self, StoreError> {
        let conn = open(path)?;
        let (tx, rx) = mpsc::channel();
        let ttl = i64::try_from(config.ttl.as_secs()).unwrap_or(i64::MAX);
        let max = i64::try_from(config.max_messages).unwrap_or(i64::MAX);
        let worker = std::thread::Builder::new()
            .name("foldgate-archive".into())
            .spawn(move || run(conn, &rx, ttl, max))
            .map_err(|source| StoreError::Thread {
                what: "archive",
                source,
            })?;
        tracing::info!(target: "foldgate::archive", path = %path.display(), "folded messages archived in SQLite");
        Ok(Self {
            tx: Some(tx),
            worker: Some(worker),
        })
    }

    fn send(&self, cmd: Cmd) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(cmd).is_ok())
    }

    /// Sends the command `make` builds around a reply channel and waits
    /// (bounded) for the answer; `T::default()` when none comes.
    async fn ask<T: Default>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Cmd) -> T {
        let (reply, rx) = oneshot::channel();
        if !self.send(make(reply)) {
            return T::default();
        }
        match tokio::time::timeout(READ_TIMEOUT, rx).await {
            Ok(Ok(answer)) => answer,
            _ => {
                tracing::warn!(target: "foldgate::archive", "archive read timed out");
                T::default()
            }
        }
    }

    pub fn record(&self, key: &ConvKey, rows: Vec<Row>) {
        self.send(Cmd::Record {
            key: key.clone(),
            rows,
        });
    }

    pub async fn hits(&self, key: &ConvKey, query: &Query, limit: usize) -> Found {
        self.ask(|reply| Cmd::Hits {
            key: key.clone(),
            query: query.clone(),
            limit,
            reply,
        })
        .await
    }

    pub async fn count(&self, key: &ConvKey) -> u64 {
        self.ask(|reply| Cmd::Count {
            key: key.clone(),
            reply,
        })
        .await
    }

    pub async fn tenants(&self, conversation: &str) -> Vec<String> {
        self.ask(|reply| Cmd::Tenants {
            conversation: conversation.to_string(),
            reply,
        })
        .await
    }

    /// Waits until every queued write is committed.
    pub async fn flush(&self) {
        self.ask(|reply| Cmd::Flush { reply }).await;
    }
}

impl Drop for SqliteArchive {
    fn drop(&mut self) {
        // Closing the queue lets the thread store what is left, then exit.
        drop(self.tx.take());
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// The archive's thread: commands in arrival order (a search sees every
/// write queued before it), expired rows deleted now and then.
fn run(mut conn: Connection, rx: &mpsc::Receiver<Cmd>, ttl: i64, max: i64) {
    let mut swept = Instant::now();
    loop {
        match rx.recv_timeout(HOUSEKEEPING) {
            Ok(cmd) => apply(&mut conn, cmd, max),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if swept.elapsed() >= HOUSEKEEPING {
            swept = Instant::now();
            match expire(&conn, super::now_unix().saturating_sub(ttl)) {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(target: "foldgate::archive", expired = n, "deleted expired archived messages")
                }
                Err(e) => {
                    tracing::warn!(target: "foldgate::archive", error = %e, "archive expiry failed")
                }
            }
        }
    }
}

fn apply(conn: &mut Connection, cmd: Cmd, max: i64) {
    match cmd {
        Cmd::Record { key, rows } => {
            if let Err(e) = insert(conn, &key, &rows, max) {
                tracing::warn!(target: "foldgate::archive", conversation = %key, error = %e, "archive write failed");
            }
        }
        Cmd::Hits {
            key,
            query,
            limit,
            reply,
        } => {
            let hits = hits(conn, &key, &query, limit).unwrap_or_else(|e| {
                tracing::warn!(target: "foldgate::archive", conversation = %key, error = %e, "archive search failed");
                Found::default()
            });
            let _ = reply.send(hits);
        }
        Cmd::Count { key, reply } => {
            let n: i64 = conn
                .query_row(
                    "SELECT count(*) FROM archive WHERE tenant = ?1 AND conversation = ?2",
                    params![key.tenant, key.conversation],
                    |r| r.get(0),
                )
                .unwrap_or(0);
            let _ = reply.send(u64::try_from(n).unwrap_or(0));
        }
        Cmd::Tenants {
            conversation,
            reply,
        } => {
            let _ = reply.send(tenants(conn, &conversation).unwrap_or_default());
        }
        Cmd::Flush { reply } => {
            let _ = reply.send(());
        }
    }
}

/// The FTS5 token naming one tenant's conversation.
fn scope(key: &ConvKey) -> String {
    let mut bytes = key.tenant.clone().into_bytes();
    bytes.push(0);
    bytes.extend_from_slice(key.conversation.as_bytes());
    format!("s{:016x}", XxHash3_64::oneshot(&bytes))
}

/// Stores the rows not stored yet, then drops the conversation's oldest
/// rows beyond `max`, in one transaction.
fn insert(conn: &mut Connection, key: &ConvKey, rows: &[Row], max: i64) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let scope = scope(key);
        let mut stmt = tx.prepare_cached(
            "INSERT OR IGNORE INTO archive (tenant, conversation, position, role, tool_call_id, fold, api,
             archived_at, digest, scope, text, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )?;
        for r in rows {
            stmt.execute(params![
                key.tenant,
                key.conversation,
                i64::try_from(r.position).unwrap_or(i64::MAX),
                r.role,
                r.tool_call_id,
                r.fold,
                r.api,
                r.archived_at,
                r.digest,
                scope,
                r.text,
                r.message,
            ])?;
        }
        tx.prepare_cached(
            "DELETE FROM archive WHERE id IN (SELECT id FROM archive WHERE tenant = ?1 AND conversation = ?2
             ORDER BY id DESC LIMIT -1 OFFSET ?3)",
        )?
        .execute(params![key.tenant, key.conversation, max])?;
    }
    tx.commit()
}

const COLUMNS: &str =
    "a.position, a.role, a.tool_call_id, a.fold, a.api, a.archived_at, a.digest, a.text, a.message";

/// The best `limit` matches, best first (BM25 over the stemmed text; the
/// newer of equal scores first), or the last `limit` rows for an empty
/// query. Pieces of the query in more than a third of the conversation's rows
/// are left out while a rarer one is left ([`query::common`]); when the
/// query finds nothing and has a phrase, it is searched again by its
/// rarest words that some row holds, each alone. The query searched by
/// leaves out words no row holds too.
fn hits(conn: &Connection, key: &ConvKey, query: &Query, limit: usize) -> rusqlite::Result<Found> {
    if query.is_empty() {
        return Ok(Found {
            hits: search(conn, key, query, limit)?,
            searched: Query::default(),
        });
    }
    let rows: i64 = conn.query_row(
        "SELECT count(*) FROM archive WHERE tenant = ?1 AND conversation = ?2",
        params![key.tenant, key.conversation],
        |r| r.get(0),
    )?;
    let counts = query
        .pieces()
        .iter()
        .map(|p| holding(conn, key, p))
        .collect::<rusqlite::Result<Vec<usize>>>()?;
    let common = query::common(&counts, usize::try_from(rows).unwrap_or(0));
    let shaped = query.without(&common);
    let found = search(conn, key, &shaped, limit)?;
    if !found.is_empty() || !query.has_phrase() {
        let absent: Vec<bool> = common
            .iter()
            .zip(&counts)
            .map(|(c, n)| *c || *n == 0)
            .collect();
        return Ok(Found {
            hits: found,
            searched: query.without(&absent),
        });
    }
    let mut rare: Vec<(usize, &str)> = Vec::new();
    for w in query.words() {
        let n = holding(conn, key, &[w.to_string()])?;
        if n > 0 {
            rare.push((n, w));
        }
    }
    rare.sort_by_key(|&(n, _)| n);
    if rare.is_empty() {
        return Ok(Found {
            hits: found,
            searched: Query::default(),
        });
    }
    let retry = Query::of_words(rare.iter().take(query::RETRY_WORDS).map(|&(_, w)| w));
    Ok(Found {
        hits: search(conn, key, &retry, limit)?,
        searched: retry,
    })
}

/// Rows of the conversation holding the phrase `words`.
fn holding(conn: &Connection, key: &ConvKey, words: &[String]) -> rusqlite::Result<usize> {
    let expr = format!(
        "scope : \"{}\" AND text : \"{}\"",
        scope(key),
        words.join(" ")
    );
    let n: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM archive_fts JOIN archive a ON a.id = archive_fts.rowid
             WHERE archive_fts MATCH ?1 AND a.tenant = ?2 AND a.conversation = ?3",
        )?
        .query_row(params![expr, key.tenant, key.conversation], |r| r.get(0))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The best `limit` matches of `query` as it is, best first, or the last
/// `limit` rows for an empty query.
fn search(
    conn: &Connection,
    key: &ConvKey,
    query: &Query,
    limit: usize,
) -> rusqlite::Result<Vec<Hit>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let read = |r: &rusqlite::Row<'_>| {
        Ok(Hit {
            row: Row {
                position: usize::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                role: r.get(1)?,
                tool_call_id: r.get(2)?,
                fold: r.get(3)?,
                api: r.get(4)?,
                archived_at: r.get(5)?,
                digest: r.get(6)?,
                text: r.get(7)?,
                message: r.get(8)?,
            },
            score: r.get(9)?,
        })
    };
    let Some(text) = query.fts("text") else {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS}, 0.0 FROM archive a WHERE a.tenant = ?1 AND a.conversation = ?2 ORDER BY a.id DESC LIMIT ?3"
        ))?;
        return stmt
            .query_map(params![key.tenant, key.conversation, limit], read)?
            .collect();
    };
    let expr = format!("scope : \"{}\" AND ({text})", scope(key));
    // bm25() is lower for better matches; the scope column weighs nothing.
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS}, -bm25(archive_fts, 0.0, 1.0) AS score FROM archive_fts
         JOIN archive a ON a.id = archive_fts.rowid
         WHERE archive_fts MATCH ?1 AND a.tenant = ?2 AND a.conversation = ?3
         ORDER BY score DESC, a.id DESC LIMIT ?4"
    ))?;
    stmt.query_map(params![expr, key.tenant, key.conversation, limit], read)?
        .collect()
}

fn tenants(conn: &Connection, conversation: &str) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT DISTINCT tenant FROM archive WHERE conversation = ?1 ORDER BY tenant",
    )?
    .query_map([conversation], |r| r.get(0))?
    .collect()
}

/// Deletes rows archived before `cutoff` (unix seconds); returns how many.
fn expire(conn: &Connection, cutoff: i64) -> rusqlite::Result<usize> {
    conn.execute("DELETE FROM archive WHERE archived_at < ?1", [cutoff])
}

/// `foldgate prune`: deletes rows archived before `cutoff` from the
/// archive database at `path`, when there is one.
pub fn prune(path: &Path, cutoff: i64) -> Result<usize, StoreError> {
    if !path.exists() {
        return Ok(0);
    }
    let conn = open(path)?;
    expire(&conn, cutoff).map_err(|e| StoreError::from(e).at("archive.path", path))
}
