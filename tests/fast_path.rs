//! The fast path on every API that has one (chat completions, Anthropic
//! Messages, Responses): a conversation has one key and one set of message
//! identities whichever way its JSON is spelled and whichever reader (the
//! shallow one or the decoder) took the body, so a fold made on one
//! request is reused on the next; and a body the decoder refuses is
//! refused from the first request, not only once a fold nears.

use crate::common;

use common::llm::Llm;
use common::{Foldgate, send};
use serde_json::{Value, json};

/// A small window, so that a long conversation folds.
fn config(llm: &Llm) -> String {
    format!(
        "{}[models.\"tiny-*\"]\ncontext_window = 3000\n\
         [policy]\nreset_ratio = 0.45\n[summarizer]\nmax_summary_tokens = 300\n",
        crate::common::providers(llm.url())
    )
}

/// The APIs with a fast path: route and a conversation of `steps` tool
/// rounds after a first user message, in the API's own shape.
fn conversation(api: &str, steps: usize) -> (&'static str, Value) {
    let filler = " the parser, the tokenizer and the cache layer were compared again;".repeat(6);
    let output = |s: usize| format!("[m{s}] output {s}{filler}");
    match api {
        "chat" => {
            let mut ms = vec![
                json!({"role": "system", "content": "You are an agent."}),
                json!({"role": "user", "content": "[m0] task: fix the build"}),
            ];
            for s in 0..steps {
                let id = format!("call_{s}");
                ms.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"cmd\":\"make {s}\"}}")}}]}));
                ms.push(json!({"role": "tool", "tool_call_id": id, "content": output(s)}));
            }
            (
                "/v1/chat/completions",
                json!({"model": "tiny-gpt", "messages": ms}),
            )
        }
        "anthropic" => {
            let mut ms = vec![json!({"role": "user", "content": "[m0] task: fix the build"})];
            for s in 0..steps {
                let id = format!("toolu_{s}");
                ms.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": "bash", "input": {"cmd": format!("make {s}")}}]}));
                ms.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": output(s)}]}));
            }
            (
                "/v1/messages",
                json!({"model": "tiny-claude", "max_tokens": 100, "system": "You are an agent.", "messages": ms}),
            )
        }
        _ => {
            let mut items = vec![json!({"role": "user", "content": "[m0] task: fix the build"})];
            for s in 0..steps {
                let id = format!("call_{s}");
                items.push(json!({"type": "reasoning", "id": format!("rs_{s}"), "summary": []}));
                items.push(
                    json!({"type": "function_call", "call_id": id, "name": "bash",
                    "arguments": format!("{{\"cmd\":\"make {s}\"}}")}),
                );
                items.push(
                    json!({"type": "function_call_output", "call_id": id, "output": output(s)}),
                );
            }
            (
                "/v1/responses",
                json!({"model": "tiny-gpt", "instructions": "You are an agent.", "input": items}),
            )
        }
    }
}

/// The body with one more exchange: the model's answer and a user turn.
fn next_turn(api: &str, mut body: Value) -> Value {
    let field = if api == "responses" {
        "input"
    } else {
        "messages"
    };
    let items = body[field].as_array_mut().unwrap();
    items.push(json!({"role": "assistant", "content": "Built."}));
    items.push(json!({"role": "user", "content": "now the tests"}));
    body
}

async fn post(fg: &Foldgate, path: &str, body: String) -> common::Reply {
    send(
        http::Method::POST,
        &format!("{}{path}", fg.url),
        &[("content-type", "application/json")],
        body.into_bytes(),
    )
    .await
}

/// A body the shallow reader declines (a field named twice) but the
/// decoder reads, keeping the last value.
fn with_duplicate_field(compact: &str) -> String {
    format!("{{\"stream\":true,\"stream\":false,{}", &compact[1..])
}

#[tokio::test]
async fn a_conversation_has_one_key_however_its_json_is_spelled_or_read() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm)).await;
    for api in ["chat", "anthropic", "responses"] {
        let (path, body) = conversation(api, 2);
        let first = post(&fg, path, body.to_string()).await;
        first.assert_ok();
        assert_eq!(first.header("x-foldgate-fold"), "none", "{api}");
        let key = first.header("x-foldgate-conversation");
        assert!(key.starts_with("fp-"), "{api}: {key}");
        let next = next_turn(api, body.clone());
        let spaced = serde_json::to_string_pretty(&next).unwrap();
        let second = post(&fg, path, spaced.clone()).await;
        assert_eq!(
            second.header("x-foldgate-conversation"),
            key,
            "{api}, spaced"
        );
        assert_eq!(
            llm.mock.received().last().unwrap().body,
            spaced.as_bytes(),
            "{api}: forwarded byte for byte"
        );
        let decoded = post(&fg, path, with_duplicate_field(&next.to_string())).await;
        decoded.assert_ok();
        assert_eq!(
            decoded.header("x-foldgate-conversation"),
            key,
            "{api}, decoded"
        );
        let (_, other) = conversation(api, 2);
        let mut other = other;
        let field = if api == "responses" {
            "input"
        } else {
            "messages"
        };
        let first_user = if api == "chat" { 1 } else { 0 };
        other[field][first_user]["content"] = json!("[m0] another task");
        let third = post(&fg, path, other.to_string()).await;
        assert_ne!(third.header("x-foldgate-conversation"), key, "{api}, other");
    }
}

#[tokio::test]
async fn a_fold_made_from_compact_json_is_reused_by_a_spaced_request() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm)).await;
    for api in ["chat", "anthropic", "responses"] {
        let (path, body) = conversation(api, 40);
        let folded = post(&fg, path, body.to_string()).await;
        folded.assert_ok();
        assert_eq!(
            folded.header("x-foldgate-fold"),
            "new",
            "{api}: {:?}",
            folded.headers
        );
        let calls = llm.summarizer_calls();
        let spaced = serde_json::to_string_pretty(&next_turn(api, body)).unwrap();
        let reused = post(&fg, path, spaced).await;
        reused.assert_ok();
        assert_eq!(reused.header("x-foldgate-fold"), "reused", "{api}");
        assert_eq!(
            reused.header("x-foldgate-conversation"),
            folded.header("x-foldgate-conversation"),
            "{api}"
        );
        assert_eq!(llm.summarizer_calls(), calls, "{api}: no second summary");
    }
}

#[tokio::test]
async fn what_the_decoder_refuses_is_refused_from_the_first_request() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm)).await;
    // A message whose `role` is missing but whose content makes it a tool
    // result (found by the `codecs` fuzz target): refused as the decoder
    // refuses it, not forwarded.
    let (path, mut body) = conversation("anthropic", 1);
    let message = body["messages"][2].as_object_mut().unwrap();
    let role = message.remove("role").unwrap();
    message.insert("roae".into(), role);
    let before = llm.mock.received().len();
    let reply = post(&fg, path, body.to_string()).await;
    assert_eq!(
        reply.status,
        400,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(
        llm.mock.received().len(),
        before,
        "refused by foldgate, not forwarded"
    );
    // In fields no reader of the fast path looks into.
    let oddities = [
        (r#""metadata":{"note":"\udfff"}"#, "surrogate"),
        (r#""temperature":1e400"#, "number out of range"),
    ];
    for api in ["chat", "anthropic", "responses"] {
        let (path, body) = conversation(api, 1);
        let compact = body.to_string();
        for (field, why) in oddities {
            let odd = format!("{{{field},{}", &compact[1..]);
            let before = llm.mock.received().len();
            let reply = post(&fg, path, odd).await;
            assert_eq!(reply.status, 400, "{api}: {field}");
            let text = String::from_utf8_lossy(&reply.body).to_string();
            assert!(text.contains(why), "{api}: {text}");
            assert_eq!(
                llm.mock.received().len(),
                before,
                "{api}: nothing forwarded"
            );
        }
    }
}
