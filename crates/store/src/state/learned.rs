//! The context windows a running proxy learned from upstreams'
//! context-length errors and kept in the state store, read by a command
//! that runs no proxy (`foldgate estimate`), so it counts against the same
//! window the proxy would.

use super::{RedisStore, Store, StoreError, sqlite};
use crate::config::{StateBackend, StateConfig};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::path::Path;

/// Every window kept in the configured store, `(model, window)`: none for
/// the memory backend or a SQLite file that does not exist yet (it is not
/// created). A Redis that does not answer within `state.timeout` reads
/// as none. The SQLite file is read on the calling thread: for commands,
/// not for the request path.
pub async fn windows(config: &StateConfig) -> Result<Vec<(String, u32)>, StoreError> {
    match config.backend {
        StateBackend::Memory => Ok(Vec::new()),
        StateBackend::Sqlite => {
            from_file(&config.path).map_err(|e| StoreError::from(e).at("state.path", &config.path))
        }
        StateBackend::Redis => Ok(RedisStore::open(config)?.windows().await),
    }
}

/// The windows kept in the SQLite file at `path`, opened read-only.
fn from_file(path: &Path) -> rusqlite::Result<Vec<(String, u32)>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // A database from before windows were kept has no such table.
    let table: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'windows'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    match table {
        Some(_) => sqlite::db::windows(&conn),
        None => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_what_the_store_kept_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/foldgate.db");
        let mut config = StateConfig {
            backend: StateBackend::Sqlite,
            path: path.clone(),
            ..StateConfig::default()
        };
        assert!(windows(&config).await.unwrap().is_empty());
        assert!(!path.exists(), "estimating creates no database");

        let conn = sqlite::db::open(&path).unwrap();
        sqlite::db::save_window(&conn, "local-model", 8192, 1).unwrap();
        drop(conn);
        assert_eq!(
            windows(&config).await.unwrap(),
            [("local-model".to_string(), 8192)]
        );
        config.backend = StateBackend::Memory;
        assert!(windows(&config).await.unwrap().is_empty());
    }
}
