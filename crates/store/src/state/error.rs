//! What can go wrong opening, migrating, writing or pruning a store (the
//! fold states' or the archive's). The messages name the configuration
//! key at fault, as the start-up and `foldgate prune` errors print them.

use crate::config::StateBackend;
use std::path::PathBuf;

/// A store that cannot be opened, migrated, written or pruned.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database's directory could not be created.
    #[error("{key}: cannot create {}: {source}", dir.display())]
    CreateDir {
        /// The configuration key of the path.
        key: &'static str,
        dir: PathBuf,
        source: std::io::Error,
    },
    /// The database file could not be opened.
    #[error("{key}: cannot open {}: {source}", path.display())]
    Open {
        /// The configuration key of the path.
        key: &'static str,
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// Something failed on the database at `path`.
    #[error("{key} {}: {source}", path.display())]
    At {
        /// The configuration key of the path.
        key: &'static str,
        path: PathBuf,
        source: Box<StoreError>,
    },
    /// The database was written by a newer foldgate.
    #[error(
        "schema version {found} is newer than this foldgate's ({version}); use a newer foldgate or another {key}"
    )]
    NewerSchema {
        /// The configuration key of the path.
        key: &'static str,
        found: i64,
        version: i64,
    },
    /// A schema step (counted from 1) failed.
    #[error("migration {step}: {source}")]
    Migration {
        step: usize,
        source: rusqlite::Error,
    },
    /// A statement failed.
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    /// A value could not be encoded for storage.
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
    /// The backend's writer thread could not start (`what`: `state` or
    /// `archive`).
    #[error("{what}: cannot start the SQLite thread: {source}")]
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
    /// `state.url` is not a Redis URL.
    #[error("state.url: {0}")]
    RedisUrl(#[from] redis::RedisError),
    /// A Redis store was opened outside the Tokio runtime.
    #[error("{0} must be opened inside the Tokio runtime")]
    NoRuntime(&'static str),
    /// `foldgate prune` on a backend that keeps nothing to prune.
    #[error(
        "prune works on state.backend = \"sqlite\"; {0:?} states expire after state.ttl on their own"
    )]
    NothingToPrune(StateBackend),
}

impl StoreError {
    /// `self`, as it happened on the database at `path` (key `key`).
    pub(crate) fn at(self, key: &'static str, path: &std::path::Path) -> Self {
        Self::At {
            key,
            path: path.to_path_buf(),
            source: Box::new(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_key_and_path() {
        let newer = StoreError::NewerSchema {
            key: "state.path",
            found: 3,
            version: 2,
        }
        .at("state.path", std::path::Path::new("/d/s.db"));
        assert_eq!(
            newer.to_string(),
            "state.path /d/s.db: schema version 3 is newer than this foldgate's (2); use a newer foldgate or another state.path"
        );
        assert_eq!(
            StoreError::NothingToPrune(StateBackend::Redis).to_string(),
            "prune works on state.backend = \"sqlite\"; Redis states expire after state.ttl on their own"
        );
        assert_eq!(
            StoreError::NoRuntime("the Redis archive").to_string(),
            "the Redis archive must be opened inside the Tokio runtime"
        );
    }
}
