//! Counters and histograms exported at `/foldgate/metrics` in the
//! OpenMetrics text format, kept and encoded by `prometheus-client`.
//!
//! Every metric is registered once, at construction, under the name its
//! samples carry (counters without their `_total`, which the encoder adds);
//! a labelled family's label sets are all created then too, so every
//! sample is exported from the start, at zero. Callers hold the metrics
//! themselves (shared handles), so recording one is an atomic add or, for
//! a histogram, an uncontended lock: no label lookup on the request path.

use crate::unclaimed::Unclaimed;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as GaugeMetric;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Bucket bounds (seconds) of foldgate's own time per request: from a
/// fraction of a millisecond (passthrough) to an inline fold's seconds.
const OVERHEAD_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Bucket bounds (seconds) of an upstream's time to its response head.
const UPSTREAM_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Bucket bounds (seconds) of one fold's summarizer work (every call and chunk).
const SUMMARIZER_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// The Content-Type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One label, as a family's label set.
type Label = [(&'static str, &'static str); 1];

/// Declares [`Counters`]: each unlabelled counter's field, its doc, and
/// the name and help it is exported under, in the order of export.
macro_rules! counters {
    ($( $(#[$doc:meta])* $field:ident => $name:literal, $help:literal; )*) => {
        /// The unlabelled counters, reached through [`Metrics`] (it derefs
        /// to them): `metrics.restubs.inc()`.
        #[derive(Debug)]
        pub struct Counters {
            $( $(#[$doc])* pub $field: Counter, )*
        }

        impl Counters {
            /// Every counter, registered under its exported name.
            fn register(registry: &mut Registry) -> Self {
                Self {
                    $( $field: {
                        let counter = Counter::default();
                        registry.register($name, $help.trim_end_matches('.'), counter.clone());
                        counter
                    }, )*
                }
            }
        }
    };
}

counters! {
    /// Conversation requests forwarded with a reused summary.
    folds_reused => "foldgate_folds_reused", "Requests forwarded with a reused summary.";
    /// Messages forwarded as compression stubs, summed over requests.
    compressed_messages => "foldgate_compressed_messages",
        "Messages forwarded as compression stubs, summed over requests.";
    /// Prompt tokens the stubs saved (the messages' tokens minus their
    /// stubs'), summed over requests.
    compressed_tokens_saved => "foldgate_compressed_tokens_saved",
        "Prompt tokens compression stubs saved, summed over requests.";
    /// Folds whose summarizer failed (then handled by `on_failure`).
    fold_failures => "foldgate_fold_failures", "Folds whose summarizer failed.";
    /// Restubs: older tool results newly shown as stubs under the fold a
    /// conversation has, without a summarizer call.
    restubs => "foldgate_restubs",
        "Restubs: older tool results newly stubbed under the fold a conversation has, no summarizer call.";
    /// Emergency folds after an upstream context-length error.
    reactive_folds => "foldgate_reactive_folds", "Folds after an upstream context-length error.";
    /// Requests forwarded with the recall tool.
    recall_offers => "foldgate_recall_offers", "Requests forwarded with the foldgate_recall tool.";
    /// Recall calls foldgate answered from the archive.
    recall_calls => "foldgate_recall_calls", "Recall calls answered from the archive.";
    /// Recall calls whose excerpts were shortened to fit the window's room.
    recall_shortened => "foldgate_recall_shortened",
        "Recall calls whose excerpts were shortened to fit the window's room.";
    /// Recall calls answered "no room" instead of with excerpts.
    recall_refused => "foldgate_recall_refused",
        "Recall calls answered without excerpts: no room left in the window.";
    /// Requests forwarded with recalled excerpts injected.
    recall_injections => "foldgate_recall_injections",
        "Requests forwarded with recalled excerpts injected before the last user message.";
    /// Requests whose must-keep messages alone exceed the window.
    cannot_fit => "foldgate_cannot_fit", "Requests that cannot fit the window even folded.";
    /// HTTP calls made to summarizer models.
    summarizer_calls => "foldgate_summarizer_calls", "HTTP calls to summarizer models.";
    /// Tokens summarizer models reported using.
    summarizer_tokens => "foldgate_summarizer_tokens", "Tokens used by summarizer models.";
    /// Milliseconds spent in summarizer calls.
    summarizer_ms => "foldgate_summarizer_milliseconds", "Time spent summarizing.";
    /// Summary items dropped for naming identifiers never shown to the model.
    summary_inventions => "foldgate_summary_inventions",
        "Summary items dropped for naming identifiers the summarizer was not shown.";
    /// Summarizer answers cut off at their token limit.
    summary_truncations => "foldgate_summary_truncations",
        "Summarizer answers cut off at their token limit.";
    /// Items that entered a ledger (specifics the summary lacked).
    ledger_items => "foldgate_ledger_items",
        "Specifics kept in a ledger because the summary lacked them.";
    /// Ledger items that left it for lack of budget.
    ledger_evictions => "foldgate_ledger_evictions",
        "Ledger items that left the ledger for lack of budget.";
    /// Folds postponed because the conversation's last fold failed recently.
    folds_postponed => "foldgate_folds_postponed",
        "Folds postponed after a recent summarizer failure of the conversation.";
    /// Requests that went on without a fold at `policy.fold_deadline`.
    fold_deadlines => "foldgate_fold_deadlines",
        "Requests that went on without their fold at policy.fold_deadline.";
    /// Prompt tokens not sent upstream: the client's messages minus the
    /// forwarded view, summed over requests forwarded with a fold.
    tokens_saved => "foldgate_tokens_saved",
        "Prompt tokens not sent upstream thanks to folds (client's messages minus the forwarded view).";
    /// Archive rows the backend refused at first and the spool kept.
    archive_spooled => "foldgate_archive_spooled_rows",
        "Archive rows kept in the spool while the archive backend was unreachable.";
    /// Spooled archive rows the backend took once it answered again.
    archive_replayed => "foldgate_archive_replayed_rows",
        "Spooled archive rows written to the backend once it answered again.";
    /// Folds not made because the archive spool was full.
    archive_vetoes => "foldgate_archive_vetoed_folds",
        "Folds not made because the archive spool was full.";
}

/// Process-wide counters. Labels are fixed and low-cardinality.
#[derive(Debug)]
pub struct Metrics {
    /// Conversation requests the pipeline took, by API: one counter per
    /// API given at construction, in that order ([`Metrics::count_request`]).
    requests: Vec<(&'static str, Counter)>,
    /// Deprecated: conversation requests of every API, unlabelled, as
    /// `foldgate_chat_requests_total` counted them before
    /// `foldgate_requests_total{api}`; kept so dashboards built on it go
    /// on counting the same requests.
    chat_requests: Counter,
    /// The unlabelled counters.
    counters: Counters,
    /// New folds by reason: emergency, token, overflow, safety, idle.
    pub folds_new: [Counter; 5],
    /// Summary items dropped, by reason: `[invented, unsupported, swap,
    /// unconfirmed]` ([`DROP_REASONS`]).
    pub summary_items_dropped: [Counter; 4],
    /// Broken recall rounds answered by the fallback (the first request
    /// without the tool), by cause ([`RECALL_CAUSES`]).
    pub recall_fallbacks: [Counter; 5],
    /// Broken recall rounds that ended in an error for the client (the
    /// fallback broke too, or a stream had shown part of the round), by
    /// cause ([`RECALL_CAUSES`]).
    pub recall_failures: [Counter; 5],
    /// Archive rows handed to the archive (queued), by what removed the
    /// message from the view: `[fold, compress]` ([`ARCHIVE_SOURCES`]).
    pub archive_rows: [Counter; 2],
    /// Durations: foldgate's overhead, upstream and summarizer latency.
    pub latency: Latencies,
    /// Conversation-shaped `POST`s no API claimed, by path.
    pub unclaimed: Unclaimed,
    /// Every metric above, registered under its exported name.
    registry: Registry,
}

impl std::ops::Deref for Metrics {
    type Target = Counters;

    fn deref(&self) -> &Counters {
        &self.counters
    }
}

/// The route label of every request that is not a folded API's.
pub const OTHER_ROUTE: &str = "other";

/// A response extension naming the folded API that answered (its latency
/// histograms' route label); a response without one counts as
/// [`OTHER_ROUTE`].
#[derive(Debug, Clone, Copy)]
pub struct RouteLabel(pub &'static str);

/// The duration histograms.
#[derive(Debug)]
pub struct Latencies {
    /// Route labels, in the order of `overhead` and `upstream`: the
    /// folded APIs' names, then [`OTHER_ROUTE`].
    routes: Vec<&'static str>,
    /// foldgate's own time per forwarded request (to the response head,
    /// minus the upstream's), by route.
    overhead: Vec<Histogram>,
    /// The upstream's time to its response head, by route.
    upstream: Vec<Histogram>,
    /// One fold's summarizer work, every call and chunk included.
    pub summarizer: Histogram,
}

/// A gauge owned outside [`Metrics`], rendered beside its counters.
pub struct Gauge {
    /// Metric name.
    pub name: &'static str,
    /// Help text.
    pub help: &'static str,
    /// `(labels, value)` samples; no labels for a gauge of one value.
    pub samples: Vec<(Vec<(&'static str, String)>, f64)>,
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

/// Reason label order of [`Metrics::summary_items_dropped`]: an item
/// naming an identifier the summarizer was not shown, one its source does
/// not support, one tying a value to a subject it was never said with,
/// and a completed item or decision no sentence confirms.
pub const DROP_REASONS: [&str; 4] = ["invented", "unsupported", "swap", "unconfirmed"];

/// Reason label order of [`Metrics::folds_new`].
pub const REASONS: [&str; 5] = ["emergency", "token", "overflow", "safety", "idle"];

impl Default for Metrics {
    fn default() -> Self {
        Self::with_routes([])
    }
}

impl Metrics {
    /// The archive's counters: clones of this registry's, so the archive
    /// counts into what `/foldgate/metrics` exports.
    pub fn archive_counters(&self) -> crate::archive::ArchiveCounters {
        crate::archive::ArchiveCounters {
            spooled: self.archive_spooled.clone(),
            replayed: self.archive_replayed.clone(),
            rows: self.archive_rows.clone(),
        }
    }

    /// Counters, with latency histograms for these routes (the folded
    /// APIs' names) and [`OTHER_ROUTE`].
    pub fn with_routes(routes: impl IntoIterator<Item = &'static str>) -> Self {
        let mut registry = Registry::default();
        let chat_requests = Counter::default();
        registry.register(
            "foldgate_chat_requests",
            "Deprecated: conversation requests of every API (not only chat completions); use sum(foldgate_requests_total)",
            chat_requests.clone(),
        );
        let counters = Counters::register(&mut registry);
        let mut by_label =
            |name: &str, help: &str, label: &'static str, values: &[&'static str]| {
                let family = Family::<Label, Counter>::default();
                registry.register(name, help, family.clone());
                let counters: Vec<Counter> = values
                    .iter()
                    .map(|v| family.get_or_create_owned(&[(label, v)]))
                    .collect();
                counters
            };
        let folds_new = by_label("foldgate_folds", "New folds by trigger", "reason", &REASONS);
        let summary_items_dropped = by_label(
            "foldgate_summary_items_dropped",
            "Summary items dropped, by reason: invented identifiers, unsupported by the folded text, a value swapped to another subject, or completed work or a decision nothing confirms",
            "reason",
            &DROP_REASONS,
        );
        let archive_rows = by_label(
            "foldgate_archive_rows",
            "Archive rows handed to the archive, by what removed the message from the view",
            "by",
            &ARCHIVE_SOURCES,
        );
        let recall_fallbacks = by_label(
            "foldgate_recall_fallbacks",
            "Broken recall rounds answered by the first request without the tool, by cause",
            "cause",
            &RECALL_CAUSES,
        );
        let recall_failures = by_label(
            "foldgate_recall_failures",
            "Broken recall rounds that ended in an error for the client, by cause",
            "cause",
            &RECALL_CAUSES,
        );
        let routes: Vec<&'static str> = routes.into_iter().collect();
        let requests = by_label(
            "foldgate_requests",
            "Conversation requests the pipeline took, by API",
            "api",
            &routes,
        );
        let requests = routes.iter().copied().zip(requests).collect();
        let latency = Latencies::register(&mut registry, routes);
        registry.register(
            "foldgate_telemetry_spans_dropped",
            "Finished trace spans never exported: the export queue was full, or the export failed or timed out",
            crate::telemetry::dropped().clone(),
        );
        let unclaimed = Unclaimed::default();
        registry.register(
            "foldgate_unrecognised",
            "Conversation-shaped POSTs no API claimed, forwarded unfolded, by path",
            unclaimed.family(),
        );
        Self {
            requests,
            chat_requests,
            counters,
            folds_new: array(folds_new),
            summary_items_dropped: array(summary_items_dropped),
            recall_fallbacks: array(recall_fallbacks),
            recall_failures: array(recall_failures),
            archive_rows: array(archive_rows),
            latency,
            unclaimed,
            registry,
        }
    }

    /// Counts one conversation request of `api` (one of the names given
    /// at construction; another is not counted).
    pub fn count_request(&self, api: &str) {
        if let Some((_, counter)) = self.requests.iter().find(|(name, _)| *name == api) {
            counter.inc();
            self.chat_requests.inc();
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
        let overhead = total.saturating_sub(upstream);
        self.latency.overhead[route].observe(overhead.as_secs_f64());
        self.latency.upstream[route].observe(upstream.as_secs_f64());
    }

    /// Records what a conversation request forwarded: the tokens of the
    /// client's messages and of the forwarded view (smaller when folded
    /// or compressed).
    pub fn observe_forwarded(&self, tokens_in: u32, tokens_out: u32) {
        self.tokens_saved
            .inc_by(u64::from(tokens_in.saturating_sub(tokens_out)));
    }

    /// Renders every metric; `extra` appends gauges owned elsewhere.
    pub fn render(&self, extra: &[Gauge]) -> String {
        let mut gauges = Registry::default();
        for gauge in extra {
            let family =
                Family::<Vec<(&'static str, String)>, GaugeMetric<f64, AtomicU64>>::default();
            for (labels, value) in &gauge.samples {
                family.get_or_create(labels).set(*value);
            }
            gauges.register(gauge.name, gauge.help.trim_end_matches('.'), family);
        }
        let mut out = String::new();
        // Writing to a String does not fail.
        let _ = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &gauges))
            .and_then(|()| encode_eof(&mut out));
        out
    }
}

impl Latencies {
    /// Histograms for these routes and [`OTHER_ROUTE`], registered.
    fn register(registry: &mut Registry, routes: impl IntoIterator<Item = &'static str>) -> Self {
        let mut routes: Vec<&'static str> = routes.into_iter().collect();
        routes.push(OTHER_ROUTE);
        let mut by_route = |name: &str, help: &str, make: fn() -> Histogram| {
            let family = Family::<Label, Histogram, fn() -> Histogram>::new_with_constructor(make);
            registry.register(name, help, family.clone());
            routes
                .iter()
                .map(|r| family.get_or_create_owned(&[("route", r)]))
                .collect::<Vec<_>>()
        };
        let overhead = by_route(
            "foldgate_overhead_seconds",
            "foldgate's own time per forwarded request (to the response head, minus the upstream's)",
            || Histogram::new(OVERHEAD_BUCKETS.iter().copied()),
        );
        let upstream = by_route(
            "foldgate_upstream_seconds",
            "Upstream time to the response head",
            || Histogram::new(UPSTREAM_BUCKETS.iter().copied()),
        );
        let summarizer = Histogram::new(SUMMARIZER_BUCKETS.iter().copied());
        registry.register(
            "foldgate_summarizer_seconds",
            "Summarizer time per fold, every call and chunk included",
            summarizer.clone(),
        );
        Self {
            routes,
            overhead,
            upstream,
            summarizer,
        }
    }
}

/// The counters of one label family, in the order of its label values.
fn array<const N: usize>(counters: Vec<Counter>) -> [Counter; N] {
    let mut it = counters.into_iter();
    std::array::from_fn(|_| it.next().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_is_exported_under_its_name_from_the_start() {
        let m = Metrics::with_routes(["chat", "gemini"]);
        m.folds_new[1].inc();
        m.count_request("gemini");
        m.count_request("gemini");
        m.count_request("nope");
        m.observe_request("chat", Duration::from_millis(7), Duration::from_millis(5));
        m.observe_request("unknown", Duration::from_millis(1), Duration::ZERO);
        let text = m.render(&[Gauge {
            name: "g",
            help: "A gauge.",
            samples: vec![(vec![("model", "a\"b".to_string())], 1.5)],
        }]);
        for line in [
            "# HELP foldgate_requests Conversation requests the pipeline took, by API.\n",
            "foldgate_requests_total{api=\"chat\"} 0\n",
            "foldgate_requests_total{api=\"gemini\"} 2\n",
            "foldgate_chat_requests_total 2\n",
            "foldgate_folds_total{reason=\"token\"} 1\n",
            "foldgate_folds_total{reason=\"idle\"} 0\n",
            "foldgate_recall_failures_total{cause=\"recall_after_last\"} 0\n",
            "foldgate_overhead_seconds_bucket{le=\"0.0025\",route=\"chat\"} 1\n",
            "foldgate_overhead_seconds_count{route=\"other\"} 1\n",
            "foldgate_summarizer_seconds_count 0\n",
            "g{model=\"a\\\"b\"} 1.5\n",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# TYPE foldgate_overhead_seconds ").count(), 1);
    }
}
