//! foldgate in front of any server on its defaults: summaries are written
//! by the request's own model on the request's own provider, and context
//! windows are read at start-up (`tokens.discover`) from local servers' own
//! APIs: Ollama's `/api/tags` + `/api/show`, llama.cpp's `/props`. Mock
//! servers answer those endpoints beside `/v1`; a discovered window shows
//! in whether a conversation folds.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::Llm;
use common::{Foldgate, Reply, post_json};
use serde_json::json;
use std::time::Duration;

/// A history of about 3,000 tokens: folds in a 4,000-token window, not in
/// the default 8,192 (nor in anything larger).
fn history() -> Convo {
    Convo::with_turns(55)
}

async fn chat(fg: &Foldgate, model: &str) -> Reply {
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[("x-conversation-id", model)],
        &history().body_for(model, false),
    )
    .await
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
            tokio::time::sleep(Duration::from_millis(100)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("foldgate never sent {request}");
}

#[tokio::test]
async fn ollama_windows_come_from_api_show_num_ctx_first() {
    let llm = Llm::start().await;
    llm.route(
        "GET /api/tags",
        json!({"models": [
            {"name": "small-llama:latest", "model": "small-llama:latest", "size": 1},
            {"name": "big-qwen:7b", "model": "big-qwen:7b", "size": 2}]}),
    );
    // small-llama runs with num_ctx 4000 (its model could take 131072);
    // big-qwen sets no num_ctx: its context_length applies.
    llm.route(
        "POST /api/show",
        json!({"parameters": "stop \"<|eot_id|>\"\nnum_ctx                        4000",
               "model_info": {"general.architecture": "llama", "llama.context_length": 131072}}),
    );
    // Without discovery the unknown model gets the default 8192: no fold.
    let plain = Foldgate::start(&config(&llm, "")).await;
    assert_eq!(label(&chat(&plain, "small-llama").await), "none");

    let fg = Foldgate::start(&config(&llm, "[tokens]\ndiscover = true\n")).await;
    wait_for(&llm, "POST /api/show").await;
    let shows: Vec<_> = llm
        .mock
        .received()
        .into_iter()
        .filter(|r| r.uri == "/api/show")
        .map(|r| r.json()["model"].as_str().unwrap().to_string())
        .collect();
    assert!(
        shows.contains(&"small-llama:latest".to_string()),
        "{shows:?}"
    );
    // Both the tag and the name without `:latest` get num_ctx.
    for model in ["small-llama", "small-llama:latest"] {
        assert_eq!(
            label(&chat(&fg, model).await),
            "new",
            "{model}: the 4000-token num_ctx applies"
        );
    }
}

#[tokio::test]
async fn ollama_without_num_ctx_uses_the_models_context_length() {
    let llm = Llm::start().await;
    llm.route(
        "GET /api/tags",
        json!({"models": [{"name": "tiny-qwen:0.5b", "model": "tiny-qwen:0.5b"}]}),
    );
    llm.route(
        "POST /api/show",
        json!({"parameters": "temperature 0.7",
               "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 4000}}),
    );
    let fg = Foldgate::start(&config(&llm, "[tokens]\ndiscover = true\n")).await;
    wait_for(&llm, "POST /api/show").await;
    assert_eq!(label(&chat(&fg, "tiny-qwen:0.5b").await), "new");
}

#[tokio::test]
async fn llamacpp_window_comes_from_props_over_the_training_context() {
    let llm = Llm::start().await;
    // llama-server lists its model with the training context; /props says
    // what each request gets (ctx-size / parallel).
    *llm.state.models_listing.lock().unwrap() = Some(json!({"object": "list", "data": [
        {"id": "local-gguf", "object": "model", "meta": {"n_ctx_train": 131072}}]}));
    llm.route(
        "GET /props",
        json!({"default_generation_settings": {"id": 0, "n_ctx": 4000}, "total_slots": 2}),
    );
    let fg = Foldgate::start(&config(&llm, "[tokens]\ndiscover = true\n")).await;
    // /api/tags (unanswered here) comes after /props.
    wait_for(&llm, "GET /api/tags").await;
    let paths: Vec<String> = llm.mock.received().iter().map(|r| r.uri.clone()).collect();
    assert!(
        paths.contains(&"/v1/models".to_string()) && paths.contains(&"/props".to_string()),
        "/props is asked beside /v1, not under it: {paths:?}"
    );
    assert_eq!(
        label(&chat(&fg, "local-gguf").await),
        "new",
        "n_ctx 4000 applies, not n_ctx_train 131072"
    );
}

/// Two providers (`cloud` takes `tiny-cloud*`, `local` the rest), inline
/// folds in a 4,000-token window, plus `summarizer` keys.
fn two_providers(cloud: &Llm, local: &Llm, summarizer: &str) -> String {
    format!(
        "[providers.cloud]\nbase_url = \"{}/v1\"\nmodels = [\"tiny-cloud*\"]\n\
         [providers.local]\nbase_url = \"{}/v1\"\nmodels = [\"*\"]\n\
         [models.\"tiny-*\"]\ncontext_window = 4000\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
         [summarizer]\nmax_summary_tokens = 400\nretries = 0\ntimeout = \"5s\"\n{summarizer}",
        cloud.url(),
        local.url()
    )
}

/// The `model` of every summarizer call `llm` received.
fn summarizer_models(llm: &Llm) -> Vec<String> {
    llm.summarizer_requests()
        .iter()
        .map(|r| r["model"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn summaries_go_to_the_requests_own_model_and_provider() {
    let (cloud, local) = (Llm::start().await, Llm::start().await);
    let fg = Foldgate::start(&two_providers(&cloud, &local, "")).await;
    assert_eq!(label(&chat(&fg, "tiny-local").await), "new");
    assert_eq!(summarizer_models(&local), ["tiny-local"]);
    assert!(
        cloud.mock.received().is_empty(),
        "nothing reached the other provider"
    );
    assert_eq!(label(&chat(&fg, "tiny-cloud-1").await), "new");
    assert_eq!(summarizer_models(&cloud), ["tiny-cloud-1"]);
    assert_eq!(local.summarizer_calls(), 1);
}

#[tokio::test]
async fn a_named_summarizer_model_runs_on_the_requests_provider_unless_one_is_named() {
    let (cloud, local) = (Llm::start().await, Llm::start().await);
    let fg = Foldgate::start(&two_providers(&cloud, &local, "model = \"tiny-sum\"\n")).await;
    assert_eq!(label(&chat(&fg, "tiny-local").await), "new");
    assert_eq!(summarizer_models(&local), ["tiny-sum"]);
    assert_eq!(cloud.summarizer_calls(), 0);
    let (cloud, local) = (Llm::start().await, Llm::start().await);
    let fg = Foldgate::start(&two_providers(
        &cloud,
        &local,
        "model = \"tiny-sum\"\nprovider = \"cloud\"\n",
    ))
    .await;
    assert_eq!(label(&chat(&fg, "tiny-local").await), "new");
    assert_eq!(summarizer_models(&cloud), ["tiny-sum"]);
    assert_eq!(local.summarizer_calls(), 0);
}
