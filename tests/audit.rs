//! Every fold's audit record: a conversation keeps only its last 8 fold
//! states for matching, but the admin API (list and detail) and so the
//! dashboard count and show every fold it made, on every state backend.
//! Ten folds through the real server, on memory, SQLite (also across a
//! restart) and a real redis-server.

use crate::common;

use common::convo::{Convo, chat, label};
use common::llm::Llm;
use common::redis::Redis;
use common::{Foldgate, send};
use foldgate::fold::FoldChain;
use http::Method;
use serde_json::Value;

/// More folds than the chain holds.
const FOLDS: usize = 10;

/// foldgate folding on every user turn (`safety_user_turns = 1`), with the
/// `[state]` section `state`.
fn config(llm: &Llm, state: &str) -> String {
    format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n\
         [models.\"tiny-*\"]\ncontext_window = 4000\n\
         [policy]\nmode = \"inline\"\npreserve_recent = 2\nsafety_user_turns = 1\n\
         [summarizer]\nmax_summary_tokens = 400\nretries = 0\ntimeout = \"5s\"\n\
         [state]\n{state}\n",
        llm.url()
    )
}

/// Folds conversation `id` [`FOLDS`] times, one fold per request.
async fn fold_ten_times(fg: &Foldgate, id: &str) {
    let mut convo = Convo::with_turns(3);
    for i in 0..FOLDS {
        if i > 0 {
            convo.next_turn(&format!("turn {i}"));
        }
        let reply = chat(fg, id, &convo).await;
        reply.assert_ok();
        assert_eq!(label(&reply), "new", "request {i} folds");
    }
}

async fn admin(fg: &Foldgate, path: &str) -> Value {
    let reply = send(
        Method::GET,
        &format!("{}/foldgate/{path}", fg.url),
        &[("authorization", "Bearer sk-tenant-a")],
        "",
    )
    .await;
    reply.assert_ok();
    reply.json()
}

/// What the admin API says of conversation `id`: every fold, counted in
/// the list and shown in the detail, the held ones in full.
async fn assert_every_fold_shown(fg: &Foldgate, id: &str, backend: &str) {
    let list = admin(fg, "conversations").await;
    let entry = list["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["conversation"] == id)
        .unwrap_or_else(|| panic!("{backend}: {id} not listed: {list}"))
        .clone();
    assert_eq!(entry["folds"], FOLDS, "{backend}: the list counts all");

    let detail = admin(fg, &format!("conversations/{id}")).await;
    let state = &detail["states"][0];
    assert_eq!(state["folds_made"], FOLDS, "{backend}");
    let folds = state["folds"].as_array().unwrap();
    assert_eq!(folds.len(), FOLDS, "{backend}: the detail shows all");
    let covered: Vec<u64> = folds
        .iter()
        .map(|f| f["covered"].as_u64().unwrap())
        .collect();
    assert!(
        covered.windows(2).all(|w| w[0] < w[1]),
        "{backend}: oldest first, each fold spanning more: {covered:?}"
    );
    let depths: Vec<u64> = folds.iter().map(|f| f["depth"].as_u64().unwrap()).collect();
    assert_eq!(depths, (1..=FOLDS as u64).collect::<Vec<_>>(), "{backend}");
    for (i, fold) in folds.iter().enumerate() {
        assert!(fold["reason"].is_string(), "{backend}: {fold}");
        assert!(
            fold["tokens_before"].is_u64() && fold["api"] == "chat",
            "{backend}: {fold}"
        );
        assert!(fold["summarizer"]["model"].is_string(), "{backend}: {fold}");
        let held = i >= FOLDS - FoldChain::MAX;
        assert_eq!(
            fold.get("summary").is_some(),
            held,
            "{backend}: fold {i} in full only while the chain holds it"
        );
    }
}

#[tokio::test]
async fn memory_shows_every_fold() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "backend = \"memory\"")).await;
    fold_ten_times(&fg, "audit-memory").await;
    assert_every_fold_shown(&fg, "audit-memory", "memory").await;
}

#[tokio::test]
async fn sqlite_shows_every_fold_also_after_a_restart() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("foldgate.db");
    let state = format!(
        "backend = \"sqlite\"\npath = {:?}",
        db.display().to_string()
    );
    let mut fg = Foldgate::start(&config(&llm, &state)).await;
    fold_ten_times(&fg, "audit-sqlite").await;
    assert_every_fold_shown(&fg, "audit-sqlite", "sqlite").await;

    fg.begin_shutdown();
    if let Some(task) = fg.task.take() {
        task.await.unwrap();
    }
    let fg = Foldgate::start(&config(&llm, &state)).await;
    assert_every_fold_shown(&fg, "audit-sqlite", "sqlite after a restart").await;
}

#[tokio::test]
async fn redis_shows_every_fold_to_every_replica() {
    let llm = Llm::start().await;
    let redis = Redis::start();
    let state = format!("backend = \"redis\"\nurl = \"{}\"", redis.url());
    let fg = Foldgate::start(&config(&llm, &state)).await;
    fold_ten_times(&fg, "audit-redis").await;
    assert_every_fold_shown(&fg, "audit-redis", "redis").await;
    // Another replica reads the audit from Redis alone.
    let other = Foldgate::start(&config(&llm, &state)).await;
    assert_every_fold_shown(&other, "audit-redis", "redis, another replica").await;
}
