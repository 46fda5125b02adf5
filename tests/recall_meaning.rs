//! Recall that finds what a question asks about, worded otherwise
//! (issue 37, items 3 and 4), through the real server: the archive search
//! drops stop words, compares words by stem (SQLite's index rebuilt with
//! FTS5's `porter` tokenizer on open), leaves out words in most archived
//! messages while rarer ones are left, and retries a phrase that finds
//! nothing by its rarest words; injection counts an archived sentence as
//! shown only when the sentence, not one of its identifiers, is in the view.

use crate::common;

use common::convo::{Convo, chat, config};
use common::llm::{Llm, content_text};
use common::{Foldgate, send};
use http::Method;
use rusqlite::Connection;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const FACT: &str = "The metrics exporter listens on port 9187.";
const GARDEN: &str = "My garden has tomatoes this year.";
/// Every other word of the question in another form than the fact's.
const QUESTION: &str = "Which ports did metric exporters listen to?";
const HEADING: &str = "[foldgate] Recalled from earlier in this conversation";
/// Every message ends with it: long enough that the talk folds in a
/// 4,000-token window, in every message so no search finds by it.
const PAD: &str = "and then we went on talking about the weather, the week, the neighbours, \
                   the shops in town, the news, the football results, the traffic, the trains \
                   and whatever else came up while the kettle was boiling";

/// Two people talking, every message naming its speaker: the fact and a
/// garden remark early (folded), small talk, then `tail` and `question`.
fn talk(tail: &[&str], question: &str) -> Convo {
    let mut convo = Convo::with_turns(0);
    let mut say = |role: &str, who: &str, what: &str| {
        convo
            .messages
            .push(json!({"role": role, "content": format!("{who}: {what} {PAD}")}));
    };
    say("user", "Maya", FACT);
    say("assistant", "Theo", "Noted.");
    say("user", "Maya", GARDEN);
    say("assistant", "Theo", "Nice.");
    for i in 0..60 {
        say("user", "Maya", &format!("Small talk number {i}."));
        say("assistant", "Theo", &format!("Reply number {i}."));
    }
    for (i, line) in tail.iter().enumerate() {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        say(role, if i % 2 == 0 { "Maya" } else { "Theo" }, line);
    }
    convo
        .messages
        .push(json!({"role": "user", "content": question}));
    convo
}

/// The archive search's hits for `q` (as tenant A), waiting up to 5 s for
/// a queued write.
async fn hits(fg: &Foldgate, id: &str, q: &str) -> Vec<String> {
    let q: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
    let url = format!(
        "{}/foldgate/conversations/{id}/archive?q={q}&limit=100",
        fg.url
    );
    let started = Instant::now();
    loop {
        let reply = send(
            Method::GET,
            &url,
            &[("authorization", "Bearer sk-tenant-a")],
            "",
        )
        .await;
        let found: Vec<String> = if reply.status == 200 {
            reply.json()["results"][0]["hits"]
                .as_array()
                .map(|h| h.iter().map(|h| content_text(&h["message"])).collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        if !found.is_empty() || started.elapsed() > Duration::from_secs(5) {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn sqlite(db: &Path) -> String {
    format!(
        "[state]\nbackend = \"sqlite\"\npath = {:?}\n",
        db.display().to_string()
    )
}

/// The searches a shaped query makes find, on one backend (`state`: a
/// `[state]` section, or none for memory).
async fn shaped_queries_find(state: &str) {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, state)).await;
    chat(&fg, "shaped", &talk(&[], "hello")).await.assert_ok();
    // Other word forms: ports/port, metric/metrics, exporters/exporter,
    // listen/listens; no word of the question is in the fact as it is.
    let found = hits(&fg, "shaped", QUESTION).await;
    assert!(
        found.first().is_some_and(|h| h.contains(FACT)),
        "{state}: {found:?}"
    );
    // A speaker's name is in every message: it is left out, the rarer
    // word decides, so only the garden remark is found.
    let found = hits(&fg, "shaped", "What did Maya say about gardens?").await;
    assert!(!found.is_empty(), "{state}");
    assert!(
        found.iter().all(|h| h.contains(GARDEN)),
        "{state}: the name alone finds nothing: {found:?}"
    );
    // Stop words alone are searched as they are (nothing is dropped to
    // an empty query).
    assert!(!hits(&fg, "shaped", "the").await.is_empty(), "{state}");
    // A phrase that finds nothing is retried by its words.
    let found = hits(&fg, "shaped", "exporter-metrics").await;
    assert!(
        found.first().is_some_and(|h| h.contains(FACT)),
        "{state}: {found:?}"
    );
}

#[tokio::test]
async fn a_question_worded_otherwise_finds_its_evidence_in_memory() {
    shaped_queries_find("").await;
}

#[tokio::test]
async fn a_question_worded_otherwise_finds_its_evidence_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    shaped_queries_find(&sqlite(&dir.path().join("f.db"))).await;
}

#[tokio::test]
async fn an_archive_indexed_without_stems_is_rebuilt_on_open() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = config(&llm, &sqlite(&dir.path().join("f.db")));
    let mut fg = Foldgate::start(&toml).await;
    chat(&fg, "old", &talk(&[], "hello")).await.assert_ok();
    assert!(!hits(&fg, "old", "listening").await.is_empty());
    fg.begin_shutdown();
    fg.task.take().unwrap().await.unwrap();
    // Back to the index an archive of the first schema has: no stems.
    let path = dir.path().join("f.archive.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP TABLE archive_fts;
         CREATE VIRTUAL TABLE archive_fts USING fts5(scope, text, content = 'archive', content_rowid = 'id');
         INSERT INTO archive_fts (archive_fts) VALUES ('rebuild');
         UPDATE schema_version SET version = 1;",
    )
    .unwrap();
    let unstemmed: i64 = conn
        .query_row(
            "SELECT count(*) FROM archive_fts WHERE archive_fts MATCH 'text : listening'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unstemmed, 0, "the old index has no stems");
    drop(conn);
    let fg = Foldgate::start(&toml).await;
    let found = hits(&fg, "old", "listening").await;
    assert!(found.first().is_some_and(|h| h.contains(FACT)), "{found:?}");
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2);
}

/// The block injected before the last user message of the last view, if any.
fn injected(llm: &Llm) -> Option<String> {
    let view = llm.chat_requests().pop()?;
    view["messages"]
        .as_array()?
        .iter()
        .map(content_text)
        .find(|t| t.contains(HEADING))
}

#[tokio::test]
async fn the_sentence_is_injected_when_only_its_identifier_is_in_view() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "[archive]\nrecall = \"inject\"\n")).await;
    // The port number is in the recent messages; what it is the port of
    // is not.
    let tail = ["Is 9187 open on the firewall?", "Yes, it is open."];
    let reply = chat(&fg, "meaning", &talk(&tail, QUESTION)).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let block = injected(&llm).expect("an injected block");
    assert!(block.contains(FACT), "{block}");
    assert!(
        !block.contains(GARDEN),
        "only what the question asks: {block}"
    );
    // Once the sentence itself is in view, nothing is injected.
    let tail = [FACT, "Good to know."];
    let reply = chat(&fg, "shown", &talk(&tail, QUESTION)).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-recall-injected"), "");
    assert_eq!(injected(&llm), None);
}

#[tokio::test]
async fn a_tool_calling_model_gets_the_tool_and_the_injection_when_configured() {
    for with_tool in [true, false] {
        let llm = Llm::start().await;
        let extra = format!("[archive]\nrecall = \"tool\"\ninject_with_tool = {with_tool}\n");
        let fg = Foldgate::start(&config(&llm, &extra)).await;
        chat(&fg, "both", &talk(&[], QUESTION)).await.assert_ok();
        let view: Value = llm.chat_requests().pop().unwrap();
        assert!(
            view["tools"].to_string().contains("foldgate_recall"),
            "{with_tool}: the tool is offered"
        );
        let block = injected(&llm);
        assert_eq!(block.is_some(), with_tool, "{block:?}");
        if with_tool {
            assert!(block.unwrap().contains(FACT));
        }
    }
}
