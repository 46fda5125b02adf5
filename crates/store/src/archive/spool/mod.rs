//! The archive's spool: writes a remote backend has not taken yet, oldest
//! first, bounded in bytes. Every write passes through it, so a write is
//! searchable from the moment it is queued, an outage changes nothing but
//! how long a batch waits, and the order the backend sees is the order the
//! folds made. A batch leaves the spool only once the backend stored it.
//! The batches are in memory; with `archive.spool_path`, those the backend
//! refused are also kept on disk ([`disk`]) and replayed after a restart.

mod disk;

use super::ArchiveCounters;
use super::Row;
use crate::state::ConvKey;
use crate::state::StoreError;
use rusqlite::Connection;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// One write: rows of one conversation, as one fold or compression made them.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub key: ConvKey,
    pub rows: Vec<Row>,
    /// Whether the backend refused it (or an older batch) once: a batch
    /// that waited through an outage counts as replayed when it lands.
    spooled: bool,
    /// Its sequence number in the spool file, once written there.
    saved: Option<i64>,
}

impl Batch {
    fn bytes(&self) -> u64 {
        self.rows.iter().map(Row::weight).sum()
    }
}

/// The spool cannot take a batch without passing its bound: the caller
/// must not drop the messages it holds (a fold is not made instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the archive spool is full ({depth} of {bound} bytes queued while the archive backend is unreachable)"
)]
pub struct SpoolFull {
    pub depth: u64,
    pub bound: u64,
}

/// Queued archive writes.
#[derive(Debug)]
pub struct Spool {
    inner: Mutex<Inner>,
    bound: u64,
    counters: ArchiveCounters,
    /// Wakes the writer when a batch is queued.
    pub wake: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Inner {
    queue: VecDeque<Batch>,
    bytes: u64,
    /// The backend refused the head batch and has not taken one since.
    down: bool,
    /// The spool file, with `archive.spool_path`.
    disk: Option<Connection>,
}

impl Inner {
    /// Marks a batch as waiting for the backend: counted, and on disk.
    fn spool(&mut self, at: usize, counters: &ArchiveCounters) {
        let Some(batch) = self.queue.get_mut(at) else {
            return;
        };
        if !batch.spooled {
            batch.spooled = true;
            let rows = batch.rows.len() as u64;
            counters.spooled.inc_by(rows);
        }
        if let (None, Some(conn)) = (batch.saved, &self.disk) {
            batch.saved = disk::insert(conn, batch);
        }
    }
}

impl Spool {
    /// An empty spool in memory holding at most `bound` bytes of rows.
    pub fn new(bound: u64, counters: ArchiveCounters) -> Self {
        Self {
            inner: Mutex::default(),
            bound,
            counters,
            wake: tokio::sync::Notify::new(),
        }
    }

    /// A spool kept on disk at `path` too (when given), holding what the
    /// file held: batches a previous run could not hand the backend, to be
    /// replayed first (they count as spooled).
    pub fn open(
        bound: u64,
        path: Option<&Path>,
        counters: ArchiveCounters,
    ) -> Result<Self, StoreError> {
        let spool = Self::new(bound, counters);
        let Some(path) = path else {
            return Ok(spool);
        };
        let (conn, saved) = disk::open(path)?;
        {
            let mut inner = spool.lock();
            for (seq, key, rows) in saved {
                let batch = Batch {
                    key,
                    rows,
                    spooled: false,
                    saved: Some(seq),
                };
                inner.bytes += batch.bytes();
                inner.queue.push_back(batch);
                let at = inner.queue.len() - 1;
                inner.spool(at, &spool.counters);
            }
            if !inner.queue.is_empty() {
                tracing::info!(target: "foldgate::archive", batches = inner.queue.len(), path = %path.display(), "spooled archive rows found: replaying");
            }
            inner.disk = Some(conn);
        }
        Ok(spool)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a batch behind every older one, or refuses it whole when it
    /// would pass the bound (an empty spool takes any one batch, so a
    /// single fold larger than the bound is not refused forever while the
    /// backend is up).
    pub fn push(&self, key: &ConvKey, rows: Vec<Row>) -> Result<(), SpoolFull> {
        let batch = Batch {
            key: key.clone(),
            rows,
            spooled: false,
            saved: None,
        };
        let bytes = batch.bytes();
        let mut inner = self.lock();
        self.admits(&inner, || bytes)?;
        inner.bytes += bytes;
        inner.queue.push_back(batch);
        if inner.down {
            let at = inner.queue.len() - 1;
            inner.spool(at, &self.counters);
        }
        drop(inner);
        self.wake.notify_one();
        Ok(())
    }

    /// Whether a batch of `bytes` rows would be queued now: a check before
    /// costly work whose rows [`Spool::push`] must take later. `bytes` is
    /// only asked for when the spool is not empty.
    pub fn room(&self, bytes: impl FnOnce() -> u64) -> Result<(), SpoolFull> {
        self.admits(&self.lock(), bytes)
    }

    /// The bound, the one rule: an empty spool takes any one batch, else
    /// the rows must fit beside the queued ones.
    fn admits(&self, inner: &Inner, bytes: impl FnOnce() -> u64) -> Result<(), SpoolFull> {
        if inner.queue.is_empty() || inner.bytes.saturating_add(bytes()) <= self.bound {
            return Ok(());
        }
        Err(SpoolFull {
            depth: inner.bytes,
            bound: self.bound,
        })
    }

    /// The oldest batches, up to `max`, to hand the backend in one go.
    pub fn head(&self, max: usize) -> Vec<Batch> {
        self.lock().queue.iter().take(max).cloned().collect()
    }

    /// The backend stored the `n` oldest batches: they leave the spool.
    pub fn stored(&self, n: usize) {
        let mut inner = self.lock();
        for _ in 0..n {
            let Some(batch) = inner.queue.pop_front() else {
                break;
            };
            inner.bytes = inner.bytes.saturating_sub(batch.bytes());
            if batch.spooled {
                let rows = batch.rows.len() as u64;
                self.counters.replayed.inc_by(rows);
            }
            if let (Some(seq), Some(conn)) = (batch.saved, &inner.disk) {
                disk::delete(conn, seq);
            }
        }
        inner.down = false;
    }

    /// The backend refused the oldest batches: everything queued now waits
    /// for it to return, and counts as spooled once.
    pub fn refused(&self) {
        let mut inner = self.lock();
        inner.down = true;
        for at in 0..inner.queue.len() {
            inner.spool(at, &self.counters);
        }
    }

    /// The conversation's queued rows, oldest first.
    pub fn rows(&self, key: &ConvKey) -> Vec<Row> {
        self.lock()
            .queue
            .iter()
            .filter(|b| &b.key == key)
            .flat_map(|b| b.rows.iter().cloned())
            .collect()
    }

    /// Tenants with queued rows of this conversation id.
    pub fn tenants(&self, conversation: &str) -> Vec<String> {
        self.lock()
            .queue
            .iter()
            .filter(|b| b.key.conversation == conversation)
            .map(|b| b.key.tenant.clone())
            .collect()
    }

    /// Whether the backend refused the last write (an outage).
    pub fn backend_down(&self) -> bool {
        self.lock().down
    }

    /// Whether the refused batches are kept on disk too.
    pub fn on_disk(&self) -> bool {
        self.lock().disk.is_some()
    }

    /// Rows and bytes queued.
    pub fn depth(&self) -> (u64, u64) {
        let inner = self.lock();
        let rows = inner.queue.iter().map(|b| b.rows.len() as u64).sum();
        (rows, inner.bytes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(conversation: &str) -> ConvKey {
        ConvKey {
            tenant: "t".into(),
            conversation: conversation.into(),
        }
    }

    /// A row whose text is `text`, at `position`.
    fn row(position: usize, text: &str) -> Row {
        let message = json!({"role": "user", "content": text});
        Row::of(position, &message, position as u128, "fold-1", "chat", 0)
    }

    fn spool(bound: u64) -> (Spool, ArchiveCounters) {
        let counters = ArchiveCounters::default();
        (Spool::new(bound, counters.clone()), counters)
    }

    fn positions(batches: &[Batch]) -> Vec<usize> {
        batches
            .iter()
            .flat_map(|b| b.rows.iter().map(|r| r.position))
            .collect()
    }

    #[test]
    fn batches_leave_in_the_order_they_came_and_only_once_stored() {
        let (spool, _) = spool(1 << 20);
        for i in 0..5 {
            spool
                .push(&key("c"), vec![row(2 * i, "a"), row(2 * i + 1, "b")])
                .unwrap();
        }
        assert_eq!(positions(&spool.head(2)), [0, 1, 2, 3]);
        // A refused write keeps everything where it was.
        spool.refused();
        assert_eq!(positions(&spool.head(10)), (0..10).collect::<Vec<_>>());
        spool.stored(2);
        assert_eq!(positions(&spool.head(10)), [4, 5, 6, 7, 8, 9]);
        // Pushed during the outage: behind the older ones.
        spool.push(&key("c"), vec![row(10, "c")]).unwrap();
        assert_eq!(positions(&spool.head(10)), [4, 5, 6, 7, 8, 9, 10]);
        spool.stored(10);
        assert!(spool.head(10).is_empty());
        assert_eq!(spool.depth(), (0, 0));
    }

    #[test]
    fn a_batch_past_the_bound_is_refused_whole_and_nothing_else_changes() {
        let one = row(0, "0123456789").weight();
        let (spool, _) = spool(3 * one);
        spool.push(&key("c"), vec![row(0, "0123456789")]).unwrap();
        spool
            .push(&key("c"), vec![row(1, "0123456789"), row(2, "0123456789")])
            .unwrap();
        assert_eq!(spool.depth(), (3, 3 * one));
        let full = spool
            .push(&key("c"), vec![row(3, "0123456789")])
            .unwrap_err();
        assert_eq!(
            full,
            SpoolFull {
                depth: 3 * one,
                bound: 3 * one
            }
        );
        assert_eq!(spool.depth(), (3, 3 * one), "the refused batch left no row");
        assert_eq!(positions(&spool.head(10)), [0, 1, 2]);
        // Room again once the backend took the oldest.
        spool.stored(1);
        spool.push(&key("c"), vec![row(3, "0123456789")]).unwrap();
        assert_eq!(positions(&spool.head(10)), [1, 2, 3]);
    }

    #[test]
    fn an_empty_spool_takes_one_batch_larger_than_the_bound() {
        let (spool, _) = spool(10);
        spool
            .push(&key("c"), vec![row(0, "far more than ten bytes")])
            .unwrap();
        assert!(spool.push(&key("c"), vec![row(1, "x")]).is_err());
    }

    #[test]
    fn rows_refused_by_the_backend_count_as_spooled_then_replayed() {
        let (spool, counters) = spool(1 << 20);
        spool.push(&key("c"), vec![row(0, "a")]).unwrap();
        spool.stored(1);
        let spooled = || counters.spooled.get();
        let replayed = || counters.replayed.get();
        assert_eq!(
            (spooled(), replayed()),
            (0, 0),
            "a write that landed is neither"
        );
        spool
            .push(&key("c"), vec![row(1, "a"), row(2, "b")])
            .unwrap();
        spool.refused();
        spool.refused();
        assert_eq!(spooled(), 2, "counted once however often refused");
        spool.push(&key("c"), vec![row(3, "c")]).unwrap();
        assert_eq!(spooled(), 3, "queued while the backend is down");
        spool.stored(2);
        assert_eq!(replayed(), 3);
        spool.push(&key("c"), vec![row(4, "d")]).unwrap();
        spool.stored(1);
        assert_eq!((spooled(), replayed()), (3, 3), "back to normal");
    }

    #[test]
    fn refused_batches_outlive_a_restart_in_the_spool_file_until_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.db");
        let counters = ArchiveCounters::default();
        let open = || Spool::open(1 << 20, Some(&path), counters.clone()).unwrap();
        let spool = open();
        spool.push(&key("c"), vec![row(0, "a")]).unwrap();
        spool.stored(1);
        spool
            .push(&key("c"), vec![row(1, "b"), row(2, "c")])
            .unwrap();
        spool.refused();
        spool.push(&key("d"), vec![row(3, "d")]).unwrap();
        drop(spool);

        let spool = open();
        assert_eq!(
            positions(&spool.head(10)),
            [1, 2, 3],
            "what waited, in order"
        );
        assert_eq!(spool.rows(&key("d")).len(), 1);
        spool.stored(1);
        drop(spool);
        let spool = open();
        assert_eq!(positions(&spool.head(10)), [3]);
        spool.stored(1);
        drop(spool);
        assert!(open().head(10).is_empty(), "stored batches leave the file");
    }

    #[test]
    fn searches_see_each_conversations_queued_rows_only() {
        let (spool, _) = spool(1 << 20);
        spool.push(&key("a"), vec![row(0, "alpha")]).unwrap();
        spool.push(&key("b"), vec![row(0, "beta")]).unwrap();
        spool.push(&key("a"), vec![row(1, "gamma")]).unwrap();
        let texts: Vec<String> = spool.rows(&key("a")).into_iter().map(|r| r.text).collect();
        assert_eq!(texts, ["alpha", "gamma"]);
        assert_eq!(spool.tenants("b"), ["t"]);
        assert!(spool.tenants("z").is_empty());
    }
}
