//! The SQLite backend: folds survive a restart, corrupted rows are
//! discarded, and `foldgate prune` deletes exactly what is old.

use crate::common;

use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::{Foldgate, send};
use http::Method;
use rusqlite::{Connection, params};
use std::path::Path;

fn sqlite_config(llm: &Llm, db: &Path) -> String {
    config(
        llm,
        &format!(
            "[state]\nbackend = \"sqlite\"\npath = {:?}\n",
            db.display().to_string()
        ),
    )
}

/// Stops foldgate and waits until it has let go of the database.
async fn stop(mut fg: Foldgate) {
    fg.begin_shutdown();
    if let Some(task) = fg.task.take() {
        task.await.unwrap();
    }
}

/// Folds `conversation` once; returns the conversation for its next turn.
async fn fold(fg: &Foldgate, llm: &Llm, conversation: &str) -> Convo {
    let calls = llm.summarizer_calls();
    let convo = Convo::with_turns(55);
    let reply = chat(fg, conversation, &convo).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    assert!(llm.summarizer_calls() > calls);
    convo
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn a_fold_survives_a_restart() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state/foldgate.db");
    let fg = Foldgate::start(&sqlite_config(&llm, &db)).await;
    let mut convo = fold(&fg, &llm, "survivor").await;
    let calls = llm.summarizer_calls();
    stop(fg).await;
    assert!(db.exists(), "the database and its directory are created");

    let fg = Foldgate::start(&sqlite_config(&llm, &db)).await;
    convo.next_turn("after the restart");
    let reply = chat(&fg, "survivor", &convo).await;
    assert_eq!(reply.status, 200);
    assert_eq!(label(&reply), "reused", "the fold is read back from SQLite");
    assert_eq!(llm.summarizer_calls(), calls, "no new summarizer call");

    // The admin endpoint serves the chain from the database too.
    let admin = send(
        Method::GET,
        &format!("{}/foldgate/conversations/survivor", fg.url),
        &[("authorization", "Bearer sk-tenant-a")],
        "",
    )
    .await;
    assert_eq!(admin.status, 200);
    assert_eq!(
        admin.json()["states"][0]["folds"].as_array().map(Vec::len),
        Some(1),
        "{}",
        admin.json()
    );

    // Every fold is in the audit trail.
    stop(fg).await;
    let conn = Connection::open(&db).unwrap();
    let (depth, reason, summary): (i64, String, String) = conn
        .query_row(
            "SELECT depth, reason, summary FROM folds WHERE conversation = 'survivor'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((depth, reason.as_str()), (1, "token"));
    assert!(serde_json::from_str::<serde_json::Value>(&summary).unwrap()["facts"].is_array());
}

#[tokio::test]
async fn a_corrupted_row_is_discarded_and_the_conversation_folds_again() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("foldgate.db");
    let fg = Foldgate::start(&sqlite_config(&llm, &db)).await;
    let mut convo = fold(&fg, &llm, "damaged").await;
    stop(fg).await;

    let conn = Connection::open(&db).unwrap();
    let changed = conn
        .execute(
            "UPDATE conversations SET chain = ?1 WHERE conversation = 'damaged'",
            params![vec![0xde_u8, 0xad, 0xbe, 0xef]],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);

    let fg = Foldgate::start(&sqlite_config(&llm, &db)).await;
    let calls = llm.summarizer_calls();
    convo.next_turn("after the damage");
    let reply = chat(&fg, "damaged", &convo).await;
    reply.assert_ok();
    assert_eq!(
        label(&reply),
        "new",
        "the bad state is discarded and the conversation refolds"
    );
    assert!(llm.summarizer_calls() > calls);
    convo.next_turn("and then");
    assert_eq!(label(&chat(&fg, "damaged", &convo).await), "reused");
    let health = send(Method::GET, &format!("{}/foldgate/health", fg.url), &[], "").await;
    assert_eq!(health.status, 200);
}

#[tokio::test]
async fn prune_removes_old_states_and_keeps_recent_ones() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("foldgate.db");
    let toml = sqlite_config(&llm, &db);
    let fg = Foldgate::start(&toml).await;
    let mut old = fold(&fg, &llm, "old").await;
    let mut recent = fold(&fg, &llm, "recent").await;
    stop(fg).await;

    let forty_days_ago = now() - 40 * 86_400;
    let conn = Connection::open(&db).unwrap();
    conn.execute(
        "UPDATE conversations SET used_at = ?1, updated_at = ?1 WHERE conversation = 'old'",
        [forty_days_ago],
    )
    .unwrap();
    conn.execute(
        "UPDATE folds SET created_at = ?1 WHERE conversation = 'old'",
        [forty_days_ago],
    )
    .unwrap();
    drop(conn);

    let text = common::prune(dir.path(), &toml, "30d");
    assert!(
        text.contains("pruned 1 conversation states and 1 fold audit rows"),
        "{text}"
    );

    let conn = Connection::open(&db).unwrap();
    let left = |table: &str| -> Vec<String> {
        conn.prepare(&format!(
            "SELECT conversation FROM {table} ORDER BY conversation"
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    assert_eq!(left("conversations"), ["recent"]);
    assert_eq!(left("folds"), ["recent"]);
    drop(conn);

    let fg = Foldgate::start(&toml).await;
    recent.next_turn("still here");
    assert_eq!(label(&chat(&fg, "recent", &recent).await), "reused");
    old.next_turn("gone");
    assert_eq!(
        label(&chat(&fg, "old", &old).await),
        "new",
        "the pruned conversation folds again"
    );
}

#[test]
fn state_settings_are_validated_by_key() {
    use foldgate::config::{Config, StateBackend};
    let default = Config::from_toml("").unwrap();
    assert_eq!(default.state.backend, StateBackend::Sqlite);
    assert_eq!(default.state.path, Path::new("./foldgate.db"));
    for (toml, key) in [
        ("[state]\nbackend = \"redis\"\n", "state.url"),
        (
            "[state]\nbackend = \"redis\"\nurl = \"http://x\"\n",
            "state.url",
        ),
        ("[state]\nbackend = \"sqlite\"\npath = \"\"\n", "state.path"),
        ("[state]\nttl = \"0s\"\n", "state.ttl"),
        ("[state]\nbackend = \"etcd\"\n", "etcd"),
        ("[state]\nrefesh = \"1s\"\n", "refesh"),
    ] {
        let err = Config::from_toml(toml).unwrap_err().to_string();
        assert!(err.contains(key), "{toml}: {err}");
    }
    let ok = Config::from_toml(
        "[state]\nbackend = \"redis\"\nurl = \"redis://:hunter2@127.0.0.1:6379/0\"\n",
    )
    .unwrap();
    assert!(
        !format!("{:?}", ok.state).contains("hunter2"),
        "the Redis password never prints"
    );
}
