//! Cheap per-thread randomness for ids and sampling draws (SplitMix64,
//! seeded from the OS once per thread): not for secrets.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = Cell::new({
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new().build_hasher().finish()
    });
}

/// The next 64 random bits of this thread's generator.
pub fn next_u64() -> u64 {
    STATE.with(|state| {
        let s = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// A uniform draw in [0, 1).
pub fn unit() -> f64 {
    (next_u64() >> 11) as f64 / (1u64 << 53) as f64
}
