//! Which parts of Redis answer, as this replica's store sees them. On a
//! cluster each key slot is up or down on its own: a failover takes one
//! master's slots away while the others answer, and a replica that called
//! all of Redis down for it stopped writing folds (and releasing fold
//! locks) on slots that never failed. One server or a Sentinel primary is
//! one part, down or up as a whole.
//!
//! A slot marked down is not asked again for [`RETRY_EVERY`], then one
//! command tries it (on a cluster; a whole Redis marked down waits for the
//! store's probe). Lock renewals and releases are not held back
//! ([`Health::should_try`] is not asked): they retry on their own pace and
//! must reach a slot's new master as soon as it answers.

use super::outage::RETRY_EVERY;
use redis::cluster_routing::Slot;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Slots (or the one Redis) that failed, and when each was last tried.
#[derive(Debug)]
pub(super) struct Health {
    cluster: bool,
    /// Where every key goes when Redis is not a cluster (and where the
    /// commands without a key go on a cluster).
    whole: Slot,
    /// Each slot marked down: since when, and when it was last tried.
    down: Mutex<HashMap<Slot, (Instant, Instant)>>,
    /// Whether any slot is down (fast path).
    any: AtomicBool,
}

impl Health {
    pub(super) fn new(cluster: bool) -> Self {
        Self {
            cluster,
            whole: Slot::for_key(""),
            down: Mutex::new(HashMap::new()),
            any: AtomicBool::new(false),
        }
    }

    /// The part of Redis a command on `key` goes to (`None`: no key).
    pub(super) fn slot(&self, key: Option<&str>) -> Slot {
        match key {
            Some(key) if self.cluster => Slot::for_key(key),
            _ => self.whole,
        }
    }

    /// Whether a command to `slot` is sent now: always while it answers;
    /// on a cluster, once every [`RETRY_EVERY`] while it is down.
    pub(super) fn should_try(&self, slot: Slot) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return true;
        }
        let Ok(mut down) = self.down.lock() else {
            return true;
        };
        match down.get_mut(&slot) {
            None => true,
            Some((_, last)) if self.cluster && last.elapsed() >= RETRY_EVERY => {
                *last = Instant::now();
                true
            }
            Some(_) => false,
        }
    }

    /// Whether `slot` is down and not due for another try
    /// ([`Health::should_try`] without counting a try).
    pub(super) fn waiting(&self, slot: Slot) -> bool {
        self.any.load(Ordering::Relaxed)
            && self.down.lock().is_ok_and(|d| {
                d.get(&slot)
                    .is_some_and(|(_, last)| !self.cluster || last.elapsed() < RETRY_EVERY)
            })
    }

    pub(super) fn answered(&self, slot: Slot) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(mut down) = self.down.lock() {
            down.remove(&slot);
            self.any.store(!down.is_empty(), Ordering::Relaxed);
        }
    }

    pub(super) fn failed(&self, slot: Slot) {
        if let Ok(mut down) = self.down.lock() {
            let now = Instant::now();
            down.entry(slot).or_insert((now, now)).1 = now;
            self.any.store(true, Ordering::Relaxed);
        }
    }

    /// How long `slot` has been down (zero while it answers).
    pub(super) fn down_for(&self, slot: Slot) -> std::time::Duration {
        if !self.any.load(Ordering::Relaxed) {
            return std::time::Duration::ZERO;
        }
        self.down
            .lock()
            .ok()
            .and_then(|d| d.get(&slot).map(|(since, _)| since.elapsed()))
            .unwrap_or_default()
    }

    /// The store's probe reached Redis (not a cluster): all of it answers.
    pub(super) fn clear(&self) {
        if let Ok(mut down) = self.down.lock() {
            down.clear();
            self.any.store(false, Ordering::Relaxed);
        }
    }

    /// Whether nothing is marked down.
    pub(super) fn healthy(&self) -> bool {
        !self.any.load(Ordering::Relaxed)
    }

    /// Whether Redis is a cluster, whose slots recover one by one (no probe).
    pub(super) fn is_cluster(&self) -> bool {
        self.cluster
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_slot_fails_alone() {
        let health = Health::new(true);
        let (a, b) = (health.slot(Some("{a}")), health.slot(Some("{b}")));
        assert_ne!(a, b);
        health.failed(a);
        assert!(health.waiting(a) && !health.waiting(b));
        assert!(!health.should_try(a) && health.should_try(b));
        health.answered(a);
        assert!(health.healthy() && health.should_try(a));
    }

    #[test]
    fn one_server_fails_whole() {
        let health = Health::new(false);
        health.failed(health.slot(Some("{a}")));
        assert!(health.waiting(health.slot(Some("{b}"))));
        assert!(!health.should_try(health.slot(None)));
        health.clear();
        assert!(health.healthy());
    }
}
