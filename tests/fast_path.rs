//! The fast path on every API (chat completions, Anthropic Messages,
//! Responses, Gemini, Ollama, Bedrock): a conversation has one key and one set of message
//! identities whichever way its JSON is spelled and whichever reader (the
//! shallow one or the decoder) took the body, so a fold made on one
//! request is reused on the next; and a body the decoder refuses is
//! refused from the first request, not only once a fold nears.

use crate::common;

use common::agents::cli::{is_summarizer, messages_summary};
use common::bedrock::{self, BedrockMock};
use common::gemini::GeminiMock;
use common::llm::Llm;
use common::mock::Recorded;
use common::ollama::OllamaMock;
use common::{Foldgate, send};
use serde_json::{Value, json};

/// Every API with a fast path.
const APIS: [&str; 6] = [
    "chat",
    "anthropic",
    "responses",
    "gemini",
    "ollama",
    "bedrock",
];

/// Foldgate in front of a mock upstream that speaks `api`, with a small
/// window, so that a long conversation folds.
struct Setup {
    fg: Foldgate,
    llm: Option<Llm>,
    gemini: Option<GeminiMock>,
    ollama: Option<OllamaMock>,
    bedrock: Option<BedrockMock>,
}

impl Setup {
    async fn start(api: &str) -> Self {
        let policy = "[models.\"tiny-*\"]\ncontext_window = 3000\n\
             [policy]\nreset_ratio = 0.45\n[summarizer]\nmax_summary_tokens = 300\n";
        if api == "gemini" {
            let mock = GeminiMock::start().await;
            let provider = format!(
                "[providers.google]\nbase_url = \"{}\"\napi = \"gemini\"\nmodels = [\"tiny-*\"]\n",
                mock.url()
            );
            let fg = Foldgate::start(&format!("{provider}{policy}")).await;
            return Self {
                fg,
                llm: None,
                gemini: Some(mock),
                ollama: None,
                bedrock: None,
            };
        }
        if api == "ollama" {
            let mock = OllamaMock::start().await;
            let provider = format!(
                "[providers.local]\nbase_url = \"{}\"\napi = \"ollama\"\nmodels = [\"tiny-*\"]\n",
                mock.url()
            );
            let fg = Foldgate::start(&format!("{provider}{policy}")).await;
            return Self {
                fg,
                llm: None,
                gemini: None,
                ollama: Some(mock),
                bedrock: None,
            };
        }
        if api == "bedrock" {
            let mock = BedrockMock::start(std::sync::Arc::new(|_path: &str, body: &Value| {
                if is_summarizer(body) {
                    return Ok(messages_summary(body));
                }
                Ok(json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "tiny-claude",
                    "content": [{"type": "text", "text": "Built."}], "stop_reason": "end_turn",
                    "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}))
            }))
            .await;
            bedrock::credentials_env();
            let provider = format!("{}models = [\"tiny-*\"]\n", bedrock::provider(mock.url()));
            let fg = Foldgate::start(&format!("{provider}{policy}")).await;
            return Self {
                fg,
                llm: None,
                gemini: None,
                ollama: None,
                bedrock: Some(mock),
            };
        }
        let llm = Llm::start().await;
        let provider = crate::common::providers(llm.url());
        let fg = Foldgate::start(&format!("{provider}{policy}")).await;
        Self {
            fg,
            llm: Some(llm),
            gemini: None,
            ollama: None,
            bedrock: None,
        }
    }

    /// Every request the upstream received.
    fn received(&self) -> Vec<Recorded> {
        if let Some(mock) = &self.bedrock {
            return mock.mock.requests.lock().unwrap().clone();
        }
        match (&self.llm, &self.gemini, &self.ollama) {
            (Some(llm), _, _) => llm.mock.received(),
            (_, Some(gemini), _) => gemini.mock.received(),
            (_, _, Some(ollama)) => ollama.mock.received(),
            _ => Vec::new(),
        }
    }

    fn summarizer_calls(&self) -> usize {
        if let Some(mock) = &self.bedrock {
            let bodies = mock.seen.bodies.lock().unwrap();
            return bodies.iter().filter(|(_, b)| is_summarizer(b)).count();
        }
        match (&self.llm, &self.gemini, &self.ollama) {
            (Some(llm), _, _) => llm.summarizer_calls(),
            (_, Some(gemini), _) => gemini.state.summarizer.lock().unwrap().len(),
            (_, _, Some(ollama)) => ollama.state.summarizer.lock().unwrap().len(),
            _ => 0,
        }
    }
}

/// The field holding an API's conversation.
fn field(api: &str) -> &'static str {
    match api {
        "responses" => "input",
        "gemini" => "contents",
        _ => "messages",
    }
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
        "bedrock" => {
            let (_, mut body) = conversation("anthropic", steps);
            let fields = body.as_object_mut().unwrap();
            fields.remove("model");
            fields.insert("anthropic_version".into(), json!("bedrock-2023-05-31"));
            ("/model/tiny-claude-v1%3A0/invoke", body)
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
        "ollama" => {
            // Calls with ids (a call without one is the decoder's: its
            // made id names its message's position).
            let mut ms = vec![
                json!({"role": "system", "content": "You are an agent."}),
                json!({"role": "user", "content": "[m0] task: fix the build"}),
            ];
            for s in 0..steps {
                ms.push(json!({"role": "assistant", "content": "", "tool_calls": [
                    {"id": format!("call_{s}"), "function": {"name": "bash", "arguments": {"cmd": format!("make {s}")}}}]}));
                ms.push(json!({"role": "tool", "tool_name": "bash", "content": output(s)}));
            }
            (
                "/api/chat",
                json!({"model": "tiny-llama", "messages": ms, "stream": false, "options": {"num_predict": 100}}),
            )
        }
        "gemini" => {
            let mut contents =
                vec![json!({"role": "user", "parts": [{"text": "[m0] task: fix the build"}]})];
            for s in 0..steps {
                contents.push(json!({"role": "model", "parts": [
                    {"functionCall": {"name": "bash", "args": {"cmd": format!("make {s}")}}}]}));
                contents.push(json!({"role": "user", "parts": [
                    {"functionResponse": {"name": "bash", "response": {"output": output(s)}}}]}));
            }
            (
                "/v1beta/models/tiny-gemini:generateContent",
                json!({"systemInstruction": {"parts": [{"text": "You are an agent."}]},
                    "contents": contents, "generationConfig": {"maxOutputTokens": 100}}),
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
    let items = body[field(api)].as_array_mut().unwrap();
    if api == "gemini" {
        items.push(json!({"role": "model", "parts": [{"text": "Built."}]}));
        items.push(json!({"role": "user", "parts": [{"text": "now the tests"}]}));
    } else {
        items.push(json!({"role": "assistant", "content": "Built."}));
        items.push(json!({"role": "user", "content": "now the tests"}));
    }
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
/// decoder reads, keeping the last value (Bedrock refuses `stream`: its
/// `anthropic_version` twice).
fn with_duplicate_field(api: &str, compact: &str) -> String {
    match api {
        "bedrock" => format!("{{\"anthropic_version\":\"x\",{}", &compact[1..]),
        _ => format!("{{\"stream\":true,\"stream\":false,{}", &compact[1..]),
    }
}

#[tokio::test]
async fn a_conversation_has_one_key_however_its_json_is_spelled_or_read() {
    for api in APIS {
        let up = Setup::start(api).await;
        let fg = &up.fg;
        let (path, body) = conversation(api, 2);
        let first = post(fg, path, body.to_string()).await;
        first.assert_ok();
        assert_eq!(first.header("x-foldgate-fold"), "none", "{api}");
        let key = first.header("x-foldgate-conversation");
        assert!(key.starts_with("fp-"), "{api}: {key}");
        let next = next_turn(api, body.clone());
        let spaced = serde_json::to_string_pretty(&next).unwrap();
        let second = post(fg, path, spaced.clone()).await;
        assert_eq!(
            second.header("x-foldgate-conversation"),
            key,
            "{api}, spaced"
        );
        assert_eq!(
            up.received().last().unwrap().body,
            spaced.as_bytes(),
            "{api}: forwarded byte for byte"
        );
        let decoded = post(fg, path, with_duplicate_field(api, &next.to_string())).await;
        decoded.assert_ok();
        assert_eq!(
            decoded.header("x-foldgate-conversation"),
            key,
            "{api}, decoded"
        );
        let (_, mut other) = conversation(api, 2);
        let first_user = &mut other[field(api)][usize::from(matches!(api, "chat" | "ollama"))];
        match api {
            "gemini" => first_user["parts"][0]["text"] = json!("[m0] another task"),
            _ => first_user["content"] = json!("[m0] another task"),
        }
        let third = post(fg, path, other.to_string()).await;
        assert_ne!(third.header("x-foldgate-conversation"), key, "{api}, other");
    }
}

#[tokio::test]
async fn a_fold_made_from_compact_json_is_reused_by_a_spaced_request() {
    for api in APIS {
        let up = Setup::start(api).await;
        let (path, body) = conversation(api, 40);
        let folded = post(&up.fg, path, body.to_string()).await;
        folded.assert_ok();
        assert_eq!(
            folded.header("x-foldgate-fold"),
            "new",
            "{api}: {:?}",
            folded.headers
        );
        let calls = up.summarizer_calls();
        let spaced = serde_json::to_string_pretty(&next_turn(api, body)).unwrap();
        let reused = post(&up.fg, path, spaced).await;
        reused.assert_ok();
        assert_eq!(reused.header("x-foldgate-fold"), "reused", "{api}");
        assert_eq!(
            reused.header("x-foldgate-conversation"),
            folded.header("x-foldgate-conversation"),
            "{api}"
        );
        assert_eq!(up.summarizer_calls(), calls, "{api}: no second summary");
    }
}

#[tokio::test]
async fn what_the_decoder_refuses_is_refused_from_the_first_request() {
    let up = Setup::start("anthropic").await;
    // A message whose `role` is missing but whose content makes it a tool
    // result (found by the `codecs` fuzz target): refused as the decoder
    // refuses it, not forwarded.
    let (path, mut body) = conversation("anthropic", 1);
    let message = body["messages"][2].as_object_mut().unwrap();
    let role = message.remove("role").unwrap();
    message.insert("roae".into(), role);
    let before = up.received().len();
    let reply = post(&up.fg, path, body.to_string()).await;
    assert_eq!(
        reply.status,
        400,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(
        up.received().len(),
        before,
        "refused by foldgate, not forwarded"
    );
    // In fields no reader of the fast path looks into.
    let oddities = [
        (r#""metadata":{"note":"\udfff"}"#, "surrogate"),
        (r#""temperature":1e400"#, "number out of range"),
    ];
    for api in APIS {
        let up = Setup::start(api).await;
        let (path, body) = conversation(api, 1);
        let compact = body.to_string();
        let mut odd: Vec<(String, &str)> = oddities
            .iter()
            .map(|(field, why)| (format!("{{{field},{}", &compact[1..]), *why))
            .collect();
        if api == "gemini" {
            // Beside the system instruction's parts, and a content that is
            // not an object.
            let mut beside = body.clone();
            beside["systemInstruction"]["role"] = json!("ROLE");
            let beside = beside.to_string().replace("ROLE", "\\udfff");
            odd.push((beside, "surrogate"));
            let mut not_object = body.clone();
            not_object["contents"]
                .as_array_mut()
                .unwrap()
                .push(json!("hi"));
            odd.push((not_object.to_string(), "must be an object"));
        }
        for (body, why) in odd {
            let before = up.received().len();
            let reply = post(&up.fg, path, body.clone()).await;
            assert_eq!(reply.status, 400, "{api}: {body}");
            let text = String::from_utf8_lossy(&reply.body).to_string();
            assert!(text.contains(why), "{api}: {text}");
            assert_eq!(up.received().len(), before, "{api}: nothing forwarded");
        }
    }
}
