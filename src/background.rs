//! Background folds: at most one fold job in flight per conversation, at
//! most one more pending after it (never a queue), detached from the
//! client's connection, tracked so shutdown can await them. After a failed
//! fold, the conversation's next non-emergency fold waits a growing
//! backoff, so a weak or overloaded summarizer is not asked again on every
//! turn.
//!
//! Jobs are opaque futures: this module knows conversations, not requests,
//! so it sits below the chat pipeline that makes the jobs. A job that
//! panics runs in a task of its own: the panic is logged, the slot moves on
//! to the pending job or is released, and shutdown does not wait for it.

use crate::state::ConvKey;
use backon::{BackoffBuilder, ExponentialBuilder};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::task::TaskTracker;

/// Conversations with recent failures kept before expired ones are swept.
const MAX_BACKOFFS: usize = 4096;

/// The failure backoff's cap, as doublings of its base (32 × base).
const MAX_DOUBLINGS: u32 = 5;

/// One fold, ready to run.
pub type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// The background folds of this process.
#[derive(Default)]
pub struct Background {
    /// Conversations with a job running; the value is the newest job asked
    /// for meanwhile.
    slots: Arc<Mutex<HashMap<ConvKey, Option<Job>>>>,
    tracker: TaskTracker,
    /// Conversations whose last fold failed: failures in a row, and when
    /// the next non-emergency fold may start.
    backoff: Mutex<HashMap<ConvKey, (u32, Instant)>>,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("running", &self.running())
            .finish()
    }
}

impl Background {
    /// Conversations with a fold job running now.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }

    /// Waits until no background fold runs, or `limit` passes. Returns
    /// whether everything finished.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        self.tracker.close();
        let done = tokio::time::timeout(limit, self.tracker.wait())
            .await
            .is_ok();
        self.tracker.reopen();
        done
    }

    /// Runs `job` for the conversation, or, when one of its jobs already
    /// runs, makes `job` the one to run after it (replacing any pending one).
    pub fn start(&self, key: &ConvKey, job: Job) {
        {
            let mut slots = lock(&self.slots);
            if let Some(pending) = slots.get_mut(key) {
                *pending = Some(job);
                return;
            }
            slots.insert(key.clone(), None);
        }
        let mut slot = Slot {
            slots: self.slots.clone(),
            key: key.clone(),
            released: false,
        };
        self.tracker.spawn(async move {
            let mut next = Some(job);
            while let Some(job) = next {
                // Its own task, so a panic ends the job, not this loop.
                if let Err(e) = tokio::spawn(job()).await {
                    tracing::error!(conversation = %slot.key, error = %e, "background fold panicked");
                }
                next = slot.next();
            }
        });
    }

    /// When a job of the conversation runs, makes `job` the pending one and
    /// returns true; false (and `job` is dropped) when none runs.
    pub fn mark_pending(&self, key: &ConvKey, job: Job) -> bool {
        match lock(&self.slots).get_mut(key) {
            Some(pending) => {
                *pending = Some(job);
                true
            }
            None => false,
        }
    }

    /// Whether a job of the conversation runs now.
    pub fn is_running(&self, key: &ConvKey) -> bool {
        lock(&self.slots).contains_key(key)
    }

    /// Whether the conversation's last fold failed too recently for a
    /// non-emergency fold to start now.
    pub fn backing_off(&self, key: &ConvKey) -> bool {
        lock(&self.backoff)
            .get(key)
            .is_some_and(|&(_, until)| Instant::now() < until)
    }

    /// The conversation's failed folds in a row since its last success (as
    /// long as this process remembers them), and how long its next
    /// non-emergency fold still waits.
    pub fn failures(&self, key: &ConvKey) -> Option<(u32, Duration)> {
        lock(&self.backoff)
            .get(key)
            .map(|&(n, until)| (n, until.saturating_duration_since(Instant::now())))
    }

    /// Records a failed fold: the wait is `base`, doubled with each failure
    /// in a row, at most 32 × `base`.
    pub fn record_failure(&self, key: &ConvKey, base: Duration) {
        let mut backoff = lock(&self.backoff);
        if backoff.len() >= MAX_BACKOFFS {
            let now = Instant::now();
            backoff.retain(|_, &mut (_, until)| until > now);
        }
        let failures = backoff.get(key).map_or(1, |&(n, _)| n.saturating_add(1));
        let wait = failure_wait(base, failures);
        backoff.insert(key.clone(), (failures, Instant::now() + wait));
    }

    /// A successful fold resets the conversation's backoff.
    pub fn record_success(&self, key: &ConvKey) {
        lock(&self.backoff).remove(key);
    }
}

/// The wait after `failures` failed folds in a row (at least one): `base`,
/// doubled with each further failure, at most 32 × `base`. No jitter: one
/// conversation's folds never fail in step with another's.
fn failure_wait(base: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(MAX_DOUBLINGS);
    ExponentialBuilder::default()
        .with_min_delay(base)
        .with_max_delay(base.saturating_mul(1 << MAX_DOUBLINGS))
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(doublings as usize)
        .unwrap_or(base)
}

/// A conversation's claim on running jobs. Released in the same critical
/// section that finds no pending job (so no job asked for meanwhile is
/// lost), or when dropped unreleased, so even a driver that unwinds frees
/// the conversation for later folds.
struct Slot {
    slots: Arc<Mutex<HashMap<ConvKey, Option<Job>>>>,
    key: ConvKey,
    released: bool,
}

impl Slot {
    /// The pending job to run next, or `None` after releasing the slot.
    fn next(&mut self) -> Option<Job> {
        let mut slots = lock(&self.slots);
        let job = slots.get_mut(&self.key).and_then(Option::take);
        if job.is_none() {
            slots.remove(&self.key);
            self.released = true;
        }
        job
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.released {
            lock(&self.slots).remove(&self.key);
        }
    }
}

/// A poisoned lock still holds consistent data here: every critical section
/// is a single map operation.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn key(id: &str) -> ConvKey {
        ConvKey {
            tenant: "t".into(),
            conversation: id.into(),
        }
    }

    fn job(f: impl Future<Output = ()> + Send + 'static) -> Job {
        Box::new(move || Box::pin(f))
    }

    #[tokio::test]
    async fn one_running_one_pending_the_newest_wins() {
        let bg = Background::default();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(tokio::sync::Notify::new());
        let record = |n: u32, wait: bool| {
            let (ran, gate) = (ran.clone(), gate.clone());
            job(async move {
                if wait {
                    gate.notified().await;
                }
                lock(&ran).push(n);
            })
        };
        bg.start(&key("a"), record(1, true));
        bg.start(&key("a"), record(2, false));
        assert!(bg.mark_pending(&key("a"), record(3, false)));
        assert!(!bg.mark_pending(&key("b"), record(9, false)));
        tokio::task::yield_now().await;
        gate.notify_one();
        assert!(bg.wait_idle(Duration::from_secs(5)).await);
        assert_eq!(*lock(&ran), vec![1, 3]);
        assert!(!bg.is_running(&key("a")));
    }

    #[tokio::test]
    async fn a_panicking_job_frees_its_conversation() {
        let bg = Background::default();
        let after = Arc::new(AtomicUsize::new(0));
        bg.start(&key("p"), job(async { panic!("summarizer bug") }));
        let counter = after.clone();
        bg.mark_pending(
            &key("p"),
            job(async move {
                counter.fetch_add(1, Ordering::SeqCst);
            }),
        );
        assert!(bg.wait_idle(Duration::from_secs(5)).await);
        assert_eq!(after.load(Ordering::SeqCst), 1, "the pending job still ran");
        assert!(!bg.is_running(&key("p")));
        // A later fold of the same conversation starts and finishes.
        bg.start(&key("p"), job(async { panic!("again") }));
        assert!(bg.wait_idle(Duration::from_secs(5)).await);
        let counter = after.clone();
        bg.start(
            &key("p"),
            job(async move {
                counter.fetch_add(1, Ordering::SeqCst);
            }),
        );
        assert!(bg.wait_idle(Duration::from_secs(5)).await);
        assert_eq!(after.load(Ordering::SeqCst), 2);
        assert_eq!(bg.running(), 0);
    }

    #[test]
    fn backoff_doubles_and_resets() {
        let bg = Background::default();
        let k = key("b");
        assert!(!bg.backing_off(&k));
        bg.record_failure(&k, Duration::from_secs(60));
        assert!(bg.backing_off(&k));
        bg.record_success(&k);
        assert!(!bg.backing_off(&k));
        bg.record_failure(&k, Duration::ZERO);
        assert!(!bg.backing_off(&k), "a zero backoff never blocks");
    }

    #[test]
    fn failure_wait_doubles_up_to_32_times_base() {
        let base = Duration::from_secs(30);
        let waits: Vec<u64> = (1..=9).map(|n| failure_wait(base, n).as_secs()).collect();
        assert_eq!(waits, [30, 60, 120, 240, 480, 960, 960, 960, 960]);
        assert_eq!(failure_wait(base, u32::MAX), base * 32);
        assert_eq!(failure_wait(Duration::ZERO, 7), Duration::ZERO);
        assert_eq!(
            failure_wait(Duration::from_millis(250), 3),
            Duration::from_secs(1)
        );
        // Saturates rather than overflowing on an absurd base.
        assert_eq!(failure_wait(Duration::MAX, 3), Duration::MAX);
    }

    #[test]
    fn failures_count_and_wait_grows() {
        let bg = Background::default();
        let k = key("c");
        for n in 1..=3 {
            bg.record_failure(&k, Duration::from_secs(60));
            let (count, wait) = bg.failures(&k).unwrap();
            assert_eq!(count, n);
            assert!(wait > Duration::from_secs(60 << (n - 1)) - Duration::from_secs(1));
            assert!(wait <= Duration::from_secs(60 << (n - 1)));
        }
    }
}
