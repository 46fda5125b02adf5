//! The token-count cache: a bounded map from already-hashed keys to small
//! values, cheap enough to ask a thousand times per request.
//!
//! Keys are hashes already (XXH3-128 of a message's text or structure), so
//! the map does not hash them again, and nothing is tracked per access:
//! each shard keeps two generations, a hit in the old one moves the entry
//! to the young one, and when the young one is full it becomes the old one
//! (whose entries, not asked for during a whole generation, are dropped).
//! That keeps what recent requests use, like an LRU, for a lock and a probe.
//! A generation also ends when it is older than half of `tokens.cache_idle`,
//! so a count nobody asked for that long is dropped even while the cache
//! is far from its bound: the cache's size follows the conversations of
//! the last few minutes instead of filling to its bound over hours.
//!
//! Hand-written rather than moka or quick_cache (issue 39 asked): an entry
//! here is charged 88 bytes (`CACHE_ENTRY_BYTES`: key, value, control
//! byte, spare capacity) where a moka entry of the archived-stub set
//! measured some 180 bytes beside its key, so a library cache would hold
//! about half the counts in the same `tokens.cache_bytes`, and nothing here
//! grows past the bound (each generation is emptied, not kept).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Shards, so that concurrent requests rarely wait on one lock.
const SHARDS: usize = 16;

/// A cache key: a 128-bit hash and a small tag (encoding, kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub hash: u128,
    pub tag: u8,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The hash is uniform already: fold it, mix in the tag.
        let folded = (self.hash as u64) ^ ((self.hash >> 64) as u64);
        state.write_u64(folded ^ u64::from(self.tag).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
}

/// Takes the one `u64` a [`Key`] writes as the hash.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `Key`; a plain FNV-1a keeps the type total.
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Map<V> = HashMap<Key, V, BuildHasherDefault<PassThrough>>;

#[derive(Debug)]
struct Generations<V> {
    young: Map<V>,
    old: Map<V>,
    /// When the young generation began.
    since: Instant,
}

/// When a shard's young generation ends.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// Entries one generation of one shard holds.
    per_generation: usize,
    /// Age at which a generation ends however full (`None`: never).
    age: Option<Duration>,
}

/// A bounded, sharded two-generation cache of `Copy` values.
#[derive(Debug)]
pub struct CountCache<V> {
    shards: Vec<Mutex<Generations<V>>>,
    bounds: Bounds,
}

impl<V: Copy> CountCache<V> {
    /// A cache of about `capacity` entries at most (both generations),
    /// dropping an entry not asked for within `idle` (at the latest `idle`
    /// after its last use, at the earliest half of it; zero: no time bound).
    pub fn new(capacity: usize, idle: Duration) -> Self {
        let now = Instant::now();
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Generations {
                    young: Map::default(),
                    old: Map::default(),
                    since: now,
                })
            })
            .collect();
        Self {
            shards,
            bounds: Bounds {
                per_generation: (capacity / SHARDS / 2).max(1),
                age: (!idle.is_zero()).then(|| idle / 2),
            },
        }
    }

    /// The value for `key`, if cached.
    pub fn get(&self, key: &Key) -> Option<V> {
        let mut shard = self.shard(key);
        if let Some(v) = shard.young.get(key) {
            return Some(*v);
        }
        let v = shard.old.remove(key)?;
        shard.insert(*key, v, self.bounds, Instant::now());
        Some(v)
    }

    /// Caches `value` for `key`.
    pub fn insert(&self, key: Key, value: V) {
        self.insert_at(key, value, Instant::now());
    }

    fn insert_at(&self, key: Key, value: V, now: Instant) {
        self.shard(&key).insert(key, value, self.bounds, now);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        (0..SHARDS)
            .map(|i| {
                let g = self.lock(i);
                g.young.len() + g.old.len()
            })
            .sum()
    }

    fn shard(&self, key: &Key) -> std::sync::MutexGuard<'_, Generations<V>> {
        self.lock((key.hash >> 120) as usize % SHARDS)
    }

    fn lock(&self, i: usize) -> std::sync::MutexGuard<'_, Generations<V>> {
        // A panic while holding the lock cannot leave the maps inconsistent
        // (each operation is one map call), so a poisoned lock is usable.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<V> Generations<V> {
    fn insert(&mut self, key: Key, value: V, bounds: Bounds, now: Instant) {
        let full = self.young.len() >= bounds.per_generation && !self.young.contains_key(&key);
        let aged = bounds
            .age
            .is_some_and(|age| now.saturating_duration_since(self.since) >= age);
        if full || aged {
            self.old = std::mem::take(&mut self.young);
            self.since = now;
        }
        self.young.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u128) -> Key {
        Key {
            hash: n.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835),
            tag: 0,
        }
    }

    #[test]
    fn bounded_and_keeps_what_is_used() {
        let cache = CountCache::new(SHARDS * 2 * 8, Duration::ZERO);
        for n in 0..10_000 {
            cache.insert(key(n), n as u32);
            // One key is asked for all along: it must survive.
            assert_eq!(cache.get(&key(0)), Some(0));
        }
        assert!(cache.len() <= SHARDS * 2 * 8, "{}", cache.len());
        assert_eq!(cache.get(&key(9_999)), Some(9_999));
        assert_eq!(cache.get(&key(5)), None);
        let tagged = Key {
            tag: 1,
            ..key(9_999)
        };
        assert_eq!(cache.get(&tagged), None);
    }

    #[test]
    fn a_count_unused_for_the_idle_time_is_dropped_far_below_the_bound() {
        let cache = CountCache::new(1_000_000, Duration::from_secs(600));
        let start = Instant::now();
        let at = |minutes: u64| start + Duration::from_secs(60 * minutes);
        // Every shard gets an entry at minute 0 and is touched again later.
        let keys: Vec<Key> = (0..SHARDS as u128 * 64).map(key).collect();
        for k in &keys {
            cache.insert_at(*k, 1_u32, at(0));
        }
        // Asked for while young: there.
        assert_eq!(cache.get(&keys[0]), Some(1));
        // Minute 6: each shard's generation ends (older than 5 minutes).
        for n in 0..SHARDS as u128 * 64 {
            cache.insert_at(key(10_000 + n), 2, at(6));
        }
        // Minute 12: another generation; what was not asked for since
        // minute 0 is gone, though the cache holds a sliver of its bound.
        for n in 0..SHARDS as u128 * 64 {
            cache.insert_at(key(20_000 + n), 3, at(12));
        }
        let left = keys.iter().filter(|k| cache.get(k).is_some()).count();
        assert_eq!(left, 0, "counts idle 12 minutes stayed");
        assert!(cache.len() <= 3 * SHARDS * 64, "{}", cache.len());
        assert_eq!(cache.get(&key(20_000)), Some(3));
    }
}
