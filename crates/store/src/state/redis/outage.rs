//! A Redis outage, told once: the first failed command of a replica's
//! connection to one Redis logs one WARN (what failed, and that the
//! replica runs on its own memory and spools archive writes), every
//! further failure logs at DEBUG, and the first command that succeeds
//! again logs one WARN with the outage's counts (how long, commands
//! failed, commands not sent). The state store and the archive of one
//! process share the tracker of a URL, so an outage of the Redis they
//! share is told once, not once by each. An outage ends once Redis has
//! answered and nothing failed for [`SETTLED`]: on a cluster a master's
//! failover makes some commands fail while others succeed, and that is one
//! outage, not one per success between failures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often a reader tries a Redis known to be down (between, it answers
/// from this replica's memory without waiting for a timeout).
pub(crate) const RETRY_EVERY: Duration = Duration::from_millis(500);

/// How long Redis must answer without a failure for an outage to end.
pub(crate) const SETTLED: Duration = Duration::from_secs(2);

/// Trackers by Redis URL, shared by every user of the URL in this process.
static SHARED: LazyLock<Mutex<HashMap<String, Weak<Outage>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The state of one Redis as this process sees it.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    /// Whether an outage is under way (fast path of [`Outage::answered`]).
    down: AtomicBool,
    /// Commands not sent because Redis was known down.
    skipped: AtomicU64,
    /// Commands that failed, ever (a fold lock's release is sent again
    /// when one fails soon after it: see `lock::confirm`).
    failures: AtomicU64,
    /// The outage under way.
    current: Mutex<Option<Down>>,
}

#[derive(Debug)]
struct Down {
    since: Instant,
    failed: u64,
    last_try: Instant,
    last_failure: Instant,
    /// Whether a command succeeded since the last failure.
    answered: bool,
}

impl Outage {
    /// The tracker of `url`, shared with every other user of it.
    pub(crate) fn shared(url: &str) -> Arc<Self> {
        let Ok(mut shared) = SHARED.lock() else {
            return Arc::new(Self::default());
        };
        shared.retain(|_, w| w.strong_count() > 0);
        if let Some(outage) = shared.get(url).and_then(Weak::upgrade) {
            return outage;
        }
        let outage = Arc::new(Self::default());
        shared.insert(url.to_string(), Arc::downgrade(&outage));
        outage
    }

    /// Whether an outage is under way.
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// A command `op` of `who` (`state`, `archive`) failed with `error`:
    /// the first of an outage is a WARN, the rest DEBUG.
    pub(crate) fn failed(self: &Arc<Self>, who: &'static str, op: &str, error: &str) {
        self.failures.fetch_add(1, Ordering::SeqCst);
        let Ok(mut current) = self.current.lock() else {
            return;
        };
        match current.as_mut() {
            Some(down) => {
                down.failed += 1;
                down.last_try = Instant::now();
                down.last_failure = down.last_try;
                down.answered = false;
                tracing::debug!(target: "foldgate::redis", who, op, error, "Redis still unavailable");
            }
            None => {
                let now = Instant::now();
                *current = Some(Down {
                    since: now,
                    failed: 1,
                    last_try: now,
                    last_failure: now,
                    answered: false,
                });
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(settle(Arc::downgrade(self)));
                }
                self.skipped.store(0, Ordering::Relaxed);
                self.down.store(true, Ordering::Relaxed);
                tracing::warn!(target: "foldgate::redis", who, op, error,
                    "Redis unavailable: this replica serves fold states from its own memory and spools archive writes until it answers (further errors at DEBUG)");
            }
        }
    }

    /// How many commands have failed so far (state and archive).
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// A command was not sent because Redis is known down.
    pub(crate) fn skipped(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a reader should try Redis now: always while it is up, once
    /// every [`RETRY_EVERY`] while it is down (counted as skipped otherwise).
    pub(crate) fn should_try(&self) -> bool {
        if !self.is_down() {
            return true;
        }
        let due = self
            .current
            .lock()
            .ok()
            .and_then(|c| {
                c.as_ref()
                    .map(|d| d.answered || d.last_try.elapsed() >= RETRY_EVERY)
            })
            .unwrap_or(true);
        if !due {
            self.skipped();
        }
        due
    }

    /// A command succeeded: an outage under way ends once nothing failed
    /// for [`SETTLED`] (now, or when [`settle`] sees it).
    pub(crate) fn answered(&self) {
        if !self.down.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(mut current) = self.current.lock() {
            if let Some(down) = current.as_mut() {
                down.answered = true;
            }
        }
        self.end_if_settled();
    }

    /// Ends the outage under way, with one WARN that says how long it
    /// lasted and what it cost, if Redis answered and nothing failed for
    /// [`SETTLED`]; true when no outage is under way any more.
    fn end_if_settled(&self) -> bool {
        let Ok(mut current) = self.current.lock() else {
            return true;
        };
        let settled = current
            .as_ref()
            .is_none_or(|d| d.answered && d.last_failure.elapsed() >= SETTLED);
        if !settled {
            return false;
        }
        if let Some(down) = current.take() {
            self.down.store(false, Ordering::Relaxed);
            let skipped = self.skipped.swap(0, Ordering::Relaxed);
            tracing::warn!(target: "foldgate::redis",
                lasted_ms = u64::try_from(down.since.elapsed().as_millis()).unwrap_or(u64::MAX),
                failed_commands = down.failed,
                skipped_commands = skipped,
                "Redis answers again: outage over; fold states shared and spooled archive writes replayed");
        }
        true
    }
}

/// Ends an outage once it has settled, though no command follows.
async fn settle(outage: Weak<Outage>) {
    loop {
        tokio::time::sleep(RETRY_EVERY).await;
        let Some(outage) = outage.upgrade() else {
            return;
        };
        if outage.end_if_settled() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_url_one_tracker() {
        let a = Outage::shared("redis://127.0.0.1:1/0");
        let b = Outage::shared("redis://127.0.0.1:1/0");
        let c = Outage::shared("redis://127.0.0.1:2/0");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        a.failed("state", "GET", "refused");
        assert!(b.is_down() && !c.is_down());
        b.failed("archive", "LRANGE", "refused");
        assert!(!a.should_try(), "retried at once");
        a.answered();
        assert!(b.is_down(), "ended before it settled");
        assert!(a.should_try(), "Redis answered: reads go to it");
        if let Ok(mut current) = a.current.lock() {
            let down = current.as_mut().unwrap();
            down.last_failure = down.last_failure.checked_sub(SETTLED).unwrap();
        }
        a.answered();
        assert!(!b.is_down());
    }
}
