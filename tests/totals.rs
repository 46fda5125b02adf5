//! The dashboard's totals (`/foldgate/totals`) come from the fold history
//! in the state store, not from this process's counters: after a restart
//! on the same SQLite file they still agree with the conversation list,
//! while the metrics start again from zero.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::Llm;
use common::{Foldgate, Reply, folds_counted, post_json, send};
use http::Method;
use serde_json::Value;

const ADMIN: &str = "adm-totals";

/// Folds `conversation` on its first request as the tenant of `key`.
async fn fold_as(fg: &Foldgate, key: &str, conversation: &str) {
    let reply = post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[
            ("x-conversation-id", conversation),
            ("authorization", &format!("Bearer {key}")),
        ],
        &Convo::with_turns(55).body(),
    )
    .await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
}

async fn get(fg: &Foldgate, path: &str, key: &str) -> Reply {
    let auth = format!("Bearer {key}");
    send(
        Method::GET,
        &format!("{}{path}", fg.url),
        &[("authorization", &auth)],
        "",
    )
    .await
}

async fn totals(fg: &Foldgate, key: &str) -> Value {
    let reply = get(fg, "/foldgate/totals", key).await;
    reply.assert_ok();
    reply.json()
}

/// The folds the listing shows, summed over its one page.
async fn listed_folds(fg: &Foldgate, key: &str) -> u64 {
    let reply = get(fg, "/foldgate/conversations?limit=500", key).await;
    reply.assert_ok();
    let list = reply.json();
    assert!(list["next"].is_null(), "{list}");
    list["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["folds"].as_u64().unwrap())
        .sum()
}

#[tokio::test]
async fn totals_come_from_the_fold_history_and_survive_a_restart() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("foldgate.db");
    let toml = config(
        &llm,
        &format!(
            "[server]\nadmin_token = \"{ADMIN}\"\n[state]\nbackend = \"sqlite\"\npath = {:?}\n",
            db.display().to_string()
        ),
    );
    let mut fg = Foldgate::start(&toml).await;
    for id in ["t-1", "t-2", "t-3"] {
        fold_as(&fg, "sk-a", id).await;
    }
    fold_as(&fg, "sk-b", "t-1").await;

    let before = totals(&fg, ADMIN).await;
    assert_eq!(before["folds"], 4, "{before}");
    assert_eq!(before["conversations"], 4, "{before}");
    assert_eq!(before["failed_folds"], 0, "{before}");
    assert_eq!(before["complete"], true, "{before}");
    assert_eq!(before["summarizer"]["folds"], 4, "{before}");
    assert!(
        before["summarizer"]["calls"].as_u64().unwrap() >= 4,
        "{before}"
    );
    assert!(
        before["summarizer"]["mean_ms_per_fold"].is_u64(),
        "{before}"
    );
    assert_eq!(listed_folds(&fg, ADMIN).await, 4);
    // Tenant-scoped like the listing.
    assert_eq!(totals(&fg, "sk-a").await["folds"], 3);
    assert_eq!(totals(&fg, "sk-b").await["folds"], 1);
    assert_eq!(totals(&fg, "sk-nobody").await["folds"], 0);
    assert_eq!(folds_counted(&fg.metrics().await), 4.0);

    fg.begin_shutdown();
    if let Some(task) = fg.task.take() {
        task.await.unwrap();
    }
    let fg = Foldgate::start(&toml).await;
    let after = totals(&fg, ADMIN).await;
    assert_eq!(after, before, "the totals are the stored history's");
    assert_eq!(listed_folds(&fg, ADMIN).await, 4, "and match the table");
    assert_eq!(totals(&fg, "sk-a").await["folds"], 3);
    // The process's own counters started again: the reason the totals
    // are not read from them.
    assert_eq!(folds_counted(&fg.metrics().await), 0.0);
    // Guarded like the listing: with an admin token set, no credential
    // reads nothing.
    send(Method::GET, &format!("{}/foldgate/totals", fg.url), &[], "")
        .await
        .assert_envelope(401, "invalid_api_key");
}
