//! End-to-end folding against a mock LLM that plays chat model and summarizer.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::{self, Llm, Sum};
use common::{Foldgate, Reply, post_json};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

async fn chat(fg: &Foldgate, conversation: &str, body: &Value) -> Reply {
    chat_as(fg, conversation, "sk-tenant-a", body).await
}

async fn chat_as(fg: &Foldgate, conversation: &str, key: &str, body: &Value) -> Reply {
    let auth = format!("Bearer {key}");
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[
            ("x-conversation-id", conversation),
            ("authorization", &auth),
        ],
        body,
    )
    .await
}

fn last_view(llm: &Llm) -> Vec<Value> {
    llm.chat_requests().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn long_agent_conversation_folds_without_dropping_anything() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let mut convo = Convo::with_turns(0);
    let mut labels = Vec::new();
    let mut requests = 0;
    for turn in 0..200 {
        convo.user(&format!("step {turn}"));
        let mut sends = vec![turn % 2 == 1];
        if turn % 4 == 0 {
            sends.push(false);
        }
        for (i, stream) in sends.into_iter().enumerate() {
            if i == 1 {
                convo.tools(1 + turn % 3);
            }
            let reply = chat(&fg, "agent-1", &convo.body_for("tiny-model", stream)).await;
            assert_eq!(
                reply.status,
                200,
                "turn {turn}: {}",
                String::from_utf8_lossy(&reply.body)
            );
            if stream {
                assert!(String::from_utf8_lossy(&reply.body).ends_with("data: [DONE]\n\n"));
            }
            requests += 1;
            assert_eq!(
                llm.chat_requests().len(),
                requests,
                "one upstream chat call per request"
            );
            llm::assert_view_covers(&convo.messages, &last_view(&llm));
            let tokens_out: u32 = reply.headers["x-foldgate-tokens-out"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                tokens_out + 100 <= 4000,
                "turn {turn}: view of {tokens_out} tokens overflows the window"
            );
            labels.push(label(&reply).to_string());
        }
        convo.assistant(&format!("done with step {turn}"));
    }
    let new = labels.iter().filter(|l| *l == "new").count();
    let reused = labels.iter().filter(|l| *l == "reused").count();
    let first_new = labels
        .iter()
        .position(|l| l == "new")
        .expect("the conversation must fold");
    assert!(
        labels[..first_new].iter().all(|l| l == "none"),
        "{labels:?}"
    );
    assert_eq!(labels[first_new + 1], "reused", "{labels:?}");
    assert!(
        reused > 5 * new,
        "summaries must be reused far more often than made: {new} new, {reused} reused"
    );
    let calls = llm.summarizer_calls();
    assert_eq!(calls, new, "one summarizer call per fold");
    assert!(
        calls * 8 < requests,
        "summarizer ran {calls} times for {requests} requests"
    );
    // Every fold is a rewrite: the summarizer saw the previous summary.
    let second = &llm.summarizer_requests()[1];
    assert!(
        second["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("[m1..m"),
        "{second}"
    );
}

/// A history that crosses the token trigger (0.8 × 4000) but still fits.
fn folding_history() -> Convo {
    Convo::with_turns(55)
}

#[tokio::test]
async fn short_conversations_pass_through_byte_exact() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let body = "{\"model\":\"tiny-model\",  \"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"x_custom\":1}],\"zeta\":true}";
    let reply = common::send(
        http::Method::POST,
        &format!("{}/v1/chat/completions", fg.url),
        &[("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(label(&reply), "none");
    assert_eq!(llm.mock.received()[0].body, body.as_bytes());
    let tokens_in: u32 = reply.headers["x-foldgate-tokens-in"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(tokens_in > 0 && tokens_in < 50);
}

#[tokio::test]
async fn folded_request_changes_only_messages() {
    let llm = Llm::start().await;
    // The recall tool (on by default) adds `tools`: tests/recall.rs.
    let fg = Foldgate::start(&config(&llm, "[archive]\nrecall = \"off\"\n")).await;
    let convo = folding_history();
    let mut body = convo.body();
    body["a_vendor_field"] = json!({"keep": [1, 2]});
    let reply = chat(&fg, "c", &body).await;
    assert_eq!(label(&reply), "new");
    let sent = llm.chat_requests().pop().unwrap();
    let keys: Vec<&String> = sent.as_object().unwrap().keys().collect();
    let expected: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(keys, expected, "field order kept");
    for (k, v) in body.as_object().unwrap() {
        if k != "messages" {
            assert_eq!(&sent[k], v);
        }
    }
    let view = sent["messages"].as_array().unwrap();
    assert!(view.len() < convo.messages.len());
    assert_eq!(view[0], convo.messages[0], "pinned system prompt first");
    llm::assert_view_covers(&convo.messages, view);
}

#[tokio::test]
async fn summarizer_5xx_are_retried() {
    let llm = Llm::start().await;
    llm.script([Sum::Status(500), Sum::Status(503)]);
    let fg = Foldgate::start(&config(&llm, "")).await;
    let reply = chat(&fg, "c", &folding_history().body()).await;
    assert_eq!(label(&reply), "new");
    assert_eq!(llm.summarizer_calls(), 3);
}

#[tokio::test]
async fn fenced_json_is_repaired() {
    let llm = Llm::start().await;
    llm.script([Sum::Fenced]);
    let fg = Foldgate::start(&config(&llm, "")).await;
    let convo = folding_history();
    let reply = chat(&fg, "c", &convo.body()).await;
    assert_eq!(label(&reply), "new");
    assert_eq!(llm.summarizer_calls(), 1);
    llm::assert_view_covers(&convo.messages, &last_view(&llm));
}

#[tokio::test]
async fn garbage_output_falls_back_to_passthrough() {
    let llm = Llm::start().await;
    llm.script([Sum::Garbage, Sum::Garbage, Sum::Garbage]);
    let fg = Foldgate::start(&config(&llm, "")).await;
    let convo = folding_history();
    let reply = chat(&fg, "c", &convo.body()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(label(&reply), "none");
    assert!(reply.headers.contains_key("x-foldgate-warning"));
    assert_eq!(
        llm.summarizer_calls(),
        3,
        "initial attempt plus two retries"
    );
    assert_eq!(
        last_view(&llm),
        convo.messages,
        "unfolded request forwarded whole"
    );
    assert!(
        fg.metrics()
            .await
            .contains("foldgate_fold_failures_total 1")
    );
}

#[tokio::test]
async fn summarizer_failure_can_be_an_error() {
    let llm = Llm::start().await;
    llm.script([Sum::Status(500), Sum::Status(500), Sum::Status(500)]);
    let fg = Foldgate::start(&config(&llm, "on_failure = \"error\"\n")).await;
    let reply = chat(&fg, "c", &folding_history().body()).await;
    reply.assert_envelope(503, "unavailable");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("summarizer")
    );
    assert!(llm.chat_requests().is_empty(), "nothing is forwarded");
}

#[tokio::test]
async fn summarizer_timeout_is_bounded() {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(3000, Ordering::Relaxed);
    let fg = Foldgate::start(
        &config(&llm, "")
            .replace("timeout = \"5s\"", "timeout = \"200ms\"\nretries = 0")
            .replace("retries = 2\n", ""),
    )
    .await;
    let started = std::time::Instant::now();
    let reply = chat(&fg, "c", &folding_history().body()).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(reply.status, 200);
    assert_eq!(label(&reply), "none");
}

#[tokio::test]
async fn json_schema_rejection_downgrades_and_is_remembered() {
    let llm = Llm::start().await;
    llm.state.reject_schema.store(true, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&llm, "")).await;
    assert_eq!(
        label(&chat(&fg, "c1", &folding_history().body()).await),
        "new"
    );
    let formats: Vec<Value> = llm
        .summarizer_requests()
        .iter()
        .map(|r| r["response_format"]["type"].clone())
        .collect();
    assert_eq!(formats, vec![json!("json_schema"), json!("json_object")]);
    assert_eq!(
        label(&chat(&fg, "c2", &folding_history().body()).await),
        "new"
    );
    assert_eq!(
        llm.summarizer_requests()[2]["response_format"]["type"],
        "json_object",
        "the accepted format is remembered"
    );
}

#[tokio::test]
async fn concurrent_requests_share_one_fold() {
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(300, Ordering::Relaxed);
    let fg = std::sync::Arc::new(Foldgate::start(&config(&llm, "")).await);
    let body = folding_history().body();
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (fg, body) = (fg.clone(), body.clone());
            tokio::spawn(async move { chat(&fg, "same", &body).await })
        })
        .collect();
    let mut labels = Vec::new();
    for t in tasks {
        let reply = t.await.unwrap();
        assert_eq!(reply.status, 200);
        labels.push(label(&reply).to_string());
    }
    assert_eq!(llm.summarizer_calls(), 1, "{labels:?}");
    assert_eq!(
        labels.iter().filter(|l| *l == "new").count(),
        1,
        "{labels:?}"
    );
    assert_eq!(
        labels.iter().filter(|l| *l == "reused").count(),
        9,
        "{labels:?}"
    );
}

#[tokio::test]
async fn edited_history_gets_no_stale_summary() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let mut convo = folding_history();
    assert_eq!(label(&chat(&fg, "c", &convo.body()).await), "new");
    convo.user("next");
    assert_eq!(label(&chat(&fg, "c", &convo.body()).await), "reused");
    // Edit an early message: the stored fold no longer matches.
    convo.messages[3]["content"] = json!("[m3] EDITED: the user changed their mind");
    let reply = chat(&fg, "c", &convo.body()).await;
    assert_eq!(
        label(&reply),
        "new",
        "an edited history must be folded afresh"
    );
    let prompt = llm.summarizer_requests().last().unwrap()["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.contains("EDITED"),
        "the new fold summarizes the edited message"
    );
    assert!(
        prompt.contains("(none yet)"),
        "and does not start from the stale summary"
    );
    llm::assert_view_covers(&convo.messages, &last_view(&llm));
}

#[tokio::test]
async fn tenants_with_the_same_conversation_id_stay_isolated() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "[server]\nadmin_token = \"adm-1\"\n")).await;
    let a = folding_history();
    assert_eq!(
        label(&chat_as(&fg, "shared-id", "sk-a", &a.body()).await),
        "new"
    );
    assert_eq!(
        label(&chat_as(&fg, "shared-id", "sk-b", &a.body()).await),
        "new",
        "tenant b must not reuse a's summary"
    );
    assert_eq!(llm.summarizer_calls(), 2);

    let url = format!("{}/foldgate/conversations/shared-id", fg.url);
    let get = |auth: &'static str| {
        let url = url.clone();
        async move { common::send(http::Method::GET, &url, &[("authorization", auth)], "").await }
    };
    let own = get("Bearer sk-a").await;
    assert_eq!(own.status, 200);
    let states = own.json()["states"].as_array().unwrap().clone();
    assert_eq!(states.len(), 1, "a tenant sees only its own state");
    assert_eq!(states[0]["folds"].as_array().unwrap().len(), 1);
    assert!(
        states[0]["current"]
            .as_str()
            .unwrap()
            .contains("[foldgate] Summary")
    );
    assert_eq!(get("Bearer sk-nobody").await.status, 404);
    let admin = get("Bearer adm-1").await;
    assert_eq!(admin.json()["states"].as_array().unwrap().len(), 2);
    common::send(http::Method::GET, &url, &[], "")
        .await
        .assert_envelope(401, "invalid_api_key");
}

#[tokio::test]
async fn context_length_error_triggers_one_emergency_fold() {
    let llm = Llm::start().await;
    // The tool alone: the mock's limit is in bytes (two thirds of the
    // body), which the retry's injected block, sized in tokens to the
    // learned window's room, can pass.
    let fg = Foldgate::start(&config(&llm, "[archive]\nrecall = \"tool\"\n")).await;
    let convo = Convo::with_turns(12);
    let body = convo.body_for("gpt-4o", false);
    // The mock names a 1,000-token window whatever its byte limit: the
    // folded view keeps as much tail as the learned window allows, so the
    // limit is two thirds of the body, not a half.
    llm.state
        .context_limit_bytes
        .store(body.to_string().len() * 2 / 3, Ordering::Relaxed);
    let reply = chat(&fg, "c", &body).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    let sent = llm.chat_requests();
    assert_eq!(sent.len(), 2, "the rejected request, then the folded retry");
    assert_eq!(sent[0]["messages"].as_array().unwrap(), &convo.messages);
    llm::assert_view_covers(&convo.messages, sent[1]["messages"].as_array().unwrap());

    // When even the retry is rejected, the upstream's error reaches the client.
    llm.state.context_limit_bytes.store(10, Ordering::Relaxed);
    let reply = chat(
        &fg,
        "other",
        &Convo::with_turns(12).body_for("gpt-4o", false),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["code"], "context_length_exceeded");
}

/// `config` with `policy.fold_deadline` set and `extra` appended.
fn config_with_deadline(llm: &Llm, deadline: &str, extra: &str) -> String {
    config(llm, extra).replace(
        "mode = \"inline\"\n",
        &format!("mode = \"inline\"\nfold_deadline = \"{deadline}\"\n"),
    )
}

#[tokio::test]
async fn a_summarizer_that_never_answers_costs_at_most_the_fold_deadline() {
    let llm = Llm::start().await;
    // Without the deadline: 3 attempts × the 5 s call timeout.
    llm.state
        .summarizer_delay_ms
        .store(600_000, Ordering::Relaxed);
    let fg = Foldgate::start(&config_with_deadline(&llm, "1s", "")).await;
    let convo = folding_history();
    let started = std::time::Instant::now();
    let reply = chat(&fg, "c", &convo.body()).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // on_failure = "passthrough": forwarded unfolded, and the response says why.
    reply.assert_ok();
    assert_eq!(label(&reply), "none");
    assert_eq!(
        reply.header("x-foldgate-warning"),
        "fold failed: not done within policy.fold_deadline (1s)"
    );
    assert_eq!(last_view(&llm), convo.messages);
    assert!(
        fg.metrics()
            .await
            .contains("foldgate_fold_deadlines_total 1")
    );

    // on_failure = "error": foldgate's own 503 says it tried, body and header.
    let llm = Llm::start().await;
    llm.state
        .summarizer_delay_ms
        .store(600_000, Ordering::Relaxed);
    let fg = Foldgate::start(&config_with_deadline(
        &llm,
        "1s",
        "on_failure = \"error\"\n",
    ))
    .await;
    let started = std::time::Instant::now();
    let reply = chat(&fg, "c", &convo.body()).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    reply.assert_envelope(503, "unavailable");
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("foldgate tried to fold the conversation and could not: not done within policy.fold_deadline (1s)"),
        "{message}"
    );
    assert!(reply.header("x-foldgate-warning").contains("fold_deadline"));
    assert!(llm.chat_requests().is_empty(), "nothing is forwarded");
}

/// One allowance for every fold a request waits for: an inline fold that
/// used it up leaves none to the reactive fold after the upstream's 400.
#[tokio::test]
async fn the_inline_and_the_reactive_fold_share_one_deadline() {
    let llm = Llm::start().await;
    llm.state
        .summarizer_delay_ms
        .store(600_000, Ordering::Relaxed);
    let fg = Foldgate::start(&config_with_deadline(&llm, "1s", "")).await;
    let body = folding_history().body();
    llm.state
        .context_limit_bytes
        .store(body.to_string().len() / 2, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let reply = chat(&fg, "c", &body).await;
    let waited = started.elapsed();
    // Bounded (the summarizer would take ten minutes); that the two folds
    // share one allowance is the count of deadlines below, not the wall
    // clock, which a loaded machine stretches past two allowances.
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.header("x-foldgate-warning"),
        "fold failed: not done within policy.fold_deadline (1s); the upstream's context-length error is returned"
    );
    assert_eq!(llm.chat_requests().len(), 1);
    let metrics = fg.metrics().await;
    assert!(
        metrics.contains("foldgate_fold_deadlines_total 1\n"),
        "{metrics}"
    );
}

/// Background mode (the default): only an emergency waits for a fold, and
/// the deadline bounds that wait too, the running fold's included.
#[tokio::test]
async fn an_emergency_fold_in_background_mode_is_bounded_by_the_fold_deadline() {
    let llm = Llm::start().await;
    llm.state
        .summarizer_delay_ms
        .store(600_000, Ordering::Relaxed);
    let fg = Foldgate::start(
        &config_with_deadline(&llm, "1s", "").replace("mode = \"inline\"", "mode = \"background\""),
    )
    .await;
    // Over the 4,000-token window with the output reserve: an emergency.
    let convo = Convo::with_turns(80);
    for conversation in ["a", "b"] {
        let started = std::time::Instant::now();
        let reply = chat(&fg, conversation, &convo.body()).await;
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        reply.assert_ok();
        assert_eq!(label(&reply), "none");
        assert_eq!(
            reply.header("x-foldgate-warning"),
            "fold failed: not done within policy.fold_deadline (1s)"
        );
    }
}

/// The client's request is rejected upstream as too long and the reactive
/// fold fails: the client gets the upstream's answer at once (the same view
/// would only be rejected again), saying foldgate tried.
#[tokio::test]
async fn a_failed_reactive_fold_says_so() {
    let llm = Llm::start().await;
    llm.answer_always(Sum::Status(500));
    let fg = Foldgate::start(&config(&llm, "")).await;
    let body = Convo::with_turns(12).body_for("gpt-4o", false);
    // The mock names a 1,000-token window whatever its byte limit: the
    // folded view keeps as much tail as the learned window allows, so the
    // limit is two thirds of the body, not a half.
    llm.state
        .context_limit_bytes
        .store(body.to_string().len() * 2 / 3, Ordering::Relaxed);
    let reply = chat(&fg, "c", &body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["code"], "context_length_exceeded");
    assert_eq!(
        reply.header("x-foldgate-warning"),
        "fold failed: the summarizer failed; the upstream's context-length error is returned"
    );
    assert_eq!(llm.chat_requests().len(), 1, "not sent again unchanged");
    assert_eq!(llm.summarizer_calls(), 3, "one fold, two retries");

    // With on_failure = "error", foldgate answers itself, saying it tried.
    let llm = Llm::start().await;
    llm.answer_always(Sum::Status(500));
    let fg = Foldgate::start(&config(&llm, "on_failure = \"error\"\n")).await;
    // The mock names a 1,000-token window whatever its byte limit: the
    // folded view keeps as much tail as the learned window allows, so the
    // limit is two thirds of the body, not a half.
    llm.state
        .context_limit_bytes
        .store(body.to_string().len() * 2 / 3, Ordering::Relaxed);
    let reply = chat(&fg, "c", &body).await;
    reply.assert_envelope(503, "unavailable");
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with(
            "foldgate tried to fold the conversation and could not: the summarizer failed: "
        ),
        "{message}"
    );
    assert_eq!(
        reply.header("x-foldgate-warning"),
        "fold failed: the summarizer failed"
    );
}

/// The field case: a context-length 400 starts a reactive fold whose
/// summarizer never answers. One deadline bounds the wait.
#[tokio::test]
async fn a_reactive_fold_is_bounded_by_the_fold_deadline() {
    let llm = Llm::start().await;
    llm.state
        .summarizer_delay_ms
        .store(600_000, Ordering::Relaxed);
    let fg = Foldgate::start(&config_with_deadline(&llm, "1s", "")).await;
    let body = Convo::with_turns(12).body_for("gpt-4o", false);
    llm.state
        .context_limit_bytes
        .store(body.to_string().len() / 2, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let reply = chat(&fg, "c", &body).await;
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["code"], "context_length_exceeded");
    let warning = reply.header("x-foldgate-warning");
    assert!(
        warning.starts_with("fold failed: not done within policy.fold_deadline (1s)"),
        "{warning}"
    );
    assert_eq!(llm.chat_requests().len(), 1);
}

#[tokio::test]
async fn malformed_chat_requests_get_clear_400s() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let url = format!("{}/v1/chat/completions", fg.url);
    let json_ct = [("content-type", "application/json")];
    let reply = common::send(http::Method::POST, &url, &json_ct, "{\"model\": \"x\", ").await;
    reply.assert_envelope(400, "invalid_request");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    let reply = post_json(&url, &[], &json!({"messages": []})).await;
    reply.assert_envelope(400, "invalid_request");
    assert_eq!(reply.json()["error"]["param"], "model");
    let reply = post_json(&url, &[], &json!({"model": "x", "messages": "hi"})).await;
    assert_eq!(reply.json()["error"]["param"], "messages");
    let reply = post_json(
        &url,
        &[],
        &json!({"model": "x", "messages": [{"content": "no role"}]}),
    )
    .await;
    assert_eq!(reply.json()["error"]["param"], "messages");
    assert!(
        llm.mock.received().is_empty(),
        "nothing malformed is forwarded"
    );
}

#[tokio::test]
async fn a_message_too_big_for_any_view_is_refused_clearly() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let mut convo = Convo::with_turns(2);
    convo
        .messages
        .push(json!({"role": "user", "content": format!("[m99] {}", "giant ".repeat(5000))}));
    let reply = chat(&fg, "c", &convo.body()).await;
    reply.assert_envelope(400, "context_length_exceeded");
    assert!(llm.chat_requests().is_empty());
}

#[tokio::test]
async fn calibration_converges_on_reported_usage() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let body = Convo::with_turns(3).body_for("some-local-model", false);
    let first = chat(&fg, "cal", &body).await;
    let estimate: f64 = first.headers["x-foldgate-tokens-out"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    llm.state
        .usage_prompt_tokens
        .store((estimate * 1.2).round() as u32, Ordering::Relaxed);
    let mut last = 0.0;
    for _ in 0..15 {
        let reply = chat(&fg, "cal", &body).await;
        last = reply.headers["x-foldgate-tokens-in"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
    }
    let ratio = last / estimate;
    let metrics = fg.metrics().await;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("foldgate_token_calibration_factor{model=\"some-local-model\"}"))
        .unwrap_or_else(|| panic!("no calibration gauge in:\n{metrics}"));
    let factor: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((factor - 1.2).abs() < 0.03, "{line}");
    assert!(
        (ratio - 1.2).abs() < 0.03,
        "calibrated estimate {last} vs first {estimate}: ratio {ratio}"
    );
}

#[tokio::test]
async fn windows_discovered_from_the_provider_drive_folding() {
    let llm = Llm::start().await;
    *llm.state.models_listing.lock().unwrap() = Some(
        json!({"data": [{"id": "disc-model", "context_length": 4000}, {"id": "other", "max_model_len": 32768}]}),
    );
    let convo = folding_history();
    // Without discovery the unknown model gets the default 8192-token window: no fold.
    let plain = Foldgate::start(&config(&llm, "")).await;
    assert_eq!(
        label(&chat(&plain, "c", &convo.body_for("disc-model", false)).await),
        "none"
    );
    let fg = Foldgate::start(&config(&llm, "[tokens]\ndiscover = true\n")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = chat(&fg, "c", &convo.body_for("disc-model", false)).await;
    assert_eq!(
        label(&reply),
        "new",
        "the discovered 4000-token window applies"
    );
    assert!(llm.mock.received().iter().any(|r| r.uri == "/v1/models"));
}

#[tokio::test]
async fn the_fast_path_counts_exactly_like_the_full_estimator() {
    let llm = Llm::start().await;
    let toml = config(&llm, "");
    let fg = Foldgate::start(&toml).await;
    let body = json!({
        "model": "gpt-4o", "max_tokens": 50,
        "tools": [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "name": "ann", "content": [{"type": "text", "text": "look at this"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"a.rs\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "fn main() {}"},
        ],
    });
    let reply = chat(&fg, "fast", &body).await;
    assert_eq!(label(&reply), "none");
    let config = foldgate::config::Config::from_toml(&toml).unwrap();
    let expected =
        foldgate::tokens::TokenCounter::new(&config).estimate("gpt-4o", body.as_object().unwrap());
    let header = |name: &str| {
        reply.headers[name]
            .to_str()
            .unwrap()
            .parse::<u32>()
            .unwrap()
    };
    assert_eq!(header("x-foldgate-tokens-in"), expected.input_tokens);
    assert_eq!(header("x-foldgate-tokens-out"), expected.input_tokens);
    assert_eq!(
        llm.mock.received()[0].body,
        body.to_string().as_bytes(),
        "forwarded byte for byte"
    );
}

#[tokio::test]
async fn keyless_conversations_are_readable_without_a_credential_only_on_loopback_without_an_admin_token()
 {
    let llm = Llm::start().await;
    for admin_token in [None, Some("adm-1")] {
        let extra = admin_token.map_or(String::new(), |t| {
            format!("[server]\nadmin_token = \"{t}\"\n")
        });
        let fg = Foldgate::start(&config(&llm, &extra)).await;
        let convo = folding_history();
        let url = format!("{}/v1/chat/completions", fg.url);
        let reply =
            common::post_json(&url, &[("x-conversation-id", "keyless")], &convo.body()).await;
        assert_eq!(label(&reply), "new");
        let read = common::send(
            http::Method::GET,
            &format!("{}/foldgate/conversations/keyless", fg.url),
            &[],
            "",
        )
        .await;
        match admin_token {
            // This test's client is on loopback: its own key-less state.
            None => {
                read.assert_ok();
                assert_eq!(read.json()["states"][0]["tenant"], "anonymous");
            }
            // With an admin token, a read needs a credential even locally.
            Some(_) => read.assert_envelope(401, "invalid_api_key"),
        }
    }
}
