//! The archive tier: every message a fold removes from the view is stored
//! with its metadata, ranked by search, scoped by tenant, bounded per
//! conversation, kept across restarts (SQLite), pruned, and shared through
//! Redis. All through the real server, over HTTP, against the mock LLM.

use crate::common;

use common::convo::{Convo, chat, config, label};
use common::llm::Llm;
use common::redis::Redis;
use common::{Foldgate, Reply, send};
use http::Method;
use rusqlite::Connection;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

const TENANT_A: (&str, &str) = ("authorization", "Bearer sk-tenant-a");
const TENANT_B: (&str, &str) = ("authorization", "Bearer sk-tenant-b");

fn sqlite(db: &Path) -> String {
    format!(
        "[state]\nbackend = \"sqlite\"\npath = {:?}\n",
        db.display().to_string()
    )
}

/// `GET /foldgate/conversations/{id}/archive?q=…&limit=100` with `headers`.
async fn search(fg: &Foldgate, id: &str, q: &str, headers: &[(&str, &str)]) -> Reply {
    let q: String = q
        .bytes()
        .map(|b| match b {
            b' ' => "+".to_string(),
            b if b.is_ascii_alphanumeric() => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    let url = format!(
        "{}/foldgate/conversations/{id}/archive?q={q}&limit=100",
        fg.url
    );
    send(Method::GET, &url, headers, "").await
}

/// Tenant A's hits for `q`, waiting (up to 5 s) until there are at least
/// `min`: Redis writes land in a task of their own.
async fn hits(fg: &Foldgate, id: &str, q: &str, min: usize) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let reply = search(fg, id, q, &[TENANT_A]).await;
        let found = if reply.status == 200 {
            reply.json()["results"][0]["hits"]
                .as_array()
                .cloned()
                .unwrap()
        } else {
            Vec::new()
        };
        if found.len() >= min || started.elapsed() > Duration::from_secs(5) {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Positions of the client's messages that the forwarded view lacks.
fn absent(client: &[Value], view: &[Value]) -> BTreeSet<usize> {
    let mut next = 0;
    let mut present = BTreeSet::new();
    for m in view {
        if let Some(at) = client[next..].iter().position(|c| c == m) {
            present.insert(next + at);
            next += at + 1;
        }
    }
    (0..client.len()).filter(|i| !present.contains(i)).collect()
}

/// The messages of the last chat request the upstream received.
fn last_view(llm: &Llm) -> Vec<Value> {
    llm.chat_requests().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone()
}

/// A conversation with tool exchanges and one planted fact early on.
fn planted() -> Convo {
    let mut convo = Convo::with_turns(4);
    convo.user("where does staging keep its data");
    convo.assistant("The staging database listens on port 5433 at db-stage.internal");
    convo.tools(2);
    for i in 0..46 {
        convo.user(&format!("question {i} about the database layer"));
        convo.assistant(&format!("answer {i}"));
    }
    convo
}

async fn stop(mut fg: Foldgate) {
    fg.begin_shutdown();
    if let Some(task) = fg.task.take() {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn folded_messages_are_archived_with_their_metadata() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let fg = Foldgate::start(&config(&llm, &sqlite(&dir.path().join("f.db")))).await;
    let convo = planted();
    let reply = chat(&fg, "meta", &convo).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");

    let gone = absent(&convo.messages, &last_view(&llm));
    assert!(gone.len() > 10, "the fold removed messages: {gone:?}");
    let listed = hits(&fg, "meta", "", gone.len()).await;
    let archived: BTreeSet<usize> = listed
        .iter()
        .map(|h| h["position"].as_u64().unwrap() as usize)
        .collect();
    assert_eq!(archived, gone, "exactly the messages absent from the view");

    let state = send(
        Method::GET,
        &format!("{}/foldgate/conversations/meta", fg.url),
        &[TENANT_A],
        "",
    )
    .await
    .json();
    let fold_id = state["states"][0]["folds"][0]["id"].as_str().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for hit in &listed {
        let position = hit["position"].as_u64().unwrap() as usize;
        let message = &convo.messages[position];
        assert_eq!(&hit["message"], message, "stored verbatim");
        assert_eq!(hit["role"], message["role"]);
        assert_eq!(hit["fold"], fold_id);
        assert_eq!(hit["api"], "chat");
        assert!((now - hit["archived_at"].as_i64().unwrap()).abs() < 60);
        let calls: Vec<&str> = message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        let expected = match message["role"].as_str() {
            Some("tool") => Value::from(message["tool_call_id"].as_str().unwrap()),
            Some("assistant") if !calls.is_empty() => Value::from(calls.join(",")),
            _ => Value::Null,
        };
        assert_eq!(hit["tool_call_id"], expected, "{hit}");
    }
    assert!(
        listed.iter().any(|h| h["role"] == "tool"),
        "the tool exchange was folded and archived too"
    );
}

#[tokio::test]
async fn search_ranks_the_right_message_first_in_sqlite_and_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    for state in [sqlite(&dir.path().join("f.db")), String::new()] {
        let llm = Llm::start().await;
        let fg = Foldgate::start(&config(&llm, &state)).await;
        chat(&fg, "rank", &planted()).await.assert_ok();
        let found = hits(&fg, "rank", "staging database port", 1).await;
        assert!(
            found[0]["message"]["content"]
                .as_str()
                .unwrap()
                .contains("port 5433 at db-stage.internal"),
            "{state}: {found:#?}"
        );
        assert!(
            found.len() > 1,
            "other messages mention the database, ranked lower"
        );
        let scores: Vec<f64> = found.iter().map(|h| h["score"].as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
        // A path is matched as a phrase of its words, punctuation is no syntax.
        let path = hits(&fg, "rank", "src/lib.rs", 1).await;
        assert_eq!(path[0]["role"], "assistant", "{path:#?}");
        assert!(path[0]["message"]["tool_calls"].is_array());
        let none = search(&fg, "rank", "kubernetes \"OR\" NEAR(", &[TENANT_A]).await;
        none.assert_ok();
        assert_eq!(none.json()["results"][0]["hits"], Value::Array(vec![]));
    }
}

/// A talk between two people, every turn led by its speaker's name (so
/// each name is too common to search by): Maya names the instrument more
/// often and in shorter turns, Theo once; then a question about Theo.
fn two_speakers() -> Convo {
    let mut convo = Convo::with_turns(0);
    convo.user("Maya: an instrument shop opened, instrument strings half price");
    convo.assistant("Theo: I bought a banjo at the flea market on Sunday, my very first instrument, and the case it came in smells of old cigars");
    convo.user("Maya: instrument lessons cost a fortune, every instrument teacher is booked");
    for i in 0..50 {
        convo.assistant(&format!("Theo: small talk {i}"));
        convo.user(&format!("Maya: more small talk {i}"));
    }
    convo.assistant("Theo: anyway");
    convo.user("Which instrument does Theo have?");
    convo
}

#[tokio::test]
async fn search_ranks_the_named_subjects_turns_first_in_sqlite_and_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    for state in [sqlite(&dir.path().join("s.db")), String::new()] {
        let llm = Llm::start().await;
        let fg = Foldgate::start(&config(&llm, &state)).await;
        chat(&fg, "subject", &two_speakers()).await.assert_ok();
        let found = hits(&fg, "subject", "Which instrument does Theo have?", 3).await;
        let texts: Vec<&str> = found
            .iter()
            .map(|h| h["message"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(texts.len(), 3, "{state}: {texts:#?}");
        // Maya's turns score higher on `instrument` alone; Theo's name,
        // too common to search by, puts his turn first.
        assert!(
            texts[0].contains("Theo: I bought a banjo"),
            "{state}: {texts:#?}"
        );
        let scores: Vec<f64> = found.iter().map(|h| h["score"].as_f64().unwrap()).collect();
        assert!(
            scores[1] > scores[0],
            "BM25 alone ranks Maya's first: {scores:?}"
        );
        // Lowercase, the name is not taken for one: BM25's order stays.
        let plain = hits(&fg, "subject", "which instrument does theo have", 3).await;
        assert!(
            plain[0]["message"]["content"]
                .as_str()
                .unwrap()
                .contains("Maya:"),
            "{state}: {plain:#?}"
        );
    }
}

#[tokio::test]
async fn tenants_never_see_each_others_archive() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "[server]\nadmin_token = \"adm-secret\"\n")).await;
    let mut a = Convo::with_turns(55);
    a.user("alpha-only secret: the vault code is 1234");
    chat(&fg, "shared-id", &a).await.assert_ok();
    let b = Convo::with_turns(56);
    let reply = common::post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[("x-conversation-id", "shared-id"), TENANT_B],
        &b.body(),
    )
    .await;
    assert_eq!(label(&reply), "new");

    let of = |reply: &Reply| reply.json()["results"].as_array().unwrap().clone();
    let own = search(&fg, "shared-id", "question", &[TENANT_A]).await;
    own.assert_ok();
    assert_eq!(of(&own).len(), 1, "one tenant's archive only");
    let b_own = search(&fg, "shared-id", "vault code", &[TENANT_B]).await;
    assert_eq!(
        of(&b_own)[0]["hits"],
        Value::Array(vec![]),
        "tenant B does not find A's words"
    );
    assert_ne!(of(&own)[0]["tenant"], of(&b_own)[0]["tenant"]);
    // A tenant without an archive for this id gets 404, not someone else's.
    let c = search(&fg, "shared-id", "", &[("authorization", "Bearer sk-c")]).await;
    assert_eq!(c.status, 404);
    // No credential, admin token set: 401, even from loopback.
    assert_eq!(search(&fg, "shared-id", "", &[]).await.status, 401);
    // The admin token reads both, one result per tenant.
    let admin = search(
        &fg,
        "shared-id",
        "",
        &[("x-foldgate-admin-token", "adm-secret")],
    )
    .await;
    admin.assert_ok();
    assert_eq!(of(&admin).len(), 2, "{}", admin.json());
}

#[tokio::test]
async fn the_archive_survives_a_restart_and_can_be_off() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = config(&llm, &sqlite(&dir.path().join("f.db")));
    let fg = Foldgate::start(&toml).await;
    chat(&fg, "durable", &planted()).await.assert_ok();
    stop(fg).await;

    let fg = Foldgate::start(&toml).await;
    let found = hits(&fg, "durable", "db-stage.internal", 1).await;
    assert_eq!(found.len(), 1, "read back from the SQLite file");
    stop(fg).await;

    let off = format!("{toml}[archive]\nenabled = false\n");
    let fg = Foldgate::start(&off).await;
    assert_eq!(search(&fg, "durable", "", &[TENANT_A]).await.status, 404);
    chat(&fg, "not-kept", &planted()).await.assert_ok();
    stop(fg).await;
    // The archive has a file of its own beside the state database.
    let conn = Connection::open(dir.path().join("f.archive.db")).unwrap();
    let kept: i64 = conn
        .query_row(
            "SELECT count(*) FROM archive WHERE conversation = 'not-kept'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, 0, "archive.enabled = false stores nothing");
}

#[tokio::test]
async fn prune_deletes_old_archived_messages_only() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.db");
    let toml = config(&llm, &sqlite(&db));
    let fg = Foldgate::start(&toml).await;
    chat(&fg, "old", &planted()).await.assert_ok();
    chat(&fg, "recent", &planted()).await.assert_ok();
    stop(fg).await;

    let conn = Connection::open(db.with_extension("archive.db")).unwrap();
    let count = |conversation: &str| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM archive WHERE conversation = ?1",
            [conversation],
            |r| r.get(0),
        )
        .unwrap()
    };
    let old = count("old");
    assert!(old > 0 && count("recent") == old);
    let forty_days_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 40 * 86_400;
    conn.execute(
        "UPDATE archive SET archived_at = ?1 WHERE conversation = 'old'",
        [forty_days_ago],
    )
    .unwrap();

    let text = common::prune(dir.path(), &toml, "30d");
    assert!(
        text.contains(&format!("pruned {old} archived messages")),
        "{text}"
    );
    assert_eq!((count("old"), count("recent")), (0, old));
    // The search index lost the pruned rows too.
    let indexed: i64 = conn
        .query_row(
            // `internal`: only the fact's host name (`stage` would stem-match
            // `staging` in the question too).
            "SELECT count(*) FROM archive_fts WHERE archive_fts MATCH 'internal'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexed, 1, "only the recent conversation's fact is indexed");
}

#[tokio::test]
async fn each_conversation_keeps_at_most_max_messages_dropping_the_oldest() {
    let llm = Llm::start().await;
    let dir = tempfile::tempdir().unwrap();
    // `recall = "tool"`: the view shows exactly what the folds left, so
    // the messages absent from it are the archived ones (under the default
    // the newest folded messages are shown again after the summary,
    // docs/folding.md, *A folded chat is filled back up*).
    let toml = config(
        &llm,
        &format!(
            "{}[archive]\nmax_messages = 5\nrecall = \"tool\"\n",
            sqlite(&dir.path().join("f.db"))
        ),
    );
    let fg = Foldgate::start(&toml).await;
    let mut convo = Convo::with_turns(55);
    chat(&fg, "bounded", &convo).await.assert_ok();
    let first = absent(&convo.messages, &last_view(&llm));
    let mut gone = first.clone();
    for i in 0..200 {
        convo.next_turn(&format!("more {i}"));
        chat(&fg, "bounded", &convo).await.assert_ok();
        gone = absent(&convo.messages, &last_view(&llm));
        if gone.len() > first.len() {
            break;
        }
    }
    assert!(gone.len() > first.len(), "a second fold archived more");
    let listed = search(&fg, "bounded", "", &[TENANT_A]).await.json();
    assert_eq!(listed["results"][0]["archived"], 5);
    let kept: BTreeSet<usize> = listed["results"][0]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["position"].as_u64().unwrap() as usize)
        .collect();
    let newest: BTreeSet<usize> = gone.iter().rev().take(5).copied().collect();
    assert_eq!(kept, newest, "the newest archived messages stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_replicas_share_the_archive_with_an_expiry_and_a_bound() {
    let redis = Redis::start();
    let llm = Llm::start().await;
    let toml = config(
        &llm,
        &format!(
            "[state]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n[archive]\nttl = \"2d\"\nmax_messages = 40\n",
            redis.url()
        ),
    );
    let a = Foldgate::start(&toml).await;
    let b = Foldgate::start(&toml).await;
    let convo = planted();
    chat(&a, "replicated", &convo).await.assert_ok();
    let gone = absent(&convo.messages, &last_view(&llm));
    assert!(
        gone.len() > 40,
        "more folded than the bound: {}",
        gone.len()
    );

    // Replica B searches what A archived.
    let newest = *gone.last().unwrap();
    let found = hits(&b, "replicated", &tag(&convo.messages[newest]), 1).await;
    assert_eq!(found[0]["message"], convo.messages[newest], "{found:#?}");
    let listed = hits(&b, "replicated", "", 40).await;
    let kept: BTreeSet<usize> = listed
        .iter()
        .map(|h| h["position"].as_u64().unwrap() as usize)
        .collect();
    let newest: BTreeSet<usize> = gone.iter().rev().take(40).copied().collect();
    assert_eq!(kept, newest, "trimmed to the newest 40");

    let keys = redis.command(&["KEYS", "foldgate:archive:*"]).unwrap();
    let key = keys
        .lines()
        .find(|l| l.starts_with("foldgate:archive:"))
        .unwrap_or_else(|| panic!("{keys}"));
    assert!(key.ends_with(":replicated}"), "{key}");
    let ttl = redis.command(&["PTTL", key]).unwrap();
    let ms: i64 = ttl.trim().trim_start_matches(':').parse().unwrap();
    assert!(
        ms > 86_400_000 && ms <= 2 * 86_400_000,
        "expires after archive.ttl: {ttl}"
    );
    let len = redis.command(&["LLEN", key]).unwrap();
    assert_eq!(len.trim(), ":40");
}

#[tokio::test]
async fn anthropic_conversations_are_archived_in_normalized_form_with_their_api() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let convo = Convo::with_turns(55);
    // Anthropic's shape: the system prompt on top, the turns as messages.
    let body = serde_json::json!({
        "model": "tiny-model",
        "max_tokens": 100,
        "system": convo.messages[0]["content"],
        "messages": convo.messages[1..],
    });
    let reply = common::post_json(
        &format!("{}/v1/messages", fg.url),
        &[("x-conversation-id", "claude"), TENANT_A],
        &body,
    )
    .await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    let first = &convo.messages[1];
    let found = hits(&fg, "claude", &tag(first), 1).await;
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["api"], "anthropic");
    assert_eq!(found[0]["role"], "user");
    assert_eq!(
        common::llm::content_text(&found[0]["message"]),
        common::llm::content_text(first)
    );
}

/// A small deterministic generator, so every run checks the same cases.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The `[mN]` tag of a message the conversation builder made.
fn tag(message: &Value) -> String {
    let text = common::llm::content_text(message);
    let n = common::llm::tags(&text).into_iter().next().unwrap();
    format!("m{n}")
}

#[tokio::test]
async fn every_message_absent_from_the_view_is_in_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    for (seed, state) in [
        (7_u64, String::new()),
        (1_234_567, sqlite(&dir.path().join("f.db"))),
        (99_991, String::new()),
    ] {
        let llm = Llm::start().await;
        let fg = Foldgate::start(&config(&llm, &state)).await;
        let mut rng = Rng(seed);
        let mut convo = Convo::with_turns(2);
        let id = format!("random-{seed}");
        let mut checked = BTreeSet::new();
        for _ in 0..45 {
            convo.user("next step");
            for _ in 0..rng.below(3) {
                convo.tools(1 + rng.below(3) as usize);
            }
            if rng.below(2) == 0 {
                convo.assistant("an answer");
            }
            chat(&fg, &id, &convo).await.assert_ok();
            let gone = absent(&convo.messages, &last_view(&llm));
            // Each newly absent message is found by its unique tag.
            for &position in gone.difference(&checked.clone()) {
                let found = hits(&fg, &id, &tag(&convo.messages[position]), 1).await;
                assert_eq!(
                    found.first().map(|h| &h["message"]),
                    Some(&convo.messages[position]),
                    "seed {seed}: message {position} left the view but is not in the archive"
                );
                assert_eq!(found[0]["position"], position);
                checked.insert(position);
            }
        }
        assert!(
            checked.len() > 30,
            "seed {seed}: folds happened ({} messages checked)",
            checked.len()
        );
    }
}
