//! Older-turn compression through the real server against the mock LLM:
//! which messages become stubs (old, long tool results, in batches), that
//! a stub keeps its bytes and its tool pair, that the tail and the last
//! user message stay, that compression postpones folds while a fold still
//! summarizes the original text, that compressed messages are archived
//! and found by their call id, that it is off without an archive, per
//! model, and on the Anthropic and Responses wire formats.

use crate::common;

use common::agents::{anthropic_violation, responses_violation};
use common::llm::{Llm, assert_tool_pairs, content_text, tags};
use common::redis::Redis;
use common::tooloop::ToolLoop;
use common::{Foldgate, Reply, metric, post_json, send};
use foldgate::fold::compress::STUB_PREFIX;
use foldgate::fold::summary::HEADING_PREFIX;
use http::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const TENANT: (&str, &str) = ("authorization", "Bearer sk-tenant-a");
/// Lines of a long tool output (~600 tokens); a short one has none.
const LONG: usize = 30;
/// `preserve_recent` (the default).
const TAIL: usize = 6;

/// foldgate before `llm`: a large window for `big-*`, a middle one for
/// `mid-*`, inline folds, and compression of tool results over 300
/// tokens after 2 turns, in batches of 3, every batch shown when due
/// (these tests check the stubs themselves; `compress_pays` checks when a
/// batch pays); plus `extra`.
fn config(llm: &Llm, extra: &str) -> String {
    format!(
        "{}\
         [models.\"big-*\"]\ncontext_window = 200000\n\
         [models.\"mid-*\"]\ncontext_window = 9000\n\
         [models.\"plain-*\"]\ncontext_window = 200000\n\
         [models.\"plain-*\".compress]\nenabled = false\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
         [summarizer]\nmax_summary_tokens = 400\ntimeout = \"5s\"\n\
         [compress]\nmin_tokens = 300\nafter_turns = 2\nbatch = 3\nwhen_it_pays = false\n{extra}",
        crate::common::providers(llm.url())
    )
}

async fn send_loop(fg: &Foldgate, conversation: &str, l: &ToolLoop, model: &str) -> Reply {
    let reply = post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[("x-conversation-id", conversation), TENANT],
        &l.body(model),
    )
    .await;
    reply.assert_ok();
    reply
}

/// The messages of the last chat request the upstream received.
fn forwarded(llm: &Llm) -> Vec<Value> {
    let requests = llm.chat_requests();
    requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone()
}

fn is_stub(m: &Value) -> bool {
    content_text(m).starts_with(STUB_PREFIX)
}

/// The rule, written out again from docs/folding.md: tool results of at least
/// `min` tokens (here: the long ones), outside the last `TAIL` messages,
/// followed by at least `after` turns (a user message or the first of a
/// run of tool results starts one); the first `floor(C / batch) * batch`.
fn expected(ms: &[Value], long: &BTreeSet<usize>, after: usize, batch: usize) -> Vec<usize> {
    let starts: Vec<usize> = (0..ms.len())
        .filter(|&i| {
            ms[i]["role"] == "user" || (ms[i]["role"] == "tool" && ms[i - 1]["role"] != "tool")
        })
        .collect();
    let mut candidates: Vec<usize> = (0..ms.len().saturating_sub(TAIL))
        .filter(|i| long.contains(i))
        .filter(|&i| starts.iter().filter(|&&s| s > i).count() >= after)
        .collect();
    candidates.truncate(candidates.len() / batch * batch);
    candidates
}

#[tokio::test]
async fn old_long_tool_results_become_stubs_in_batches_with_frozen_bytes() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let mut l = ToolLoop::new("fix the failing build");
    let mut long = BTreeSet::new();
    let mut stub_bytes: BTreeMap<usize, String> = BTreeMap::new();
    let mut previous: Option<(Vec<usize>, Vec<Value>)> = None;
    let (mut changes, mut stable) = (0, 0);
    for step in 1..=16u32 {
        // Every fourth output is short, and one follow-up from the user.
        l.step(if step % 4 == 0 { 0 } else { LONG });
        if step % 4 != 0 {
            long.insert(l.messages.len() - 1);
        }
        if step == 9 {
            l.user("also run the linter");
        }
        let reply = send_loop(&fg, "batches", &l, "big-model").await;
        assert_eq!(
            reply.header("x-foldgate-fold"),
            "none",
            "no fold, only stubs"
        );
        let view = forwarded(&llm);
        let want = expected(&l.messages, &long, 2, 3);
        assert_eq!(view.len(), l.messages.len(), "a stub replaces, never drops");
        let stubbed: Vec<usize> = (0..view.len()).filter(|&i| is_stub(&view[i])).collect();
        assert_eq!(stubbed, want, "step {step}");
        assert_eq!(stubbed.len() % 3, 0);
        let header = reply.headers.get("x-foldgate-compressed");
        let header = header.map(|v| v.to_str().unwrap().parse::<usize>().unwrap());
        assert_eq!(
            header,
            (!stubbed.is_empty()).then_some(stubbed.len()),
            "step {step}"
        );
        for (i, (m, original)) in view.iter().zip(&l.messages).enumerate() {
            if !stubbed.contains(&i) {
                assert_eq!(m, original, "message {i} is verbatim");
                continue;
            }
            let text = content_text(m);
            let k = original["tool_call_id"].as_str().unwrap();
            assert_eq!(m["role"], "tool");
            assert_eq!(
                m["tool_call_id"], original["tool_call_id"],
                "the pair stays"
            );
            let n: u32 = k.trim_start_matches("call_").parse().unwrap();
            for must in [
                format!("`bash`, call `{k}`"),
                format!("First line: $ ls /srv/app/step{n}"),
                format!("port 5{n:03}"),
                format!("/srv/app/step{n}/main.rs"),
                format!("query \"{k}\""),
            ] {
                assert!(text.contains(&must), "stub of {k} lacks {must:?}: {text}");
            }
            assert!(text.len() * 3 < content_text(original).len(), "{text}");
            let bytes = serde_json::to_string(m).unwrap();
            let first = stub_bytes.entry(i).or_insert_with(|| bytes.clone());
            assert_eq!(*first, bytes, "stub {i} renders to the same bytes");
        }
        assert_tool_pairs(&view);
        let last_user = l
            .messages
            .iter()
            .rposition(|m| m["role"] == "user")
            .unwrap();
        assert_eq!(view[last_user], l.messages[last_user]);
        if let Some((before, old_view)) = &previous {
            if *before == stubbed {
                stable += 1;
                assert_eq!(
                    &view[..old_view.len()],
                    &old_view[..],
                    "step {step}: the previous view is a prefix of this one"
                );
            } else {
                changes += 1;
            }
        }
        previous = Some((stubbed, view));
    }
    let total = stub_bytes.len();
    assert!(total >= 6, "{total} stubs after 16 steps");
    assert_eq!(changes, total / 3, "the view changes once per batch");
    assert!(stable > changes, "{stable} stable turns, {changes} changes");
    let m = fg.metrics().await;
    assert!(metric(&m, "foldgate_compressed_messages_total") >= total as f64);
    assert!(metric(&m, "foldgate_compressed_tokens_saved_total") > 0.0);
}

/// Runs a 30-step loop on `mid-model`; returns the summarizer calls.
async fn fold_run(extra: &str) -> (Llm, usize) {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, extra)).await;
    let mut l = ToolLoop::new("port the service");
    let mut stubs_seen = 0;
    for _ in 0..30 {
        l.step(LONG);
        let reply = send_loop(&fg, "postpone", &l, "mid-model").await;
        let view = forwarded(&llm);
        stubs_seen += view.iter().filter(|m| is_stub(m)).count();
        assert_covered(&l.messages, &view);
        assert!(reply.tokens_out() + 200 <= 9000, "fits the window");
    }
    if extra.is_empty() {
        assert!(stubs_seen > 0);
    } else {
        assert_eq!(stubs_seen, 0);
    }
    let calls = llm.summarizer_calls();
    (llm, calls)
}

/// Every client message is in the view verbatim, as its stub (same tool
/// call id, same place among the verbatim ones), or folded: its tags are
/// in the summary shown.
fn assert_covered(client: &[Value], view: &[Value]) {
    let summary: BTreeSet<u32> = view
        .iter()
        .filter(|m| content_text(m).contains(HEADING_PREFIX))
        .flat_map(|m| tags(&content_text(m)))
        .collect();
    let mut next = 0;
    let mut shown = BTreeSet::new();
    for m in view {
        let found = client[next..].iter().position(|c| {
            c == m || (is_stub(m) && c["role"] == "tool" && c["tool_call_id"] == m["tool_call_id"])
        });
        if let Some(at) = found {
            shown.insert(next + at);
            next += at + 1;
        } else {
            assert!(
                content_text(m).contains(HEADING_PREFIX),
                "unknown message {m}"
            );
        }
    }
    for (i, m) in client
        .iter()
        .enumerate()
        .filter(|(i, _)| !shown.contains(i))
    {
        let own = tags(&content_text(m));
        assert!(
            own.is_subset(&summary) && !own.is_empty(),
            "message {i} lost: {m}"
        );
    }
    assert_tool_pairs(view);
}

#[tokio::test]
async fn compression_postpones_folds_and_folds_summarize_the_original_text() {
    let (with, compressed) = fold_run("").await;
    let (_, plain) = fold_run("[archive]\nenabled = false\n").await;
    assert!(
        plain >= 2,
        "without compression the loop folds ({plain} calls)"
    );
    assert!(
        compressed < plain,
        "compression postpones folds: {compressed} summarizer calls against {plain}"
    );
    for request in with.summarizer_requests() {
        assert!(
            !request.to_string().contains(STUB_PREFIX),
            "the summarizer gets the original messages, never stubs"
        );
    }
}

/// Tenant A's archive hits for `q` in `conversation` (waits up to 5 s for
/// queued writes).
async fn hits(fg: &Foldgate, conversation: &str, q: &str) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let url = format!(
            "{}/foldgate/conversations/{conversation}/archive?q={q}&limit=20",
            fg.url
        );
        let reply = send(Method::GET, &url, &[TENANT], "").await;
        if reply.status == 200 {
            let found = reply.json()["results"][0]["hits"]
                .as_array()
                .cloned()
                .unwrap();
            if !found.is_empty() || started.elapsed() > Duration::from_secs(5) {
                return found;
            }
        } else if started.elapsed() > Duration::from_secs(5) {
            panic!("archive search answered {}", reply.status);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn compressed_messages_are_archived_and_found_by_call_id() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!(
        "[state]\nbackend = \"sqlite\"\npath = {:?}\n",
        dir.path().join("f.db").display().to_string()
    );
    for state in [sqlite, String::new()] {
        let llm = Llm::start().await;
        let fg = Foldgate::start(&config(&llm, &state)).await;
        let mut l = ToolLoop::new("fix the failing build");
        for _ in 0..8 {
            l.step(LONG);
        }
        send_loop(&fg, "archived", &l, "big-model").await;
        let view = forwarded(&llm);
        let stubbed: Vec<&Value> = view.iter().filter(|m| is_stub(m)).collect();
        assert!(stubbed.len() >= 3, "{state}");
        for stub in stubbed {
            let id = stub["tool_call_id"].as_str().unwrap();
            let original = l.messages.iter().find(|m| m["tool_call_id"] == id).unwrap();
            let found = hits(&fg, "archived", id).await;
            let hit = found
                .iter()
                .find(|h| h["tool_call_id"] == id)
                .unwrap_or_else(|| panic!("{state}: {id} not found: {found:#?}"));
            assert_eq!(found[0]["tool_call_id"], id, "{state}: ranked first");
            assert_eq!(hit["message"], *original, "{state}: stored verbatim");
            assert_eq!(hit["fold"], "compress");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stub_shown_on_every_turn_is_archived_once_in_redis() {
    let redis = Redis::start();
    let llm = Llm::start().await;
    let state = format!(
        "[state]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    );
    let fg = Foldgate::start(&config(&llm, &state)).await;
    let mut l = ToolLoop::new("fix the failing build");
    let mut stubbed = BTreeSet::new();
    for _ in 0..14 {
        l.step(LONG);
        send_loop(&fg, "redis-once", &l, "big-model").await;
        let view = forwarded(&llm);
        stubbed.extend((0..view.len()).filter(|&i| is_stub(&view[i])));
    }
    assert!(stubbed.len() >= 6, "{stubbed:?}");
    // Writes land in a task of their own: wait until they have.
    let want = format!(":{}", stubbed.len());
    let started = Instant::now();
    let len = loop {
        let keys = redis.command(&["KEYS", "foldgate:archive:*"]).unwrap();
        let len = keys
            .lines()
            .find(|k| k.ends_with(":redis-once}"))
            .and_then(|k| redis.command(&["LLEN", k]))
            .unwrap_or_default();
        if len.trim() == want || started.elapsed() > Duration::from_secs(5) {
            break len;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        len.trim(),
        want,
        "each stubbed message stored once, not per turn"
    );
}

#[tokio::test]
async fn nothing_is_compressed_without_an_archive_or_when_a_model_turns_it_off() {
    let llm = Llm::start().await;
    let off = Foldgate::start(&config(&llm, "[archive]\nenabled = false\n")).await;
    let on = Foldgate::start(&config(&llm, "")).await;
    let mut l = ToolLoop::new("fix the failing build");
    for _ in 0..10 {
        l.step(LONG);
    }
    let untouched = |llm: &Llm| {
        let body = llm.chat_requests().last().unwrap().clone();
        assert_eq!(body["messages"], json!(l.messages));
    };
    send_loop(&off, "off", &l, "big-model").await;
    untouched(&llm);
    send_loop(&on, "model-off", &l, "plain-model").await;
    untouched(&llm);
    send_loop(&on, "model-on", &l, "big-model").await;
    assert!(
        forwarded(&llm).iter().any(is_stub),
        "the same loop compresses on big-*"
    );
    let m = off.metrics().await;
    assert_eq!(metric(&m, "foldgate_compressed_messages_total"), 0.0);
    // Without the recall tool, a stub names no tool the model lacks.
    let quiet = Foldgate::start(&config(&llm, "[archive]\nrecall = \"off\"\n")).await;
    send_loop(&quiet, "quiet", &l, "big-model").await;
    let stubs: Vec<String> = forwarded(&llm)
        .iter()
        .filter(|m| is_stub(m))
        .map(content_text)
        .collect();
    assert!(!stubs.is_empty());
    for text in stubs {
        assert!(
            text.ends_with("The full text is archived.") && !text.contains("foldgate_recall"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn assistant_answers_are_compressed_only_when_a_model_asks_for_it() {
    let llm = Llm::start().await;
    let extra = "[models.\"chatty-*\"]\ncontext_window = 200000\n\
                 [models.\"chatty-*\".compress]\nassistant = true\n";
    let fg = Foldgate::start(&config(&llm, extra)).await;
    let report =
        "the parser, the tokenizer and the cache layer were compared once more\n".repeat(40);
    let mut messages = vec![json!({"role": "system", "content": "You are a reviewer."})];
    for t in 0..10 {
        messages.push(json!({"role": "user", "content": format!("[m{t}] review part {t}")}));
        let mut answer = json!({"role": "assistant",
            "content": format!("Review of part {t}: see src/part{t}.rs\n{report}")});
        if t % 2 == 0 {
            answer["tool_calls"] = json!([{"id": format!("call_{t}"), "type": "function",
                "function": {"name": "open", "arguments": format!("{{\"path\":\"src/part{t}.rs\"}}")}}]);
            messages.push(answer);
            messages.push(
                json!({"role": "tool", "tool_call_id": format!("call_{t}"), "content": "ok"}),
            );
        } else {
            messages.push(answer);
        }
    }
    for (model, stubbed) in [("big-model", false), ("chatty-model", true)] {
        let reply = post_json(
            &format!("{}/v1/chat/completions", fg.url),
            &[("x-conversation-id", model), TENANT],
            &json!({"model": model, "messages": messages}),
        )
        .await;
        reply.assert_ok();
        let view = forwarded(&llm);
        assert_eq!(view.len(), messages.len());
        let stubs: Vec<usize> = (0..view.len()).filter(|&i| is_stub(&view[i])).collect();
        assert_eq!(!stubs.is_empty(), stubbed, "{model}: {stubs:?}");
        for &i in &stubs {
            assert_eq!(view[i]["role"], "assistant");
            assert_eq!(
                view[i].get("tool_calls"),
                messages[i].get("tool_calls"),
                "calls kept"
            );
            let text = content_text(&view[i]);
            assert!(
                text.contains("compressed assistant answer") && text.contains("src/part"),
                "{text}"
            );
        }
        assert_tool_pairs(&view);
    }
}

/// A Messages loop: `steps` tool uses, each answered by a long result;
/// the first step makes a second, parallel call (`toolu_0b`).
fn anthropic_loop(steps: usize) -> Value {
    let output = "compiling module with the parser tokenizer and cache layer\n".repeat(2 * LONG);
    let mut messages = vec![json!({"role": "user", "content": "[m1] task: fix the build"})];
    for s in 0..steps {
        let id = format!("toolu_{s}");
        let mut uses = vec![
            json!({"type": "text", "text": format!("step {s}")}),
            json!({"type": "tool_use", "id": id, "name": "bash", "input": {"cmd": format!("make {s}")}}),
        ];
        let mut results = vec![json!({"type": "tool_result", "tool_use_id": id,
            "content": format!("make {s}: port 6{s:03}\n{output}")})];
        if s == 0 {
            uses.push(json!({"type": "tool_use", "id": "toolu_0b", "name": "bash", "input": {"cmd": "ls"}}));
            results.push(
                json!({"type": "tool_result", "tool_use_id": "toolu_0b", "content": "a.txt"}),
            );
        }
        messages.push(json!({"role": "assistant", "content": uses}));
        messages.push(json!({"role": "user", "content": results}));
    }
    json!({"model": "big-claude", "max_tokens": 100, "system": "You are an agent.", "messages": messages})
}

/// A Responses loop: `steps` function calls, each answered by a long output.
fn responses_loop(steps: usize) -> Value {
    let output = "compiling module with the parser tokenizer and cache layer\n".repeat(2 * LONG);
    let mut input = vec![json!({"role": "user", "content": "[m1] task: fix the build"})];
    for s in 0..steps {
        let id = format!("call_{s}");
        input.push(json!({"type": "reasoning", "id": format!("rs_{s}"), "summary": []}));
        input.push(
            json!({"type": "function_call", "call_id": id, "name": "bash",
            "arguments": json!({"cmd": format!("make {s}")}).to_string()}),
        );
        input.push(json!({"type": "function_call_output", "call_id": id,
            "output": format!("make {s}: port 6{s:03}\n{output}")}));
    }
    json!({"model": "big-gpt", "input": input})
}

#[tokio::test]
async fn anthropic_and_responses_stubs_keep_their_wire_pairing() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    for (path, body) in [
        ("/v1/messages", anthropic_loop(10)),
        ("/v1/responses", responses_loop(10)),
    ] {
        let reply = post_json(
            &format!("{}{path}", fg.url),
            &[("x-conversation-id", path), TENANT],
            &body,
        )
        .await;
        reply.assert_ok();
        let sent = llm.chat_requests().last().unwrap().clone();
        let (mut results, violation): (Vec<Value>, _) = if path == "/v1/messages" {
            let blocks = sent["messages"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .filter(|b| b["type"] == "tool_result")
                .map(|b| json!({"id": b["tool_use_id"], "text": b["content"]}))
                .collect();
            (blocks, anthropic_violation(&sent))
        } else {
            let outputs = sent["input"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| i["type"] == "function_call_output")
                .map(|i| json!({"id": i["call_id"], "text": i["output"]}))
                .collect();
            (outputs, responses_violation(&sent))
        };
        assert_eq!(violation, None, "{path}");
        let sibling = results.iter().position(|r| r["id"] == "toolu_0b");
        if let Some(at) = sibling {
            // The second result of a compressed message points to the stub.
            let pointer = results.remove(at);
            assert_eq!(
                pointer["text"],
                "[foldgate: compressed with the tool result before it]"
            );
        }
        assert_eq!(sibling.is_some(), path == "/v1/messages");
        assert_eq!(results.len(), 10, "{path}: every result stays, paired");
        let stubs: Vec<&Value> = results
            .iter()
            .filter(|r| {
                r["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(STUB_PREFIX))
            })
            .collect();
        assert!(
            stubs.len() >= 3 && stubs.len() % 3 == 0,
            "{path}: {stubs:?}"
        );
        for (s, stub) in stubs.iter().enumerate() {
            let text = stub["text"].as_str().unwrap();
            let id = stub["id"].as_str().unwrap();
            assert!(
                id.ends_with(&format!("_{s}")),
                "{path}: the oldest go first"
            );
            assert!(text.contains(&format!("port 6{s:03}")), "{path}: {text}");
            assert!(text.contains(&format!("`{id}`")), "{path}: {text}");
            assert!(text.contains("foldgate_recall"), "{path}: {text}");
        }
        // The newest results and everything else stay as sent.
        assert!(
            !results[9]["text"]
                .as_str()
                .unwrap()
                .starts_with(STUB_PREFIX)
        );
    }
}

#[tokio::test]
async fn replay_shows_the_stubs_and_tokens_the_proxy_sends() {
    let llm = Llm::start().await;
    let toml = config(&llm, "");
    let dir = tempfile::tempdir().unwrap();
    let (config_path, recording) = (dir.path().join("f.toml"), dir.path().join("loop.jsonl"));
    std::fs::write(&config_path, &toml).unwrap();
    let mut l = ToolLoop::new("fix the failing build");
    let mut lines = Vec::new();
    for _ in 0..12 {
        l.step(LONG);
        lines.push(l.body("big-model").to_string());
    }
    std::fs::write(&recording, lines.join("\n")).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_foldgate"))
        .arg("replay")
        .arg(&recording)
        .arg("--config")
        .arg(&config_path)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // line messages tokens_in tokens_out ratio fold reason folded covered stubs
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("line"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), lines.len(), "{stdout}");
    let fg = Foldgate::start(&toml).await;
    let mut stubbed = 0;
    for (row, line) in rows.iter().zip(&lines) {
        let body: Value = serde_json::from_str(line).unwrap();
        let reply = post_json(
            &format!("{}/v1/chat/completions", fg.url),
            &[("x-conversation-id", "replayed"), TENANT],
            &body,
        )
        .await;
        reply.assert_ok();
        let stubs = forwarded(&llm).iter().filter(|m| is_stub(m)).count();
        assert_eq!(row[9], stubs.to_string(), "{stdout}");
        assert_eq!(row[3], reply.tokens_out().to_string(), "{stdout}");
        stubbed += stubs;
    }
    assert!(stubbed > 0, "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_archive_spool_sends_the_messages_whole_instead_of_as_stubs() {
    let mut redis = Redis::start();
    let llm = Llm::start().await;
    // Room for one batch of stubs only: an empty spool takes any one.
    let state = format!(
        "[state]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\n[archive]\nspool_bytes = 1\n",
        redis.url()
    );
    let fg = Foldgate::start(&config(&llm, &state)).await;
    redis.kill();
    let mut l = ToolLoop::new("fix the failing build");
    let mut stubbed = BTreeSet::new();
    let mut refused = 0;
    for _ in 0..14 {
        l.step(LONG);
        let reply = send_loop(&fg, "spool-full", &l, "big-model").await;
        let view = forwarded(&llm);
        let stubs: BTreeSet<usize> = (0..view.len()).filter(|&i| is_stub(&view[i])).collect();
        if reply
            .header("x-foldgate-warning")
            .contains("archive spool is full")
        {
            refused += 1;
            assert!(
                stubs.is_empty(),
                "no stub without its archive row: {stubs:?}"
            );
            assert_eq!(view, l.messages, "the messages go whole");
        }
        stubbed.extend(stubs);
    }
    assert!(
        !stubbed.is_empty(),
        "the first batch is spooled and stubbed"
    );
    assert!(refused > 0, "later batches find the spool full");

    redis.restart();
    // Every message ever sent as a stub reaches Redis.
    let want = format!(":{}", stubbed.len());
    let started = Instant::now();
    let len = loop {
        let keys = redis.command(&["KEYS", "foldgate:archive:*"]).unwrap();
        let len = keys
            .lines()
            .find(|k| k.ends_with(":spool-full}"))
            .and_then(|k| redis.command(&["LLEN", k]))
            .unwrap_or_default();
        if len.trim() == want || started.elapsed() > Duration::from_secs(20) {
            break len;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(len.trim(), want, "spooled stubs replayed");
    // With the spool empty again, stubs come back.
    l.step(LONG);
    let reply = send_loop(&fg, "spool-full", &l, "big-model").await;
    assert_eq!(reply.header("x-foldgate-warning"), "");
    assert!(forwarded(&llm).iter().any(is_stub));
}
