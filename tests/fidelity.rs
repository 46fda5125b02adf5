//! Fidelity of folds: the ledger keeps what a lossy summarizer drops, small
//! windows fold on defaults, summarizer output is repaired or retried (never
//! trusted blindly), failing summarizers are backed off, summarizer calls
//! are bounded per provider, request ids are UUIDs, and the history rules
//! (`max_depth`, `idle_fold_after`, re-sent older histories) hold end to end.

use crate::common;

use common::convo::{self, Convo, label};
use common::llm::{self, Llm, Sum, assert_tool_pairs, content_text};
use common::{Foldgate, Reply, metric, post_json, send};
use foldgate::fold::ledger::LEDGER_HEADING;
use foldgate::fold::summary::HEADING_PREFIX;
use http::Method;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TENANT: &str = "Bearer sk-tenant-a";
const FILLER: &str = "we look at the parser, the tokenizer and the cache layer, then decide on the next step together";

// ---------------------------------------------------------------- helpers

async fn chat(fg: &Foldgate, conversation: &str, body: &Value) -> Reply {
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[
            ("x-conversation-id", conversation),
            ("authorization", TENANT),
        ],
        body,
    )
    .await
}

/// The index of the summary message in a view.
fn summary_at(view: &[Value]) -> Option<usize> {
    view.iter()
        .position(|m| content_text(m).contains(HEADING_PREFIX))
}

/// The summary message's text, if the view has one.
fn summary_text(view: &[Value]) -> Option<String> {
    summary_at(view).map(|i| content_text(&view[i]))
}

/// The summary text without its ledger section.
fn narrative_part(summary: &str) -> &str {
    summary.split(LEDGER_HEADING).next().unwrap()
}

/// "(N messages folded)" of a summary heading.
fn folded_count(summary: &str) -> usize {
    let rest = &summary[summary.find(HEADING_PREFIX).unwrap() + HEADING_PREFIX.len()..];
    let digits: String = rest
        .trim_start_matches([' ', '('])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no folded count in {summary}"))
}

/// Everything a view shows the model: message texts and tool-call arguments.
fn view_text(view: &[Value]) -> String {
    let mut out = String::new();
    for m in view {
        out.push_str(&content_text(m));
        out.push('\n');
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            out.push_str(call["function"]["name"].as_str().unwrap_or(""));
            out.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
            out.push('\n');
        }
    }
    out
}

fn last_view(llm: &Llm) -> Vec<Value> {
    llm.chat_requests().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone()
}

/// The summarizer's user prompt of one request.
fn prompt_of(request: &Value) -> String {
    request["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The conversation's fold states (oldest first), as the tenant sees them.
async fn folds(fg: &Foldgate, conversation: &str) -> Vec<Value> {
    let reply = send(
        Method::GET,
        &format!("{}/foldgate/conversations/{conversation}", fg.url),
        &[("authorization", TENANT)],
        "",
    )
    .await;
    reply.assert_ok();
    reply.json()["states"][0]["folds"]
        .as_array()
        .unwrap()
        .clone()
}

fn as_usize(v: &Value) -> usize {
    usize::try_from(v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))).unwrap()
}

/// A `tiny-*` (4000-token window) config like `convo::config`, with extra
/// `[policy]` keys and extra `[summarizer]` keys.
fn tiny_config(llm: &Llm, policy: &str, summarizer: &str) -> String {
    convo::config(llm, summarizer).replace("[policy]\n", &format!("[policy]\n{policy}\n"))
}

/// `with_turns(55)` (folds on its first request against `tiny-model`) with
/// specifics planted in its first user message.
fn planted_history() -> Convo {
    let mut c = Convo::with_turns(55);
    c.messages[1]["content"] = json!(format!(
        "[m1] question 0: the project is ORCHID-7 and its database db-03.internal.example \
         listens on port 5433; {FILLER}"
    ));
    c
}

/// A history of `turns` tagged user/assistant pairs ending with a user
/// message (as in tests/background.rs).
fn tagged_history(turns: usize) -> Vec<Value> {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding assistant."})];
    for i in 0..turns {
        messages.push(
            json!({"role": "user", "content": format!("[m{}] question {i}: {FILLER}", 2 * i)}),
        );
        if i + 1 < turns {
            messages.push(json!({"role": "assistant", "content": format!("[m{}] answer {i}: {FILLER}", 2 * i + 1)}));
        }
    }
    messages
}

/// Sleeps until just after the start of a wall-clock second, so that a
/// fold and the request right after it fall in the same Unix second.
async fn align_to_second_start() {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_millis();
    tokio::time::sleep(Duration::from_millis(u64::from(1000 - ms) + 20)).await;
}

// ------------------------------------------------------- ledger fidelity

/// One agent turn `i` of the lossy test: the user's task, an assistant tool
/// call, its result (shell output, a stack trace, JSON, or a diff), and the
/// assistant's answer. Each message plants identifiers of its own; they are
/// returned with the index (within the turn) of the message planting them.
fn agent_turn(i: usize) -> (Vec<Value>, Vec<(usize, String)>) {
    let ticket = format!("TKT-{}", 100 + i);
    let host = format!("node-{i}.cluster.example");
    let port = format!("port {}", 5000 + i);
    let version = format!("v1.{i}.3");
    let path = format!("src/mod_{i}/file_{i}.rs");
    let user = json!({"role": "user", "content": format!(
        "{ticket}: the service on {host} stopped answering on {port} after the upgrade to {version}. \
         The handler is in {path}; please find out why and fix it."
    )});
    let mut ids = vec![(0, ticket), (0, host), (0, port), (0, version), (0, path)];
    let call_id = format!("call_{i}");
    let uuid = format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        0x1a2b_0000u32 + i as u32,
        0xbeefu32 ^ i as u32,
        0x0f0 + i,
        0x5c0 + i,
        0x00de_adbe_ef00u64 + i as u64
    );
    let (tool, args, result, tool_ids): (&str, Value, String, Vec<String>) = match i % 4 {
        0 => {
            let krate = format!("svc_{i}");
            (
                "run_shell",
                json!({"cmd": format!("cargo test -p {krate}")}),
                format!(
                    "$ cargo test -p {krate}\n   Compiling {krate} v0.{i}.1 (/work/crates/{krate})\n    \
                     Finished `test` profile [unoptimized + debuginfo] target(s) in 4.21s\n     \
                     Running unittests src/lib.rs (target/debug/deps/{krate}-3f9a1c2b7d4e5f60)\n\n\
                     running 12 tests\ntest cache::tests::evicts_oldest ... FAILED\n\nfailures:\n    \
                     cache::tests::evicts_oldest\n\ntest result: FAILED. 11 passed; 1 failed; 0 ignored\n\
                     error: test failed, to rerun pass `-p {krate} --lib`"
                ),
                vec![
                    krate.clone(),
                    format!("/work/crates/{krate}"),
                    format!("v0.{i}.1"),
                ],
            )
        }
        1 => {
            let log = format!("/var/log/worker_{i}.log");
            let file = format!("src/worker_{i}/queue.rs");
            (
                "read_file",
                json!({"path": log}),
                format!(
                    "thread 'tokio-runtime-worker' panicked at {file}:{i}7:17:\n\
                     called `Option::unwrap()` on a `None` value\nstack backtrace:\n   \
                     0: rust_begin_unwind\n   1: core::option::unwrap_failed\n   \
                     2: worker_{i}::queue::Queue::pop_batch\n             at ./{file}:{i}7:17\n   \
                     3: worker_{i}::pool::WorkerPool::run\n\
                     note: run with `RUST_BACKTRACE=full` for a verbose backtrace."
                ),
                vec![log, file],
            )
        }
        2 => {
            let url = format!("https://api-{i}.example.com/v2/jobs/{i}");
            let db = format!("db-{i}.internal.example");
            (
                "http_get",
                json!({"url": url}),
                json!({"job_id": uuid, "status": "failed", "upstream": db, "attempts": 3,
                    "error": "connection refused"})
                .to_string(),
                vec![url, uuid.clone(), db],
            )
        }
        _ => {
            let file = format!("src/mod_{i}/lib.rs");
            (
                "git_diff",
                json!({"path": file}),
                format!(
                    "diff --git a/{file} b/{file}\nindex 3c4d5e6..9a8b7c6 100644\n--- a/{file}\n+++ b/{file}\n\
                     @@ -{i},7 +{i},8 @@ impl Client {{\n-    let timeout = Duration::from_secs(30);\n\
                     +    let timeout = Duration::from_secs(60);\n+    let retries = 3;\n     \
                     self.connect(timeout)"
                ),
                vec![file],
            )
        }
    };
    let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": call_id,
        "type": "function", "function": {"name": tool, "arguments": args.to_string()}}]});
    // The call's own argument (path, command or URL) is planted in the call.
    let arg = args
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    ids.push((1, arg));
    let tool_msg = json!({"role": "tool", "tool_call_id": call_id, "content": result});
    ids.extend(tool_ids.into_iter().map(|id| (2, id)));
    let commit = format!(
        "{:08x}{:032x}",
        0x9f3c_0000u32 + i as u32,
        0x7e1d_u128 * (i as u128 + 11) * 0x1_0000_0001
    );
    let pr = format!("https://git.example.com/acme/backend/pull/{}", 700 + i);
    let email = format!("ops-{i}@example.com");
    let answer = json!({"role": "assistant", "content": format!(
        "Fixed in commit {commit}; the review is at {pr}. I told {email} about it."
    )});
    ids.extend([(3, commit), (3, pr), (3, email)]);
    (vec![user, call, tool_msg, answer], ids)
}

/// The lossy test's setup. With a summarizer that keeps no identifier,
/// the ledger must carry every specific of every folded message: for the 40
/// turns of [`agent_turn`] that is ~490 items, ~13,600 tokens rendered
/// (more than the ~10,000 tokens of the conversation itself — each item
/// carries up to 80 characters of context). So the summary budget must be
/// at least that: `summary_ratio = 0.5` of a 48,000-token window is 24,000
/// (= `max_summary_tokens`), and the test checks the whole ledger fits it.
/// A ledger larger than the history it comes from can never be reached by
/// token triggers (the view shrinks by less than the summary takes), so
/// folds are driven by message count: `overflow_buffer = 12` folds once
/// more than 6 + 12 messages are unfolded, about every third turn. The
/// cut's reset target holds: 24,000 reserved + a ~6-message tail is under
/// 0.70 × 48,000.
const LOSSY_WINDOW: u32 = 48_000;
const LOSSY_SUMMARY_BUDGET: u32 = 24_000;

fn lossy_config(llm: &Llm) -> String {
    format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n\
         [models.\"lossy-*\"]\ncontext_window = {LOSSY_WINDOW}\n\
         [policy]\nmode = \"inline\"\nsummary_ratio = 0.5\noverflow_buffer = 12\n\
         [summarizer]\nmax_summary_tokens = {LOSSY_SUMMARY_BUDGET}\nretries = 0\ntimeout = \"5s\"\n",
        llm.url()
    )
}

/// Tokens of the ledger holding every specific of `messages` (as if the
/// summary kept none), counted like foldgate counts the summary message.
fn full_ledger_tokens(toml: &str, messages: &[Value]) -> u32 {
    let config = foldgate::config::Config::from_toml(toml).unwrap();
    let counter = foldgate::tokens::TokenCounter::new(&config);
    let count =
        |s: &str| counter.message_tokens("lossy-model", &json!({"role": "system", "content": s}));
    let refs: Vec<&Value> = messages.iter().collect();
    let update = foldgate::fold::ledger::Ledger::after_fold(
        &Default::default(),
        None,
        &refs,
        "",
        u32::MAX,
        &count,
    );
    count(&update.ledger.render())
}

#[tokio::test]
async fn lossy_summarizer_loses_no_identifier() {
    let llm = Llm::start().await;
    llm.answer_always(Sum::Lossy);
    // The budget: see `LOSSY_WINDOW`.
    let toml = lossy_config(&llm);
    let all: Vec<Value> = (10..50).flat_map(|i| agent_turn(i).0).collect();
    let needed = full_ledger_tokens(&toml, &all);
    assert!(
        needed + 200 <= LOSSY_SUMMARY_BUDGET,
        "test setup: the full ledger takes {needed} tokens, over the summary budget"
    );
    let fg = Foldgate::start(&toml).await;
    let mut messages = vec![json!({"role": "system",
        "content": "You are a coding agent working in a large service repository."})];
    // (message index, identifier) of everything the client has sent.
    let mut planted: Vec<(usize, String)> = Vec::new();
    let mut sent: Vec<Vec<Value>> = Vec::new();
    let mut labels = Vec::new();
    for i in 10..50 {
        let (turn, ids) = agent_turn(i);
        let base = messages.len();
        planted.extend(ids.into_iter().map(|(at, id)| (base + at, id)));
        let mut turn = turn.into_iter();
        // The user's task, then the tool result: two requests per turn.
        for take in [1, 2] {
            messages.extend(turn.by_ref().take(take));
            let body = json!({"model": "lossy-model", "messages": messages, "max_tokens": 200});
            let reply = chat(&fg, "lossy", &body).await;
            assert_eq!(
                reply.status,
                200,
                "turn {i}: {}",
                String::from_utf8_lossy(&reply.body)
            );
            labels.push(label(&reply).to_string());
            sent.push(messages.clone());
        }
        messages.extend(turn);
    }
    let metrics = fg.metrics().await;
    assert_eq!(
        metric(&metrics, "foldgate_ledger_evictions_total"),
        0.0,
        "test setup: the ledger budget must hold every identifier"
    );
    let requests = llm.chat_requests();
    assert_eq!(requests.len(), sent.len(), "one upstream call per request");
    let mut with_ledger = 0;
    for (k, (request, client)) in requests.iter().zip(&sent).enumerate() {
        let view = request["messages"].as_array().unwrap();
        assert_tool_pairs(view);
        let text = view_text(view);
        let missing: Vec<&String> = planted
            .iter()
            .filter(|(at, _)| *at < client.len())
            .map(|(_, id)| id)
            .filter(|id| !text.contains(id.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "request {k} ({}): the view lost {} identifier(s) the client sent: {missing:?}\n\
             summary message:\n{}",
            labels[k],
            missing.len(),
            summary_text(view).unwrap_or_default()
        );
        if text.contains(LEDGER_HEADING) {
            with_ledger += 1;
        }
    }
    let new = labels.iter().filter(|l| *l == "new").count();
    assert!(new >= 2, "expected at least two folds: {labels:?}");
    assert!(with_ledger >= 1, "no view carried a ledger");
}

// ------------------------------------------------------ small windows

/// About 60 words of plain English (~65 tokens), tagged.
fn long_message(tag: usize, role: &str) -> Value {
    const WORDS: [&str; 24] = [
        "the", "parser", "reads", "each", "line", "and", "then", "we", "check", "whether", "cache",
        "entries", "still", "match", "what", "users", "expect", "before", "moving", "on", "to",
        "next", "small", "step",
    ];
    let words: Vec<&str> = (0..58)
        .map(|w| WORDS[(tag * 5 + w) % WORDS.len()])
        .collect();
    json!({"role": role, "content": format!("[m{tag}] {}", words.join(" "))})
}

#[tokio::test]
async fn small_window_folds_on_defaults() {
    let llm = Llm::start().await;
    // Only the provider and the model's window: default policy (background
    // mode) and default summarizer.
    let toml = format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"small-*\"]\ncontext_window = 2048\n",
        llm.url()
    );
    let fg = Foldgate::start(&toml).await;
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut sent = Vec::new();
    let mut labels = Vec::new();
    let mut tag = 0;
    for turn in 0..34 {
        tag += 1;
        messages.push(long_message(tag, "user"));
        // No max_tokens, as most clients send: the default output reserve
        // is capped at a quarter of the window.
        let body = json!({"model": "small-model", "messages": messages});
        let reply = chat(&fg, "small", &body).await;
        assert_eq!(
            reply.status,
            200,
            "turn {turn}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        assert!(
            reply.tokens_out() + 512 <= 2048,
            "turn {turn}: a view of {} tokens leaves no room for the output",
            reply.tokens_out()
        );
        labels.push(label(&reply).to_string());
        sent.push(messages.clone());
        tag += 1;
        messages.push(long_message(tag, "assistant"));
        // Lets a background fold finish (pacing only, nothing is timed).
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(
        labels.iter().any(|l| l == "new" || l == "reused"),
        "the conversation never folded: {labels:?}"
    );
    let metrics = fg.metrics().await;
    assert!(common::folds_counted(&metrics) >= 1.0);
    // The summary budget is 0.15 × 2048 = 307 tokens; the summarizer is
    // asked for at most two thirds of it.
    let limit = (0.15f64 * 2048.0).floor() as u64 * 2 / 3;
    let requests = llm.summarizer_requests();
    assert!(!requests.is_empty());
    for r in &requests {
        let max = r["max_tokens"]
            .as_u64()
            .or_else(|| r["max_completion_tokens"].as_u64())
            .unwrap_or_else(|| panic!("no output limit in {r}"));
        assert!(
            max <= limit,
            "summarizer asked for {max} tokens (limit {limit})"
        );
    }
    let preserve = 6;
    let mut folded_views = 0;
    for (k, (request, client)) in llm.chat_requests().iter().zip(&sent).enumerate() {
        let view = request["messages"].as_array().unwrap();
        llm::assert_view_covers(client, view);
        let Some(at) = summary_at(view) else { continue };
        folded_views += 1;
        let after = view.len() - at - 1;
        let unfolded = client.len() - 1 - folded_count(&content_text(&view[at]));
        // The fold never cuts into the most recent `preserve_recent`
        // messages the client sent.
        assert!(
            after >= preserve.min(client.len() - 1),
            "request {k}: only {after} verbatim messages after the summary \
             ({} sent, {unfolded} unfolded, {labels:?})",
            client.len()
        );
    }
    assert!(folded_views >= 1);
}

// ------------------------------------------------------ summarizer repairs

#[tokio::test]
async fn an_object_where_a_list_belongs_is_flattened() {
    let llm = Llm::start().await;
    llm.script([Sum::Raw(
        json!({"summary": "The database moved.",
            "facts": {"port": 5433, "host": "db-03.internal.example"},
            "goals": "decide on the next step", "decisions": [], "open_items": [], "artifacts": []})
        .to_string(),
    )]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "flat", &planted_history().body()).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    assert_eq!(llm.summarizer_calls(), 1, "a repair, not a retry");
    let summary = summary_text(&last_view(&llm)).expect("a summary message");
    let narrative = narrative_part(&summary);
    for item in [
        "- port: 5433",
        "- host: db-03.internal.example",
        "- decide on the next step",
    ] {
        assert!(
            narrative.contains(item),
            "{item:?} missing from:\n{summary}"
        );
    }
    assert!(
        !narrative.contains('{') && !narrative.contains("\"port\""),
        "JSON leaked into the summary:\n{summary}"
    );
    let states = folds(&fg, "flat").await;
    let facts = states.last().unwrap()["summary"]["facts"].clone();
    let facts: Vec<&str> = facts
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        facts.contains(&"port: 5433") && facts.contains(&"host: db-03.internal.example"),
        "{facts:?}"
    );
}

#[tokio::test]
async fn nested_output_is_retried_with_the_reason() {
    let llm = Llm::start().await;
    llm.script([
        Sum::Raw(
            json!({"summary": "Database work.", "facts": [{"db": {"port": 5433}}],
                "goals": [], "decisions": [], "open_items": [], "artifacts": []})
            .to_string(),
        ),
        Sum::Good,
    ]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "nested", &planted_history().body()).await;
    assert_eq!(label(&reply), "new");
    let requests = llm.summarizer_requests();
    assert_eq!(requests.len(), 2);
    let (first, second) = (prompt_of(&requests[0]), prompt_of(&requests[1]));
    assert_ne!(first, second, "never the identical request again");
    assert!(second.contains("could not be used"), "{second}");
    assert!(
        second.contains("facts[0]"),
        "the retry names what was wrong: {second}"
    );
}

#[tokio::test]
async fn an_invented_identifier_is_dropped_and_counted() {
    let llm = Llm::start().await;
    llm.script([Sum::Raw(
        json!({"summary": "Work on ORCHID-7 continues.",
            "facts": ["the project codename is ORPHIC-7", "the database listens on port 5433"],
            "goals": ["ship ORCHID-7"], "decisions": [], "open_items": [], "artifacts": []})
        .to_string(),
    )]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "invent", &planted_history().body()).await;
    assert_eq!(label(&reply), "new");
    let summary = summary_text(&last_view(&llm)).expect("a summary message");
    assert!(
        !summary.contains("ORPHIC-7"),
        "the invention reached the view:\n{summary}"
    );
    assert!(summary.contains("ORCHID-7"), "{summary}");
    assert!(
        summary.contains("- the database listens on port 5433"),
        "{summary}"
    );
    let inventions = metric(&fg.metrics().await, "foldgate_summary_inventions_total");
    assert!(inventions >= 1.0, "{inventions}");
}

#[tokio::test]
async fn an_unsupported_item_is_dropped_and_counted() {
    // A summarizer that invents: a migration, a person and a number the
    // conversation never mentioned, beside items it does support.
    let llm = Llm::start().await;
    llm.script([Sum::Raw(
        json!({"summary": "Work on ORCHID-7 continues.",
            "facts": ["the database listens on port 5433", "the team migrated everything to the cloud yesterday"],
            "goals": ["decide on the next step together"],
            "decisions": ["Bob Marley approved the parser rewrite"],
            "open_items": ["the tokenizer has 17 failing tests"], "artifacts": []})
        .to_string(),
    )]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "unsupported", &planted_history().body()).await;
    assert_eq!(label(&reply), "new");
    let summary = summary_text(&last_view(&llm)).expect("a summary message");
    let narrative = narrative_part(&summary);
    for kept in [
        "- the database listens on port 5433",
        "- decide on the next step together",
    ] {
        assert!(narrative.contains(kept), "{kept:?} missing:\n{summary}");
    }
    for gone in ["cloud", "Bob Marley", "17 failing"] {
        assert!(
            !narrative.contains(gone),
            "{gone:?} reached the view:\n{summary}"
        );
    }
    let metrics = fg.metrics().await;
    let unsupported = metric(
        &metrics,
        "foldgate_summary_items_dropped_total{reason=\"unsupported\"}",
    );
    assert_eq!(unsupported, 3.0);
    let invented = metric(
        &metrics,
        "foldgate_summary_items_dropped_total{reason=\"invented\"}",
    );
    assert_eq!(invented, 0.0);
}

#[tokio::test]
async fn a_cut_off_answer_that_can_be_closed_keeps_its_complete_items() {
    let llm = Llm::start().await;
    llm.script([Sum::Cut(
        r#"{"summary":"The user is fixing the parser.","facts":["the tokenizer was looked at","the cache layer was discussed","the parser sti"#
            .to_string(),
    )]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "cut", &planted_history().body()).await;
    assert_eq!(label(&reply), "new");
    assert_eq!(
        llm.summarizer_calls(),
        1,
        "the complete part is used as it is"
    );
    let summary = summary_text(&last_view(&llm)).expect("a summary message");
    let narrative = narrative_part(&summary);
    assert!(
        narrative.contains("The user is fixing the parser."),
        "{summary}"
    );
    assert!(
        narrative.contains("- the tokenizer was looked at"),
        "{summary}"
    );
    assert!(
        narrative.contains("- the cache layer was discussed"),
        "{summary}"
    );
    assert!(
        !narrative.contains("the parser sti"),
        "a half item was kept:\n{summary}"
    );
    let truncations = metric(&fg.metrics().await, "foldgate_summary_truncations_total");
    assert!(truncations >= 1.0, "{truncations}");
}

#[tokio::test]
async fn a_cut_off_answer_that_cannot_be_closed_is_asked_again_with_more_room() {
    let llm = Llm::start().await;
    llm.script([
        Sum::Cut(r#"{"summary":"The user and the assistant worked thro"#.to_string()),
        Sum::Good,
    ]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "uncut", &planted_history().body()).await;
    assert_eq!(label(&reply), "new");
    let requests = llm.summarizer_requests();
    assert_eq!(requests.len(), 2, "one retry");
    let limit = |r: &Value| r["max_tokens"].as_u64().unwrap();
    assert!(
        limit(&requests[1]) > limit(&requests[0]),
        "the retry's max_tokens {} is not larger than {}",
        limit(&requests[1]),
        limit(&requests[0])
    );
    let (first, second) = (prompt_of(&requests[0]), prompt_of(&requests[1]));
    assert_ne!(first, second);
    assert!(second.contains("could not be used"), "{second}");
}

// ---------------------------------------------------------------- backoff

#[tokio::test]
async fn a_failing_summarizer_is_backed_off() {
    let llm = Llm::start().await;
    llm.answer_always(Sum::Status(500));
    let toml = format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"tiny-*\"]\ncontext_window = 4000\n\
         [policy]\nreset_ratio = 0.5\nmode = \"background\"\n\
         [summarizer]\nmax_summary_tokens = 300\nretries = 0\nbackoff = \"5ms\"\ntimeout = \"5s\"\n\
         failure_backoff = \"1h\"\n",
        llm.url()
    );
    let fg = Foldgate::start(&toml).await;
    let send_history = |turns: usize| {
        let body =
            json!({"model": "tiny-model", "messages": tagged_history(turns), "max_tokens": 100});
        let fg = &fg;
        async move { chat(fg, "bo", &body).await }
    };
    // ~2750 tokens at 44 turns, over the prefold ratio (2800) from about 45,
    // over the trigger (3200) from about 52, still under the window at 60.
    let mut over_trigger = Vec::new();
    for turns in 44..=60 {
        let reply = send_history(turns).await;
        reply.assert_ok();
        let out = reply.tokens_out();
        assert!(
            out + 100 <= 4000,
            "turn {turns}: {out} tokens is an emergency; adjust the test"
        );
        let warning = reply.header("x-foldgate-warning");
        if f64::from(out) >= 0.8 * 4000.0 {
            over_trigger.push((turns, warning));
        }
        // Pacing: lets the background fold fail and be recorded.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let calls = llm.summarizer_calls();
    assert!(
        (1..=2).contains(&calls),
        "{calls} summarizer calls for 17 turns with a failing summarizer"
    );
    assert!(over_trigger.len() >= 3, "{over_trigger:?}");
    for (turns, warning) in &over_trigger {
        assert!(
            warning.contains("fold postponed: the summarizer failed recently"),
            "turn {turns} over the trigger: warning {warning:?}"
        );
    }
    let metrics = fg.metrics().await;
    let postponed = metric(&metrics, "foldgate_folds_postponed_total");
    assert!(postponed >= over_trigger.len() as f64, "{postponed}");
    assert!(metric(&metrics, "foldgate_fold_failures_total") >= 1.0);

    // An emergency still folds, backoff or not.
    llm.answer_always(Sum::Good);
    let before = llm.summarizer_calls();
    let messages = tagged_history(66);
    let reply = send_history(66).await;
    reply.assert_ok();
    assert_eq!(
        label(&reply),
        "new",
        "{}",
        reply.header("x-foldgate-warning")
    );
    assert!(llm.summarizer_calls() > before);
    llm::assert_view_covers(&messages, &last_view(&llm));
}

// ------------------------------------------------------------ concurrency

async fn two_folds_at_once(max_concurrent: &str) -> (Llm, usize) {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(500, Ordering::Relaxed);
    let fg = Foldgate::start(&convo::config(&llm, max_concurrent)).await;
    let body = Convo::with_turns(55).body();
    let (a, b) = tokio::join!(chat(&fg, "conc-a", &body), chat(&fg, "conc-b", &body));
    assert_eq!((label(&a), label(&b)), ("new", "new"));
    assert_eq!(llm.summarizer_calls(), 2);
    let max = llm.max_summarizer_in_flight();
    (llm, max)
}

#[tokio::test]
async fn summarizer_calls_per_provider_are_bounded() {
    // A loopback provider with `max_concurrent = 0` (auto): one at a time.
    let (_, max) = two_folds_at_once("max_concurrent = 0\n").await;
    assert_eq!(
        max, 1,
        "a local provider gets one summarizer call at a time"
    );
    // Two allowed: both folds' calls overlap (each takes 500 ms).
    let (_, max) = two_folds_at_once("max_concurrent = 2\n").await;
    assert_eq!(max, 2);
}

// ------------------------------------------------------------ request ids

fn assert_uuid_v4(id: &str) {
    let b = id.as_bytes();
    assert_eq!(b.len(), 36, "{id:?} is not a UUID");
    for (i, c) in b.iter().enumerate() {
        if [8, 13, 18, 23].contains(&i) {
            assert_eq!(*c, b'-', "{id:?} is not a UUID");
        } else {
            assert!(c.is_ascii_hexdigit(), "{id:?} is not a UUID");
        }
    }
    assert_eq!(b[14], b'4', "{id:?} is not a version-4 UUID");
    assert!(
        matches!(b[19].to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b'),
        "{id:?} has not the RFC 4122 variant"
    );
}

#[tokio::test]
async fn request_ids_are_uuids_unless_the_client_sent_one() {
    let llm = Llm::start().await;
    *llm.state.models_listing.lock().unwrap() = Some(json!({"data": [{"id": "tiny-model"}]}));
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let chat_url = format!("{}/v1/chat/completions", fg.url);
    let models_url = format!("{}/v1/models", fg.url);
    let body = json!({"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]});

    let replies = [
        post_json(&chat_url, &[], &body).await,
        send(Method::GET, &models_url, &[], "").await,
    ];
    let received = llm.mock.received();
    assert_eq!(received.len(), 2);
    let mut ids = Vec::new();
    for (reply, upstream) in replies.iter().zip(&received) {
        reply.assert_ok();
        let id = upstream
            .header("x-request-id")
            .unwrap_or_else(|| panic!("no x-request-id upstream for {}", upstream.uri));
        assert_uuid_v4(id);
        assert_eq!(
            reply.header("x-request-id"),
            id,
            "the client gets the same id"
        );
        ids.push(id.to_string());
    }
    assert_ne!(ids[0], ids[1]);

    let replies = [
        post_json(&chat_url, &[("x-request-id", "my-id-1")], &body).await,
        send(Method::GET, &models_url, &[("x-request-id", "my-id-1")], "").await,
    ];
    let received = llm.mock.received();
    for (reply, upstream) in replies.iter().zip(&received[2..]) {
        reply.assert_ok();
        assert_eq!(
            upstream.header("x-request-id"),
            Some("my-id-1"),
            "{}",
            upstream.uri
        );
        assert_eq!(reply.header("x-request-id"), "my-id-1");
    }
}

// ---------------------------------------------------------- history rules

/// Adds turns until a request folds; returns the reply.
async fn turns_until_fold(fg: &Foldgate, conversation: &str, convo: &mut Convo) -> Reply {
    for _ in 0..80 {
        convo.next_turn("later work");
        let reply = chat(fg, conversation, &convo.body()).await;
        reply.assert_ok();
        if label(&reply) == "new" {
            return reply;
        }
    }
    panic!("no second fold within 80 turns");
}

#[tokio::test]
async fn max_depth_rebuilds_from_the_raw_messages() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&tiny_config(&llm, "max_depth = 1", "")).await;
    let mut convo = Convo::with_turns(55);
    assert_eq!(label(&chat(&fg, "deep", &convo.body()).await), "new");
    let first = folds(&fg, "deep").await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["depth"], 1);
    let before = llm.summarizer_calls();
    turns_until_fold(&fg, "deep", &mut convo).await;
    let second_fold = &llm.summarizer_requests()[before..];
    assert!(!second_fold.is_empty());
    let prompt = prompt_of(&second_fold[0]);
    assert!(
        prompt.contains("Current summary:\n(none yet)"),
        "a rebuild starts from no summary:\n{prompt}"
    );
    for tag in ["[m1] ", "[m2] ", "[m3] "] {
        assert!(
            prompt.contains(tag),
            "the rebuild folds the first messages again ({tag}):\n{prompt}"
        );
    }
    // Every message the new state stands for was in this fold's prompts.
    let shown: std::collections::BTreeSet<u32> = second_fold
        .iter()
        .flat_map(|r| llm::tags(&prompt_of(r)))
        .collect();
    let states = folds(&fg, "deep").await;
    let newest = states.last().unwrap();
    assert_eq!(
        newest["depth"], 1,
        "a rebuilt state starts at depth 1: {newest}"
    );
    let folded = as_usize(&newest["covered"]) - usize::from(!newest["kept_user"].is_null());
    assert!(
        (1..=folded as u32).all(|t| shown.contains(&t)),
        "the rebuild did not show every folded message: {shown:?} vs 1..={folded}"
    );
    llm::assert_view_covers(&convo.messages, &last_view(&llm));
}

#[tokio::test]
async fn an_idle_conversation_folds_at_its_next_request() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&tiny_config(&llm, "idle_fold_after = \"1s\"", "")).await;
    let mut convo = Convo::with_turns(55);
    // The fold and the next request fall in the same Unix second.
    align_to_second_start().await;
    assert_eq!(label(&chat(&fg, "idle", &convo.body()).await), "new");
    convo.next_turn("one more");
    let reply = chat(&fg, "idle", &convo.body()).await;
    assert_eq!(label(&reply), "reused", "no fold right after a fold");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    for i in 0..4 {
        convo.next_turn(&format!("after the pause {i}"));
    }
    let reply = chat(&fg, "idle", &convo.body()).await;
    assert!(
        f64::from(reply.tokens_out()) < 0.8 * 4000.0,
        "test setup: the view must stay under the token trigger"
    );
    assert_eq!(label(&reply), "new", "an idle conversation folds");
    let metrics = fg.metrics().await;
    assert_eq!(
        metric(&metrics, "foldgate_folds_total{reason=\"idle\"}"),
        1.0
    );
    assert_eq!(
        metric(&metrics, "foldgate_folds_total{reason=\"token\"}"),
        1.0
    );
    llm::assert_view_covers(&convo.messages, &last_view(&llm));
    let view = last_view(&llm);
    let after = view.len() - summary_at(&view).unwrap() - 1;
    assert!(after >= 6, "{after} verbatim messages after an idle fold");
}

#[tokio::test]
async fn a_resent_older_history_does_not_get_a_fold_that_leaves_too_little() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let mut convo = Convo::with_turns(55);
    assert_eq!(label(&chat(&fg, "regen", &convo.body()).await), "new");
    turns_until_fold(&fg, "regen", &mut convo).await;
    let states = folds(&fg, "regen").await;
    assert_eq!(states.len(), 2, "two folds");
    let (first, second) = (&states[0], &states[1]);
    let (first_covered, second_covered) =
        (as_usize(&first["covered"]), as_usize(&second["covered"]));
    assert!(second_covered > first_covered + 2);
    let first_folded = first_covered - usize::from(!first["kept_user"].is_null());
    let preserve = 6;

    // A regenerate re-sends the history as it was two messages after a cut:
    // the fold at that cut (made from a longer history) would leave two
    // verbatim messages.
    for (case, covered) in [("first cut", first_covered), ("second cut", second_covered)] {
        let resent = &convo.messages[..1 + covered + 2];
        let body = json!({"model": "tiny-model", "messages": resent, "max_tokens": 100});
        let reply = chat(&fg, "regen", &body).await;
        reply.assert_ok();
        let view = last_view(&llm);
        llm::assert_view_covers(resent, &view);
        match label(&reply) {
            "none" => assert_eq!(view, resent, "{case}"),
            "reused" => {
                let at = summary_at(&view).expect("a summary");
                let after = view.len() - at - 1;
                assert!(
                    after >= preserve,
                    "{case}: the view keeps only {after} verbatim messages after the summary \
                     (roles {:?})",
                    view.iter()
                        .map(|m| m["role"].as_str().unwrap_or(""))
                        .collect::<Vec<_>>()
                );
                if case == "second cut" {
                    assert_eq!(
                        folded_count(&content_text(&view[at])),
                        first_folded,
                        "the earlier fold serves the re-sent history"
                    );
                }
            }
            other => panic!("{case}: a re-sent older history got {other:?}"),
        }
        if case == "second cut" {
            assert_eq!(
                label(&reply),
                "reused",
                "the earlier fold fits under the trigger"
            );
        }
    }
}

// ------------------------------------------- identifiers that nest in others

/// Whether `needle` occurs in `text` as a whole token: not followed (or
/// preceded) by a letter or digit, so "port 80" is not found in "port 8080".
fn contains_token(text: &str, needle: &str) -> bool {
    text.match_indices(needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// A tagged history whose messages carry no specifics at all (unlike
/// `Convo::with_turns`, whose "question 12" / "answer 12" are ledger items),
/// so the ledger holds only what a test plants; 60 turns fold on the first
/// request against `tiny-model`.
fn quiet_history() -> Convo {
    let mut c = Convo::with_turns(0);
    for _ in 0..60 {
        c.user("note").assistant("reply");
    }
    c
}

/// A quiet history whose first two user messages carry specifics that are
/// prefixes of each other's: "port 80" / "port 8080", "TKT-12" / "TKT-123".
fn nested_history() -> Convo {
    let mut c = quiet_history();
    c.messages[1]["content"] = json!(format!(
        "[m1] note: nginx listens on port 80 and the proxy work is tracked in TKT-12; {FILLER}"
    ));
    c.messages[3]["content"] = json!(format!(
        "[m3] note: the app listens on port 8080 and its work is tracked in TKT-123; {FILLER}"
    ));
    c
}

#[tokio::test]
async fn a_specific_nested_in_one_the_summary_keeps_is_not_lost() {
    let llm = Llm::start().await;
    // The summary keeps the app's specifics and drops nginx's.
    llm.script([Sum::Raw(
        json!({"summary": "The app was configured.",
            "facts": ["the app listens on port 8080", "the app's work is tracked in TKT-123"],
            "goals": [], "decisions": [], "open_items": [], "artifacts": []})
        .to_string(),
    )]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let convo = nested_history();
    let reply = chat(&fg, "nest", &convo.body()).await;
    assert_eq!(label(&reply), "new");
    let view = last_view(&llm);
    assert!(
        !view.contains(&convo.messages[1]),
        "test setup: the message is folded"
    );
    let text = view_text(&view);
    let lost: Vec<&str> = ["port 80", "TKT-12", "port 8080", "TKT-123"]
        .into_iter()
        .filter(|id| !contains_token(&text, id))
        .collect();
    assert!(
        lost.is_empty(),
        "{lost:?} left the view: in neither the summary nor the ledger\n{}",
        summary_text(&view).unwrap()
    );
}

#[tokio::test]
async fn an_invention_nested_in_a_real_identifier_is_dropped() {
    let llm = Llm::start().await;
    llm.script([Sum::Raw(
        json!({"summary": "Work continues.",
            "facts": ["the release is tracked in ORCHID-7", "the parser was reviewed"],
            "goals": [], "decisions": [], "open_items": [], "artifacts": []})
        .to_string(),
    )]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let mut convo = quiet_history();
    // The conversation only ever names ORCHID-77.
    convo.messages[1]["content"] = json!(format!(
        "[m1] note: the release is tracked in ORCHID-77; {FILLER}"
    ));
    let reply = chat(&fg, "nest-inv", &convo.body()).await;
    assert_eq!(label(&reply), "new");
    let summary = summary_text(&last_view(&llm)).unwrap();
    assert!(
        !contains_token(&summary, "ORCHID-7"),
        "an identifier the summarizer was never shown reached the view:\n{summary}"
    );
    assert!(
        metric(&fg.metrics().await, "foldgate_summary_inventions_total") >= 1.0,
        "the invention was not counted"
    );
}

// ----------------------------------------------- never the identical request

/// Every summarizer request of one fold differs from every other.
fn assert_all_distinct(requests: &[Value]) {
    let tail = |r: &Value| {
        let p = prompt_of(r);
        let start = p
            .rfind("Return the complete rewritten summary")
            .unwrap_or(0);
        p[start..].to_string()
    };
    for i in 0..requests.len() {
        for j in i + 1..requests.len() {
            assert!(
                requests[i] != requests[j],
                "summarizer requests {i} and {j} of one fold are identical: \
                 max_tokens {} and {}, both prompts ending {:?}",
                requests[i]["max_tokens"],
                requests[j]["max_tokens"],
                tail(&requests[j])
            );
        }
    }
}

#[tokio::test]
async fn two_cut_off_answers_in_a_row_never_repeat_a_request() {
    let llm = Llm::start().await;
    let cut = r#"{"summary":"The user and the assistant worked thro"#;
    llm.script([
        Sum::Cut(cut.to_string()),
        Sum::Cut(cut.to_string()),
        Sum::Good,
    ]);
    // retries = 2: three attempts.
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "cut2", &planted_history().body()).await;
    assert_eq!(label(&reply), "new");
    let requests = llm.summarizer_requests();
    assert_eq!(requests.len(), 3);
    assert_all_distinct(&requests);
}

#[tokio::test]
async fn two_nested_answers_in_a_row_never_repeat_a_request() {
    let llm = Llm::start().await;
    let nested = json!({"summary": "Database work.", "facts": [{"db": {"port": 5433}}],
        "goals": [], "decisions": [], "open_items": [], "artifacts": []})
    .to_string();
    llm.script([Sum::Raw(nested.clone()), Sum::Raw(nested), Sum::Good]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "nested2", &planted_history().body()).await;
    assert_eq!(label(&reply), "new");
    let requests = llm.summarizer_requests();
    assert_eq!(requests.len(), 3);
    assert_all_distinct(&requests);
}

// ------------------------------------------------ rewrites and the ledger

#[tokio::test]
async fn a_rewrite_that_drops_what_the_earlier_summary_kept_moves_it_to_the_ledger() {
    let llm = Llm::start().await;
    // The first summary keeps the specifics (so the ledger need not), the
    // rewrite keeps none of them.
    llm.script([Sum::Raw(
        json!({"summary": "The project is ORCHID-7.",
            "facts": ["the database db-03.internal.example listens on port 5433"],
            "goals": [], "decisions": [], "open_items": [], "artifacts": []})
        .to_string(),
    )]);
    llm.answer_always(Sum::Lossy);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let mut convo = quiet_history();
    convo.messages[1]["content"] = json!(format!(
        "[m1] note: the project is ORCHID-7 and its database db-03.internal.example \
         listens on port 5433; {FILLER}"
    ));
    assert_eq!(label(&chat(&fg, "rewrite", &convo.body()).await), "new");
    let first = summary_text(&last_view(&llm)).unwrap();
    assert!(narrative_part(&first).contains("ORCHID-7"), "{first}");
    turns_until_fold(&fg, "rewrite", &mut convo).await;
    let view = last_view(&llm);
    let text = view_text(&view);
    for id in ["ORCHID-7", "db-03.internal.example", "port 5433"] {
        assert!(
            contains_token(&text, id),
            "{id} was lost by the rewrite:\n{}",
            summary_text(&view).unwrap()
        );
    }
}

// ------------------------------------------------------- inline backoff

#[tokio::test]
async fn inline_folds_back_off_after_a_failure_too() {
    let llm = Llm::start().await;
    llm.answer_always(Sum::Status(500));
    let toml =
        convo::config(&llm, "failure_backoff = \"1h\"\n").replace("retries = 2", "retries = 0");
    let fg = Foldgate::start(&toml).await;
    let mut convo = Convo::with_turns(55);
    let reply = chat(&fg, "inline-bo", &convo.body()).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "none");
    assert_eq!(llm.summarizer_calls(), 1);
    convo.user("one more question");
    let reply = chat(&fg, "inline-bo", &convo.body()).await;
    reply.assert_ok();
    assert!(
        reply.tokens_out() + 100 <= 4000,
        "test setup: not an emergency"
    );
    assert_eq!(
        reply.header("x-foldgate-warning"),
        "fold postponed: the summarizer failed recently"
    );
    assert_eq!(
        llm.summarizer_calls(),
        1,
        "no new attempt while backing off"
    );
    assert_eq!(
        metric(&fg.metrics().await, "foldgate_folds_postponed_total"),
        1.0
    );
}

#[tokio::test]
async fn the_keys_of_a_flattened_object_are_not_inventions() {
    let llm = Llm::start().await;
    // Models often answer a list with an object keyed in snake_case.
    llm.script([Sum::Raw(
        json!({"summary": "The database moved.",
            "facts": {"database_host": "db-03.internal.example", "listen_port": 5433},
            "goals": [], "decisions": [], "open_items": [], "artifacts": []})
        .to_string(),
    )]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let mut convo = quiet_history();
    convo.messages[1]["content"] = json!(format!(
        "[m1] note: the database db-03.internal.example listens on port 5433; {FILLER}"
    ));
    let reply = chat(&fg, "flat-keys", &convo.body()).await;
    assert_eq!(label(&reply), "new");
    let summary = summary_text(&last_view(&llm)).unwrap();
    let narrative = narrative_part(&summary);
    for item in [
        "- database_host: db-03.internal.example",
        "- listen_port: 5433",
    ] {
        assert!(
            narrative.contains(item),
            "the repaired item {item:?} was dropped:\n{summary}"
        );
    }
    assert_eq!(
        metric(&fg.metrics().await, "foldgate_summary_inventions_total"),
        0.0,
        "nothing was invented"
    );
}

// ------------------------------------------------ statements kept true

/// What an inventing summarizer was shown: a short infrastructure chat.
const CLAIMS_SOURCE: &str = "Current summary:\n(none yet)\n\nNew messages to fold into it:\n\
### user\nPostgres listens on port 5433 on db-03.internal.example.\n\
### tool [result of call_1]\nThe metrics port is 9187. The admin port is 7311.\n\
### user\nDana Whitfield is the database admin. Ana Ortiz is the release manager.\n\
### assistant\nThe cache holds 512 MB and evicts with LRU.\n\
### user\nWe should migrate the billing service to Kubernetes next quarter.\n\
### assistant\nI fixed the flaky parser tests; they pass now.\n\
### user\nCan you rotate the staging API keys?\n### assistant\nDone.\n\
### user\nLet's use Redis for the session store instead of Memcached.\n\
### assistant\nThe deploy runs from the build host falcon.corp every night.\n\
### tool [result of call_2]\nThe search cluster runs Elasticsearch 8.11 on three nodes.\n\
### user\nWe still need to write the runbook for failover.\n";

/// True facts, paraphrased modestly, by the list they come under.
const TRUE_CLAIMS: &[(&str, &str)] = &[
    ("facts", "Postgres listens on port 5433"),
    ("facts", "metrics port: 9187"),
    ("facts", "The admin port is 7311."),
    ("facts", "Dana Whitfield is the database admin"),
    ("facts", "the release manager is Ana Ortiz"),
    ("facts", "The cache holds 512 MB with LRU eviction"),
    (
        "facts",
        "deploys run nightly from the build host falcon.corp",
    ),
    ("facts", "the search cluster runs Elasticsearch 8.11"),
    ("facts", "Postgres is on db-03.internal.example"),
    (
        "facts",
        "Postgres listens on 5433 and the metrics port is 9187",
    ),
    ("completed", "Fixed the flaky parser tests"),
    ("completed", "Rotated the staging API keys"),
    ("decisions", "Use Redis for the session store"),
    ("open_items", "Write the failover runbook"),
    ("goals", "Migrate the billing service to Kubernetes"),
];

/// What the summarizer made up, by the list it comes under: prose the
/// chat never said, values moved to another subject, and two facts merged
/// into a false one.
const FALSE_CLAIMS: &[(&str, &str)] = &[
    ("completed", "Migrated the billing service to Kubernetes."),
    ("completed", "Wrote the failover runbook"),
    ("completed", "Rotated the production TLS certificates"),
    ("facts", "The team rewrote the frontend in Svelte"),
    ("decisions", "Switch the message queue to Kafka"),
    ("open_items", "Audit the payment logs for fraud"),
    ("goals", "Cut cloud costs with spot instances"),
    ("decisions", "The parser tests pass"),
    ("facts", "The metrics port is 5433."),
    ("facts", "Postgres listens on port 9187"),
    ("facts", "The admin port is 9187"),
    ("facts", "Ana Ortiz is the database admin"),
    ("facts", "The release manager is Dana Whitfield"),
    ("facts", "The build host is db-03.internal.example"),
    ("facts", "the billing service runs Elasticsearch 8.11"),
    ("facts", "the search cluster holds 512 MB"),
];

fn list_of<'a>(s: &'a mut foldgate::fold::Summary, name: &str) -> &'a mut Vec<String> {
    match name {
        "facts" => &mut s.facts,
        "completed" => &mut s.completed,
        "decisions" => &mut s.decisions,
        "open_items" => &mut s.open_items,
        _ => &mut s.goals,
    }
}

#[test]
fn claims_are_grounded_true_ones_kept_invented_ones_dropped() {
    let mut summary = foldgate::fold::Summary {
        summary: "Postgres listens on 5433. The metrics port is 5433.".into(),
        ..Default::default()
    };
    for (list, claim) in TRUE_CLAIMS.iter().chain(FALSE_CLAIMS) {
        list_of(&mut summary, list).push((*claim).to_owned());
    }
    let invented = foldgate::summarize::drop_inventions(&mut summary, CLAIMS_SOURCE);
    let drops = foldgate::summarize::drop_unsupported(&mut summary, CLAIMS_SOURCE, None);
    let kept: Vec<String> = ["facts", "completed", "decisions", "open_items", "goals"]
        .into_iter()
        .flat_map(|list| list_of(&mut summary, list).clone())
        .collect();
    let kept: Vec<&str> = kept.iter().map(String::as_str).collect();
    let true_kept = TRUE_CLAIMS.iter().filter(|(_, c)| kept.contains(c)).count();
    let false_kept: Vec<&str> = FALSE_CLAIMS
        .iter()
        .map(|(_, c)| *c)
        .filter(|c| kept.contains(c))
        .collect();
    eprintln!(
        "true claims kept {true_kept}/{}, false claims dropped {}/{} ({drops:?}, invented {invented})",
        TRUE_CLAIMS.len(),
        FALSE_CLAIMS.len() - false_kept.len(),
        FALSE_CLAIMS.len()
    );
    assert!(false_kept.is_empty(), "false claims kept: {false_kept:?}");
    assert_eq!(
        true_kept,
        TRUE_CLAIMS.len(),
        "true claims dropped: {:?}",
        TRUE_CLAIMS
            .iter()
            .filter(|(_, c)| !kept.contains(c))
            .collect::<Vec<_>>()
    );
    assert_eq!(summary.summary, "Postgres listens on 5433.");
    assert!(drops.swaps >= 6, "{drops:?}");
    assert!(drops.unconfirmed >= 2, "{drops:?}");
}

#[tokio::test]
async fn invented_prose_and_swapped_values_leave_the_view_counted_by_reason() {
    // planted_history says: "the project is ORCHID-7 and its database
    // db-03.internal.example listens on port 5433; we look at the parser,
    // the tokenizer and the cache layer, then decide on the next step
    // together". Nothing about metrics, billing or Kubernetes, and the next
    // step is a plan, not done.
    let llm = Llm::start().await;
    llm.script([Sum::Raw(
        json!({"summary": "Work on ORCHID-7 continues. The metrics port is 5433.",
            "facts": ["the database listens on port 5433", "The metrics port is 5433."],
            "goals": ["decide on the next step together"],
            "decisions": [],
            "completed": ["Migrated the billing service to Kubernetes.", "Decided on the next step together"],
            "open_items": [], "artifacts": []})
        .to_string(),
    )]);
    let fg = Foldgate::start(&convo::config(&llm, "")).await;
    let reply = chat(&fg, "claims", &planted_history().body()).await;
    assert_eq!(label(&reply), "new");
    let summary = summary_text(&last_view(&llm)).expect("a summary message");
    let narrative = narrative_part(&summary);
    for kept in [
        "Work on ORCHID-7 continues.",
        "- the database listens on port 5433",
        "- decide on the next step together",
    ] {
        assert!(narrative.contains(kept), "{kept:?} missing:\n{summary}");
    }
    for gone in ["metrics port", "Kubernetes", "Decided on"] {
        assert!(
            !narrative.contains(gone),
            "{gone:?} reached the view:\n{summary}"
        );
    }
    let metrics = fg.metrics().await;
    let dropped = |reason: &str| {
        metric(
            &metrics,
            &format!("foldgate_summary_items_dropped_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(dropped("swap"), 2.0);
    assert_eq!(dropped("unsupported"), 1.0);
    assert_eq!(dropped("unconfirmed"), 1.0);
    assert_eq!(dropped("invented"), 0.0);
}
