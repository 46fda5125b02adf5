//! Background folds: at most one fold in flight per conversation, at most
//! one more pending after it (never a queue), detached from the client's
//! connection, and awaited at shutdown. After a failed fold, the
//! conversation's next non-emergency fold waits a growing backoff, so a
//! weak or overloaded summarizer is not asked again on every turn.

use super::fold_run::Started;
use super::turn::Turn;
use crate::state::ConvKey;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Conversations with recent failures kept before expired ones are swept.
const MAX_BACKOFFS: usize = 4096;

/// The background folds of this process.
#[derive(Default)]
pub struct Background {
    /// Conversations with a fold running; the value is the newest request
    /// that asked for another fold meanwhile.
    slots: Mutex<HashMap<ConvKey, Option<Turn>>>,
    running: AtomicUsize,
    idle: Notify,
    /// Conversations whose last fold failed: failures in a row, and when
    /// the next non-emergency fold may start.
    backoff: Mutex<HashMap<ConvKey, (u32, Instant)>>,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("running", &self.running.load(Ordering::Relaxed))
            .finish()
    }
}

impl Background {
    /// Folds running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Waits until no background fold runs, or `limit` passes. Returns
    /// whether everything finished.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.idle.notified();
                if self.running() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }

    /// Whether the conversation's last fold failed too recently for a
    /// non-emergency fold to start now.
    pub fn backing_off(&self, key: &ConvKey) -> bool {
        let backoff = self.backoff.lock().unwrap_or_else(|p| p.into_inner());
        backoff
            .get(key)
            .is_some_and(|&(_, until)| Instant::now() < until)
    }

    /// Records a failed fold: the wait is `base`, doubled with each failure
    /// in a row, at most 32 × `base`.
    pub fn record_failure(&self, key: &ConvKey, base: Duration) {
        let mut backoff = self.backoff.lock().unwrap_or_else(|p| p.into_inner());
        if backoff.len() >= MAX_BACKOFFS {
            let now = Instant::now();
            backoff.retain(|_, &mut (_, until)| until > now);
        }
        let failures = backoff.get(key).map_or(1, |&(n, _)| n.saturating_add(1));
        let wait = base.saturating_mul(1 << (failures - 1).min(5));
        backoff.insert(key.clone(), (failures, Instant::now() + wait));
    }

    /// A successful fold resets the conversation's backoff.
    pub fn record_success(&self, key: &ConvKey) {
        let mut backoff = self.backoff.lock().unwrap_or_else(|p| p.into_inner());
        backoff.remove(key);
    }

    /// Claims the conversation for a new fold, or records `turn` as the
    /// pending one when a fold already runs. True when the caller must
    /// start the fold.
    fn claim(&self, key: &ConvKey, turn: &Turn) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        match slots.get_mut(key) {
            Some(pending) => {
                *pending = Some(turn.clone());
                false
            }
            None => {
                slots.insert(key.clone(), None);
                true
            }
        }
    }

    /// Records `turn` as the pending one when a fold of the conversation
    /// runs; false when none runs.
    fn mark_pending(&self, key: &ConvKey, turn: &Turn) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        match slots.get_mut(key) {
            Some(pending) => {
                *pending = Some(turn.clone());
                true
            }
            None => false,
        }
    }

    /// The pending turn to fold next, or `None` after releasing the slot.
    fn next(&self, key: &ConvKey) -> Option<Turn> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        match slots.get_mut(key).and_then(Option::take) {
            Some(turn) => Some(turn),
            None => {
                slots.remove(key);
                None
            }
        }
    }
}

impl Turn {
    /// When a background fold of this conversation runs, makes this request
    /// the one to fold after it and returns true.
    pub(super) fn mark_pending(&self) -> bool {
        match &self.data.key {
            Some(key) => self.app.chat.background.mark_pending(key, self),
            None => false,
        }
    }

    /// Starts a background fold of this request's history (or marks one
    /// pending when a fold of the conversation already runs).
    pub(super) fn start_background(&self) {
        let Some(key) = self.data.key.clone() else {
            return;
        };
        let background = &self.app.chat.background;
        if !background.claim(&key, self) {
            return;
        }
        background.running.fetch_add(1, Ordering::Relaxed);
        let mut turn = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = turn.fold_locked(Started::Background, None).await {
                    tracing::warn!(conversation = %key, error = %e, "background fold failed");
                }
                match turn.app.chat.background.next(&key) {
                    Some(pending) => turn = pending,
                    None => break,
                }
            }
            let background = &turn.app.chat.background;
            background.running.fetch_sub(1, Ordering::Relaxed);
            background.idle.notify_waiters();
        });
    }
}
