//! Prometheus histograms of durations: fixed buckets, lock-free counts.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds (seconds) of foldgate's own time per request: from a
/// fraction of a millisecond (passthrough) to an inline fold's seconds.
pub const OVERHEAD_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Bucket bounds (seconds) of an upstream's time to its response head.
pub const UPSTREAM_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Bucket bounds (seconds) of one fold's summarizer work (every call and chunk).
pub const SUMMARIZER_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// One histogram: a count per bucket (not cumulative; rendering sums
/// them), the number of observations and their sum.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One per bound, then the `+Inf` bucket.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds, ascending, in seconds.
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Records one duration.
    pub fn observe(&self, duration: Duration) {
        let seconds = duration.as_secs_f64();
        let bucket = self
            .bounds
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(self.bounds.len());
        if let Some(b) = self.buckets.get(bucket) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Writes the `_bucket`, `_sum` and `_count` samples of `name`;
    /// `labels` is empty or `key="value"` pairs without braces.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        let bounds = self.bounds.iter().map(|b| b.to_string());
        for (bound, bucket) in bounds
            .chain(std::iter::once("+Inf".to_string()))
            .zip(self.buckets.iter())
        {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(
            out,
            "{name}_count{braces} {}",
            self.count.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_sum_in_seconds() {
        let h = Histogram::new(&[0.01, 0.1]);
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_secs(2));
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "route=\"chat\"");
        let expect = "x_seconds_bucket{route=\"chat\",le=\"0.01\"} 1\n\
                      x_seconds_bucket{route=\"chat\",le=\"0.1\"} 2\n\
                      x_seconds_bucket{route=\"chat\",le=\"+Inf\"} 3\n\
                      x_seconds_sum{route=\"chat\"} 2.055\n\
                      x_seconds_count{route=\"chat\"} 3\n";
        assert_eq!(out, expect);
        let mut bare = String::new();
        h.render(&mut bare, "y", "");
        assert!(
            bare.contains("y_bucket{le=\"+Inf\"} 3\ny_sum 2.055\ny_count 3\n"),
            "{bare}"
        );
    }
}
