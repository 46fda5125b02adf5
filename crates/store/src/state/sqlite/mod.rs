//! The SQLite store: durable across restarts, with every fold kept for
//! audit. Reads are answered by the in-process layer; the database is
//! touched only on a miss, and every query runs on one dedicated thread
//! (never on an async worker). Writes are queued to that thread and the
//! request does not wait for them: the in-process layer already answers
//! with the new state, and the queue is drained when the store is dropped.
//!
//! One process per database file: the in-process layer trusts that no one
//! else writes the file while foldgate runs (`foldgate prune` only deletes
//! rows of idle conversations).

pub mod db;
#[cfg(test)]
mod tests;

use super::hot::Hot;
use super::{BoxFuture, ConvKey, Flights, FoldGuard, ListQuery, Page, Store};
use crate::config::StateConfig;
use crate::fold::FoldChain;
use crate::state::StoreError;
use rusqlite::Connection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// How long a request waits for a database read before going on without
/// the state (it is a cache: the cost is a re-summarization).
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the worker deletes idle states and recounts.
const HOUSEKEEPING: Duration = Duration::from_secs(60);
/// Writes applied in one transaction at most.
const BATCH: usize = 512;

/// Work for the database thread.
enum Cmd {
    Load {
        key: ConvKey,
        reply: oneshot::Sender<Option<FoldChain>>,
    },
    Find {
        conversation: String,
        reply: oneshot::Sender<Vec<(ConvKey, FoldChain)>>,
    },
    List {
        query: ListQuery,
        reply: oneshot::Sender<Page>,
    },
    Save {
        key: ConvKey,
        chain: Arc<FoldChain>,
        at: i64,
    },
    Touch {
        key: ConvKey,
        at: i64,
    },
    Flush {
        reply: oneshot::Sender<()>,
    },
    SaveWindow {
        model: String,
        window: u32,
        at: i64,
    },
    Windows {
        reply: oneshot::Sender<Vec<(String, u32)>>,
    },
}

/// Fold chains in a SQLite file, behind the in-process layer.
#[derive(Debug)]
pub struct SqliteStore {
    hot: Hot,
    flights: Flights,
    tx: Option<mpsc::Sender<Cmd>>,
    worker: Option<std::thread::JoinHandle<()>>,
    stored: Arc<AtomicU64>,
    /// A cached conversation's `used_at` is refreshed this often at most.
    touch_every: Duration,
}

impl SqliteStore {
    /// Opens (creating and migrating) the database at `state.path`.
    pub fn open(config: &StateConfig) -> Result<Self, StoreError> {
        let conn = db::open(&config.path)?;
        let stored = Arc::new(AtomicU64::new(db::count(&conn).unwrap_or(0)));
        let (tx, rx) = mpsc::channel();
        let ttl = i64::try_from(config.ttl.as_secs()).unwrap_or(i64::MAX);
        let count = stored.clone();
        let worker = std::thread::Builder::new()
            .name("foldgate-sqlite".into())
            .spawn(move || run(conn, rx, ttl, &count))
            .map_err(|source| StoreError::Thread {
                what: "state",
                source,
            })?;
        tracing::info!(target: "foldgate::state", path = %config.path.display(), "fold states in SQLite");
        Ok(Self {
            hot: Hot::new(config),
            flights: Flights::default(),
            tx: Some(tx),
            worker: Some(worker),
            stored,
            touch_every: (config.ttl / 8).min(Duration::from_secs(3600)),
        })
    }

    fn send(&self, cmd: Cmd) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(cmd).is_ok())
    }

    /// Sends a read to the database thread and waits for the answer, at
    /// most [`READ_TIMEOUT`]; `None` when the thread is gone or late (the
    /// caller answers from the in-process layer).
    async fn ask<T>(&self, cmd: impl FnOnce(oneshot::Sender<T>) -> Cmd) -> Option<T> {
        let (reply, rx) = oneshot::channel();
        if !self.send(cmd(reply)) {
            return None;
        }
        tokio::time::timeout(READ_TIMEOUT, rx).await.ok()?.ok()
    }

    /// Waits until every queued write is committed.
    pub async fn flush(&self) {
        let (reply, rx) = oneshot::channel();
        if self.send(Cmd::Flush { reply }) {
            let _ = rx.await;
        }
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the queue lets the worker commit what is left, then exit.
        drop(self.tx.take());
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Store for SqliteStore {
    fn load<'a>(&'a self, key: &'a ConvKey) -> BoxFuture<'a, Option<Arc<FoldChain>>> {
        Box::pin(async move {
            if let Some(slot) = self.hot.get(key) {
                if slot.chain.is_some() && slot.synced.elapsed() >= self.touch_every {
                    self.send(Cmd::Touch {
                        key: key.clone(),
                        at: now_unix(),
                    });
                    self.hot.put(key, slot.chain.clone());
                }
                return slot.chain;
            }
            let (reply, rx) = oneshot::channel();
            if !self.send(Cmd::Load {
                key: key.clone(),
                reply,
            }) {
                return None;
            }
            match tokio::time::timeout(READ_TIMEOUT, rx).await {
                Ok(Ok(chain)) => self.hot.fill(key, chain.map(Arc::new)),
                _ => {
                    tracing::warn!(target: "foldgate::state", conversation = %key, "SQLite read timed out; going on without a state");
                    None
                }
            }
        })
    }

    fn save<'a>(&'a self, key: &'a ConvKey, chain: Arc<FoldChain>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.hot.put(key, Some(chain.clone()));
            self.send(Cmd::Save {
                key: key.clone(),
                chain,
                at: now_unix(),
            });
        })
    }

    fn lock<'a>(&'a self, key: &'a ConvKey) -> BoxFuture<'a, FoldGuard> {
        Box::pin(async move { Box::new(self.flights.lock(key).await) as FoldGuard })
    }

    fn find<'a>(&'a self, conversation: &'a str) -> BoxFuture<'a, Vec<(ConvKey, Arc<FoldChain>)>> {
        Box::pin(async move {
            let cmd = |reply| Cmd::Find {
                conversation: conversation.to_string(),
                reply,
            };
            match self.ask(cmd).await {
                Some(found) => found.into_iter().map(|(k, c)| (k, Arc::new(c))).collect(),
                None => self.hot.find(conversation),
            }
        })
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Page> {
        Box::pin(async move {
            let cmd = |reply| Cmd::List {
                query: query.clone(),
                reply,
            };
            match self.ask(cmd).await {
                Some(page) => page,
                None => self.hot.list(query),
            }
        })
    }

    fn count(&self) -> u64 {
        self.stored.load(Ordering::Relaxed)
    }

    fn cached_bytes(&self) -> u64 {
        self.hot.bytes()
    }

    fn save_window<'a>(&'a self, model: &'a str, window: u32) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.send(Cmd::SaveWindow {
                model: model.to_owned(),
                window,
                at: now_unix(),
            });
        })
    }

    fn windows(&self) -> BoxFuture<'_, Vec<(String, u32)>> {
        Box::pin(async move {
            self.ask(|reply| Cmd::Windows { reply })
                .await
                .unwrap_or_default()
        })
    }
}

/// The database thread: runs commands in arrival order, batching whatever
/// is queued into one transaction, and deletes idle states now and then.
fn run(mut conn: Connection, rx: mpsc::Receiver<Cmd>, ttl: i64, stored: &AtomicU64) {
    let mut last_housekeeping = Instant::now();
    loop {
        let first = match rx.recv_timeout(HOUSEKEEPING) {
            Ok(cmd) => Some(cmd),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if let Some(first) = first {
            let mut batch = vec![first];
            batch.extend(rx.try_iter().take(BATCH));
            apply(&mut conn, batch, ttl);
        }
        if last_housekeeping.elapsed() >= HOUSEKEEPING {
            last_housekeeping = Instant::now();
            match db::expire(&conn, now_unix().saturating_sub(ttl)) {
                Ok(n) if n > 0 => {
                    tracing::info!(target: "foldgate::state", expired = n, "deleted idle fold states")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: "foldgate::state", error = %e, "SQLite expiry failed")
                }
            }
            if let Ok(n) = db::count(&conn) {
                stored.store(n, Ordering::Relaxed);
            }
        }
    }
}

fn apply(conn: &mut Connection, batch: Vec<Cmd>, ttl: i64) {
    let tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(e) => {
            tracing::warn!(target: "foldgate::state", error = %e, "SQLite transaction failed; dropping {} commands", batch.len());
            return;
        }
    };
    let mut flushed = Vec::new();
    for cmd in batch {
        match cmd {
            Cmd::Load { key, reply } => {
                let chain = db::load(&tx, &key, now_unix().saturating_sub(ttl)).unwrap_or_else(|e| {
                    tracing::warn!(target: "foldgate::state", conversation = %key, error = %e, "SQLite read failed");
                    None
                });
                let _ = reply.send(chain);
            }
            Cmd::Find {
                conversation,
                reply,
            } => {
                let _ = reply.send(db::find(&tx, &conversation).unwrap_or_default());
            }
            Cmd::List { query, reply } => {
                let idle_before = now_unix().saturating_sub(ttl);
                let page = db::list(&tx, &query, idle_before).unwrap_or_else(|e| {
                    tracing::warn!(target: "foldgate::state", error = %e, "SQLite listing failed");
                    Page::default()
                });
                let _ = reply.send(page);
            }
            Cmd::Save { key, chain, at } => {
                if let Err(e) = db::save(&tx, &key, &chain, at) {
                    tracing::warn!(target: "foldgate::state", conversation = %key, error = %e, "SQLite write failed");
                }
            }
            Cmd::Touch { key, at } => {
                if let Err(e) = db::touch(&tx, &key, at) {
                    tracing::warn!(target: "foldgate::state", conversation = %key, error = %e, "SQLite write failed");
                }
            }
            Cmd::Flush { reply } => flushed.push(reply),
            Cmd::SaveWindow { model, window, at } => {
                if let Err(e) = db::save_window(&tx, &model, window, at) {
                    tracing::warn!(target: "foldgate::state", model, error = %e, "SQLite write failed");
                }
            }
            Cmd::Windows { reply } => {
                let _ = reply.send(db::windows(&tx).unwrap_or_else(|e| {
                    tracing::warn!(target: "foldgate::state", error = %e, "SQLite read failed");
                    Vec::new()
                }));
            }
        }
    }
    if let Err(e) = tx.commit() {
        tracing::warn!(target: "foldgate::state", error = %e, "SQLite commit failed");
    }
    for reply in flushed {
        let _ = reply.send(());
    }
}
