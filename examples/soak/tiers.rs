//! The soak's readings of the new tiers: foldgate's recall and archive
//! counters from `/foldgate/metrics`, the archive rows Redis stored over
//! the run, and the checks on them (rows stored = rows foldgate handed to
//! the archive for the messages it folded and stubbed, once the spool has
//! drained).

use super::redis::{Archived, RedisServer};
use super::upstream::Injected;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Longest wait, after the clients stop, for the spool to drain and the
/// last background folds to finish.
const SETTLE_WITHIN: Duration = Duration::from_secs(60);

/// foldgate's metrics text, or `None` when it does not answer.
pub async fn metrics(base: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let read = async {
        let mut stream = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
            .await
            .ok()?;
        let req = b"GET /foldgate/metrics HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n\r\n";
        stream.write_all(req).await.ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        Some(text)
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()
        .flatten()
}

/// The sum of every sample of `name` (all its labels), or of one sample
/// when `name` carries its labels (`foldgate_x_total{by="fold"}`).
pub fn value(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            *series == name || (!name.contains('{') && series.split('{').next() == Some(name))
        })
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Samples of a labelled counter, `label=value` joined.
fn by_label(text: &str, name: &str) -> String {
    let parts: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|l| l.split_once("} "))
        .filter(|(_, v)| *v != "0")
        .map(|(labels, v)| format!("{labels} {v}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// Rows foldgate handed to the archive.
fn handed(text: &str) -> u64 {
    value(text, "foldgate_archive_rows_total")
}

/// Waits until the spool is empty and the rows handed stay the same for
/// 3 s (the last background folds done); returns the last metrics text.
pub async fn settle(base: &str) -> Option<String> {
    let started = Instant::now();
    let mut last: Option<(u64, Instant)> = None;
    let mut text = None;
    while started.elapsed() < SETTLE_WITHIN {
        if let Some(t) = metrics(base).await {
            let rows = handed(&t);
            let spooled = value(&t, "foldgate_archive_spool_rows");
            match last {
                Some((r, since)) if r == rows && spooled == 0 => {
                    if since.elapsed() >= Duration::from_secs(3) {
                        return Some(t);
                    }
                }
                _ => last = Some((rows, Instant::now())),
            }
            text = Some(t);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    text
}

/// Prints the APIs', recall's, folds' and the archive's figures from
/// foldgate's metrics `t`: (archive rows handed by folds, by stubs).
fn print_figures(t: &str, i: &Injected) -> (u64, u64) {
    println!(
        "\nAPIs (upstream requests): anthropic {}, responses {}; recall calls the scripted model made: {} ({} streamed) of {} requests offering the tool",
        i.anthropic.load(Ordering::Relaxed),
        i.responses.load(Ordering::Relaxed),
        i.recall_calls.load(Ordering::Relaxed),
        i.recall_calls_streamed.load(Ordering::Relaxed),
        i.recall_offers.load(Ordering::Relaxed),
    );
    println!(
        "recall (foldgate): offers {}, calls answered {}, fallbacks {} ({}), failures {} ({})",
        value(t, "foldgate_recall_offers_total"),
        value(t, "foldgate_recall_calls_total"),
        value(t, "foldgate_recall_fallbacks_total"),
        by_label(t, "foldgate_recall_fallbacks_total"),
        value(t, "foldgate_recall_failures_total"),
        by_label(t, "foldgate_recall_failures_total"),
    );
    let (fold_rows, stub_rows) = (
        value(t, "foldgate_archive_rows_total{by=\"fold\"}"),
        value(t, "foldgate_archive_rows_total{by=\"compress\"}"),
    );
    println!(
        "folds: {} ({}), fold failures {}, stubs forwarded {}; archive rows handed: {} folded + {} stubbed = {}; spooled {}, replayed {}, left in spool {}, vetoed folds {}",
        value(t, "foldgate_folds_total"),
        by_label(t, "foldgate_folds_total"),
        value(t, "foldgate_fold_failures_total"),
        value(t, "foldgate_compressed_messages_total"),
        fold_rows,
        stub_rows,
        fold_rows + stub_rows,
        value(t, "foldgate_archive_spooled_rows_total"),
        value(t, "foldgate_archive_replayed_rows_total"),
        value(t, "foldgate_archive_spool_rows"),
        value(t, "foldgate_archive_vetoed_folds_total"),
    );
    (fold_rows, stub_rows)
}

/// Prints the tiers' figures and returns their checks.
pub async fn report(
    text: Option<&str>,
    redis: &mut RedisServer,
    injected: &Injected,
    leaked: u64,
) -> Vec<(bool, String)> {
    let t = text.unwrap_or_default();
    let archived = redis.archived().await;
    let (fold_rows, stub_rows) = print_figures(t, injected);
    let mut checks = vec![
        (
            text.is_some(),
            "foldgate's metrics read after the run".to_string(),
        ),
        (
            leaked == 0,
            format!("no foldgate_recall shown to a client ({leaked} answers did)"),
        ),
        (
            value(t, "foldgate_recall_calls_total") > 0,
            "some recall rounds answered".into(),
        ),
        (
            redis.restarts > 0,
            format!("Redis restarted {} times", redis.restarts),
        ),
        (
            text.is_some() && value(t, "foldgate_archive_spool_rows") == 0,
            "the archive spool drained".into(),
        ),
        (
            value(t, "foldgate_archive_spooled_rows_total") > 0,
            "the outages spooled archive rows (the spool was used)".into(),
        ),
    ];
    match archived {
        Ok(Archived {
            rows,
            messages,
            entries,
            lists,
        }) => {
            let handed = fold_rows + stub_rows;
            println!(
                "Redis: {} restarts; archive rows stored over the run {rows} ({messages} distinct messages, {entries} list entries with copies, {lists} lists at the end)",
                redis.restarts
            );
            // Distinct rows below the rows handed, with no entry missing:
            // identical rows were handed twice (a duplicate, not a loss).
            if rows < handed && entries >= handed {
                println!(
                    "note: {} rows handed were identical to rows handed before",
                    handed - rows
                );
            }
            checks.push((
                text.is_some() && entries >= handed && rows <= handed,
                format!(
                    "no archive row lost: list entries {entries} >= rows handed {handed}, distinct rows {rows} <= rows handed"
                ),
            ));
        }
        Err(e) => checks.push((false, format!("Redis readable at the end ({e})"))),
    }
    checks
}
