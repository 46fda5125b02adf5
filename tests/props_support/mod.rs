//! What the property tests share: their proptest configuration.

use proptest::test_runner::{Config, RngSeed};

/// `cases` cases from a fixed seed, so CI is reproducible, unless
/// `PROPTEST_RNG_SEED` names another; no failure files are written.
pub fn config(cases: u32, seed: u64) -> Config {
    let mut config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    if config.rng_seed == RngSeed::Random {
        config.rng_seed = RngSeed::Fixed(seed);
    }
    config
}
