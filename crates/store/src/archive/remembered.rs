//! The compressed messages this process archived, remembered so that a
//! conversation's stubs are stored once, not on every request showing them.
//!
//! Two generations of 128-bit keys in plain hash sets: a key is looked up
//! in both, and one found in the older generation moves to the newer; when
//! the newer is full, the older is emptied and the two swap. A key in use
//! (a live conversation's stubs are looked up on each of its requests)
//! stays; one unused for a whole generation is forgotten, and stored again
//! if it comes back (the backends keep a row once). Both sets are allocated
//! at their bound up front and emptied in place, so the memory is level
//! from the start: 17 bytes a slot (the key and the table's control byte),
//! the two sets sized to fit `archive.remembered_bytes` (default 4.5 MiB:
//! 114,688 keys a generation; a moka cache of the same keys cost some 180
//! bytes an entry).
//!
//! On eviction nothing is lost: a forgotten key only means its stub's row
//! is handed to the backend again the next time a request shows the stub.
//! SQLite (`INSERT OR IGNORE`) and memory (position and digest) keep it
//! once; Redis appends it to the conversation's list again and its reads
//! drop the duplicate (by position and digest). What it costs is a
//! duplicate write (a duplicate row in Redis, until `archive.ttl`) and a
//! count too many in `foldgate_archive_rows_total`. A key in use is never forgotten while
//! fewer distinct stubs than a generation are shown between two of its
//! uses.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, PoisonError};

/// Bytes one slot of a set takes: a 128-bit key and a control byte.
const SLOT_BYTES: u64 = 17;

/// Keys one generation holds when both fit in `bytes`: a hash table's
/// buckets are a power of two filled to 7/8 at most, so the buckets are
/// the largest power of two whose slots fit half of `bytes`.
fn per_generation(bytes: u64) -> usize {
    let slots = bytes / 2 / SLOT_BYTES;
    if slots < 8 {
        return 0;
    }
    let buckets = 1u64 << (63 - slots.leading_zeros());
    usize::try_from(buckets / 8 * 7).unwrap_or(0)
}

/// Keys are xxh3 digests already: the table takes their low 64 bits.
#[derive(Debug, Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

type Set = HashSet<u128, BuildHasherDefault<Prehashed>>;

#[derive(Debug)]
struct Generations {
    newer: Set,
    older: Set,
}

/// Keys remembered across two generations of at most `per_generation`.
#[derive(Debug)]
pub struct Remembered {
    per_generation: usize,
    sets: Mutex<Generations>,
}

impl Remembered {
    /// Two generations that fit in `bytes`, allocated now.
    pub fn with_bytes(bytes: u64) -> Self {
        Self::new(per_generation(bytes))
    }

    /// Bytes the two sets' slots take.
    pub fn bytes(&self) -> u64 {
        let sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
        let slots = |s: &Set| (s.capacity() as u64).div_ceil(7) * 8;
        (slots(&sets.newer) + slots(&sets.older)) * SLOT_BYTES
    }

    /// Two generations of `per_generation` keys, allocated now.
    pub fn new(per_generation: usize) -> Self {
        let set = || Set::with_capacity_and_hasher(per_generation, BuildHasherDefault::default());
        Self {
            per_generation,
            sets: Mutex::new(Generations {
                newer: set(),
                older: set(),
            }),
        }
    }

    /// The items whose key is not remembered (in their order); those
    /// remembered in the older generation move to the newer.
    pub fn unknown<T>(&self, items: impl IntoIterator<Item = (u128, T)>) -> Vec<(u128, T)> {
        let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
        let mut unknown = Vec::new();
        for (key, item) in items {
            if sets.newer.contains(&key) {
                continue;
            }
            if sets.older.remove(&key) {
                self.add(&mut sets, key);
            } else {
                unknown.push((key, item));
            }
        }
        unknown
    }

    /// Remembers `keys` in the newer generation.
    pub fn insert(&self, keys: impl IntoIterator<Item = u128>) {
        let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            self.add(&mut sets, key);
        }
    }

    /// Keys remembered in both generations.
    pub fn len(&self) -> usize {
        let sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
        sets.newer.len() + sets.older.len()
    }

    fn add(&self, sets: &mut Generations, key: u128) {
        if self.per_generation == 0 {
            return;
        }
        if sets.newer.len() >= self.per_generation && !sets.newer.contains(&key) {
            sets.older.clear();
            std::mem::swap(&mut sets.newer, &mut sets.older);
        }
        sets.newer.insert(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(r: &Remembered, keys: &[u128]) -> Vec<u128> {
        r.unknown(keys.iter().map(|&k| (k, ())))
            .into_iter()
            .map(|(k, ())| k)
            .collect()
    }

    #[test]
    fn a_key_in_use_stays_and_an_unused_one_is_forgotten_after_two_generations() {
        let r = Remembered::new(2);
        r.insert([1, 2]);
        assert_eq!(unknown(&r, &[1, 2, 3]), [3]);
        r.insert([3]); // the generation of 1 and 2 becomes the older
        assert_eq!(
            unknown(&r, &[1]),
            Vec::<u128>::new(),
            "1 moves to the newer"
        );
        r.insert([4]); // the newer (3, 1) is full: 2, never used again, goes
        assert_eq!(unknown(&r, &[1, 2, 3, 4]), [2]);
        assert!(r.len() <= 4);
    }

    #[test]
    fn the_sets_do_not_grow_past_their_bound() {
        let r = Remembered::new(1000);
        let capacity = |r: &Remembered| {
            let sets = r.sets.lock().unwrap_or_else(PoisonError::into_inner);
            sets.newer.capacity() + sets.older.capacity()
        };
        let before = capacity(&r);
        for k in 0..100_000u128 {
            r.insert([k.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)]);
        }
        assert_eq!(r.len(), 2000);
        assert_eq!(capacity(&r), before);
    }

    /// The sets are sized to fit the byte bound, not rounded up past it.
    #[test]
    fn sized_by_bytes() {
        for bytes in [4_718_592u64, 1 << 20, 1_000_000, 3_000_000] {
            let n = per_generation(bytes);
            let r = Remembered::with_bytes(bytes);
            assert!(r.bytes() <= bytes, "{} > {bytes}", r.bytes());
            assert!(r.bytes() * 2 > bytes, "{} wastes {bytes}", r.bytes());
            let sets = r.sets.lock().unwrap();
            assert_eq!(sets.newer.capacity(), n, "{bytes}");
        }
        assert_eq!(per_generation(4_718_592), 114_688);
        assert_eq!(per_generation(100), 0);
    }

    #[test]
    fn nothing_is_remembered_at_a_zero_bound() {
        let r = Remembered::new(0);
        r.insert([1]);
        assert_eq!(unknown(&r, &[1]), [1]);
    }
}
