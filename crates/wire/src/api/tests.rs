use super::summary::SummaryCall;
use super::*;
use crate::message::RECALL_TOOL;
use http::header::{AUTHORIZATION, HeaderName};
use http::{Method, Uri};
use recall::input::MAX_QUERY_CHARS;
use serde_json::Value;
use serde_json::json;
use summary::Format;

fn api(name: &str) -> Api {
    named(name).unwrap()
}

/// Every path shape the official SDKs produce on their defaults (and
/// the mount prefixes users put in front of them): the API that claims
/// it, the tail a provider's `base_url` takes, the model in the path.
#[test]
fn routes_by_path_shape() {
    /// The API's name, the tail, the model.
    type Claimed = Option<(&'static str, &'static str, Option<&'static str>)>;
    let table: &[(&str, Claimed)] = &[
        // openai, OpenAI(base_url=…/v1) and the mounts of other servers
        (
            "/v1/chat/completions",
            Some(("chat", "/chat/completions", None)),
        ),
        (
            "/chat/completions",
            Some(("chat", "/chat/completions", None)),
        ),
        (
            "/api/v1/chat/completions",
            Some(("chat", "/chat/completions", None)),
        ),
        (
            "/openai/v1/chat/completions",
            Some(("chat", "/chat/completions", None)),
        ),
        ("/v1/responses", Some(("responses", "/responses", None))),
        (
            "/openai/v1/responses",
            Some(("responses", "/responses", None)),
        ),
        // AzureOpenAI(azure_endpoint=…): base …/openai, the deployment in the path
        (
            "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21",
            Some((
                "chat",
                "/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21",
                Some("gpt-4o-prod"),
            )),
        ),
        (
            "/openai/responses?api-version=preview",
            Some(("responses", "/responses?api-version=preview", None)),
        ),
        // anthropic: Anthropic(base_url=host) calls /v1/messages
        ("/v1/messages", Some(("anthropic", "/messages", None))),
        (
            "/anthropic/v1/messages",
            Some(("anthropic", "/messages", None)),
        ),
        (
            "/messages?beta=true",
            Some(("anthropic", "/messages?beta=true", None)),
        ),
        // google-genai: v1 (its default), v1beta, v1alpha, any mount
        (
            "/v1/models/gemini-2.5-flash:generateContent",
            Some((
                "gemini",
                "/v1/models/gemini-2.5-flash:generateContent",
                Some("gemini-2.5-flash"),
            )),
        ),
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            Some((
                "gemini",
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                Some("gemini-2.5-flash"),
            )),
        ),
        (
            "/gemini/v1alpha/models/m:generateContent",
            Some(("gemini", "/v1alpha/models/m:generateContent", Some("m"))),
        ),
        (
            "/models/m:generateContent",
            Some(("gemini", "/models/m:generateContent", Some("m"))),
        ),
        // google-genai with vertexai=True: projects and locations, and express mode
        (
            "/v1beta1/projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
            Some((
                "gemini",
                "/v1beta1/projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
                Some("gemini-2.5-pro"),
            )),
        ),
        (
            "/vertex/v1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            Some((
                "gemini",
                "/v1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
                Some("gemini-2.5-pro"),
            )),
        ),
        // not conversations
        ("/v1beta/models/gemini-2.5-pro:countTokens", None),
        ("/v1/models/gemini-2.5-pro:embedContent", None),
        ("/v1/messages/count_tokens", None),
        ("/v1/messages/batches", None),
        ("/v1/threads/thread_1/messages", None),
        ("/v1/responses/compact", None),
        ("/v1/responses/resp_1/cancel", None),
        ("/v1/embeddings", None),
        ("/v1/models", None),
    ];
    for (path, expected) in table {
        let uri: Uri = path.parse().unwrap();
        let got = route(&Method::POST, &uri);
        let got = got
            .as_ref()
            .map(|r| (r.api.name(), r.tail.as_str(), r.model.as_deref()));
        assert_eq!(got, *expected, "{path}");
    }
    let uri: Uri = "/v1/responses".parse().unwrap();
    assert!(route(&Method::GET, &uri).is_none());
}

#[test]
fn calls_go_back_with_their_bounded_query_on_every_api() {
    let huge = json!({ "query": "x".repeat(1 << 20) }).to_string();
    let cut = json!({ "query": "x".repeat(MAX_QUERY_CHARS) });
    let mut chat = vec![json!({"role": "assistant", "tool_calls": [
        {"id": "a", "function": {"name": RECALL_TOOL, "arguments": huge}},
        {"id": "b", "function": {"name": "ls", "arguments": "{\"p\": 1}"}}]})];
    api("chat").recall().bound_calls(&mut chat);
    assert_eq!(
        chat[0]["tool_calls"][0]["function"]["arguments"],
        cut.to_string()
    );
    assert_eq!(
        chat[0]["tool_calls"][1]["function"]["arguments"],
        "{\"p\": 1}"
    );
    let input: Value = serde_json::from_str(&huge).unwrap_or_default();
    let mut anthropic = vec![json!({"role": "assistant", "content": [
        {"type": "text", "text": "hm"},
        {"type": "tool_use", "id": "a", "name": RECALL_TOOL, "input": input}]})];
    api("anthropic").recall().bound_calls(&mut anthropic);
    assert_eq!(anthropic[0]["content"][1]["input"], cut);
    let mut responses = vec![
        json!({"type": "function_call", "call_id": "a", "name": RECALL_TOOL, "arguments": "not json"}),
    ];
    api("responses").recall().bound_calls(&mut responses);
    assert_eq!(responses[0]["arguments"], "{}");
}

#[test]
fn recalled_excerpts_go_before_the_last_user_message_in_each_api() {
    let place = |name: &str, body: &mut Value, block: &str| {
        let api = api(name);
        let fields = body.as_object_mut().unwrap();
        api.recall()
            .place_recalled(api.conversation(fields).unwrap(), block);
    };
    let mut chat = json!({"messages": [
        {"role": "system", "content": "s"}, {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"}, {"role": "user", "content": "q"}]});
    place("chat", &mut chat, "BLOCK");
    let m = &chat["messages"];
    assert_eq!(m[3], json!({"role": "user", "content": "BLOCK"}));
    assert_eq!(m[4]["content"], "q");

    let mut anthropic = json!({"messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]});
    place("anthropic", &mut anthropic, "BLOCK");
    let m = &anthropic["messages"];
    assert_eq!(m.as_array().map(Vec::len), Some(3), "no message added");
    assert_eq!(m[0]["content"][0]["text"], "BLOCK");
    assert_eq!(m[0]["content"][1], json!({"type": "text", "text": "q"}));
    assert_eq!(m[2]["content"][0]["type"], "tool_result");

    let mut responses = json!({"input": [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "x"}]});
    place("responses", &mut responses, "BLOCK");
    assert_eq!(responses["input"][0]["content"], "BLOCK");
    assert_eq!(responses["input"][1]["content"], "q");
}

#[test]
fn summarizer_calls_take_each_providers_shape() {
    let call = |format, completion_param| SummaryCall {
        model: "m",
        system: "s",
        user: "u".into(),
        schema: || json!({}),
        format,
        max_tokens: 100,
        completion_param,
    };
    let chat = for_provider("openai").unwrap();
    let anthropic = for_provider("anthropic").unwrap();
    assert_eq!((chat.name(), anthropic.name()), ("chat", "anthropic"));
    let b = chat.summary_body(call(Format::JsonSchema, false)).unwrap();
    assert_eq!(b["response_format"]["type"], "json_schema");
    assert_eq!(b["max_tokens"], 100);
    let b = chat.summary_body(call(Format::Instructions, true)).unwrap();
    assert!(b.get("response_format").is_none());
    assert_eq!(b["max_completion_tokens"], 100);
    let b = anthropic
        .summary_body(call(Format::JsonSchema, true))
        .unwrap();
    assert_eq!((&b["system"], &b["max_tokens"]), (&json!("s"), &json!(100)));
    assert!(b.get("response_format").is_none());
    assert_eq!(Format::JsonSchema.downgrade(), Some(Format::JsonObject));
    assert_eq!(Format::Instructions.downgrade(), None);
}

/// One check of a conversation's roles, in each API's own words.
#[test]
fn malformed_conversations_are_refused_in_each_apis_words() {
    let said = |name: &str, body: &str| {
        let refused = api(name).decode(None, body.as_bytes()).err();
        refused.map(|e| (e.to_string(), e.code()))
    };
    let cases = [
        (
            r#"{"model":"m","messages":[{"role":"user"},{"content":"x"}]}"#,
            "messages[1] must be an object with a string `role`",
            "messages.1: must be an object with a string `role`",
        ),
        (
            r#"{"model":"m","messages":{}}"#,
            "`messages` must be an array",
            "messages: must be an array",
        ),
        (
            r#"{"model":"m"}"#,
            "you must provide a `messages` parameter",
            "messages: field required",
        ),
    ];
    for (body, chat, anthropic) in cases {
        let invalid = "invalid_request";
        assert_eq!(
            said("chat", body),
            Some((chat.to_string(), invalid)),
            "{body}"
        );
        assert_eq!(
            said("anthropic", body),
            Some((anthropic.to_string(), invalid)),
            "{body}"
        );
    }
    let fine = r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#;
    assert_eq!((said("chat", fine), said("anthropic", fine)), (None, None));
}

#[test]
fn key_headers_are_each_apis_once() {
    let x_api_key = HeaderName::from_static("x-api-key");
    let x_goog_api_key = HeaderName::from_static("x-goog-api-key");
    let api_key = HeaderName::from_static("api-key");
    assert_eq!(
        key_headers(),
        [AUTHORIZATION, api_key, x_api_key.clone(), x_goog_api_key]
    );
    let anthropic = for_provider("anthropic").unwrap();
    assert_eq!(anthropic.key_header("k"), (x_api_key, "k".to_string()));
    let chat = for_provider("openai").unwrap();
    assert_eq!(
        chat.key_header("k"),
        (AUTHORIZATION, "Bearer k".to_string())
    );
}
