//! foldgate's store: fold states with per-conversation single-flight, and
//! the archive of every message a fold removed from the view — in memory,
//! SQLite or Redis (standalone, Cluster, Sentinel). Stands on
//! `foldgate-core` only (docs/architecture.md).

pub mod archive;
pub mod state;

use foldgate_core::{config, fold, message, stem};
