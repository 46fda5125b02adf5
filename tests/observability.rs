//! Metrics scraped over HTTP from `/foldgate/metrics`: latency histograms
//! (foldgate's overhead, the upstream, the summarizer) and tokens saved.

use crate::common;

use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::{Foldgate, Reply, metric};
use std::sync::atomic::Ordering;

fn tokens(reply: &Reply, header: &str) -> f64 {
    reply.header(header).parse().unwrap()
}

fn saved(reply: &Reply) -> f64 {
    tokens(reply, "x-foldgate-tokens-in") - tokens(reply, "x-foldgate-tokens-out")
}

#[tokio::test]
async fn histograms_and_tokens_saved_follow_the_requests() {
    let llm = Llm::start().await;
    // Every summarizer call takes at least 1.5 s.
    llm.state.summarizer_delay_ms.store(1500, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&llm, "")).await;
    let before = fg.metrics().await;
    assert_eq!(
        metric(&before, "foldgate_overhead_seconds_count{route=\"chat\"}"),
        0.0
    );
    assert_eq!(metric(&before, "foldgate_tokens_saved_total"), 0.0);

    // A short conversation passes unfolded: nothing saved.
    let mut short = Convo::with_turns(2);
    let none = chat(&fg, "short", &short).await;
    assert_eq!(label(&none), "none");
    // A long one folds inline (one summarizer call), then reuses the fold.
    let mut long = Convo::with_turns(55);
    let new = chat(&fg, "long", &long).await;
    assert_eq!(label(&new), "new");
    long.next_turn("one more question");
    let reused = chat(&fg, "long", &long).await;
    assert_eq!(label(&reused), "reused");
    short.next_turn("still short");
    assert_eq!(label(&chat(&fg, "short", &short).await), "none");
    // A request foldgate only forwards.
    common::send(http::Method::GET, &format!("{}/v1/models", fg.url), &[], "").await;

    let text = fg.metrics().await;
    assert!(saved(&new) > 0.0 && saved(&reused) > 0.0);
    assert_eq!(
        metric(&text, "foldgate_tokens_saved_total"),
        saved(&new) + saved(&reused),
        "tokens saved are the folded requests' tokens in minus tokens out"
    );
    for (route, requests) in [
        ("chat", 4.0),
        ("anthropic", 0.0),
        ("responses", 0.0),
        ("gemini", 0.0),
        ("other", 1.0),
    ] {
        // Conversation requests, counted by API; a forwarded-only request
        // is none.
        if route != "other" {
            let counted = metric(
                &text,
                &format!("foldgate_requests_total{{api=\"{route}\"}}"),
            );
            assert_eq!(counted, requests, "requests of {route}\n{text}");
        }
        for name in ["foldgate_overhead_seconds", "foldgate_upstream_seconds"] {
            let count = metric(&text, &format!("{name}_count{{route=\"{route}\"}}"));
            assert_eq!(count, requests, "{name} {route}\n{text}");
            let inf = metric(
                &text,
                &format!("{name}_bucket{{le=\"+Inf\",route=\"{route}\"}}"),
            );
            assert_eq!(
                inf, requests,
                "{name} {route}: +Inf bucket holds every request"
            );
        }
    }
    // The fold ran on the request path: its 1.5 s are foldgate's overhead,
    // not the upstream's.
    let overhead = metric(&text, "foldgate_overhead_seconds_sum{route=\"chat\"}");
    assert!(overhead >= 1.5, "overhead sum {overhead}\n{text}");
    let fast = metric(
        &text,
        "foldgate_overhead_seconds_bucket{le=\"1.0\",route=\"chat\"}",
    );
    assert_eq!(
        fast, 3.0,
        "only the folding request took over a second\n{text}"
    );
    let upstream = metric(&text, "foldgate_upstream_seconds_sum{route=\"chat\"}");
    assert!(
        upstream < overhead,
        "upstream {upstream} vs overhead {overhead}"
    );
    // One fold, one observation of the summarizer's time.
    assert_eq!(metric(&text, "foldgate_summarizer_seconds_count"), 1.0);
    assert!(metric(&text, "foldgate_summarizer_seconds_sum") >= 1.5);
    assert_eq!(
        metric(&text, "foldgate_summarizer_seconds_bucket{le=\"1.0\"}"),
        0.0
    );
    assert!(text.contains("# TYPE foldgate_overhead_seconds histogram"));
    // OpenMetrics, said so in the Content-Type.
    let url = format!("{}/foldgate/metrics", fg.url);
    let scrape = common::send(http::Method::GET, &url, &[], "").await;
    assert!(
        scrape
            .header("content-type")
            .starts_with("application/openmetrics-text; version=1.0.0")
    );
    assert!(text.ends_with("# EOF\n"));
}
