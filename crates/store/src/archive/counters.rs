//! The archive's counters. The server's Prometheus registry exports them
//! (`foldgate_archive_*`, src/metrics.rs hands clones of its own counters
//! in); a clone counts into the same atomic.

use prometheus_client::metrics::counter::Counter;

/// What the archive counts as it takes and replays rows.
#[derive(Clone, Debug, Default)]
pub struct ArchiveCounters {
    /// Rows the backend refused at first and the spool kept.
    pub spooled: Counter,
    /// Spooled rows the backend took once it answered again.
    pub replayed: Counter,
    /// Rows handed to the archive (queued), by what removed the message
    /// from the view: `[fold, compress]`.
    pub rows: [Counter; 2],
}
