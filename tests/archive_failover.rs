//! The Redis archive writer through a cluster failover whose old master
//! comes back: a real Redis Cluster (three masters, a replica each) on
//! loopback, foldgate in this process. The master holding a folded
//! conversation's archive list is killed while foldgate is idle, its
//! replica takes over, and the killed node restarts from its `nodes.conf`
//! and rejoins as a replica of its successor, on the same address. The
//! archive's cluster client still maps those slots to that address, and
//! its connections are `READONLY` (the client sends it to every node), so
//! the rejoined replica answers a read of those slots itself while
//! refusing the writer's transaction (`MOVED` inside `EXECABORT`): a
//! probe by a read teaches the client nothing and the writer would retry
//! the same transaction forever. The next fold on those slots must still
//! reach the new master: the spool drains, archive rows = rows handed.

use crate::common;

use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::redis::Cluster;
use common::{Foldgate, metric};
use std::time::{Duration, Instant};

/// The most the writer may take to land the rows after the failover: far
/// above its longest backoff (2 s) and a slot refresh.
const DRAIN_WITHIN: Duration = Duration::from_secs(60);

/// Archive list entries in the cluster, all lists summed.
fn archived(cluster: &Cluster) -> usize {
    cluster
        .keys("foldgate:archive:*")
        .iter()
        .map(|k| {
            cluster
                .on_key(k, &["LLEN", k])
                .trim()
                .parse::<usize>()
                .unwrap()
        })
        .sum()
}

/// Waits until foldgate's spool is empty and the cluster holds every row
/// it handed the archive; panics with both counts after `within`.
async fn wait_all_archived(fg: &Foldgate, cluster: &Cluster, within: Duration) -> usize {
    let started = Instant::now();
    loop {
        let metrics = fg.metrics().await;
        let spooled = metric(&metrics, "foldgate_archive_spool_rows");
        let handed = metric(&metrics, "foldgate_archive_rows_total{by=\"fold\"}") as usize;
        let stored = archived(cluster);
        if spooled == 0.0 && stored == handed {
            return handed;
        }
        assert!(
            started.elapsed() < within,
            "not within {within:?}: {spooled} rows still spooled, {stored} archive rows in Redis of {handed} handed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_writer_finds_the_new_master_when_the_old_one_rejoins_as_a_replica() {
    let mut cluster = Cluster::start();
    let llm = Llm::start().await;
    let state = format!(
        "[state]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"500ms\"\n",
        cluster.url()
    );
    let fg = Foldgate::start(&config(&llm, &state)).await;

    // A first fold: the archive's client maps the slots and writes there.
    let reply = chat(&fg, "before", &Convo::with_turns(55)).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    let before = wait_all_archived(&fg, &cluster, DRAIN_WITHIN).await;
    assert!(before > 0, "the first fold archived rows");
    let list = cluster.keys("foldgate:archive:*").remove(0);

    // Its master dies, its replica takes over, and the old master returns
    // as that replica's replica, all while foldgate sends nothing.
    let old = cluster.kill_master_of(&list);
    cluster.restart(old);
    let new = cluster.master_of(&list);
    assert_ne!(new, old, "the restarted node is a replica now");

    // A conversation whose archive list lives on the same master: the
    // client still maps its slot to the old address.
    let tag = list
        .trim_start_matches("foldgate:archive:{")
        .split(':')
        .next()
        .unwrap()
        .to_string();
    let after = (0..200)
        .map(|i| format!("after-{i}"))
        .find(|id| cluster.master_of(&format!("foldgate:archive:{{{tag}:{id}}}")) == new)
        .expect("a conversation on the failed-over master's slots");
    let reply = chat(&fg, &after, &Convo::with_turns(55)).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new", "the second conversation folds");

    let handed = wait_all_archived(&fg, &cluster, DRAIN_WITHIN).await;
    assert!(handed > before, "the second fold archived rows too");
}
