//! Counters and histograms exported at `/foldgate/metrics` in Prometheus
//! text format.

mod histogram;

pub use histogram::Histogram;

use histogram::{OVERHEAD_BUCKETS, SUMMARIZER_BUCKETS, UPSTREAM_BUCKETS};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Process-wide counters. Labels are fixed and low-cardinality.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Chat-completion requests intercepted.
    pub chat_requests: AtomicU64,
    /// Chat requests forwarded with a reused summary.
    pub folds_reused: AtomicU64,
    /// New folds by reason: emergency, token, overflow, safety, idle.
    pub folds_new: [AtomicU64; 5],
    /// Folds whose summarizer failed (then handled by `on_failure`).
    pub fold_failures: AtomicU64,
    /// Emergency folds after an upstream context-length error.
    pub reactive_folds: AtomicU64,
    /// Requests whose must-keep messages alone exceed the window.
    pub cannot_fit: AtomicU64,
    /// HTTP calls made to summarizer models.
    pub summarizer_calls: AtomicU64,
    /// Tokens summarizer models reported using.
    pub summarizer_tokens: AtomicU64,
    /// Milliseconds spent in summarizer calls.
    pub summarizer_ms: AtomicU64,
    /// Summary items dropped for naming identifiers never shown to the model.
    pub summary_inventions: AtomicU64,
    /// Summarizer answers cut off at their token limit.
    pub summary_truncations: AtomicU64,
    /// Items that entered a ledger (specifics the summary lacked).
    pub ledger_items: AtomicU64,
    /// Ledger items that left it for lack of budget.
    pub ledger_evictions: AtomicU64,
    /// Folds postponed because the conversation's last fold failed recently.
    pub folds_postponed: AtomicU64,
    /// Requests that went on without a fold at `policy.fold_deadline`.
    pub fold_deadlines: AtomicU64,
    /// Prompt tokens not sent upstream: the client's messages minus the
    /// forwarded view, summed over requests forwarded with a fold.
    pub tokens_saved: AtomicU64,
    /// Messages forwarded as compression stubs, summed over requests.
    pub compressed_messages: AtomicU64,
    /// Prompt tokens the stubs saved (the messages' tokens minus their
    /// stubs'), summed over requests.
    pub compressed_tokens_saved: AtomicU64,
    /// Requests forwarded with the recall tool.
    pub recall_offers: AtomicU64,
    /// Recall calls foldgate answered from the archive.
    pub recall_calls: AtomicU64,
    /// Recall calls whose excerpts were shortened to fit the window's room.
    pub recall_shortened: AtomicU64,
    /// Recall calls answered "no room" instead of with excerpts.
    pub recall_refused: AtomicU64,
    /// Requests forwarded with recalled excerpts injected.
    pub recall_injections: AtomicU64,
    /// Broken recall rounds answered by the fallback (the first request
    /// without the tool), by cause ([`RECALL_CAUSES`]).
    pub recall_fallbacks: [AtomicU64; 5],
    /// Broken recall rounds that ended in an error for the client (the
    /// fallback broke too, or a stream had shown part of the round), by
    /// cause ([`RECALL_CAUSES`]).
    pub recall_failures: [AtomicU64; 5],
    /// Archive rows the backend refused at first and the spool kept.
    pub archive_spooled: AtomicU64,
    /// Spooled archive rows the backend took once it answered again.
    pub archive_replayed: AtomicU64,
    /// Folds not made because the archive spool was full.
    pub archive_vetoes: AtomicU64,
    /// Archive rows handed to the archive (queued), by what removed the
    /// message from the view: `[fold, compress]` ([`ARCHIVE_SOURCES`]).
    pub archive_rows: [AtomicU64; 2],
    /// Durations: foldgate's overhead, upstream and summarizer latency.
    pub latency: Latencies,
}

/// The route label of every request that is not a folded API's.
pub const OTHER_ROUTE: &str = "other";

/// The duration histograms.
#[derive(Debug)]
pub struct Latencies {
    /// Route labels, in the order of `overhead` and `upstream`: the
    /// folded APIs' names, then [`OTHER_ROUTE`].
    routes: Vec<&'static str>,
    /// foldgate's own time per forwarded request (to the response head,
    /// minus the upstream's), by route.
    pub overhead: Vec<Histogram>,
    /// The upstream's time to its response head, by route.
    pub upstream: Vec<Histogram>,
    /// One fold's summarizer work, every call and chunk included.
    pub summarizer: Histogram,
}

impl Latencies {
    /// Histograms for these routes and [`OTHER_ROUTE`].
    fn new(routes: impl IntoIterator<Item = &'static str>) -> Self {
        let mut routes: Vec<&'static str> = routes.into_iter().collect();
        routes.push(OTHER_ROUTE);
        Self {
            overhead: routes
                .iter()
                .map(|_| Histogram::new(OVERHEAD_BUCKETS))
                .collect(),
            upstream: routes
                .iter()
                .map(|_| Histogram::new(UPSTREAM_BUCKETS))
                .collect(),
            routes,
            summarizer: Histogram::new(SUMMARIZER_BUCKETS),
        }
    }
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new([])
    }
}

/// A gauge owned outside [`Metrics`], rendered beside its counters.
pub struct Gauge<'a> {
    /// Metric name.
    pub name: &'a str,
    /// Help text.
    pub help: &'a str,
    /// `(labels, value)` samples; labels are `{k="v"}` or empty.
    pub samples: Vec<(String, f64)>,
}

/// Cause label order of [`Metrics::recall_fallbacks`] and
/// [`Metrics::recall_failures`]: an error status, no answer at all, a body
/// cut short, an answer that is not the API's JSON, and recall calls
/// after the last allowed round.
pub const RECALL_CAUSES: [&str; 5] = [
    "status",
    "unreachable",
    "cut",
    "unparseable",
    "recall_after_last",
];

/// Label order of [`Metrics::archive_rows`]: rows of a fold's messages
/// (a rebuild's counted again), and of messages first shown as stubs.
pub const ARCHIVE_SOURCES: [&str; 2] = ["fold", "compress"];

/// Reason label order of [`Metrics::folds_new`].
pub const REASONS: [&str; 5] = ["emergency", "token", "overflow", "safety", "idle"];

impl Metrics {
    /// Adds one to a counter.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counters, with latency histograms for these routes (the folded
    /// APIs' names) and [`OTHER_ROUTE`].
    pub fn with_routes(routes: impl IntoIterator<Item = &'static str>) -> Self {
        Self {
            latency: Latencies::new(routes),
            ..Self::default()
        }
    }

    /// Records one forwarded request's timings: `route` is one of the
    /// routes given at construction (anything else counts as
    /// [`OTHER_ROUTE`]), `total` runs to the response head, `upstream` is
    /// its part.
    pub fn observe_request(&self, route: &str, total: Duration, upstream: Duration) {
        let routes = &self.latency.routes;
        let route = routes
            .iter()
            .position(|r| *r == route)
            .unwrap_or(routes.len() - 1);
        self.latency.overhead[route].observe(total.saturating_sub(upstream));
        self.latency.upstream[route].observe(upstream);
    }

    /// Records what a conversation request forwarded: the tokens of the
    /// client's messages and of the forwarded view (smaller when folded
    /// or compressed).
    pub fn observe_forwarded(&self, tokens_in: u32, tokens_out: u32) {
        self.tokens_saved.fetch_add(
            u64::from(tokens_in.saturating_sub(tokens_out)),
            Ordering::Relaxed,
        );
    }

    /// Renders every counter; `extra` appends gauges owned elsewhere.
    pub fn render(&self, extra: &[Gauge<'_>]) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        counter(
            "foldgate_chat_requests_total",
            "Chat-completion requests intercepted.",
            get(&self.chat_requests),
        );
        counter(
            "foldgate_folds_reused_total",
            "Requests forwarded with a reused summary.",
            get(&self.folds_reused),
        );
        counter(
            "foldgate_compressed_messages_total",
            "Messages forwarded as compression stubs, summed over requests.",
            get(&self.compressed_messages),
        );
        counter(
            "foldgate_compressed_tokens_saved_total",
            "Prompt tokens compression stubs saved, summed over requests.",
            get(&self.compressed_tokens_saved),
        );
        counter(
            "foldgate_fold_failures_total",
            "Folds whose summarizer failed.",
            get(&self.fold_failures),
        );
        counter(
            "foldgate_reactive_folds_total",
            "Folds after an upstream context-length error.",
            get(&self.reactive_folds),
        );
        counter(
            "foldgate_recall_offers_total",
            "Requests forwarded with the foldgate_recall tool.",
            get(&self.recall_offers),
        );
        counter(
            "foldgate_recall_calls_total",
            "Recall calls answered from the archive.",
            get(&self.recall_calls),
        );
        counter(
            "foldgate_recall_shortened_total",
            "Recall calls whose excerpts were shortened to fit the window's room.",
            get(&self.recall_shortened),
        );
        counter(
            "foldgate_recall_refused_total",
            "Recall calls answered without excerpts: no room left in the window.",
            get(&self.recall_refused),
        );
        counter(
            "foldgate_recall_injections_total",
            "Requests forwarded with recalled excerpts injected before the last user message.",
            get(&self.recall_injections),
        );
        counter(
            "foldgate_cannot_fit_total",
            "Requests that cannot fit the window even folded.",
            get(&self.cannot_fit),
        );
        counter(
            "foldgate_summarizer_calls_total",
            "HTTP calls to summarizer models.",
            get(&self.summarizer_calls),
        );
        counter(
            "foldgate_summarizer_tokens_total",
            "Tokens used by summarizer models.",
            get(&self.summarizer_tokens),
        );
        counter(
            "foldgate_summarizer_milliseconds_total",
            "Time spent summarizing.",
            get(&self.summarizer_ms),
        );
        counter(
            "foldgate_summary_inventions_total",
            "Summary items dropped for naming identifiers the summarizer was not shown.",
            get(&self.summary_inventions),
        );
        counter(
            "foldgate_summary_truncations_total",
            "Summarizer answers cut off at their token limit.",
            get(&self.summary_truncations),
        );
        counter(
            "foldgate_ledger_items_total",
            "Specifics kept in a ledger because the summary lacked them.",
            get(&self.ledger_items),
        );
        counter(
            "foldgate_ledger_evictions_total",
            "Ledger items that left the ledger for lack of budget.",
            get(&self.ledger_evictions),
        );
        counter(
            "foldgate_folds_postponed_total",
            "Folds postponed after a recent summarizer failure of the conversation.",
            get(&self.folds_postponed),
        );
        counter(
            "foldgate_fold_deadlines_total",
            "Requests that went on without their fold at policy.fold_deadline.",
            get(&self.fold_deadlines),
        );
        counter(
            "foldgate_tokens_saved_total",
            "Prompt tokens not sent upstream thanks to folds (client's messages minus the forwarded view).",
            get(&self.tokens_saved),
        );
        counter(
            "foldgate_archive_spooled_rows_total",
            "Archive rows kept in the spool while the archive backend was unreachable.",
            get(&self.archive_spooled),
        );
        counter(
            "foldgate_archive_replayed_rows_total",
            "Spooled archive rows written to the backend once it answered again.",
            get(&self.archive_replayed),
        );
        counter(
            "foldgate_archive_vetoed_folds_total",
            "Folds not made because the archive spool was full.",
            get(&self.archive_vetoes),
        );
        self.render_latencies(&mut out);
        let _ = writeln!(
            out,
            "# HELP foldgate_folds_total New folds by trigger.\n# TYPE foldgate_folds_total counter"
        );
        for (reason, c) in REASONS.iter().zip(&self.folds_new) {
            let _ = writeln!(
                out,
                "foldgate_folds_total{{reason=\"{reason}\"}} {}",
                get(c)
            );
        }
        let _ = writeln!(
            out,
            "# HELP foldgate_archive_rows_total Archive rows handed to the archive, by what removed the message from the view.\n# TYPE foldgate_archive_rows_total counter"
        );
        for (by, c) in ARCHIVE_SOURCES.iter().zip(&self.archive_rows) {
            let _ = writeln!(out, "foldgate_archive_rows_total{{by=\"{by}\"}} {}", get(c));
        }
        let by_cause = [
            (
                "foldgate_recall_fallbacks_total",
                "Broken recall rounds answered by the first request without the tool, by cause.",
                &self.recall_fallbacks,
            ),
            (
                "foldgate_recall_failures_total",
                "Broken recall rounds that ended in an error for the client, by cause.",
                &self.recall_failures,
            ),
        ];
        for (name, help, counters) in by_cause {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (cause, c) in RECALL_CAUSES.iter().zip(counters) {
                let _ = writeln!(out, "{name}{{cause=\"{cause}\"}} {}", get(c));
            }
        }
        for Gauge {
            name,
            help,
            samples,
        } in extra
        {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        }
        out
    }

    fn render_latencies(&self, out: &mut String) {
        let l = &self.latency;
        let by_route = [
            (
                "foldgate_overhead_seconds",
                "foldgate's own time per forwarded request (to the response head, minus the upstream's).",
                &l.overhead,
            ),
            (
                "foldgate_upstream_seconds",
                "Upstream time to the response head.",
                &l.upstream,
            ),
        ];
        for (name, help, histograms) in by_route {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for (route, h) in l.routes.iter().zip(histograms) {
                h.render(out, name, &format!("route=\"{route}\""));
            }
        }
        let name = "foldgate_summarizer_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Summarizer time per fold, every call and chunk included.\n# TYPE {name} histogram"
        );
        l.summarizer.render(out, name, "");
    }
}
