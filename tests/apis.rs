//! Anthropic Messages and OpenAI Responses through foldgate: agent loops
//! driven by the official `anthropic` and `openai` Python packages against
//! mocks that enforce each API's rules, byte-exact passthrough, the error
//! shape, reactive folds, and requests whose history is held upstream.

use crate::common;

use common::llm::{Llm, assert_covers, tags};
use common::{Foldgate, post_json, send};
use foldgate::fold::summary::HEADING_PREFIX;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// A small window, so that a 40-step loop folds several times.
fn config(llm: &Llm) -> String {
    format!(
        "{}[models.\"tiny-*\"]\ncontext_window = 3000\n\
         [policy]\nreset_ratio = 0.45\n[summarizer]\nmax_summary_tokens = 300\n",
        crate::common::providers(llm.url())
    )
}

/// Checks an agent loop's log against what the upstream received.
fn assert_loop(
    log: &[Value],
    upstream: &[Value],
    view_of: impl Fn(&Value) -> (Vec<Value>, String),
) {
    assert_eq!(log.len(), 40);
    assert_eq!(
        upstream.len(),
        40,
        "one upstream request per client request"
    );
    let mut folded = 0;
    for (i, (entry, body)) in log.iter().zip(upstream).enumerate() {
        let sent = entry["sent"].as_array().unwrap();
        let (view, summary) = view_of(body);
        let own = |item: &Value| {
            item.to_string().contains(HEADING_PREFIX)
                || item["content"] == json!(foldgate::api::anthropic::CONTINUE_TEXT)
        };
        assert_covers(sent, &view, &summary, own);
        folded += usize::from(!summary.is_empty());
        assert!(
            entry["tokens_out"].as_u64().unwrap() + 200 <= 3000,
            "request {i} overflows the window"
        );
        assert_eq!(
            body["stream"].as_bool().unwrap_or(false),
            i % 2 == 1,
            "request {i}"
        );
    }
    assert!(
        folded >= 10,
        "only {folded} of 40 requests carried a summary"
    );
    let labels: Vec<&str> = log.iter().map(|e| e["fold"].as_str().unwrap()).collect();
    assert!(
        labels.iter().filter(|l| **l == "reused").count() >= 10,
        "{labels:?}"
    );
}

#[tokio::test]
async fn anthropic_sdk_agent_loop_folds_without_splitting_tool_pairs() {
    let llm = Llm::start().await;
    llm.state.window_tokens.store(6000, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&llm)).await;
    let log = common::drive("anthropic_agent.py", &fg.url).await;
    assert!(llm.state.violations.lock().unwrap().is_empty());
    let upstream = llm.chat_requests();
    assert_loop(&log, &upstream, |body| {
        let system = body["system"].as_array().unwrap();
        let summary = system
            .iter()
            .filter_map(|b| b["text"].as_str())
            .filter(|t| t.contains(HEADING_PREFIX))
            .collect::<String>();
        (body["messages"].as_array().unwrap().clone(), summary)
    });
    let calls = llm.summarizer_calls();
    assert!((1..=12).contains(&calls), "{calls} summarizer calls");
    // The client caches its system prompt: the summary after it gets a
    // breakpoint too, and the request stays within the API's four.
    let last = upstream.last().unwrap();
    let system = last["system"].as_array().unwrap();
    assert_eq!(system.len(), 2, "{system:?}");
    assert_eq!(system[1]["cache_control"], json!({"type": "ephemeral"}));
    assert!(last.to_string().matches("cache_control").count() <= 4);
    // The admin API says which API the conversation speaks.
    let admin = common::send(
        http::Method::GET,
        &format!("{}/foldgate/conversations/claude-e2e", fg.url),
        &[("x-api-key", "sk-ant-e2e")],
        Vec::new(),
    )
    .await;
    admin.assert_ok();
    let folds = admin.json()["states"][0]["folds"].clone();
    assert!(!folds.as_array().unwrap().is_empty());
    assert!(
        folds
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["api"] == "anthropic"),
        "{folds}"
    );
}

#[tokio::test]
async fn responses_sdk_agent_loop_folds_without_splitting_calls() {
    let llm = Llm::start().await;
    llm.state.window_tokens.store(6000, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&llm)).await;
    let log = common::drive("responses_agent.py", &format!("{}/v1", fg.url)).await;
    assert!(llm.state.violations.lock().unwrap().is_empty());
    let upstream = llm.chat_requests();
    assert_loop(&log, &upstream, |body| {
        let input = body["input"].as_array().unwrap();
        let summary = input
            .iter()
            .filter(|i| i["role"] == "system")
            .filter_map(|i| i["content"].as_str())
            .collect::<String>();
        (input.clone(), summary)
    });
    for body in &upstream {
        assert_eq!(body["instructions"], "You are a careful coding agent.");
    }
}

#[tokio::test]
async fn unfolded_requests_pass_through_byte_exact() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm)).await;
    let bodies = [
        (
            "/v1/messages",
            r#"{ "model":"claude-x","max_tokens":50,  "system":"s","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}] }"#,
        ),
        (
            "/v1/responses",
            r#"{"model":"gpt-x", "input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[]}],"store":false}"#,
        ),
        (
            "/v1/messages/count_tokens",
            r#"{"model":"claude-x","messages":[{"role":"user","content":"hi"}]}"#,
        ),
        (
            "/v1/responses/compact",
            r#"{"model":"gpt-x","input":[{"role":"user","content":"hi"}]}"#,
        ),
    ];
    for (path, body) in bodies {
        let reply = send(
            http::Method::POST,
            &format!("{}{path}", fg.url),
            &[("content-type", "application/json")],
            body.as_bytes().to_vec(),
        )
        .await;
        assert!(reply.status.as_u16() < 500, "{path}: {}", reply.status);
        // A conversation without a header is keyed by its fingerprint.
        let folded_route = !path.ends_with("count_tokens") && !path.ends_with("compact");
        assert_eq!(
            reply.header("x-foldgate-conversation").starts_with("fp-"),
            folded_route,
            "{path}"
        );
        let received = llm.mock.received();
        let last = received.last().unwrap();
        assert_eq!(last.uri, path);
        assert_eq!(
            last.body,
            body.as_bytes(),
            "{path} was not forwarded byte for byte"
        );
    }
}

#[tokio::test]
async fn foldgate_errors_on_the_messages_route_use_anthropic_shape() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\napi = \"anthropic\"\nmodels = [\"claude-*\"]\n",
        llm.url()
    ))
    .await;
    let url = format!("{}/v1/messages", fg.url);
    let reply = send(
        http::Method::POST,
        &url,
        &[("content-type", "application/json")],
        b"{not json".to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400);
    let v = reply.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    let reply = post_json(
        &url,
        &[],
        &json!({"model": "gpt-4o", "max_tokens": 5, "messages": []}),
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error"]["type"], "not_found_error");
    let reply = post_json(
        &url,
        &[],
        &json!({"model": "claude-x", "max_tokens": 5, "messages": [{"content": "x"}]}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages.0: must be an object")
    );
    // The chat route keeps OpenAI's envelope.
    let reply = post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[],
        &json!({"model": "gpt-4o", "messages": []}),
    )
    .await;
    // Only an Anthropic provider: a chat request is not sent to it.
    reply.assert_envelope(404, "provider_not_found");
    assert!(
        reply.text().contains(r#"api = \"openai\""#),
        "{}",
        reply.text()
    );
    assert_eq!(llm.chat_requests().len(), 0);
}

/// A long Messages conversation in tool steps.
fn long_anthropic(steps: usize) -> Value {
    let filler = " the parser, the tokenizer and the cache layer were compared again;".repeat(6);
    let mut messages = vec![json!({"role": "user", "content": "[m1] task: fix the build"})];
    for s in 0..steps {
        let id = format!("toolu_{s}");
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("[m{}] step", 2 * s + 2)},
            {"type": "tool_use", "id": id, "name": "bash", "input": {"cmd": format!("make {s}")}}]}));
        messages.push(
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
            "content": format!("[m{}] output{filler}", 2 * s + 3)}]}),
        );
    }
    json!({"model": "tiny-claude", "max_tokens": 100, "system": "You are an agent.", "messages": messages})
}

#[tokio::test]
async fn prompt_too_long_from_anthropic_folds_and_retries_once() {
    let llm = Llm::start().await;
    // foldgate believes the window is large; the upstream knows better.
    llm.state.window_tokens.store(3000, Ordering::Relaxed);
    let fg = Foldgate::start(&format!(
        "{}[models.\"tiny-*\"]\ncontext_window = 100000\n",
        crate::common::providers(llm.url())
    ))
    .await;
    let body = long_anthropic(30);
    let reply = post_json(
        &format!("{}/v1/messages", fg.url),
        &[("x-conversation-id", "big")],
        &body,
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    assert_eq!(reply.header("x-foldgate-conversation"), "big");
    let upstream = llm.chat_requests();
    assert_eq!(upstream.len(), 2, "one rejected attempt, one folded retry");
    let retry = &upstream[1];
    assert!(
        retry["system"][1]["text"]
            .as_str()
            .unwrap()
            .contains(HEADING_PREFIX)
    );
    assert!(common::agents::anthropic_violation(retry).is_none());
    let sent = body["messages"].as_array().unwrap();
    let summary = retry["system"][1]["text"].as_str().unwrap();
    assert_covers(sent, retry["messages"].as_array().unwrap(), summary, |_| {
        false
    });
}

/// The field case on the Messages API: the upstream says the prompt is too
/// long and the summarizer never answers. `policy.fold_deadline` bounds the
/// wait, and the answer says foldgate tried, in Anthropic's shape.
#[tokio::test]
async fn a_reactive_fold_past_its_deadline_says_so_in_anthropics_shape() {
    let llm = Llm::start().await;
    llm.state.window_tokens.store(3000, Ordering::Relaxed);
    llm.state
        .summarizer_delay_ms
        .store(600_000, Ordering::Relaxed);
    let toml = |on_failure: &str| {
        format!(
            "{}[models.\"tiny-*\"]\ncontext_window = 100000\n\
             [policy]\nfold_deadline = \"1s\"\n[summarizer]\non_failure = \"{on_failure}\"\n",
            crate::common::providers(llm.url())
        )
    };
    async fn send(fg: &Foldgate) -> common::Reply {
        let url = format!("{}/v1/messages", fg.url);
        post_json(&url, &[("x-conversation-id", "big")], &long_anthropic(30)).await
    }
    let fg = Foldgate::start(&toml("passthrough")).await;
    let started = std::time::Instant::now();
    let reply = send(&fg).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    // The upstream's own error, once, with why foldgate could not help.
    assert_eq!(reply.status, 400);
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long")
    );
    assert_eq!(
        reply.header("x-foldgate-warning"),
        "fold failed: not done within policy.fold_deadline (1s); the upstream's context-length error is returned"
    );
    assert_eq!(llm.chat_requests().len(), 1);

    let fg = Foldgate::start(&toml("error")).await;
    let started = std::time::Instant::now();
    let reply = send(&fg).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(reply.status, 503);
    let body = reply.json();
    assert_eq!(body["type"], "error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("foldgate tried to fold the conversation and could not: not done within policy.fold_deadline (1s)"),
        "{body}"
    );
    assert_eq!(
        reply.header("x-foldgate-warning"),
        "fold failed: not done within policy.fold_deadline (1s)"
    );
}

#[tokio::test]
async fn responses_with_history_upstream_are_forwarded_untouched() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm)).await;
    let big = "[m2] a long tool output ".repeat(2000);
    let body = json!({"model": "tiny-model", "previous_response_id": "resp_1", "input": [
        {"role": "user", "content": "[m1] go"},
        {"type": "function_call_output", "call_id": "call_0", "output": big}]});
    let text = body.to_string();
    let reply = send(
        http::Method::POST,
        &format!("{}/v1/responses", fg.url),
        &[
            ("content-type", "application/json"),
            ("x-conversation-id", "r1"),
        ],
        text.clone().into_bytes(),
    )
    .await;
    assert_eq!(reply.header("x-foldgate-fold"), "none");
    assert_eq!(llm.mock.received().last().unwrap().body, text.as_bytes());
    assert_eq!(llm.summarizer_calls(), 0);
}

#[test]
fn the_mocks_reject_what_the_apis_reject() {
    use common::agents::{anthropic_violation, responses_violation};
    let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]});
    let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]});
    let user = json!({"role": "user", "content": "go"});
    let ok = json!({"messages": [user, call, result]});
    assert_eq!(anthropic_violation(&ok), None);
    assert!(anthropic_violation(&json!({"messages": [user, call, user]})).is_some());
    assert!(anthropic_violation(&json!({"messages": [user, result]})).is_some());
    assert!(anthropic_violation(&json!({"messages": [call, result]})).is_some());
    let rs = json!({"type": "reasoning", "id": "rs_1", "summary": []});
    let fc = json!({"type": "function_call", "call_id": "call_1", "name": "x", "arguments": "{}"});
    let out = json!({"type": "function_call_output", "call_id": "call_1", "output": "ok"});
    assert_eq!(
        responses_violation(&json!({"input": [user, rs, fc, out]})),
        None
    );
    assert!(responses_violation(&json!({"input": [user, fc, out]})).is_some());
    assert!(responses_violation(&json!({"input": [user, rs, fc]})).is_some());
    assert!(responses_violation(&json!({"input": [user, out]})).is_some());
    assert!(responses_violation(&json!({"input": [user, rs, out]})).is_some());
}

#[tokio::test]
async fn an_anthropic_provider_summarizes_on_its_messages_api_with_its_key() {
    let llm = Llm::start().await;
    // SAFETY of the test: the variable name is unique to this test.
    unsafe { std::env::set_var("FOLDGATE_TEST_ANTHROPIC_KEY", "sk-ant-provider") };
    let fg = Foldgate::start(&format!(
        "[providers.claude]\nbase_url = \"{}/v1\"\napi = \"anthropic\"\napi_key_env = \"FOLDGATE_TEST_ANTHROPIC_KEY\"\n\
         [models.\"tiny-*\"]\ncontext_window = 3000\n[policy]\nmode = \"inline\"\nreset_ratio = 0.45\n\
         [summarizer]\nmax_summary_tokens = 300\n",
        llm.url()
    ))
    .await;
    let reply = post_json(
        &format!("{}/v1/messages", fg.url),
        &[("x-api-key", "sk-client"), ("x-conversation-id", "k1")],
        &long_anthropic(24),
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let received = llm.mock.received();
    let summarizer: Vec<_> = received
        .iter()
        .filter(|r| r.json()["system"] == foldgate::summarize::prompt::SYSTEM_PROMPT)
        .collect();
    assert_eq!(summarizer.len(), 1);
    assert_eq!(summarizer[0].uri, "/v1/messages");
    assert!(summarizer[0].json().get("response_format").is_none());
    for r in &received {
        assert_eq!(r.header("x-api-key"), Some("sk-ant-provider"), "{}", r.uri);
        assert_eq!(r.header("authorization"), None);
    }
    let forwarded = llm.chat_requests();
    let summary = forwarded[0]["system"][1]["text"].as_str().unwrap();
    assert!(tags(summary).len() > 20, "{summary}");
}

#[test]
fn a_view_that_keeps_everything_encodes_back_to_the_body() {
    use foldgate::api::fuzzing::codec;
    let anthropic = long_anthropic(3);
    let responses = json!({"model": "gpt-x", "instructions": "i", "store": false, "input": [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "a", "name": "ls", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "cat", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "x"},
        {"type": "function_call_output", "call_id": "b", "output": "y"}]});
    for (api, body, units) in [("anthropic", anthropic, 8), ("responses", responses, 5)] {
        let read = codec(api, body.to_string().as_bytes()).unwrap();
        assert_eq!(read.reencoded, body, "{api}");
        assert_eq!(read.units.len(), units, "{api}: {:?}", read.units);
        assert_eq!(read.units[0], None, "{api}: the pinned field first");
    }
    // A number with more digits than an f64 holds comes back as the same
    // number (parsed correctly rounded; found by the codecs fuzz target).
    let long = "111.222222222222221111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111122222222000000001";
    let body = format!(
        r#"{{"model":"claude-x","max_tokens":9,"temperature":{long},"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let read = codec("anthropic", body.as_bytes()).unwrap();
    let original: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(read.reencoded, original);
    let again: Value = serde_json::from_str(&read.reencoded.to_string()).unwrap();
    assert_eq!(again, original, "encoded and read again, the same value");
}
