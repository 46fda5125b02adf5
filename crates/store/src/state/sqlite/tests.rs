//! Schema migration and decode-error handling of the SQLite store.

use super::db::{self, MIGRATIONS, VERSION};
use crate::fold::{ChainHash, FoldChain, FoldState, Reason, Summary};
use crate::state::ConvKey;
use rusqlite::{Connection, params};

fn key(conversation: &str) -> ConvKey {
    ConvKey {
        tenant: "t1".into(),
        conversation: conversation.into(),
    }
}

fn chain(depth: u32, created_at: u64) -> FoldChain {
    let mut chain = FoldChain::new();
    chain.push(FoldState {
        id: format!("state{depth}"),
        parent: None,
        depth,
        summary: Summary {
            summary: "the story".into(),
            facts: vec!["port 8080".into()],
            ..Summary::default()
        },
        ledger: Default::default(),
        covered: 10,
        kept_user: None,
        chain: ChainHash([7; 32]),
        user_turns: 5,
        messages: 14,
        created_at,
        tokens_before: 3000,
        tokens_after: 900,
        reason: Reason::Token,
        summarizer: None,
        api: "chat".into(),
        recall: false,
        retained: Default::default(),
        background: false,
        restub: false,
    });
    chain
}

fn version(conn: &Connection) -> i64 {
    conn.query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_new_database_gets_the_latest_schema_and_reopens_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/state.db");
    let conn = db::open(&path).unwrap();
    assert_eq!(version(&conn), VERSION);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    drop(conn);
    let mut conn = db::open(&path).unwrap();
    assert_eq!(
        db::migrate(&mut conn).unwrap(),
        VERSION,
        "already migrated: nothing to do"
    );
    let versions: i64 = conn
        .query_row("SELECT count(*) FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(versions, 1);
}

#[test]
fn a_version_one_database_is_migrated_and_keeps_its_states() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (1);")
            .unwrap();
        let json = serde_json::to_string(&chain(1, 100)).unwrap();
        conn.execute(
            "INSERT INTO conversations VALUES ('t1', 'old', ?1, ?2, ?2)",
            params![json, i64::MAX / 2],
        )
        .unwrap();
    }
    let mut conn = Connection::open(&path).unwrap();
    assert_eq!(db::migrate(&mut conn).unwrap(), 1);
    assert_eq!(version(&conn), VERSION);
    let loaded = db::load(&conn, &key("old"), 0)
        .unwrap()
        .expect("state kept across the migration");
    assert_eq!(loaded, chain(1, 100));
    // The audit table of version 2 exists and takes rows.
    db::save(&conn, &key("old"), &loaded, 200).unwrap();
    let folds: i64 = conn
        .query_row("SELECT count(*) FROM folds", [], |r| r.get(0))
        .unwrap();
    assert_eq!(folds, 1);
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    drop(db::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    conn.execute("UPDATE schema_version SET version = ?1", [VERSION + 1])
        .unwrap();
    drop(conn);
    let err = db::open(&path).unwrap_err().to_string();
    assert!(err.contains("state.path") && err.contains("newer"), "{err}");
}

#[test]
fn rows_that_do_not_decode_are_discarded_and_others_survive() {
    let dir = tempfile::tempdir().unwrap();
    let conn = db::open(&dir.path().join("s.db")).unwrap();
    db::save(&conn, &key("good"), &chain(1, 100), 1000).unwrap();
    for (conv, garbage) in [
        ("text", rusqlite::types::Value::Text("{not json".into())),
        ("blob", rusqlite::types::Value::Blob(vec![0xff, 0x00, 0x13])),
        (
            "shape",
            rusqlite::types::Value::Text(r#"[{"id": 3}]"#.into()),
        ),
        ("null", rusqlite::types::Value::Integer(42)),
    ] {
        conn.execute(
            "INSERT INTO conversations VALUES ('t1', ?1, ?2, 1000, 1000)",
            params![conv, garbage],
        )
        .unwrap();
        assert_eq!(
            db::find(&conn, conv).unwrap().len(),
            0,
            "{conv}: find skips it"
        );
        assert!(db::load(&conn, &key(conv), 0).unwrap().is_none(), "{conv}");
        let left: i64 = conn
            .query_row(
                "SELECT count(*) FROM conversations WHERE conversation = ?1",
                [conv],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "{conv}: the bad row is deleted");
    }
    assert_eq!(
        db::load(&conn, &key("good"), 0).unwrap(),
        Some(chain(1, 100))
    );
}

#[test]
fn idle_states_expire_and_prune_keeps_recent_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = db::open(&dir.path().join("s.db")).unwrap();
    db::save(&conn, &key("old"), &chain(1, 100), 100).unwrap();
    db::save(&conn, &key("new"), &chain(2, 5000), 5000).unwrap();
    assert!(
        db::load(&conn, &key("old"), 1000).unwrap().is_none(),
        "idle past the cutoff"
    );
    db::save(&conn, &key("old"), &chain(1, 100), 100).unwrap();
    db::touch(&conn, &key("old"), 900).unwrap();
    assert!(
        db::load(&conn, &key("old"), 800).unwrap().is_some(),
        "touched after the cutoff"
    );
    let pruned = db::prune(&mut conn, 1000).unwrap();
    assert_eq!(
        pruned,
        db::Pruned {
            states: 1,
            folds: 1
        }
    );
    assert!(db::load(&conn, &key("new"), 0).unwrap().is_some());
    let kept: Vec<String> = conn
        .prepare("SELECT conversation FROM folds")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(kept, ["new"]);
}

#[test]
fn listing_skips_undecodable_and_idle_rows_and_pages_past_them() {
    let dir = tempfile::tempdir().unwrap();
    let conn = db::open(&dir.path().join("s.db")).unwrap();
    for c in ["a", "c", "e"] {
        db::save(&conn, &key(c), &chain(1, 100), 1000).unwrap();
    }
    db::save(&conn, &key("d-idle"), &chain(1, 100), 10).unwrap();
    conn.execute(
        "INSERT INTO conversations VALUES ('t1', 'b-bad', '{not json', 1000, 1000)",
        [],
    )
    .unwrap();
    let mut query = crate::state::ListQuery {
        tenant: Some("t1".into()),
        after: None,
        limit: 2,
    };
    let first = db::list(&conn, &query, 500).unwrap();
    let ids = |p: &crate::state::Page| -> Vec<String> {
        p.conversations
            .iter()
            .map(|(k, _)| k.conversation.clone())
            .collect()
    };
    // The bad row takes a place in the page but is not shown; the cursor
    // still moves past it.
    assert_eq!(ids(&first), ["a"]);
    assert_eq!(first.next, Some(key("b-bad")));
    query.after = first.next;
    let second = db::list(&conn, &query, 500).unwrap();
    assert_eq!(ids(&second), ["c", "e"]);
    assert_eq!(second.next, None);
    query.tenant = Some("other".into());
    query.after = None;
    assert!(
        db::list(&conn, &query, 500)
            .unwrap()
            .conversations
            .is_empty()
    );
}

#[test]
fn the_audit_trail_records_the_summarizer() {
    let dir = tempfile::tempdir().unwrap();
    let conn = db::open(&dir.path().join("s.db")).unwrap();
    let mut recorded = FoldChain::new();
    let state = chain(1, 100).states()[0].clone().with_summarizer(
        "mini-summarizer",
        std::time::Duration::from_millis(1234),
        2,
    );
    recorded.push(state);
    db::save(&conn, &key("audited"), &recorded, 1000).unwrap();
    let (model, latency): (String, i64) = conn
        .query_row(
            "SELECT summarizer_model, latency_ms FROM folds WHERE conversation = 'audited'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((model.as_str(), latency), ("mini-summarizer", 1234));
    let back = db::load(&conn, &key("audited"), 0).unwrap().unwrap();
    assert_eq!(
        back.states()[0].summarizer.as_ref().map(|r| r.calls),
        Some(2)
    );
}
