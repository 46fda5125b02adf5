//! The Redis archive's one writer: hands the spool's oldest batches to
//! Redis in atomic pipelines, in order, and lets them go only once Redis
//! stored them. On one server (or a Sentinel primary) one transaction
//! carries up to [`BATCHES_PER_WRITE`] batches; on a cluster a transaction
//! cannot cross slots, so each run of batches of one conversation (one
//! hash tag, one slot) is its own transaction, and the batches of each
//! transaction Redis took are let go before the next is tried. While Redis refuses, it waits with backoff and tries
//! the same batches again, so what was spooled is replayed first and in
//! the order the folds made it.

use super::{Conn, list_key};
use crate::archive::spool::{Batch, Spool};
use backon::{BackoffBuilder, ExponentialBuilder};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Batches written in one pipeline at most.
const BATCHES_PER_WRITE: usize = 64;
/// First and longest wait between attempts while Redis refuses.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(MIN_BACKOFF)
        .with_max_delay(MAX_BACKOFF)
        .with_jitter()
        .without_max_times()
        .build()
}

/// Writes until `stop` is cancelled (the archive is dropped).
pub(super) async fn run(conn: Conn, spool: Arc<Spool>, stop: CancellationToken) {
    stop.run_until_cancelled(write_forever(conn, spool)).await;
}

async fn write_forever(conn: Conn, spool: Arc<Spool>) {
    let mut delays = backoff();
    let mut outage = false;
    loop {
        let batches = spool.head(BATCHES_PER_WRITE);
        if batches.is_empty() {
            spool.wake.notified().await;
            continue;
        }
        if write_runs(&conn, &spool, &batches).await {
            if outage {
                let (left, _) = spool.depth();
                tracing::info!(target: "foldgate::archive", left, "Redis archive answers again: replaying spooled rows");
                outage = false;
            }
            delays = backoff();
        } else {
            if !outage {
                let (rows, bytes) = spool.depth();
                // The outage itself is told once, by `Outage`.
                tracing::debug!(target: "foldgate::archive", rows, bytes, "archive writes spooled until Redis answers");
                outage = true;
            }
            spool.refused();
            tokio::time::sleep(delays.next().unwrap_or(MAX_BACKOFF)).await;
        }
    }
}

/// Writes `batches` as transactions of batches that may share one (see
/// the module doc), letting each go from the spool once Redis took it;
/// true when Redis took them all.
async fn write_runs(conn: &Conn, spool: &Spool, batches: &[Batch]) -> bool {
    let cluster = conn.conn.is_cluster();
    let mut rest = batches;
    while let Some(first) = rest.first() {
        let run = if cluster {
            rest.iter().take_while(|b| b.key == first.key).count()
        } else {
            rest.len()
        };
        if !write(conn, &rest[..run]).await {
            if cluster {
                reroute(conn, &first.key).await;
            }
            return false;
        }
        spool.stored(run);
        rest = &rest[run..];
    }
    true
}

/// After a failover the cluster answers a transaction sent to the old
/// master with `MOVED` inside `EXECABORT`, which the client does not
/// follow; one plain command on the same key is redirected, and teaches
/// the client the slot's new master for the next attempt. It must be a
/// write: the client opens every node connection `READONLY`, so when the
/// old master has come back as its successor's replica (on the address
/// the client still maps the slot to) it answers a read itself and
/// redirects only writes. Renewing the list's expiry is the write: the
/// transaction being retried renews it anyway, and a missing list stays
/// missing.
async fn reroute(conn: &Conn, key: &crate::state::ConvKey) {
    let mut c = conn.conn.clone();
    let cmd = redis::cmd("PEXPIRE")
        .arg(list_key(key))
        .arg(conn.ttl_ms)
        .clone();
    let _: Option<i64> = conn.op("reroute", cmd.query_async(&mut c)).await;
}

/// Appends each batch's rows to its conversation's list, trims the list
/// and renews its expiry, all in one transaction: true when Redis took it.
async fn write(conn: &Conn, batches: &[Batch]) -> bool {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for batch in batches {
        let json: Vec<String> = batch
            .rows
            .iter()
            .filter_map(|r| serde_json::to_string(r).ok())
            .collect();
        if json.is_empty() {
            continue;
        }
        let list = list_key(&batch.key);
        pipe.rpush(&list, json)
            .ignore()
            .ltrim(&list, -conn.max_messages, -1)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&list)
            .arg(conn.ttl_ms)
            .ignore();
    }
    let mut c = conn.conn.clone();
    conn.op("archive", pipe.query_async::<()>(&mut c))
        .await
        .is_some()
}
