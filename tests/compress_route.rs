//! `POST /foldgate/v1/compress`, the fold engine for another gateway,
//! through the real server against the mock LLM: a client written to
//! agentgateway's published `contextCompression` contract, a long
//! conversation folded (`new`, fewer tokens), then reused, a short one
//! left alone, errors in foldgate's envelope, the state shared with the
//! proxy path both ways and per tenant, archive rows written, no recall
//! hint in the view's summaries or stubs, the other APIs' shapes
//! (Anthropic Messages, Gemini, Responses), and
//! examples/litellm_compress.py driven by the real `litellm` package.

use crate::common;

use common::convo::{Convo, chat, config, label};
use common::llm::{Llm, Sum, assert_view_covers, content_text, tags};
use common::{Foldgate, Reply, post_json, send};
use foldgate::fold::summary::HEADING_PREFIX;
use foldgate::message::RECALL_TOOL;
use http::Method;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeSet;

const TENANT_A: (&str, &str) = ("authorization", "Bearer sk-tenant-a");
const TENANT_B: (&str, &str) = ("authorization", "Bearer sk-tenant-b");

async fn compress(fg: &Foldgate, headers: &[(&str, &str)], body: &Value) -> Reply {
    post_json(&format!("{}/foldgate/v1/compress", fg.url), headers, body).await
}

/// A conversation that folds on its first request against a `tiny-*`
/// model, with a tool exchange, and a body over agentgateway's default
/// 16 KiB threshold.
fn long() -> Convo {
    let mut convo = Convo::with_turns(40);
    convo.tools(2);
    for i in 0..30 {
        convo.user(&format!("follow-up {i}"));
        convo.assistant(&format!("reply {i}"));
    }
    convo
}

/// The summary messages of a view (foldgate's heading).
fn summaries(view: &[Value]) -> Vec<String> {
    view.iter()
        .map(content_text)
        .filter(|t| t.contains(HEADING_PREFIX))
        .collect()
}

// --- agentgateway's side, as published --------------------------------
//
// agentgateway (crates/agentgateway/src/llm/policy/compression.rs and
// webhook.rs: `ContextCompression::apply`, `call_processor` with
// `WireFormat::Compress`, `validate_replacement`) skips a request whose
// body is under `minSizeBytes` (16384 by default); posts
// `{"messages": <the request's raw messages>, "model": <its model,
// omitted when absent>}` as JSON to the engine's `path`, with the
// incoming headers it is told to forward; treats any status but 200 as a
// failure; reads `{messages, tokens_saved?}` (other fields ignored); and
// applies the messages only when they are non-empty (for a non-empty
// input), all objects, and break no tool-call pairing the input kept.
// A failure forwards the original request (failOpen, the default) or
// answers 502 (failClosed).

/// What agentgateway does with one request.
#[derive(Debug)]
enum Outcome {
    /// Below the size threshold: not sent.
    Skipped,
    /// The engine's messages replace the request's.
    Applied {
        messages: Vec<Value>,
        tokens_saved: Option<i64>,
    },
    /// The engine failed: failOpen forwards the original, failClosed 502.
    Failed(String),
}

#[derive(Serialize)]
struct CalloutRequest<'a> {
    messages: &'a [Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
}

#[derive(Deserialize)]
struct CompressResponse {
    messages: Vec<Value>,
    tokens_saved: Option<i64>,
}

async fn agentgateway(
    engine: &str,
    forwarded: &[(&str, &str)],
    request: &Value,
    min_size_bytes: usize,
) -> Outcome {
    if request.to_string().len() < min_size_bytes {
        return Outcome::Skipped;
    }
    let original = request["messages"].as_array().unwrap();
    let body = CalloutRequest {
        messages: original,
        model: request["model"].as_str(),
    };
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(forwarded);
    let reply = send(
        Method::POST,
        &format!("{engine}/foldgate/v1/compress"),
        &headers,
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    if reply.status != 200 {
        return Outcome::Failed(format!(
            "message processor returned status {}",
            reply.status
        ));
    }
    let parsed: CompressResponse = match serde_json::from_slice(&reply.body) {
        Ok(parsed) => parsed,
        Err(e) => return Outcome::Failed(format!("invalid compress response: {e}")),
    };
    if let Err(why) = validate_replacement(original, &parsed.messages) {
        return Outcome::Failed(why);
    }
    Outcome::Applied {
        messages: parsed.messages,
        tokens_saved: parsed.tokens_saved,
    }
}

fn validate_replacement(original: &[Value], replacement: &[Value]) -> Result<(), String> {
    if replacement.is_empty() && !original.is_empty() {
        return Err("processor returned an empty message array".into());
    }
    if replacement.iter().any(|m| !m.is_object()) {
        return Err("processor returned non-object messages".into());
    }
    let before = pairing_violations(original);
    let broken: Vec<_> = pairing_violations(replacement)
        .difference(&before)
        .cloned()
        .collect();
    if broken.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "processor broke tool-call pairing for ids: {broken:?}"
        ))
    }
}

/// Call ids on one side only: chat completions, Anthropic blocks,
/// Responses items.
fn pairing_violations(messages: &[Value]) -> BTreeSet<String> {
    let (mut calls, mut results) = (BTreeSet::new(), BTreeSet::new());
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    for m in messages {
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            calls.extend(text(call, "id"));
        }
        results.extend(text(m, "tool_call_id"));
        for part in m["content"].as_array().into_iter().flatten() {
            match part["type"].as_str() {
                Some("tool_use") => calls.extend(text(part, "id")),
                Some("tool_result") => results.extend(text(part, "tool_use_id")),
                _ => {}
            }
        }
        match m["type"].as_str() {
            Some("function_call") => calls.extend(text(m, "call_id")),
            Some("function_call_output") => results.extend(text(m, "call_id")),
            _ => {}
        }
    }
    calls.symmetric_difference(&results).cloned().collect()
}

#[tokio::test]
async fn agentgateway_applies_what_foldgate_answers() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let convo = long();
    let request = convo.body();
    assert!(
        request.to_string().len() > 16384,
        "over agentgateway's default threshold"
    );

    let Outcome::Applied {
        messages,
        tokens_saved,
    } = agentgateway(&fg.url, &[TENANT_A], &request, 16384).await
    else {
        panic!("agentgateway did not apply foldgate's answer");
    };
    assert!(messages.len() < convo.messages.len());
    assert!(tokens_saved.unwrap() > 1000, "{tokens_saved:?}");
    assert_view_covers(&convo.messages, &messages);
    assert_eq!(summaries(&messages).len(), 1);
    let calls = llm.summarizer_calls();
    assert!(calls > 0);
    assert!(
        llm.chat_requests().is_empty(),
        "the engine calls no model but the summarizer"
    );

    // The same conversation again: the fold is reused, not made again.
    let Outcome::Applied {
        messages: again, ..
    } = agentgateway(&fg.url, &[TENANT_A], &request, 16384).await
    else {
        panic!("not applied the second time");
    };
    assert_eq!(again, messages, "the same view, byte for byte");
    assert_eq!(llm.summarizer_calls(), calls);

    // A short request stays below the threshold; posted anyway, it comes
    // back unchanged.
    let short = Convo::with_turns(3).body();
    assert!(matches!(
        agentgateway(&fg.url, &[TENANT_A], &short, 16384).await,
        Outcome::Skipped
    ));
    let Outcome::Applied {
        messages,
        tokens_saved,
    } = agentgateway(&fg.url, &[TENANT_A], &short, 0).await
    else {
        panic!("a short conversation was not answered");
    };
    assert_eq!(&messages, short["messages"].as_array().unwrap());
    assert_eq!(tokens_saved, Some(0));
}

#[tokio::test]
async fn a_failing_summarizer_fails_the_gateway_open_or_answers_unchanged() {
    let llm = Llm::start().await;
    llm.answer_always(Sum::Status(500));
    let request = long().body();
    // on_failure = "error": a status agentgateway's failure mode handles.
    let fg = Foldgate::start(&config(&llm, "on_failure = \"error\"\n")).await;
    match agentgateway(&fg.url, &[TENANT_A], &request, 16384).await {
        Outcome::Failed(why) => assert!(why.contains("503"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    // on_failure = "passthrough" (the default): the messages unchanged,
    // and why in `warning`.
    let fg = Foldgate::start(&config(&llm, "")).await;
    let reply = compress(&fg, &[TENANT_A], &request).await;
    reply.assert_ok();
    let answer = reply.json();
    assert_eq!(answer["messages"], request["messages"]);
    assert_eq!(answer["fold"], "none");
    assert!(
        answer["warning"].as_str().unwrap().contains("summarizer"),
        "{answer}"
    );
}

#[tokio::test]
async fn long_folds_new_then_reused_and_short_is_left_alone() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let convo = long();
    let mut body = convo.body();
    body["conversation"] = json!("c-long");

    let first = compress(&fg, &[TENANT_A], &body).await;
    first.assert_ok();
    let a = first.json();
    assert_eq!(a["fold"], "new", "{a}");
    assert_eq!(a["conversation"], "c-long");
    assert_eq!(a["api"], "chat");
    assert_eq!(a["recall"], false);
    let (tokens_in, tokens_out) = (
        a["tokens_in"].as_i64().unwrap(),
        a["tokens_out"].as_i64().unwrap(),
    );
    assert!(tokens_out < tokens_in / 2, "{tokens_in} -> {tokens_out}");
    assert_eq!(a["tokens_saved"].as_i64().unwrap(), tokens_in - tokens_out);
    // Only the view and what the engine did: no field of the body echoed.
    assert!(
        a.get("model").is_none() && a.get("max_tokens").is_none(),
        "{a}"
    );
    let view = a["messages"].as_array().unwrap();
    assert_view_covers(&convo.messages, view);

    let calls = llm.summarizer_calls();
    let second = compress(&fg, &[TENANT_A], &body).await.json();
    assert_eq!(second["fold"], "reused");
    assert_eq!(second["messages"], a["messages"]);
    assert_eq!(llm.summarizer_calls(), calls);

    let short = Convo::with_turns(3);
    let reply = compress(&fg, &[TENANT_A], &short.body()).await.json();
    assert_eq!(reply["fold"], "none");
    assert_eq!(reply["tokens_saved"], 0);
    assert_eq!(reply["messages"], json!(short.messages));
    // Without `conversation`, the fingerprint, as on the proxy path.
    assert!(
        reply["conversation"].as_str().unwrap().starts_with("fp-"),
        "{reply}"
    );
}

#[tokio::test]
async fn errors_are_clear_and_in_foldgates_envelope() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "[server]\nmax_body_bytes = 65536\n")).await;
    let url = format!("{}/foldgate/v1/compress", fg.url);
    let json_type = ("content-type", "application/json");

    let reply = send(Method::POST, &url, &[json_type], "{\"messages\": [").await;
    reply.assert_envelope(400, "invalid_request");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("JSON")
    );

    let mut body = Convo::with_turns(2).body();
    body["api"] = json!("cohere");
    let reply = compress(&fg, &[], &body).await;
    reply.assert_envelope(400, "invalid_request");
    let error = &reply.json()["error"];
    assert_eq!(error["param"], "api");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("cohere") && message.contains("anthropic"),
        "{message}"
    );

    let reply = compress(
        &fg,
        &[],
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    reply.assert_envelope(400, "invalid_request");
    assert_eq!(reply.json()["error"]["param"], "model");

    let mut body = Convo::with_turns(2).body();
    body["conversation"] = json!(42);
    let reply = compress(&fg, &[], &body).await;
    assert_eq!(reply.json()["error"]["param"], "conversation");

    let reply = compress(
        &fg,
        &[],
        &json!({"model": "tiny-model", "messages": "hello"}),
    )
    .await;
    reply.assert_envelope(400, "invalid_request");

    let huge = long().body_for(&format!("tiny-{}", "x".repeat(70_000)), false);
    compress(&fg, &[], &huge)
        .await
        .assert_envelope(413, "request_too_large");
    // Without a Content-Length, the limit holds while reading.
    let chunked = hyper_chunked(&url, huge.to_string()).await;
    assert_eq!(chunked.0, 413, "{}", chunked.1);
    assert!(chunked.1.contains("request_too_large"), "{}", chunked.1);

    let reply = send(Method::GET, &url, &[], "").await;
    reply.assert_envelope(404, "not_found");
}

/// POSTs `body` in chunks without a Content-Length; status and body.
async fn hyper_chunked(url: &str, body: String) -> (u16, String) {
    use http_body_util::BodyExt;
    let (tx, rx) = foldgate::body::channel(4);
    tokio::spawn(async move {
        for chunk in body.into_bytes().chunks(8192) {
            if tx
                .send(Ok(bytes::Bytes::copy_from_slice(chunk)))
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(rx)
        .unwrap();
    let resp = common::client().request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn the_state_is_shared_with_the_proxy_path_and_kept_per_tenant() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;

    // A fold made by the engine is reused by the proxied next turn.
    let mut convo = long();
    let mut body = convo.body();
    body["conversation"] = json!("shared-1");
    assert_eq!(
        compress(&fg, &[TENANT_A], &body).await.json()["fold"],
        "new"
    );
    let calls = llm.summarizer_calls();
    convo.next_turn("and now the next step");
    let reply = chat(&fg, "shared-1", &convo).await;
    reply.assert_ok();
    assert_eq!(label(&reply), "reused");
    assert_eq!(llm.summarizer_calls(), calls);

    // A fold made on the proxy path is reused by the engine.
    let mut other = long();
    other.user("a different conversation");
    let reply = chat(&fg, "shared-2", &other).await;
    assert_eq!(label(&reply), "new");
    let proxied = llm.chat_requests().last().unwrap()["messages"].clone();
    other.next_turn("next");
    let mut body = other.body();
    body["conversation"] = json!("shared-2");
    let calls = llm.summarizer_calls();
    let answer = compress(&fg, &[TENANT_A], &body).await.json();
    assert_eq!(answer["fold"], "reused", "{answer}");
    assert_eq!(llm.summarizer_calls(), calls);
    let summary_of = |view: &Value| summaries(view.as_array().unwrap()).first().map(|s| tags(s));
    assert_eq!(
        summary_of(&answer["messages"]),
        summary_of(&proxied),
        "the proxy's summary"
    );

    // Another credential is another tenant: its own fold.
    let answer = compress(&fg, &[TENANT_B], &body).await.json();
    assert_eq!(answer["fold"], "new");
    assert!(llm.summarizer_calls() > calls);

    // The conversation header works as on the proxy path.
    let answer = compress(
        &fg,
        &[TENANT_B, ("x-conversation-id", "shared-2")],
        &other.body(),
    )
    .await;
    assert_eq!(answer.json()["fold"], "reused");
    assert_eq!(answer.json()["conversation"], "shared-2");

    // The admin token is no tenant's credential.
    let fg = Foldgate::start(&config(&llm, "[server]\nadmin_token = \"adm\"\n")).await;
    compress(&fg, &[("authorization", "Bearer adm")], &body)
        .await
        .assert_envelope(401, "invalid_api_key");
}

#[tokio::test]
async fn folded_messages_are_archived_and_listed() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let convo = long();
    let mut body = convo.body();
    body["conversation"] = json!("archived");
    let answer = compress(&fg, &[TENANT_A], &body).await.json();
    assert_eq!(answer["fold"], "new");
    let view = answer["messages"].as_array().unwrap();
    let absent = convo.messages.iter().filter(|m| !view.contains(m)).count();
    assert!(absent > 20, "{absent}");

    let url = format!(
        "{}/foldgate/conversations/archived/archive?limit=100",
        fg.url
    );
    let started = std::time::Instant::now();
    let hits = loop {
        let reply = send(Method::GET, &url, &[TENANT_A], "").await;
        let hits = match reply.status.as_u16() {
            200 => reply.json()["results"][0]["hits"]
                .as_array()
                .unwrap()
                .clone(),
            _ => Vec::new(),
        };
        if hits.len() >= absent || started.elapsed().as_secs() > 5 {
            break hits;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(hits.len(), absent, "one row per message the view lacks");
    for hit in &hits {
        let position = hit["position"].as_u64().unwrap() as usize;
        assert_eq!(hit["message"], convo.messages[position], "stored verbatim");
        assert_eq!(hit["api"], "chat");
    }
    // The fold is in the conversation's history, with its summarizer.
    let state = send(
        Method::GET,
        &format!("{}/foldgate/conversations/archived", fg.url),
        &[TENANT_A],
        "",
    )
    .await;
    state.assert_ok();
    assert_eq!(
        state.json()["states"][0]["folds_made"],
        1,
        "{}",
        state.text()
    );
}

#[tokio::test]
async fn no_recall_hint_reaches_the_engines_view() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    // The proxy path offers recall here: its summary ends with the hint.
    let convo = long();
    let reply = chat(&fg, "hinted", &convo).await;
    assert_eq!(label(&reply), "new");
    let proxied = llm.chat_requests().last().unwrap()["messages"].clone();
    let proxied = summaries(proxied.as_array().unwrap()).concat();
    assert!(
        proxied.contains(RECALL_TOOL),
        "the proxy's summary has the hint"
    );

    // The engine's own fold has none.
    let mut body = long().body();
    body["conversation"] = json!("quiet");
    let answer = compress(&fg, &[TENANT_A], &body).await.json();
    assert_eq!(answer["fold"], "new");
    assert_eq!(answer["recall"], false);
    assert!(!answer.to_string().contains(RECALL_TOOL), "{answer}");
    let quiet = summaries(answer["messages"].as_array().unwrap()).concat();
    assert!(!quiet.is_empty());

    // Nor the proxy's fold when the engine reuses it.
    let mut later = convo;
    later.next_turn("more");
    let mut body = later.body();
    body["conversation"] = json!("hinted");
    let answer = compress(&fg, &[TENANT_A], &body).await.json();
    assert_eq!(answer["fold"], "reused");
    let reused = summaries(answer["messages"].as_array().unwrap()).concat();
    assert!(
        !reused.is_empty() && !reused.contains(RECALL_TOOL),
        "{reused}"
    );
    assert_eq!(tags(&reused), tags(&proxied), "the same summary otherwise");
}

#[tokio::test]
async fn anthropic_bodies_fold_with_the_summary_in_system() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let convo = long();
    // Anthropic's plain turns: chat's tool messages left out.
    let plain: Vec<Value> = convo.messages[1..]
        .iter()
        .filter(|m| m["role"] != "tool" && m.get("tool_calls").is_none())
        .cloned()
        .collect();
    let body = json!({
        "api": "anthropic", "conversation": "claude-1", "model": "tiny-claude",
        "max_tokens": 100, "system": "You are a careful coding assistant.",
        "messages": plain,
    });
    let reply = compress(&fg, &[("x-api-key", "sk-ant-a")], &body).await;
    reply.assert_ok();
    let answer = reply.json();
    assert_eq!(answer["api"], "anthropic");
    assert_eq!(answer["fold"], "new", "{answer}");
    let system = answer["system"].to_string();
    assert!(
        system.contains(HEADING_PREFIX),
        "the summary is in `system`: {system}"
    );
    let view = answer["messages"].as_array().unwrap();
    assert!(view.len() < plain.len());
    let kept: BTreeSet<u32> = view.iter().flat_map(|m| tags(&content_text(m))).collect();
    let covered: BTreeSet<u32> = kept.union(&tags(&system)).copied().collect();
    let sent: BTreeSet<u32> = plain.iter().flat_map(|m| tags(&content_text(m))).collect();
    assert!(
        sent.is_subset(&covered),
        "every message is in the view or its summary"
    );
    assert_eq!(
        view.first().unwrap()["role"],
        "user",
        "Anthropic's first turn is the user's"
    );
}

/// Drives examples/litellm_compress.py with the real `litellm` package:
/// the callback's `async_pre_call_hook` as LiteLLM's proxy calls it before
/// the model call, then `litellm.acompletion` with what it returned, to
/// the mock model.
const LITELLM_DRIVER: &str = r#"
import asyncio, json, os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "examples"))
import litellm
from litellm.caching.caching import DualCache
from litellm.proxy._types import UserAPIKeyAuth
import litellm_compress

async def main():
    data = json.load(open(sys.argv[1]))
    data["litellm_session_id"] = "litellm-session-1"
    key = UserAPIKeyAuth(api_key="sk-litellm-virtual-1")
    out = await litellm_compress.proxy_handler_instance.async_pre_call_hook(
        user_api_key_dict=key, cache=DualCache(), data=data, call_type="acompletion")
    resp = await litellm.acompletion(model="openai/" + out["model"], messages=out["messages"],
        api_base=os.environ["MODEL_URL"] + "/v1", api_key="sk-model", max_tokens=100)
    json.dump({"messages": out["messages"], "foldgate": out["metadata"]["foldgate"],
               "answer": resp.choices[0].message.content}, open(sys.argv[2], "w"))

asyncio.run(main())
"#;

#[tokio::test]
async fn the_litellm_example_sends_the_model_foldgates_view() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let convo = long();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.json"), dir.path().join("out.json"));
    std::fs::write(&input, convo.body().to_string()).unwrap();
    let run = tokio::process::Command::new("python3")
        .arg("-c")
        .arg(LITELLM_DRIVER)
        .arg(&input)
        .arg(&output)
        .env("ROOT", env!("CARGO_MANIFEST_DIR"))
        .env("FOLDGATE_URL", &fg.url)
        .env("MODEL_URL", llm.url())
        // LiteLLM fetches its model price list at import unless told not to.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .await
        .expect("python3 with litellm (.ci/run installs tests/e2e/requirements.txt)");
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let out: Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    assert_eq!(out["foldgate"]["fold"], "new", "{}", out["foldgate"]);
    assert_eq!(out["foldgate"]["conversation"], "litellm-session-1");
    assert!(out["foldgate"]["tokens_saved"].as_i64().unwrap() > 1000);
    let view = out["messages"].as_array().unwrap();
    assert!(view.len() < convo.messages.len());
    assert_view_covers(&convo.messages, view);
    // The model got exactly foldgate's view, through LiteLLM's own client.
    let sent = llm.chat_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0]["messages"], &out["messages"]);
    assert_eq!(out["answer"], "Sure, done.");
}

#[tokio::test]
async fn gemini_and_responses_bodies_fold_in_their_own_shape() {
    use common::gemini::{GeminiMock, pairing_violation};
    let mock = GeminiMock::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\nmodels = [\"tiny-*\"]\n\
         [models.\"tiny-*\"]\ncontext_window = 3000\n[policy]\nmode = \"inline\"\nreset_ratio = 0.45\n\
         [summarizer]\nmax_summary_tokens = 300\n",
        mock.url()
    ))
    .await;
    // The Gemini tests' agent loop, without tools (the route offers none).
    let mut body = crate::gemini::long_gemini(30);
    let fields = body.as_object_mut().unwrap();
    fields.remove("tools");
    fields.insert("api".into(), json!("gemini"));
    fields.insert("model".into(), json!("tiny-gemini"));
    fields.insert("conversation".into(), json!("g-1"));
    let contents = body["contents"].as_array().unwrap().clone();
    let reply = compress(&fg, &[("x-goog-api-key", "g-client")], &body).await;
    reply.assert_ok();
    let answer = reply.json();
    assert_eq!(answer["api"], "gemini");
    assert_eq!(answer["fold"], "new", "{answer}");
    assert!(
        answer.get("messages").is_none(),
        "Gemini's field is `contents`"
    );
    let view = answer["contents"].as_array().unwrap();
    assert!(view.len() < contents.len());
    let summary = answer["systemInstruction"].to_string();
    assert!(summary.contains(HEADING_PREFIX), "{summary}");
    let own =
        |item: &Value| item["parts"][0]["text"] == foldgate::api::gemini::codec::CONTINUE_TEXT;
    common::llm::assert_covers(&contents, view, &summary, own);
    assert_eq!(pairing_violation(&json!({"contents": view})), None);
    assert!(mock.bodies().is_empty(), "no conversation call upstream");

    // Responses: `input` in, `input` out.
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config(&llm, "")).await;
    let input: Vec<Value> = long().messages[1..]
        .iter()
        .filter(|m| m["role"] != "tool" && m.get("tool_calls").is_none())
        .cloned()
        .collect();
    let body = json!({"api": "responses", "model": "tiny-gpt", "instructions": "Be careful.", "input": input});
    let answer = compress(&fg, &[TENANT_A], &body).await.json();
    assert_eq!(answer["api"], "responses");
    assert_eq!(answer["fold"], "new", "{answer}");
    let view = answer["input"].as_array().unwrap();
    assert!(view.len() < input.len());
    let shown = answer.to_string();
    assert!(shown.contains(HEADING_PREFIX));
    let covered: BTreeSet<u32> = tags(&shown);
    let sent: BTreeSet<u32> = input.iter().flat_map(|m| tags(&content_text(m))).collect();
    assert!(sent.is_subset(&covered));
}

#[tokio::test]
async fn stubs_in_the_engines_view_name_no_recall_tool() {
    use common::tooloop::ToolLoop;
    use foldgate::fold::compress::STUB_PREFIX;
    let llm = Llm::start().await;
    // Compression of long tool results, every batch shown when due (as
    // tests/compress.rs sets it), recall on (the default).
    let fg = Foldgate::start(&format!(
        "{}[models.\"big-*\"]\ncontext_window = 200000\n\
         [compress]\nmin_tokens = 300\nafter_turns = 2\nbatch = 3\nwhen_it_pays = false\n",
        common::providers(llm.url())
    ))
    .await;
    let mut l = ToolLoop::new("fix the failing build");
    for _ in 0..10 {
        l.step(30);
    }
    let stubs = |view: &[Value]| -> Vec<String> {
        view.iter()
            .map(content_text)
            .filter(|t| t.starts_with(STUB_PREFIX))
            .collect()
    };
    // The proxy path's stubs point at the recall tool.
    let reply = post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[TENANT_A, ("x-conversation-id", "loop-proxy")],
        &l.body("big-model"),
    )
    .await;
    reply.assert_ok();
    let proxied = stubs(
        llm.chat_requests().last().unwrap()["messages"]
            .as_array()
            .unwrap(),
    );
    assert!(!proxied.is_empty() && proxied.iter().all(|t| t.contains(RECALL_TOOL)));

    let mut body = l.body("big-model");
    body["conversation"] = json!("loop-engine");
    let answer = compress(&fg, &[TENANT_A], &body).await.json();
    assert_eq!(
        answer["compressed"].as_u64().unwrap() as usize,
        proxied.len(),
        "{answer}"
    );
    let quiet = stubs(answer["messages"].as_array().unwrap());
    assert_eq!(quiet.len(), proxied.len());
    for text in quiet {
        assert!(
            text.ends_with("The full text is archived.") && !text.contains(RECALL_TOOL),
            "{text}"
        );
    }
}
