//! Ollama's native chat (`POST /api/chat`) through foldgate, against a
//! mock that enforces Ollama's rules: an untouched request goes byte for
//! byte and streams JSON lines by default, errors take Ollama's
//! `{"error": …}`, `options.num_ctx` is the request's window, a long
//! conversation folds with its `images`, `thinking`, `tool_calls` and
//! fields kept and its tool results with their calls, the summarizer asks
//! `/api/chat` for JSON without a stream, the model recalls an archived
//! message through the recall tool (whole and streamed), and the official
//! `ollama` Python client runs an agent loop that folds, recalls and
//! streams.

use crate::common;

use common::Foldgate;
use common::ollama::{OllamaMock, pairing_violation, violation};
use foldgate::fold::summary::HEADING_PREFIX;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// A provider speaking Ollama; windows from the requests' `num_ctx`
/// (the model's own is large).
fn config(mock: &OllamaMock, mode: &str) -> String {
    format!(
        "[providers.local]\nbase_url = \"{}\"\napi = \"ollama\"\nmodels = [\"*\"]\n\
         [models.\"tiny-*\"]\ncontext_window = 100000\n[policy]\nmode = \"{mode}\"\nreset_ratio = 0.45\n\
         [summarizer]\nmax_summary_tokens = 300\n",
        mock.url()
    )
}

/// An Ollama agent loop of `steps` `run` calls and their results, each
/// message tagged `[mN]`, with the fields Ollama's clients send.
fn agent_body(steps: usize, num_ctx: Option<u32>) -> Value {
    let filler = " the parser, the tokenizer and the cache layer were compared again;".repeat(6);
    let mut messages = vec![
        json!({"role": "system", "content": "You are an agent."}),
        json!({"role": "user", "content": "[m1] task: fix the build", "images": ["iVBORw0KGgo="]}),
    ];
    for s in 0..steps {
        messages.push(json!({"role": "assistant", "content": format!("[m{}] step", 2 * s + 2),
            "thinking": "let me run it",
            "tool_calls": [{"function": {"name": "run", "arguments": {"cmd": format!("make {s}")}}}]}));
        messages.push(json!({"role": "tool", "tool_name": "run",
            "content": format!("[m{}] output{filler}", 2 * s + 3)}));
    }
    let mut body = json!({
        "model": "tiny-llama",
        "messages": messages,
        "tools": [{"type": "function", "function": {"name": "run", "description": "runs a command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}],
        "keep_alive": "5m",
        "think": true,
        "options": {"temperature": 0},
    });
    if let Some(n) = num_ctx {
        body["options"]["num_ctx"] = json!(n);
    }
    body
}

/// The text of the view's summary message ("" when there is none).
fn summary_of(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .filter(|t| t.contains(HEADING_PREFIX))
        .collect()
}

/// Every message the client sent is in the view verbatim, in order, or
/// its tags are in the view's summary; the view holds nothing else but
/// foldgate's own messages.
fn assert_covers(sent: &[Value], view: &Value) {
    let summary = summary_of(view);
    let own = |m: &Value| {
        let text = m["content"].as_str().unwrap_or_default();
        text.contains(HEADING_PREFIX) || text == foldgate::fold::ACK_TEXT
    };
    common::llm::assert_covers(sent, view["messages"].as_array().unwrap(), &summary, own);
}

/// A view's field as the client sent it: `tools` without the recall tool
/// foldgate offers a folded conversation.
fn client_field(view: &Value, field: &str) -> Value {
    match (field, &view[field]) {
        ("tools", Value::Array(tools)) => tools
            .iter()
            .filter(|t| t["function"]["name"] != "foldgate_recall")
            .cloned()
            .collect(),
        (_, value) => value.clone(),
    }
}

/// The lines of a streamed answer.
fn lines(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn an_untouched_request_streams_json_lines_byte_for_byte() {
    let mock = OllamaMock::start().await;
    let fg = Foldgate::start(&config(&mock, "inline")).await;
    let body = br#"{"model":"tiny-llama","messages":[{"role":"user","content":"[m1] hi"}],"keep_alive":-1}"#;
    let reply = common::send(
        http::Method::POST,
        &format!("{}/api/chat", fg.url),
        &[("content-type", "application/json")],
        body.to_vec(),
    )
    .await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "none");
    assert_eq!(reply.header("content-type"), "application/x-ndjson");
    assert_eq!(
        mock.mock.received()[0].body,
        &body[..],
        "forwarded byte for byte"
    );
    let lines = lines(&reply.body);
    assert_eq!(lines.len(), 3, "two pieces and the final line");
    assert_eq!(lines[2]["done"], true);
    assert!(lines[2]["prompt_eval_count"].as_u64().unwrap() > 0);
    assert!(mock.violations().is_empty(), "{:?}", mock.violations());
}

#[tokio::test]
async fn foldgates_own_errors_take_ollamas_shape() {
    let mock = OllamaMock::start().await;
    let fg = Foldgate::start(&config(&mock, "inline")).await;
    for body in [
        &b"{not json"[..],
        br#"{"model":"tiny-llama","messages":[{"content":"x"}]}"#,
    ] {
        let reply = common::send(
            http::Method::POST,
            &format!("{}/api/chat", fg.url),
            &[
                ("content-type", "application/json"),
                ("x-conversation-id", "e1"),
            ],
            body.to_vec(),
        )
        .await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        let error = reply.json();
        let keys: Vec<&String> = error.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["error"], "{error}");
        assert!(error["error"].is_string(), "{error}");
    }
    assert!(mock.mock.received().is_empty());
}

#[tokio::test]
async fn num_ctx_is_the_requests_window_and_a_fold_keeps_ollamas_fields() {
    let mock = OllamaMock::start().await;
    mock.state.calls_tools.store(true, Ordering::Relaxed);
    let fg = Foldgate::start(&config(&mock, "inline")).await;
    let url = format!("{}/api/chat", fg.url);
    // The model's window (100000) holds the conversation: untouched.
    let plain = agent_body(24, None);
    let reply = common::post_json(&url, &[("x-conversation-id", "w0")], &plain).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "none");
    // The same conversation with num_ctx = 3000: folded to fit it.
    let mut body = agent_body(24, Some(3000));
    body["stream"] = json!(false);
    let reply = common::post_json(&url, &[("x-conversation-id", "w1")], &body).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "new");
    assert!(reply.tokens_out() + 300 <= 3000, "{}", reply.tokens_out());
    assert_eq!(
        reply.json()["message"]["tool_calls"][0]["function"]["name"],
        "run"
    );
    let views = mock.bodies();
    let view = views.last().unwrap();
    assert!(mock.violations().is_empty(), "{:?}", mock.violations());
    assert!(!summary_of(view).is_empty(), "the view carries the summary");
    for field in ["tools", "keep_alive", "think", "options", "stream", "model"] {
        assert_eq!(client_field(view, field), body[field], "{field} kept");
    }
    assert_covers(body["messages"].as_array().unwrap(), view);
    assert_eq!(
        view["messages"][0], body["messages"][0],
        "the system prompt stays first"
    );
    // The summarizer asked /api/chat for JSON, not streamed (the mock
    // refuses it otherwise, and the fold would have failed).
    let asked = mock.state.summarizer.lock().unwrap().clone();
    assert!(!asked.is_empty());
    for r in &asked {
        assert_eq!(r.uri, "/api/chat");
        let b = r.json();
        assert_eq!(
            (&b["stream"], &b["format"]),
            (&json!(false), &json!("json"))
        );
    }
}

/// A conversation whose early tool output (folded out of view) holds the
/// answer to its last question.
fn forgetful(steps: usize) -> Value {
    let mut body = agent_body(steps, Some(3000));
    let messages = body["messages"].as_array_mut().unwrap();
    messages[3]["content"] = json!("[m3] the customer's favourite colour is teal");
    let n = messages.len() + 1;
    messages.push(json!({"role": "user", "content": format!("[m{n}] what is the favourite colour of the customer?")}));
    body
}

#[tokio::test]
async fn recall_on_ollama_answers_the_call_whole_and_streamed() {
    for stream in [false, true] {
        let mock = OllamaMock::start().await;
        let fg = Foldgate::start(&config(&mock, "inline")).await;
        let mut body = forgetful(24);
        // Streamed by Ollama's default: no `stream` field at all.
        if !stream {
            body["stream"] = json!(false);
        }
        let reply = common::post_json(
            &format!("{}/api/chat", fg.url),
            &[("x-conversation-id", "r1")],
            &body,
        )
        .await;
        reply.assert_ok();
        assert_eq!(reply.header("x-foldgate-fold"), "new", "stream {stream}");
        let text = reply.text();
        assert!(!text.contains("foldgate_recall"), "stream {stream}: {text}");
        let (answer, last) = if stream {
            let lines = lines(&reply.body);
            let answer: String = lines
                .iter()
                .filter_map(|l| l["message"]["content"].as_str())
                .collect();
            (answer, lines.last().cloned().unwrap())
        } else {
            let whole = reply.json();
            (
                whole["message"]["content"].as_str().unwrap().to_string(),
                whole,
            )
        };
        assert!(answer.contains("teal"), "stream {stream}: {answer}");
        let bodies = mock.bodies();
        assert_eq!(bodies.len(), 2, "stream {stream}: one recall round");
        assert!(mock.violations().is_empty(), "{:?}", mock.violations());
        // Both rounds' prompt tokens reach the client.
        let prompts: u64 = mock
            .state
            .conversation
            .lock()
            .unwrap()
            .iter()
            .map(|r| (r.body.len() / 3) as u64)
            .sum();
        assert_eq!(last["prompt_eval_count"], prompts, "stream {stream}");
        assert!(!bodies[0]["messages"].to_string().contains("teal"));
        assert!(bodies[0]["tools"].to_string().contains("foldgate_recall"));
        let second = bodies[1]["messages"].as_array().unwrap();
        let n = second.len();
        let call = &second[n - 2]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "foldgate_recall");
        assert!(
            call["arguments"].is_object(),
            "Ollama's arguments are an object"
        );
        assert_eq!(second[n - 1]["tool_name"], "foldgate_recall");
        assert!(second[n - 1]["content"].as_str().unwrap().contains("teal"));
    }
}

/// The official `ollama` Python package in a 40-step agent loop, every
/// other step streamed, `num_ctx` setting the window, then a question only
/// an archived tool output answers, asked streamed and not: no request
/// breaks Ollama's rules, every message the client sent is in the view or
/// its tags in the summary, the loop folds and reuses its folds, and the
/// model recalls the answer through foldgate's tool.
#[tokio::test]
async fn ollama_python_client_agent_loop_folds_recalls_and_streams() {
    let mock = OllamaMock::start().await;
    mock.state.calls_tools.store(true, Ordering::Relaxed);
    let fg = Foldgate::start(&format!(
        "[providers.local]\nbase_url = \"{}\"\napi = \"ollama\"\n\
         [models.\"tiny-*\"]\ncontext_window = 100000\n\
         [policy]\ntrigger_ratio = 0.6\nreset_ratio = 0.45\n[summarizer]\nmax_summary_tokens = 300\n",
        mock.url()
    ))
    .await;
    let log = common::drive_value("ollama_agent.py", &fg.url).await;
    assert!(mock.violations().is_empty(), "{:?}", mock.violations());
    let exchanges = log["exchanges"].as_array().unwrap();
    assert_eq!(exchanges.len(), 42);
    let received = mock.bodies();
    assert_eq!(
        received.len(),
        44,
        "one request per client request, one more per recall"
    );
    let mut folded = 0;
    for (i, (entry, view)) in exchanges.iter().zip(&received).take(40).enumerate() {
        let sent = &entry["sent"];
        assert_eq!(view["stream"], sent["stream"], "request {i}");
        assert_eq!(
            sent["stream"],
            json!(i % 2 == 1),
            "request {i}: the client's default"
        );
        for field in ["options", "keep_alive", "tools", "model"] {
            assert_eq!(
                client_field(view, field),
                sent[field],
                "request {i}: {field}"
            );
        }
        assert_covers(sent["messages"].as_array().unwrap(), view);
        folded += usize::from(!summary_of(view).is_empty());
        let headers = &entry["headers"];
        let tokens_out: u64 = headers["x-foldgate-tokens-out"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            tokens_out + 200 <= 3000,
            "request {i} overflows num_ctx: {tokens_out}"
        );
        let streamed = headers["content-type"] == "application/x-ndjson";
        assert_eq!(streamed, i % 2 == 1, "request {i}: {headers}");
    }
    assert!(
        folded >= 10,
        "only {folded} of 40 requests carried a summary"
    );
    let labels: Vec<&str> = exchanges
        .iter()
        .map(|e| e["headers"]["x-foldgate-fold"].as_str().unwrap())
        .collect();
    assert!(
        labels.iter().filter(|l| **l == "reused").count() >= 10,
        "{labels:?}"
    );
    // The recall questions: the model called the tool, foldgate answered
    // it from the archive, the client saw the answer only.
    for (answer, round) in log["answers"].as_array().unwrap().iter().zip([41, 43]) {
        let messages = received[round]["messages"].as_array().unwrap();
        let n = messages.len();
        assert!(
            answer.as_str().unwrap().contains("teal"),
            "{answer}: {}",
            messages[n - 1]
        );
        assert_eq!(
            messages[n - 2]["tool_calls"][0]["function"]["name"],
            "foldgate_recall"
        );
        assert!(
            messages[n - 1]["content"]
                .as_str()
                .unwrap()
                .contains("teal")
        );
    }
    assert!(!received[40]["messages"].to_string().contains("teal"));
}

#[test]
fn the_mock_rejects_what_ollama_rejects() {
    let user = json!({"role": "user", "content": "go"});
    let call = json!({"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "ls", "arguments": {}}}]});
    let result = json!({"role": "tool", "content": "x", "tool_name": "ls"});
    let body = |messages: Value| json!({"model": "m", "messages": messages});
    assert_eq!(violation(&body(json!([user, call, result]))), None);
    assert_eq!(
        violation(&body(json!([user, call]))),
        None,
        "a call awaiting its result"
    );
    assert!(
        violation(&body(json!([user, call, user]))).is_some(),
        "a call without its result"
    );
    assert!(
        violation(&body(json!([user, result]))).is_some(),
        "a result without its call"
    );
    let other = json!({"role": "tool", "content": "x", "tool_name": "cat"});
    assert!(pairing_violation(&[user.clone(), call.clone(), other]).is_some());
    let chat_call = json!({"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]});
    assert!(
        violation(&body(json!([user, chat_call, result]))).is_some(),
        "string arguments"
    );
    let parts = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
    assert!(violation(&body(json!([parts]))).is_some(), "content parts");
    assert!(violation(&body(json!([{"role": "developer", "content": "x"}]))).is_some());
    let chat_result = json!({"role": "tool", "content": "x", "name": "ls"});
    assert!(
        violation(&body(json!([user, call, chat_result]))).is_some(),
        "an OpenAI field"
    );
    let mut openai = body(json!([user]));
    openai["response_format"] = json!({"type": "json_object"});
    assert!(violation(&openai).is_some());
}
