//! The spool's file (`archive.spool_path`): the batches that waited for an
//! unreachable backend, kept in a small SQLite database of their own so a
//! replica that restarts during an outage still replays them. A batch is
//! written here only once the backend refused it (normal writes never touch
//! the disk) and deleted once the backend stored it.

use super::Batch;
use crate::archive::Row;
use crate::state::ConvKey;
use crate::state::StoreError;
use rusqlite::{Connection, params};
use std::path::Path;

/// Schema steps, applied in order (see `state::sqlite::db::open_with`).
/// Append, never edit.
const MIGRATIONS: &[&str] = &["CREATE TABLE spool (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant TEXT NOT NULL,
        conversation TEXT NOT NULL,
        rows TEXT NOT NULL
    );"];

/// A batch read back from the file: its sequence number, conversation, rows.
pub type Saved = (i64, ConvKey, Vec<Row>);

/// Opens (creating and migrating) the spool file at `path`; returns it and
/// the batches it holds, oldest first.
pub fn open(path: &Path) -> Result<(Connection, Vec<Saved>), StoreError> {
    let conn = crate::state::sqlite::db::open_with(path, "archive.spool_path", MIGRATIONS)?;
    let batches = {
        let mut stmt = conn
            .prepare("SELECT seq, tenant, conversation, rows FROM spool ORDER BY seq")
            .map_err(|e| StoreError::from(e).at("archive.spool_path", path))?;
        let read = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| StoreError::from(e).at("archive.spool_path", path))?;
        read.into_iter()
            .filter_map(|(seq, tenant, conversation, rows)| {
                // A batch that does not parse is not replayable: say so.
                let rows: Vec<Row> = serde_json::from_str(&rows)
                    .inspect_err(|e| tracing::warn!(target: "foldgate::archive", seq, error = %e, "unreadable spooled batch skipped"))
                    .ok()?;
                Some((seq, ConvKey { tenant, conversation }, rows))
            })
            .collect()
    };
    Ok((conn, batches))
}

/// Writes a batch; its sequence number, or `None` (and a warning) when the
/// disk refuses: the batch then waits in memory only.
pub fn insert(conn: &Connection, batch: &Batch) -> Option<i64> {
    let rows = serde_json::to_string(&batch.rows).ok()?;
    let written = conn.execute(
        "INSERT INTO spool (tenant, conversation, rows) VALUES (?1, ?2, ?3)",
        params![batch.key.tenant, batch.key.conversation, rows],
    );
    match written {
        Ok(_) => Some(conn.last_insert_rowid()),
        Err(e) => {
            tracing::warn!(target: "foldgate::archive", error = %e, "spool file not written; the batch waits in memory only");
            None
        }
    }
}

/// Deletes a batch the backend stored.
pub fn delete(conn: &Connection, seq: i64) {
    if let Err(e) = conn.execute("DELETE FROM spool WHERE seq = ?1", params![seq]) {
        tracing::warn!(target: "foldgate::archive", seq, error = %e, "stored batch not deleted from the spool file; a restart replays it again (searches count it once)");
    }
}
