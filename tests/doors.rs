//! Every door: real clients on their defaults reach the fold by whatever
//! path shape their SDK uses, and a request never goes to a provider of
//! another API (its key would go with it).

use crate::common;

use common::gemini::GeminiMock;
use common::llm::{Llm, tags};
use common::{Foldgate, drive};
use serde_json::Value;

/// One call of `tests/e2e/gemini_one_call.py` against `base` (`mode`:
/// `whole` or `stream`): the status and the text or error it got.
async fn gemini_one_call(base: &str, mode: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    let script = format!(
        "{}/tests/e2e/gemini_one_call.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let status = tokio::process::Command::new("python3")
        .args([&script, base, out.to_str().unwrap(), mode])
        .status()
        .await
        .expect("python3 must be installed (.ci/run installs the client packages)");
    assert!(status.success(), "{script} failed");
    let result: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    result[0].clone()
}

/// google-genai on its defaults (API version `v1`) against the shipped
/// config's shape — one OpenAI provider taking `*` — gets a clear 404
/// naming `api = "gemini"`, and nothing reaches the OpenAI upstream.
#[tokio::test]
async fn a_gemini_key_never_reaches_an_openai_provider() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.openai]\nbase_url = \"{}/v1\"\nmodels = [\"*\"]\napi = \"openai\"\n",
        llm.url()
    ))
    .await;
    for mode in ["whole", "stream"] {
        let result = gemini_one_call(&fg.url, mode).await;
        assert_eq!(result["status"], 404, "{mode}: {result}");
        let message = result["message"].as_str().unwrap_or_default();
        assert!(message.contains(r#"api = "gemini""#), "{mode}: {result}");
    }
    assert!(llm.mock.received().is_empty(), "{:?}", llm.mock.received());
}

/// google-genai on its defaults calls `/v1/models/…`: claimed as Gemini,
/// forwarded to the provider's host with the version it used (its
/// 40-step loop folds in `gemini::google_genai_agent_loop_…`).
#[tokio::test]
async fn google_genai_on_its_default_version_is_claimed_and_keeps_it() {
    let mock = GeminiMock::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\nmodels = [\"gemini-*\"]\n\
         [models.\"gemini-*\"]\ncontext_window = 1000\n",
        mock.url()
    ))
    .await;
    let result = gemini_one_call(&fg.url, "whole").await;
    assert_eq!(result["status"], 200, "{result}");
    let received = mock.mock.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].uri,
        "/v1/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(received[0].header("x-goog-api-key"), Some("AIza-user-key"));
}

/// The openai package's `AzureOpenAI` client, on Azure's quick-start
/// settings: every request keeps its deployment path and `api-version`,
/// the `api-key` header passes through, the conversation folds, and the
/// summarizer calls the same deployment.
#[tokio::test]
async fn azure_openai_client_folds_on_its_deployment() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.azure]\nbase_url = \"{}/openai\"\nmodels = [\"*\"]\n\
         [models.\"gpt-4o-prod\"]\ncontext_window = 3000\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n[summarizer]\nmax_summary_tokens = 300\n",
        llm.url()
    ))
    .await;
    let log = drive("azure_chat.py", &fg.url).await;
    assert_eq!(log.len(), 30);
    let received = llm.mock.received();
    for r in &received {
        assert_eq!(
            r.uri, "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21",
            "every call, the summarizer's too, on the deployment"
        );
        assert_eq!(r.header("api-key"), Some("azure-user-key"));
    }
    assert!(llm.summarizer_calls() > 0, "never folded");
    let upstream = llm.chat_requests();
    assert_eq!(upstream.len(), 30);
    let mut folded = 0;
    for (entry, body) in log.iter().zip(&upstream) {
        let messages = body["messages"].as_array().unwrap();
        let view = body["messages"].to_string();
        folded += usize::from(messages.len() < entry["sent"].as_array().unwrap().len());
        let seen = tags(&view);
        for sent in entry["sent"].as_array().unwrap() {
            assert!(tags(&sent.to_string()).is_subset(&seen), "{sent} dropped");
        }
        let headers = &entry["headers"];
        assert!(headers["x-foldgate-fold"].is_string(), "{headers}");
    }
    assert!(folded >= 5, "only {folded} of 30 requests were folded");
}

/// A conversation POSTed where no API claims it (a chat body on a path
/// of the client's own) goes upstream as it came, and is counted by path,
/// listed for the dashboard; an embeddings body is not a conversation.
#[tokio::test]
async fn an_unclaimed_conversation_is_counted_and_listed_not_silent() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&common::config_for(llm.url(), "")).await;
    let chat = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..2 {
        let reply = common::post_json(&format!("{}/v2/chat", fg.url), &[], &chat).await;
        reply.assert_ok();
        assert_eq!(reply.header("x-foldgate-fold"), "", "not claimed");
    }
    let embed = serde_json::json!({"model": "m", "input": ["a", "b"]});
    common::post_json(&format!("{}/v1/embeddings", fg.url), &[], &embed).await;
    assert_eq!(llm.mock.received().len(), 3, "everything forwarded");
    let listed = common::send(
        http::Method::GET,
        &format!("{}/foldgate/unclaimed", fg.url),
        &[],
        Vec::new(),
    )
    .await
    .json();
    let metrics = fg.metrics().await;
    assert_eq!(
        listed,
        serde_json::json!({"paths": [{"path": "/v2/chat", "count": 2}]})
    );
    assert!(
        metrics.contains(r#"foldgate_unrecognised_total{path="/v2/chat"} 2"#),
        "{metrics}"
    );
}

/// On every API: a request whose API no provider takes is answered 404
/// in that API's error shape, naming the `api` to set, and nothing
/// reaches the providers there are (of other APIs).
#[tokio::test]
async fn no_request_crosses_to_another_apis_provider() {
    let llm = Llm::start().await;
    let gemini_only = format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\n",
        llm.url()
    );
    let openai_only = common::config_for(llm.url(), "");
    let chat = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let anthropic = serde_json::json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let responses = serde_json::json!({"model": "m", "input": "hi"});
    let gemini = serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let cases = [
        (
            &gemini_only,
            "/v1/chat/completions",
            &chat,
            "openai",
            "/error/code",
        ),
        (
            &gemini_only,
            "/api/v1/responses",
            &responses,
            "openai",
            "/error/code",
        ),
        (
            &gemini_only,
            "/v1/messages",
            &anthropic,
            "anthropic",
            "/type",
        ),
        (
            &openai_only,
            "/v1/messages",
            &anthropic,
            "anthropic",
            "/type",
        ),
        (
            &openai_only,
            "/v1/models/gemini-2.5-flash:generateContent",
            &gemini,
            "gemini",
            "/error/status",
        ),
        (
            &openai_only,
            "/v1beta1/projects/p/locations/l/publishers/google/models/g:generateContent",
            &gemini,
            "gemini",
            "/error/status",
        ),
    ];
    for (config, path, body, api, shape) in cases {
        let fg = Foldgate::start(config).await;
        let reply = common::post_json(
            &format!("{}{path}", fg.url),
            &[
                ("x-api-key", "k"),
                ("x-goog-api-key", "g"),
                ("authorization", "Bearer b"),
            ],
            body,
        )
        .await;
        assert_eq!(reply.status, 404, "{path}: {}", reply.text());
        assert!(
            reply.text().contains(&format!(r#"api = \"{api}\""#)),
            "{path}: {}",
            reply.text()
        );
        assert!(
            reply.json().pointer(shape).is_some(),
            "{path}: not its API's shape: {}",
            reply.text()
        );
    }
    assert!(llm.mock.received().is_empty(), "{:?}", llm.mock.received());
}

/// An API's other endpoints are not folded, but go only to that API's
/// providers, with the same tail rule: Gemini's `:countTokens` (on its
/// default `v1`) keeps its version on the provider's bare host, and
/// Anthropic's `count_tokens` goes to the Anthropic provider; with no
/// provider of the API, a 404 naming it and nothing sent.
#[tokio::test]
async fn an_apis_other_endpoints_stay_with_its_providers() {
    let openai = Llm::start().await;
    let google = GeminiMock::start().await;
    let anthropic = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.openai]\nbase_url = \"{}/v1\"\nmodels = [\"*\"]\n\
         [providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\nmodels = [\"gemini-*\"]\n\
         [providers.claude]\nbase_url = \"{}/v1\"\napi = \"anthropic\"\nmodels = [\"claude-*\"]\n",
        openai.url(),
        google.url(),
        anthropic.url()
    ))
    .await;
    let contents = serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    common::post_json(
        &format!("{}/v1/models/gemini-2.5-flash:countTokens", fg.url),
        &[("x-goog-api-key", "AIza-user-key")],
        &contents,
    )
    .await;
    let count =
        serde_json::json!({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]});
    common::post_json(
        &format!("{}/v1/messages/count_tokens", fg.url),
        &[("x-api-key", "sk-ant")],
        &count,
    )
    .await;
    assert!(
        openai.mock.received().is_empty(),
        "{:?}",
        openai.mock.received()
    );
    let to_google = google.mock.received();
    assert_eq!(to_google.len(), 1);
    assert_eq!(to_google[0].uri, "/v1/models/gemini-2.5-flash:countTokens");
    let to_anthropic = anthropic.mock.received();
    assert_eq!(to_anthropic.len(), 1);
    assert_eq!(to_anthropic[0].uri, "/v1/messages/count_tokens");

    let only_openai = Foldgate::start(&common::config_for(openai.url(), "")).await;
    let reply = common::post_json(
        &format!(
            "{}/v1beta/models/gemini-2.5-flash:countTokens",
            only_openai.url
        ),
        &[("x-goog-api-key", "AIza-user-key")],
        &contents,
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.text());
    assert!(
        reply.text().contains(r#"api = \"gemini\""#),
        "{}",
        reply.text()
    );
    assert!(openai.mock.received().is_empty());
}
