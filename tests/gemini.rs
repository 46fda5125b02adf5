//! Gemini (`/v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent`) through foldgate, against a mock that
//! enforces Gemini's rules: a long conversation folds with its summary in
//! `systemInstruction` and function pairs intact, untouched requests go
//! byte for byte with the client's key, errors take Google's shape, a
//! "too many tokens" answer folds and retries, streams pass through, and
//! a provider with `api = "gemini"` sets the key and takes the
//! summarizer's calls.

use crate::common;

use common::gemini::{GeminiMock, summary_of, violation};
use common::llm::tags;
use common::{Foldgate, post_json, send};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

const PATH: &str = "/v1beta/models/tiny-gemini:generateContent";

/// A provider speaking Gemini, a small window.
fn config(mock: &GeminiMock, extra: &str) -> String {
    format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\nmodels = [\"tiny-*\"]\n{extra}\
         [models.\"tiny-*\"]\ncontext_window = 3000\n[policy]\nmode = \"inline\"\nreset_ratio = 0.45\n\
         [summarizer]\nmax_summary_tokens = 300\n",
        mock.url()
    )
}

/// A Gemini agent loop: one task, then `steps` function calls and their
/// responses, each tagged `[mN]`.
pub(crate) fn long_gemini(steps: usize) -> Value {
    let filler = " the parser, the tokenizer and the cache layer were compared again;".repeat(6);
    let mut contents =
        vec![json!({"role": "user", "parts": [{"text": "[m1] task: fix the build"}]})];
    for s in 0..steps {
        contents.push(json!({"role": "model", "parts": [
            {"text": format!("[m{}] step", 2 * s + 2)},
            {"functionCall": {"name": "run", "args": {"cmd": format!("make {s}")}}}]}));
        contents.push(
            json!({"role": "user", "parts": [{"functionResponse": {"name": "run",
            "response": {"output": format!("[m{}] output{filler}", 2 * s + 3)}}}]}),
        );
    }
    json!({
        "systemInstruction": {"parts": [{"text": "You are an agent."}]},
        "contents": contents,
        "tools": [{"functionDeclarations": [{"name": "run", "description": "runs a command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]}],
        "generationConfig": {"maxOutputTokens": 100},
    })
}

/// The Gemini view covers what the client sent; foldgate's own turn is
/// the one that asks the model to go on.
fn assert_covers(sent: &[Value], view: &[Value], summary: &str) {
    let own =
        |item: &Value| item["parts"][0]["text"] == foldgate::api::gemini::codec::CONTINUE_TEXT;
    common::llm::assert_covers(sent, view, summary, own);
}

#[tokio::test]
async fn a_gemini_conversation_folds_into_the_system_instruction_with_pairs_intact() {
    let mock = GeminiMock::start().await;
    // SAFETY of the test: the variable name is unique to this test.
    unsafe { std::env::set_var("FOLDGATE_TEST_GEMINI_KEY", "g-provider") };
    let fg = Foldgate::start(&config(
        &mock,
        "api_key_env = \"FOLDGATE_TEST_GEMINI_KEY\"\n",
    ))
    .await;
    let body = long_gemini(24);
    let reply = post_json(
        &format!("{}{PATH}", fg.url),
        &[("x-goog-api-key", "g-client"), ("x-conversation-id", "g1")],
        &body,
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    assert!(reply.json()["candidates"][0]["content"]["parts"][0]["text"].is_string());
    assert!(mock.state.violations.lock().unwrap().is_empty());
    let forwarded = mock.bodies();
    assert_eq!(forwarded.len(), 1);
    let view = &forwarded[0];
    assert!(violation(view).is_none());
    let system = view["systemInstruction"]["parts"].as_array().unwrap();
    assert_eq!(system[0]["text"], "You are an agent.", "pinned first");
    let summary = summary_of(view);
    assert!(tags(&summary).len() > 20, "{summary}");
    let sent = body["contents"].as_array().unwrap();
    let contents = view["contents"].as_array().unwrap();
    assert!(contents.len() < sent.len());
    assert_eq!(contents[0], sent[0], "the task stays verbatim");
    assert_covers(sent, contents, &summary);
    // The client's tools, then foldgate's recall tool (the view hides
    // archived contents).
    assert_eq!(view["tools"][0], body["tools"][0]);
    assert_eq!(
        view["tools"][1]["functionDeclarations"][0]["name"],
        "foldgate_recall"
    );
    assert_eq!(view["generationConfig"], body["generationConfig"]);
    // The summarizer spoke Gemini, with the provider's key, like the
    // forwarded request.
    let summarizer = mock.state.summarizer.lock().unwrap().clone();
    assert!((1..=3).contains(&summarizer.len()), "{summarizer:?}");
    for call in &summarizer {
        assert_eq!(call.uri, PATH);
        let config = &call.json()["generationConfig"];
        assert!(config["maxOutputTokens"].is_u64(), "{config}");
    }
    let received = mock.mock.received();
    for r in &received {
        assert_eq!(r.header("x-goog-api-key"), Some("g-provider"), "{}", r.uri);
        assert_eq!(r.header("authorization"), None);
    }
    // The next turn reuses the fold, byte-identical summary.
    let mut more = body.clone();
    let list = more["contents"].as_array_mut().unwrap();
    list.push(json!({"role": "model", "parts": [{"text": "[m200] done"}]}));
    list.push(json!({"role": "user", "parts": [{"text": "[m201] thanks"}]}));
    let reply = post_json(
        &format!("{}{PATH}", fg.url),
        &[("x-goog-api-key", "g-client"), ("x-conversation-id", "g1")],
        &more,
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "reused");
    let second = mock.bodies().pop().unwrap();
    assert!(violation(&second).is_none());
    assert_eq!(summary_of(&second), summary);
}

#[tokio::test]
async fn untouched_gemini_requests_go_byte_for_byte_with_the_clients_key() {
    let mock = GeminiMock::start().await;
    let fg = Foldgate::start(&config(&mock, "")).await;
    let body = r#"{ "contents":[{"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}}]}],  "safetySettings":[] }"#;
    for (path, headers) in [
        (PATH.to_string(), vec![("x-goog-api-key", "g-header")]),
        (format!("{PATH}?key=g-query"), vec![]),
    ] {
        let mut all = vec![("content-type", "application/json")];
        all.extend(headers.iter().copied());
        let reply = send(
            http::Method::POST,
            &format!("{}{path}", fg.url),
            &all,
            body.as_bytes().to_vec(),
        )
        .await;
        reply.assert_ok();
        assert_eq!(reply.header("x-foldgate-fold"), "none");
        assert!(reply.header("x-foldgate-conversation").starts_with("fp-"));
        let last = mock.mock.received().pop().unwrap();
        assert_eq!(last.uri, path, "the query (and its key) passes through");
        assert_eq!(
            last.body,
            body.as_bytes(),
            "{path} was not forwarded byte for byte"
        );
        for (name, value) in headers {
            assert_eq!(last.header(name), Some(value));
        }
    }
    // Timed under their own route, not `other`.
    let text = fg.metrics().await;
    assert_eq!(
        common::metric(&text, "foldgate_overhead_seconds_count{route=\"gemini\"}"),
        2.0,
        "{text}"
    );
    // And counted as Gemini's requests, not chat's.
    assert_eq!(
        common::metric(&text, "foldgate_requests_total{api=\"gemini\"}"),
        2.0,
        "{text}"
    );
    assert_eq!(
        common::metric(&text, "foldgate_requests_total{api=\"chat\"}"),
        0.0,
        "{text}"
    );
}

/// A client that sends its key as `?key=` only: the upstream gets the
/// query as it came (no header added), the summarizer the key in
/// `x-goog-api-key`, and two keys are two tenants.
#[tokio::test]
async fn a_key_in_the_query_reaches_the_summarizer_and_keys_the_tenant() {
    let mock = GeminiMock::start().await;
    let fg = Foldgate::start(&config(&mock, "")).await;
    let body = long_gemini(24);
    let path = format!("{PATH}?key=g-query");
    let reply = post_json(&format!("{}{path}", fg.url), &[], &body).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let conversation = mock.state.conversation.lock().unwrap().clone();
    assert_eq!(conversation[0].uri, path);
    assert_eq!(conversation[0].header("x-goog-api-key"), None);
    let summarizer = mock.state.summarizer.lock().unwrap().clone();
    assert!(!summarizer.is_empty());
    for call in &summarizer {
        assert_eq!(call.header("x-goog-api-key"), Some("g-query"));
        assert_eq!(call.uri, PATH, "the summarizer's own path, no query");
    }
    // The same conversation under another key is another tenant's: no
    // summary reused across keys.
    let other = format!("{}{PATH}?key=g-other", fg.url);
    let reply = post_json(&other, &[], &body).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let reply = post_json(&format!("{}{path}", fg.url), &[], &body).await;
    assert_eq!(reply.header("x-foldgate-fold"), "reused");
}

/// A summarizer model without JSON mode: the call is asked again without
/// `responseMimeType`, as a plain prompt, and the fold is made.
#[tokio::test]
async fn a_model_without_json_mode_summarizes_from_a_plain_prompt() {
    let mock = GeminiMock::start().await;
    mock.state.no_json_mode.store(true, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&mock, "")).await;
    let reply = post_json(
        &format!("{}{PATH}", fg.url),
        &[
            ("x-goog-api-key", "g-client"),
            ("x-conversation-id", "plain"),
        ],
        &long_gemini(24),
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let calls = mock.state.summarizer.lock().unwrap().clone();
    let json_mode = |c: &common::mock::Recorded| {
        c.json()
            .pointer("/generationConfig/responseMimeType")
            .is_some()
    };
    assert!(json_mode(&calls[0]), "JSON asked for first");
    let last = calls.last().unwrap();
    assert!(!json_mode(last), "then a plain prompt");
    assert!(tags(&summary_of(&mock.bodies()[0])).len() > 20);
}

/// A provider with its own key: the client's `?key=` goes upstream
/// neither in the query nor in a header; the provider's key does, and the
/// rest of the query is kept.
#[tokio::test]
async fn a_provider_key_replaces_a_key_the_client_sent_in_the_query() {
    let mock = GeminiMock::start().await;
    // SAFETY of the test: the variable name is unique to this test.
    unsafe { std::env::set_var("FOLDGATE_TEST_GEMINI_QUERY_KEY", "g-provider") };
    let fg = Foldgate::start(&config(
        &mock,
        "api_key_env = \"FOLDGATE_TEST_GEMINI_QUERY_KEY\"\n",
    ))
    .await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let stream = "/v1beta/models/tiny-gemini:streamGenerateContent";
    for (path, upstream) in [
        (format!("{PATH}?key=g-client"), PATH.to_string()),
        (
            format!("{stream}?alt=sse&key=g-client"),
            format!("{stream}?alt=sse"),
        ),
    ] {
        let reply = post_json(&format!("{}{path}", fg.url), &[], &body).await;
        reply.assert_ok();
        let last = mock.mock.received().pop().unwrap();
        assert_eq!(last.uri, upstream);
        assert_eq!(last.header("x-goog-api-key"), Some("g-provider"));
    }
}

#[tokio::test]
async fn streamed_answers_pass_through_as_events_or_an_array() {
    let mock = GeminiMock::start().await;
    let fg = Foldgate::start(&config(&mock, "")).await;
    let stream = "/v1beta/models/tiny-gemini:streamGenerateContent";
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let reply = post_json(&format!("{}{stream}?alt=sse", fg.url), &[], &body).await;
    reply.assert_ok();
    assert!(
        reply
            .header("content-type")
            .starts_with("text/event-stream")
    );
    let text = String::from_utf8_lossy(&reply.body).to_string();
    let events: Vec<&str> = text.split("\r\n\r\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 2, "{text}");
    assert!(events[1].contains("promptTokenCount"));
    let reply = post_json(&format!("{}{stream}", fg.url), &[], &body).await;
    reply.assert_ok();
    assert_eq!(reply.json().as_array().map(Vec::len), Some(2));
    // A long conversation folds on the streamed route too.
    let reply = post_json(
        &format!("{}{stream}?alt=sse", fg.url),
        &[("x-conversation-id", "s1")],
        &long_gemini(24),
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    assert!(String::from_utf8_lossy(&reply.body).contains("on it"));
    let last = mock.mock.received().pop().unwrap();
    assert!(last.uri.ends_with(":streamGenerateContent?alt=sse"));
    assert!(violation(&last.json()).is_none());
    assert!(!summary_of(&last.json()).is_empty());
}

#[tokio::test]
async fn foldgate_errors_on_gemini_routes_take_googles_shape() {
    let mock = GeminiMock::start().await;
    let fg = Foldgate::start(&config(&mock, "")).await;
    let reply = send(
        http::Method::POST,
        &format!("{}{PATH}", fg.url),
        &[("content-type", "application/json")],
        b"{not json".to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400);
    let v = reply.json();
    assert_eq!(v["error"]["code"], 400, "{v}");
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    let reply = post_json(
        &format!("{}/v1beta/models/gpt-4o:generateContent", fg.url),
        &[],
        &json!({"contents": []}),
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error"]["status"], "NOT_FOUND");
    let reply = post_json(&format!("{}{PATH}", fg.url), &[], &json!({"contents": "x"})).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("contents")
    );
    // An upstream error passes through unchanged.
    let reply = post_json(
        &format!("{}{PATH}", fg.url),
        &[],
        &json!({"contents": [{"role": "model", "parts": [{"text": "x"}]}]}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.json()["error"]["message"],
        "the first content must be the user's"
    );
}

#[tokio::test]
async fn too_many_input_tokens_folds_and_retries_once() {
    let mock = GeminiMock::start().await;
    mock.state.window_bytes.store(9000, Ordering::Relaxed);
    let fg = Foldgate::start(&format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\n\
         [models.\"tiny-*\"]\ncontext_window = 100000\n",
        mock.url()
    ))
    .await;
    let body = long_gemini(30);
    let reply = post_json(
        &format!("{}{PATH}", fg.url),
        &[("x-conversation-id", "big")],
        &body,
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    let upstream = mock.bodies();
    assert_eq!(upstream.len(), 2, "one rejected attempt, one folded retry");
    let retry = &upstream[1];
    assert!(violation(retry).is_none());
    let summary = summary_of(retry);
    assert_covers(
        body["contents"].as_array().unwrap(),
        retry["contents"].as_array().unwrap(),
        &summary,
    );
}

/// A conversation whose first turn holds a fact the summary loses, and
/// whose last asks for it.
fn forgetful(turns: usize) -> Value {
    let turn = |role: &str, text: String| json!({"role": role, "parts": [{"text": text}]});
    let mut contents = vec![
        turn(
            "user",
            "note that the favourite colour of the customer is teal".into(),
        ),
        turn("model", "noted".into()),
    ];
    for i in 0..turns {
        contents.push(turn(
            "user",
            format!("question {i} about the build and its long log"),
        ));
        contents.push(turn(
            "model",
            format!("answer {i}: the build was compared again"),
        ));
    }
    contents.push(turn(
        "user",
        "what is the favourite colour of the customer?".into(),
    ));
    json!({"contents": contents})
}

#[tokio::test]
async fn recall_on_gemini_answers_function_calls_whole_and_streamed() {
    for path in [
        PATH,
        "/v1beta/models/tiny-gemini:streamGenerateContent?alt=sse",
    ] {
        let mock = GeminiMock::start().await;
        mock.state.recalls.store(true, Ordering::Relaxed);
        // The tool alone: an injected block would answer without a round.
        let fg = Foldgate::start(&config(&mock, "[archive]\nrecall = \"tool\"\n")).await;
        let reply = post_json(
            &format!("{}{path}", fg.url),
            &[("x-goog-api-key", "g-client"), ("x-conversation-id", "r1")],
            &forgetful(120),
        )
        .await;
        reply.assert_ok();
        assert_eq!(reply.header("x-foldgate-fold"), "new", "{path}");
        let text = String::from_utf8_lossy(&reply.body).to_string();
        assert!(text.contains("teal"), "{path}: {text}");
        assert!(!text.contains("foldgate_recall"), "{path}: {text}");
        // Each round answered 5 candidate tokens: the client sees both.
        let key = "\"candidatesTokenCount\":";
        let counts: Vec<String> = text
            .match_indices(key)
            .map(|(i, _)| {
                text[i + key.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect()
            })
            .collect();
        assert_eq!(
            counts.last().map(String::as_str),
            Some("10"),
            "{path}: {text}"
        );
        let bodies = mock.bodies();
        assert_eq!(bodies.len(), 2, "{path}: one recall round");
        assert!(mock.state.violations.lock().unwrap().is_empty());
        let first = &bodies[0];
        assert!(first["tools"].to_string().contains("foldgate_recall"));
        assert!(!first["contents"].to_string().contains("teal"));
        let second = bodies[1]["contents"].as_array().unwrap();
        let n = second.len();
        assert_eq!(
            second[n - 2]["parts"][0]["functionCall"]["name"],
            "foldgate_recall"
        );
        let answer = &second[n - 1]["parts"][0]["functionResponse"];
        assert_eq!(answer["name"], "foldgate_recall");
        assert!(answer["response"]["content"].to_string().contains("teal"));
    }
}

/// The official `google-genai` package in a 40-step agent loop, every
/// other step streamed: no request breaks Gemini's rules, every content
/// the client sent is in the view or its tags in the summary, and the
/// loop folds and reuses its folds.
#[tokio::test]
async fn google_genai_agent_loop_folds_without_splitting_function_pairs() {
    let mock = GeminiMock::start().await;
    mock.state.calls_tools.store(true, Ordering::Relaxed);
    let fg = Foldgate::start(&format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\n\
         [models.\"tiny-*\"]\ncontext_window = 3000\n\
         [policy]\nreset_ratio = 0.45\n[summarizer]\nmax_summary_tokens = 300\n",
        mock.url()
    ))
    .await;
    let log = common::drive("gemini_agent.py", &fg.url).await;
    assert!(mock.state.violations.lock().unwrap().is_empty());
    let received = mock.state.conversation.lock().unwrap().clone();
    assert_eq!(log.len(), 40);
    assert_eq!(
        received.len(),
        40,
        "one upstream request per client request"
    );
    let mut folded = 0;
    for (i, (entry, request)) in log.iter().zip(&received).enumerate() {
        assert_eq!(
            request.uri.contains(":streamGenerateContent?alt=sse"),
            i % 2 == 1,
            "request {i}: {}",
            request.uri
        );
        assert_eq!(request.header("x-goog-api-key"), Some("g-e2e"));
        // The SDK's default version, kept on the way to the provider.
        assert!(
            request.uri.starts_with("/v1/models/tiny-"),
            "{}",
            request.uri
        );
        let body = request.json();
        let summary = summary_of(&body);
        folded += usize::from(!summary.is_empty());
        let mut seen = tags(&summary);
        seen.extend(tags(&body["contents"].to_string()));
        for content in entry["sent"].as_array().unwrap() {
            let carried = tags(&content.to_string());
            assert!(!carried.is_empty(), "request {i}: untagged {content}");
            assert!(
                carried.is_subset(&seen),
                "request {i}: {content} is neither in the view nor in its summary"
            );
        }
        assert!(
            entry["tokens_out"].as_u64().unwrap() + 200 <= 3000,
            "request {i} overflows the window"
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

#[test]
fn the_mock_rejects_what_gemini_rejects() {
    let user = json!({"role": "user", "parts": [{"text": "go"}]});
    let call = json!({"role": "model", "parts": [{"functionCall": {"name": "x", "args": {}}}]});
    let answer =
        json!({"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {}}}]});
    assert_eq!(violation(&json!({"contents": [user, call, answer]})), None);
    assert!(violation(&json!({"contents": [user, call, user]})).is_some());
    assert!(violation(&json!({"contents": [user, answer]})).is_some());
    assert!(violation(&json!({"contents": [call, answer]})).is_some());
    assert!(violation(&json!({"contents": [user, user]})).is_some());
}

#[test]
fn a_gemini_view_that_keeps_everything_encodes_back_to_the_body() {
    let body = long_gemini(3);
    let read = foldgate::api::fuzzing::codec("gemini", body.to_string().as_bytes()).unwrap();
    assert_eq!(read.reencoded, body);
    assert_eq!(read.units.len(), 8);
    assert_eq!(read.units[0], None, "the pinned field first");
}
