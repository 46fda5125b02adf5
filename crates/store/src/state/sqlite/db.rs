//! The SQLite side: schema and migrations, and the synchronous queries the
//! store's worker thread runs. Nothing here is called from async code.

use crate::fold::FoldChain;
use crate::state::StoreError;
use crate::state::{ConvKey, ListQuery, Page};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Schema steps, applied in order; `schema_version` records how many ran.
/// Append, never edit: a database carries the steps it has seen.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: each conversation's current chain.
    "CREATE TABLE conversations (
        tenant TEXT NOT NULL,
        conversation TEXT NOT NULL,
        chain TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        used_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, conversation)
    ) WITHOUT ROWID;
    CREATE INDEX conversations_used_at ON conversations (used_at);",
    // 2: the audit trail, one row per fold ever made.
    "CREATE TABLE folds (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant TEXT NOT NULL,
        conversation TEXT NOT NULL,
        id TEXT NOT NULL,
        parent TEXT,
        depth INTEGER NOT NULL,
        reason TEXT NOT NULL,
        covered INTEGER NOT NULL,
        kept_user INTEGER,
        hash TEXT NOT NULL,
        tokens_before INTEGER NOT NULL,
        tokens_after INTEGER NOT NULL,
        summarizer_model TEXT,
        latency_ms INTEGER,
        created_at INTEGER NOT NULL,
        summary TEXT NOT NULL,
        UNIQUE (tenant, conversation, id, created_at)
    );
    CREATE INDEX folds_conversation ON folds (conversation, tenant);
    CREATE INDEX folds_created_at ON folds (created_at);",
    // 3: context windows learned from upstreams' context-length errors.
    "CREATE TABLE windows (
        model TEXT PRIMARY KEY,
        context_window INTEGER NOT NULL,
        learned_at INTEGER NOT NULL
    ) WITHOUT ROWID;",
];

/// The schema version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// Opens (creating it and its directory) and migrates the database.
pub fn open(path: &Path) -> Result<Connection, StoreError> {
    open_with(path, "state.path", MIGRATIONS)
}

/// Opens (creating it and its directory) the SQLite file at `path`, the
/// value of configuration key `key`, and applies `steps` as [`migrate`]
/// does: shared by the state database and the archive's.
pub fn open_with(path: &Path, key: &'static str, steps: &[&str]) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            key,
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    let mut conn = Connection::open(path).map_err(|source| StoreError::Open {
        key,
        path: path.to_path_buf(),
        source,
    })?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| StoreError::from(e).at(key, path))?;
    // WAL: readers (prune, admin) never block the writer; NORMAL sync is
    // durable across process crashes, which is all a cache needs.
    conn.pragma_update(None, "journal_mode", "WAL")
        .and_then(|()| conn.pragma_update(None, "synchronous", "NORMAL"))
        .map_err(|e| StoreError::from(e).at(key, path))?;
    migrate_steps(&mut conn, steps, key).map_err(|e| e.at(key, path))?;
    Ok(conn)
}

/// Brings the schema to [`VERSION`]; returns the version found before.
pub fn migrate(conn: &mut Connection) -> Result<i64, StoreError> {
    migrate_steps(conn, MIGRATIONS, "state.path")
}

/// Applies the `steps` a database has not seen; returns the version
/// (steps applied) found before.
fn migrate_steps(
    conn: &mut Connection,
    steps: &[&str],
    key: &'static str,
) -> Result<i64, StoreError> {
    let version = i64::try_from(steps.len()).unwrap_or(i64::MAX);
    let tx = conn.transaction()?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")?;
    let found: Option<i64> = tx
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .optional()?;
    let found = found.unwrap_or(0);
    if found > version {
        return Err(StoreError::NewerSchema {
            key,
            found,
            version,
        });
    }
    for (i, step) in steps
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        tx.execute_batch(step)
            .map_err(|source| StoreError::Migration {
                step: i + 1,
                source,
            })?;
    }
    tx.execute("DELETE FROM schema_version", [])?;
    tx.execute(
        "INSERT INTO schema_version (version) VALUES (?1)",
        [version],
    )?;
    tx.commit()?;
    Ok(found)
}

/// Decodes a stored chain; `None` (and a warning) for anything else.
fn decode(key: &ConvKey, raw: ValueRef<'_>) -> Option<FoldChain> {
    let bytes = match raw {
        ValueRef::Text(b) | ValueRef::Blob(b) => b,
        _ => &[],
    };
    match serde_json::from_slice::<FoldChain>(bytes) {
        Ok(chain) => Some(chain),
        Err(e) => {
            tracing::warn!(target: "foldgate::state", conversation = %key, error = %e, "discarding a stored state that does not decode");
            None
        }
    }
}

/// The conversation's chain if it is stored, decodes, and was used after
/// `idle_before`. A row that fails either test is deleted.
pub fn load(
    conn: &Connection,
    key: &ConvKey,
    idle_before: i64,
) -> rusqlite::Result<Option<FoldChain>> {
    let row = conn
        .query_row(
            "SELECT chain, used_at FROM conversations WHERE tenant = ?1 AND conversation = ?2",
            params![key.tenant, key.conversation],
            |r| Ok((decode(key, r.get_ref(0)?), r.get::<_, i64>(1).unwrap_or(0))),
        )
        .optional()?;
    match row {
        None => Ok(None),
        Some((Some(chain), used_at)) if used_at >= idle_before => Ok(Some(chain)),
        Some(_) => {
            conn.execute(
                "DELETE FROM conversations WHERE tenant = ?1 AND conversation = ?2",
                params![key.tenant, key.conversation],
            )?;
            Ok(None)
        }
    }
}

/// Every tenant's decodable chain for a conversation id.
pub fn find(conn: &Connection, conversation: &str) -> rusqlite::Result<Vec<(ConvKey, FoldChain)>> {
    let mut stmt =
        conn.prepare_cached("SELECT tenant, chain FROM conversations WHERE conversation = ?1")?;
    let rows = stmt.query_map([conversation], |r| {
        let key = ConvKey {
            tenant: r.get(0)?,
            conversation: conversation.to_string(),
        };
        let chain = decode(&key, r.get_ref(1)?);
        Ok(chain.map(|c| (key, c)))
    })?;
    rows.filter_map(Result::transpose).collect()
}

/// A page of the decodable chains used after `idle_before`, in listing
/// order.
pub fn list(conn: &Connection, query: &ListQuery, idle_before: i64) -> rusqlite::Result<Page> {
    let (after_tenant, after_conversation) = query
        .after
        .as_ref()
        .map_or(("", ""), |k| (k.tenant.as_str(), k.conversation.as_str()));
    let limit = query.limit();
    let mut stmt = conn.prepare_cached(
        "SELECT tenant, conversation, chain FROM conversations
         WHERE (?1 IS NULL OR tenant = ?1) AND (tenant, conversation) > (?2, ?3) AND used_at >= ?4
         ORDER BY tenant, conversation LIMIT ?5",
    )?;
    let rows = stmt.query_map(
        params![
            query.tenant,
            after_tenant,
            after_conversation,
            idle_before,
            // One more than a page tells whether another follows.
            i64::try_from(limit + 1).unwrap_or(i64::MAX)
        ],
        |r| {
            let key = ConvKey {
                tenant: r.get(0)?,
                conversation: r.get(1)?,
            };
            let chain = decode(&key, r.get_ref(2)?);
            Ok((key, chain))
        },
    )?;
    let mut page = Page::default();
    let mut last = None;
    for (seen, row) in rows.enumerate() {
        let (key, chain) = row?;
        if seen == limit {
            // A row past the page: the page ends at the last row read.
            page.next = last;
            break;
        }
        if let Some(chain) = chain {
            page.conversations.push((key.clone(), Arc::new(chain)));
        }
        last = Some(key);
    }
    Ok(page)
}

/// Stores the current chain and appends its folds to the audit trail.
pub fn save(
    conn: &Connection,
    key: &ConvKey,
    chain: &FoldChain,
    now: i64,
) -> Result<(), StoreError> {
    let json = serde_json::to_string(chain)?;
    conn.prepare_cached(
        "INSERT INTO conversations (tenant, conversation, chain, updated_at, used_at) VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT (tenant, conversation) DO UPDATE SET chain = ?3, updated_at = ?4, used_at = ?4",
    )
    .and_then(|mut s| s.execute(params![key.tenant, key.conversation, json, now]))
    ?;
    let mut audit = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO folds (tenant, conversation, id, parent, depth, reason, covered, kept_user, hash,
             tokens_before, tokens_after, summarizer_model, latency_ms, created_at, summary)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )
        ?;
    for s in chain.states() {
        let summary = serde_json::to_string(&s.summary)?;
        audit.execute(params![
            key.tenant,
            key.conversation,
            s.id,
            s.parent,
            s.depth,
            s.reason.as_str(),
            s.covered as i64,
            s.kept_user.map(|k| k as i64),
            s.chain.to_hex(),
            s.tokens_before,
            s.tokens_after,
            s.summarizer.as_ref().map(|r| r.model.as_str()),
            s.summarizer
                .as_ref()
                .map(|r| i64::try_from(r.latency_ms).unwrap_or(i64::MAX)),
            i64::try_from(s.created_at).unwrap_or(i64::MAX),
            summary,
        ])?;
    }
    Ok(())
}

/// Keeps `model`'s learned window (the latest replaces an earlier one).
pub fn save_window(conn: &Connection, model: &str, window: u32, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO windows (model, context_window, learned_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (model) DO UPDATE SET context_window = ?2, learned_at = ?3",
    )?
    .execute(params![model, window, now])
    .map(drop)
}

/// Every learned window, `(model, window)`.
pub fn windows(conn: &Connection) -> rusqlite::Result<Vec<(String, u32)>> {
    let mut stmt =
        conn.prepare_cached("SELECT model, context_window FROM windows ORDER BY model")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Records that the conversation was used at `now`.
pub fn touch(conn: &Connection, key: &ConvKey, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE conversations SET used_at = ?3 WHERE tenant = ?1 AND conversation = ?2",
    )?
    .execute(params![key.tenant, key.conversation, now])
    .map(drop)
}

/// Deletes states idle since before `cutoff`; returns how many.
pub fn expire(conn: &Connection, cutoff: i64) -> rusqlite::Result<usize> {
    conn.execute("DELETE FROM conversations WHERE used_at < ?1", [cutoff])
}

/// Conversations stored.
pub fn count(conn: &Connection) -> rusqlite::Result<u64> {
    conn.query_row("SELECT count(*) FROM conversations", [], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| u64::try_from(n).unwrap_or(0))
}

/// What [`prune`] deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Conversation states unused since the cutoff.
    pub states: usize,
    /// Audit rows of folds made before the cutoff.
    pub folds: usize,
}

/// Deletes states last used, and audit rows created, before `cutoff`.
pub fn prune(conn: &mut Connection, cutoff: i64) -> rusqlite::Result<Pruned> {
    let tx = conn.transaction()?;
    let states = expire(&tx, cutoff)?;
    let folds = tx.execute("DELETE FROM folds WHERE created_at < ?1", [cutoff])?;
    tx.commit()?;
    Ok(Pruned { states, folds })
}
