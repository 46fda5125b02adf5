//! Per-model calibration: learns how far the estimate is from the
//! upstream's own `usage.prompt_tokens` and corrects later estimates by it.
//!
//! The factor is an exponentially weighted moving average of
//! `actual / estimated` starting at 1.0, with weight [`ALPHA`] on each new
//! observation, so a steady ratio is approached within 2% after about six
//! observations while one odd response moves it by at most a third of the way.
//! Ratios and the factor stay within [`MIN_FACTOR`, `MAX_FACTOR`]: beyond
//! that the estimate is wrong for reasons a scale cannot fix (a wrong
//! tokenizer family, a proxy rewriting prompts) and should be visible.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Weight of the newest observation.
pub const ALPHA: f64 = 0.3;
/// Smallest factor applied.
pub const MIN_FACTOR: f64 = 0.5;
/// Largest factor applied.
pub const MAX_FACTOR: f64 = 2.0;
/// Models tracked at most. Names come from clients, so the map is bounded;
/// models beyond it stay uncalibrated.
const MAX_MODELS: usize = 4096;

/// The learned factors, by exact model name.
#[derive(Debug, Default)]
pub(crate) struct Calibrator {
    factors: Mutex<HashMap<String, f64>>,
}

impl Calibrator {
    /// Folds one observation in. Ignored when either count is zero (an
    /// error response, or an upstream that reports no usage).
    pub fn observe(&self, model: &str, estimated: u32, actual: u32) {
        if estimated == 0 || actual == 0 {
            return;
        }
        let ratio = (f64::from(actual) / f64::from(estimated)).clamp(MIN_FACTOR, MAX_FACTOR);
        let mut factors = self.factors.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = factors.get_mut(model) {
            *f = (*f + ALPHA * (ratio - *f)).clamp(MIN_FACTOR, MAX_FACTOR);
        } else if factors.len() < MAX_MODELS {
            factors.insert(model.to_owned(), 1.0 + ALPHA * (ratio - 1.0));
        }
    }

    /// The current factor for `model`; 1.0 before any observation.
    pub fn factor(&self, model: &str) -> f64 {
        let factors = self.factors.lock().unwrap_or_else(PoisonError::into_inner);
        factors.get(model).copied().unwrap_or(1.0)
    }

    /// Every model's current factor, sorted by model name.
    pub fn all(&self) -> Vec<(String, f64)> {
        let factors = self.factors.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<(String, f64)> = factors.iter().map(|(m, f)| (m.clone(), *f)).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_to_a_steady_ratio() {
        let c = Calibrator::default();
        for _ in 0..10 {
            c.observe("m", 1000, 1200);
        }
        let f = c.factor("m");
        assert!((f - 1.2).abs() / 1.2 < 0.02, "{f}");
        assert_eq!(c.factor("other"), 1.0);
    }

    #[test]
    fn clamped_and_zero_ignored() {
        let c = Calibrator::default();
        for _ in 0..50 {
            c.observe("big", 100, 1000);
            c.observe("small", 1000, 1);
        }
        assert!(c.factor("big") <= MAX_FACTOR && c.factor("big") > MAX_FACTOR - 1e-6);
        assert!(c.factor("small") >= MIN_FACTOR && c.factor("small") < MIN_FACTOR + 1e-6);
        c.observe("z", 0, 10);
        c.observe("z", 10, 0);
        assert_eq!(c.factor("z"), 1.0);
    }

    #[test]
    fn one_outlier_moves_a_third() {
        let c = Calibrator::default();
        c.observe("m", 1000, 2000);
        assert!((c.factor("m") - 1.3).abs() < 1e-9);
    }
}
