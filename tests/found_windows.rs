//! Windows that are found, not guessed small (issue 51). A model nothing
//! names (no config, no built-in model or family, nothing discovered or
//! learned, `tokens.default_context_window` unset) is never folded on a
//! guess: its requests go upstream unfolded until the upstream's first
//! context-length error, which teaches the window; then foldgate folds,
//! retries, and folds within the learned window from then on. New names
//! in known families get their family's window, and providers' model
//! lists (`context_length`, `max_model_len`, LiteLLM's model info) name
//! the rest.

use crate::common;

use common::llm::Llm;
use common::{Foldgate, Reply, metric, post_json, send};
use http::Method;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The mock's window, in its tokens (o200k of the body's strings, as a
/// provider's tokenizer counts them): a 400k-token cloud model.
const WINDOW: u32 = 400_000;

/// About `tokens` o200k tokens of text tagged `[m{n}]`: the sentence is
/// 11 tokens.
fn text(n: usize, tokens: usize) -> String {
    format!("[m{n}] notes of turn {n}:")
        + &" the parser, the tokenizer and the cache were compared;".repeat(tokens / 11)
}

/// A conversation of `turns` user/assistant exchanges of about
/// `per_message` tokens each message, ending with a user message.
fn conversation(model: &str, turns: usize, per_message: usize) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "You are a careful assistant."})];
    for t in 0..turns {
        messages.push(json!({"role": "user", "content": text(2 * t, per_message)}));
        messages.push(json!({"role": "assistant", "content": text(2 * t + 1, per_message)}));
    }
    messages.push(json!({"role": "user", "content": format!("[q{turns}] and now?")}));
    json!({"model": model, "max_tokens": 1000, "messages": messages})
}

async fn chat(fg: &Foldgate, id: &str, body: &Value) -> Reply {
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[("x-conversation-id", id)],
        body,
    )
    .await
}

fn fold(reply: &Reply) -> String {
    reply.header("x-foldgate-fold")
}

async fn windows(fg: &Foldgate) -> Value {
    let reply = send(
        Method::GET,
        &format!("{}/foldgate/windows", fg.url),
        &[],
        "",
    )
    .await;
    reply.assert_ok();
    reply.json()
}

/// The models `/foldgate/windows` lists without a window, but the `*`
/// pattern of the mock's providers (local ones, listed at start-up).
fn missing(windows: &Value) -> Vec<String> {
    windows["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model"].as_str().unwrap().to_string())
        .filter(|m| m != "*")
        .collect()
}

/// The entry of `/foldgate/windows` for `model`, if any.
fn known<'w>(windows: &'w Value, model: &str) -> Option<&'w Value> {
    windows["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == model)
}

fn config(upstream: &str) -> String {
    format!(
        "{}[policy]\nmode = \"inline\"\n[summarizer]\nretries = 0\ntimeout = \"10s\"\n",
        common::providers(upstream)
    )
}

/// A cloud model foldgate knows nothing about (not `gpt-6.2-sol`: the
/// `gpt-6*` family names that one), behind an upstream with a 400k window
/// that rejects only prompts really over it: conversations far past 8k and
/// 100k tokens go up unfolded, whole; the first request over 400k is
/// rejected once, teaches the window, is folded and retried; later
/// requests are folded within the learned window, never rejected again.
#[tokio::test]
async fn an_unknown_window_is_learned_from_the_first_rejection_not_guessed() {
    let model = "sol-large-2";
    let llm = Llm::start().await;
    llm.state.window_tokens.store(WINDOW, Ordering::Relaxed);
    llm.state.usage_from_text.store(true, Ordering::Relaxed);
    let fg = Foldgate::start(&config(llm.url())).await;

    // Growing, far past any default, short of the upstream's window.
    let mut sent = 0;
    for turns in [2, 6, 30, 100, 190] {
        let body = conversation(model, turns, 1000);
        let reply = chat(&fg, "sol", &body).await;
        reply.assert_ok();
        assert_eq!(fold(&reply), "none", "{turns} turns: {:?}", reply.headers);
        assert_eq!(
            reply.tokens_out(),
            reply.header("x-foldgate-tokens-in").parse::<u32>().unwrap()
        );
        sent += 1;
        let forwarded = llm.chat_requests();
        assert_eq!(forwarded.len(), sent);
        assert_eq!(
            forwarded[sent - 1]["messages"],
            body["messages"],
            "{turns} turns: forwarded whole"
        );
        if turns >= 100 {
            assert!(reply.tokens_out() > 100_000, "{}", reply.tokens_out());
        }
    }
    assert_eq!(llm.summarizer_calls(), 0, "nothing was folded");
    // Named once (the WARN), listed until its window is known.
    let w = windows(&fg).await;
    assert_eq!(missing(&w), [model], "{w}");
    assert_eq!(w["default_context_window"], Value::Null, "{w}");
    assert!(known(&w, model).is_none(), "{w}");

    // Over the upstream's window: rejected once, learned, folded, retried.
    let over = conversation(model, 205, 1000);
    let reply = chat(&fg, "sol", &over).await;
    reply.assert_ok();
    assert_eq!(fold(&reply), "new", "{:?}", reply.headers);
    assert!(reply.tokens_out() < WINDOW, "{}", reply.tokens_out());
    assert!(reply.header("x-foldgate-tokens-in").parse::<u32>().unwrap() > WINDOW);
    let forwarded = llm.chat_requests();
    assert_eq!(
        forwarded.len(),
        sent + 2,
        "the rejected request and its retry"
    );
    assert!(llm.summarizer_calls() > 0);
    assert_eq!(
        metric(&fg.metrics().await, "foldgate_reactive_folds_total"),
        1.0
    );
    let w = windows(&fg).await;
    assert!(missing(&w).is_empty(), "{w}");
    let learned = known(&w, model).unwrap_or_else(|| panic!("{w}"));
    assert_eq!(learned["context_window"], WINDOW, "{w}");
    assert_eq!(learned["source"], "learned", "{w}");

    // From then on: folded within the learned window, never rejected. The
    // fold keeps its own view under the trigger (4/5 of the window), but a
    // chat without tools that gets the recall block is filled back up with
    // the newest folded messages (docs/folding.md, *A folded chat is filled
    // back up*): up to the band trigger − reset on top, within the room the
    // window leaves. So the bound is the window itself, less the output
    // reserve (`max_tokens`, 1000), the estimate margin (a twentieth of
    // the window) and, unless the block is there to take it, the block's
    // budget (`archive.inject_tokens`, 600), all of which the fill leaves
    // free.
    for turns in [215, 230, 260] {
        let reply = chat(&fg, "sol", &conversation(model, turns, 1000)).await;
        reply.assert_ok();
        assert_ne!(fold(&reply), "none", "{turns} turns: {:?}", reply.headers);
        let block = if reply.header("x-foldgate-recall-injected").is_empty() {
            600
        } else {
            0
        };
        assert!(
            reply.tokens_out() <= WINDOW - 1000 - WINDOW / 20 - block,
            "{turns} turns: {} tokens forwarded",
            reply.tokens_out()
        );
    }
    assert_eq!(
        metric(&fg.metrics().await, "foldgate_reactive_folds_total"),
        1.0,
        "rejected once only"
    );
}

/// The same unknown model with `tokens.default_context_window` set: the
/// opt-in plans against it as the old default did (folded at ~6.5k).
#[tokio::test]
async fn the_default_window_is_an_opt_in() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "{}[tokens]\ndefault_context_window = 8192\n",
        config(llm.url())
    ))
    .await;
    let reply = chat(&fg, "opt-in", &conversation("sol-large-2", 6, 1000)).await;
    reply.assert_ok();
    assert_eq!(fold(&reply), "new", "{:?}", reply.headers);
    assert!(reply.tokens_out() < 8192);
}

/// New names in known families get the family's window: `gpt-6*` (400k)
/// is not folded at 20k tokens, `*qwen*` (32k) is folded near 30k, before
/// any rejection; neither is listed as missing.
#[tokio::test]
async fn a_new_name_in_a_known_family_gets_the_familys_window() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(llm.url())).await;
    let small = conversation("gpt-6.2-sol", 10, 1000);
    let reply = chat(&fg, "family-gpt", &small).await;
    reply.assert_ok();
    assert_eq!(fold(&reply), "none", "{:?}", reply.headers);
    let reply = chat(
        &fg,
        "family-qwen",
        &conversation("qwen-next-mini", 15, 1000),
    )
    .await;
    reply.assert_ok();
    assert_eq!(fold(&reply), "new", "{:?}", reply.headers);
    assert!(reply.tokens_out() < 32_768 * 4 / 5);
    assert_eq!(
        metric(&fg.metrics().await, "foldgate_reactive_folds_total"),
        0.0
    );
    let w = windows(&fg).await;
    assert!(missing(&w).is_empty(), "{w}");
}

/// Waits until the mock has answered `request` ("METHOD /path"), then a
/// little longer for foldgate to record what it read.
async fn wait_for(llm: &Llm, request: &str) {
    for _ in 0..300 {
        let seen = llm
            .mock
            .received()
            .iter()
            .any(|r| format!("{} {}", r.method, r.uri) == request);
        if seen {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("foldgate never sent {request}");
}

/// Windows from the provider's model list: OpenRouter's `context_length`,
/// vLLM's `max_model_len` and LiteLLM's `model_info.max_input_tokens`;
/// each is what the conversation is planned against.
#[tokio::test]
async fn model_lists_name_windows() {
    let llm = Llm::start().await;
    *llm.state.models_listing.lock().unwrap() = Some(json!({"object": "list", "data": [
        {"id": "router/sol-a", "context_length": 300_000,
         "top_provider": {"context_length": 300_000, "max_completion_tokens": 32_000}},
        {"id": "sol-vllm", "object": "model", "owned_by": "vllm", "max_model_len": 12_000},
        {"id": "team-sol", "object": "model"}]}));
    llm.route(
        "GET /v1/model/info",
        json!({"data": [{"model_name": "team-sol", "litellm_params": {"model": "openai/sol"},
            "model_info": {"id": "d1", "max_tokens": 4096, "max_input_tokens": 14_000}}]}),
    );
    let fg = Foldgate::start(&format!("{}[tokens]\ndiscover = true\n", config(llm.url()))).await;
    wait_for(&llm, "GET /v1/model/info").await;
    let w = windows(&fg).await;
    for (model, window, via) in [
        ("router/sol-a", 300_000, "GET /v1/models"),
        ("sol-vllm", 12_000, "GET /v1/models"),
        ("team-sol", 14_000, "GET /model/info"),
    ] {
        let entry = known(&w, model).unwrap_or_else(|| panic!("{model}: {w}"));
        assert_eq!(entry["context_window"], window, "{w}");
        assert_eq!(entry["origin"], format!("discovered via {via}"), "{w}");
    }
    assert!(missing(&w).is_empty(), "{w}");
    // About 12k tokens: over 0.8 of 12k and 14k, far under 300k.
    let body = |model| conversation(model, 6, 1000);
    for (model, folded) in [
        ("sol-vllm", true),
        ("team-sol", true),
        ("router/sol-a", false),
    ] {
        let reply = chat(&fg, model, &body(model)).await;
        reply.assert_ok();
        assert_eq!(
            fold(&reply) != "none",
            folded,
            "{model}: {:?}",
            reply.headers
        );
    }
    assert_eq!(
        metric(&fg.metrics().await, "foldgate_reactive_folds_total"),
        0.0
    );
}
