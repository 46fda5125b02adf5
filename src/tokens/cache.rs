//! The token-count cache: a bounded map from already-hashed keys to small
//! values, cheap enough to ask a thousand times per request.
//!
//! Keys are hashes already (XXH3-128 of a message's text or structure), so
//! the map does not hash them again, and nothing is tracked per access:
//! each shard keeps two generations, a hit in the old one moves the entry
//! to the young one, and when the young one is full it becomes the old one
//! (whose entries, not asked for during a whole generation, are dropped).
//! That keeps what recent requests use, like an LRU, for a lock and a probe.
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
}

/// A bounded, sharded two-generation cache of `Copy` values.
#[derive(Debug)]
pub struct CountCache<V> {
    shards: Vec<Mutex<Generations<V>>>,
    /// Entries one generation of one shard holds.
    per_generation: usize,
}

impl<V: Copy> CountCache<V> {
    /// A cache of about `capacity` entries at most (both generations).
    pub fn new(capacity: usize) -> Self {
        let per_generation = (capacity / SHARDS / 2).max(1);
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Generations {
                    young: Map::default(),
                    old: Map::default(),
                })
            })
            .collect();
        Self {
            shards,
            per_generation,
        }
    }

    /// The value for `key`, if cached.
    pub fn get(&self, key: &Key) -> Option<V> {
        let mut shard = self.shard(key);
        if let Some(v) = shard.young.get(key) {
            return Some(*v);
        }
        let v = shard.old.remove(key)?;
        shard.insert(*key, v, self.per_generation);
        Some(v)
    }

    /// Caches `value` for `key`.
    pub fn insert(&self, key: Key, value: V) {
        self.shard(&key).insert(key, value, self.per_generation);
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
    fn insert(&mut self, key: Key, value: V, per_generation: usize) {
        if self.young.len() >= per_generation && !self.young.contains_key(&key) {
            self.old = std::mem::take(&mut self.young);
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
        let cache = CountCache::new(SHARDS * 2 * 8);
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
}
