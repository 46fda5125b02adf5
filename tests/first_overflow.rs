//! The first overflow folds, on every API: an unknown model (its window
//! not known, so its requests go up unfolded) behind an upstream whose
//! window is 3,000 tokens. The upstream's context-length 400 teaches the window, the same
//! request is planned again against it — summary budget, output reserve
//! and tail target all from the learned window — and folded; no turn of a
//! conversation growing far past the window fails.

use crate::common;

use common::gemini::GeminiMock;
use common::llm::Llm;
use common::{Foldgate, post_json};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

/// The upstream's window, in the mocks' tokens (3 bytes each).
const WINDOW: u32 = 3000;

fn output(s: usize) -> String {
    format!("[m{s}] output of step {s}:")
        + &" the parser, the tokenizer and the cache were compared;".repeat(8)
}

/// An agent loop of `steps` tool steps in `api`'s shape: its path and body.
fn body(api: &str, steps: usize) -> (String, Value) {
    let task = "[m0] task: make every build step pass";
    match api {
        "chat" => {
            let mut messages = vec![json!({"role": "user", "content": task})];
            for s in 1..=steps {
                let id = format!("call_{s}");
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id,
                    "type": "function", "function": {"name": "run", "arguments": format!("{{\"step\":{s}}}")}}]}));
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": output(s)}));
            }
            // No output limit: the default reserve, a share of the window.
            let body = json!({"model": "mystery-model", "messages": messages});
            ("/v1/chat/completions".into(), body)
        }
        "anthropic" => {
            let mut messages = vec![json!({"role": "user", "content": task})];
            for s in 1..=steps {
                let id = format!("toolu_{s}");
                messages.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": "run", "input": {"step": s}}]}));
                messages.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": output(s)}]}));
            }
            let body = json!({"model": "mystery-model", "max_tokens": 100, "messages": messages});
            ("/v1/messages".into(), body)
        }
        "responses" => {
            let mut input = vec![json!({"role": "user", "content": task})];
            for s in 1..=steps {
                let id = format!("call_{s}");
                input.push(json!({"type": "reasoning", "id": format!("rs_{s}"), "summary": []}));
                input.push(
                    json!({"type": "function_call", "call_id": id, "name": "run",
                    "arguments": format!("{{\"step\":{s}}}")}),
                );
                input.push(
                    json!({"type": "function_call_output", "call_id": id, "output": output(s)}),
                );
            }
            let body = json!({"model": "mystery-model", "input": input});
            ("/v1/responses".into(), body)
        }
        _ => {
            let mut contents = vec![json!({"role": "user", "parts": [{"text": task}]})];
            for s in 1..=steps {
                contents.push(json!({"role": "model", "parts": [
                    {"functionCall": {"name": "run", "args": {"step": s}}}]}));
                contents.push(json!({"role": "user", "parts": [
                    {"functionResponse": {"name": "run", "response": {"output": output(s)}}}]}));
            }
            // Gemini's output limit is its own, not a share of the input window.
            let body = json!({"contents": contents, "generationConfig": {"maxOutputTokens": 3000}});
            ("/v1beta/models/mystery-model:generateContent".into(), body)
        }
    }
}

/// Grows a conversation from 4 to 36 steps (about 2.5 times the window);
/// every turn must be answered, and turns past the window folded.
async fn grow(fg: &Foldgate, api: &str) {
    let mut folded = 0;
    for steps in (4..=36).step_by(2) {
        let (path, body) = body(api, steps);
        let reply = post_json(
            &format!("{}{path}", fg.url),
            &[("x-conversation-id", &format!("overflow-{api}"))],
            &body,
        )
        .await;
        assert_eq!(
            reply.status,
            200,
            "{api}, {steps} steps: {} (warning: {})",
            reply.text(),
            reply.header("x-foldgate-warning")
        );
        folded += usize::from(reply.header("x-foldgate-fold") != "none");
    }
    assert!(folded > 0, "{api}: never folded");
}

fn config(upstream: &str) -> String {
    format!(
        "{}[summarizer]\nretries = 0\ntimeout = \"5s\"\n",
        common::providers(upstream)
    )
}

#[tokio::test]
async fn the_first_overflow_folds_on_chat_anthropic_and_responses() {
    for api in ["chat", "anthropic", "responses"] {
        let llm = Llm::start().await;
        llm.state.window_tokens.store(WINDOW, Ordering::Relaxed);
        let fg = Foldgate::start(&config(llm.url())).await;
        grow(&fg, api).await;
    }
}

#[tokio::test]
async fn the_first_overflow_folds_on_gemini() {
    let mock = GeminiMock::start().await;
    mock.state
        .window_bytes
        .store(3 * WINDOW as usize, Ordering::Relaxed);
    let fg = Foldgate::start(&format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\n\
         [summarizer]\nretries = 0\ntimeout = \"5s\"\n",
        mock.url()
    ))
    .await;
    grow(&fg, "gemini").await;
}

/// When even the reactive fold cannot fit the learned window (one user
/// message larger than it), the client gets the upstream's own 400, and
/// `x-foldgate-warning` says why, naming the window the upstream named.
#[tokio::test]
async fn a_reactive_fold_that_cannot_fit_returns_the_upstreams_error_with_a_warning() {
    let llm = Llm::start().await;
    llm.state.window_tokens.store(WINDOW, Ordering::Relaxed);
    let fg = Foldgate::start(&config(llm.url())).await;
    let (path, mut body) = body("chat", 6);
    let huge =
        "[m99] please read all of this: ".to_string() + &"every word matters here; ".repeat(700);
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": huge}));
    let reply = post_json(&format!("{}{path}", fg.url), &[], &body).await;
    assert_eq!(reply.status, 400);
    assert!(
        reply
            .text()
            .contains("maximum context length is 3000 tokens"),
        "the upstream's own error: {}",
        reply.text()
    );
    let warning = reply.header("x-foldgate-warning");
    assert!(
        warning.starts_with("fold failed: the conversation cannot fit"),
        "{warning}"
    );
    assert!(
        warning.contains("context window of 3000 tokens"),
        "{warning}"
    );
    assert!(
        warning.contains("plus 750 for the output"),
        "the reserve of the learned window: {warning}"
    );
}
