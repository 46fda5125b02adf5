//! Amazon Bedrock (`api = "bedrock"`) through foldgate, against the mock
//! Bedrock of `common::bedrock`, which checks every request's SigV4
//! signature and frames its streams as AWS event streams: an untouched
//! `invoke` goes byte for byte and signed; a long conversation folds (the
//! summary in `system`, no `model` or `stream` added) and the summarizer
//! asks the conversation's model on `invoke`, signed too; a streamed
//! answer reaches the client as well-formed frames. Planted faults — a
//! body changed after signing, no signature, a flipped bit in a frame —
//! are caught by the same checks.

use crate::common;

use common::Foldgate;
use common::agents::cli::{is_summarizer, messages_summary, summary_in};
use common::bedrock::{self, BedrockMock};
use common::{post_json, send};
use foldgate::api::bedrock::eventstream;
use serde_json::{Value, json};
use std::sync::Arc;

/// The model id as Claude Code sends it in the path (URL-encoded).
const MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0";

/// A mock Bedrock answering every turn with one text block, and the
/// summarizer with a summary.
async fn mock() -> BedrockMock {
    BedrockMock::start(Arc::new(|_path: &str, body: &Value| {
        if is_summarizer(body) {
            return Ok(messages_summary(body));
        }
        let n = body["messages"].as_array().map_or(0, Vec::len);
        Ok(json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": format!("answer {n}")}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 50 * n, "output_tokens": 3}}))
    }))
    .await
}

/// foldgate in front of the mock, with a small window for Claude models.
async fn foldgate(mock: &BedrockMock) -> Foldgate {
    bedrock::credentials_env();
    Foldgate::start(&format!(
        "{}models = [\"*\"]\n[models.\"*claude*\"]\ncontext_window = 3000\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n[summarizer]\nmax_summary_tokens = 300\n",
        bedrock::provider(mock.url())
    ))
    .await
}

/// A Bedrock Claude body of `turns` exchanges, each message tagged.
fn body(turns: usize) -> Value {
    let filler = " the parser, the tokenizer and the cache layer were compared again;".repeat(4);
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": [{"type": "text", "text": format!("[u{i}] question{filler}")}]}));
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("[a{i}] answer{filler}")}]}));
    }
    messages.push(json!({"role": "user", "content": "and now?"}));
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 200,
        "system": [{"type": "text", "text": "You are a careful assistant."}], "messages": messages})
}

async fn invoke(fg: &Foldgate, method: &str, body: &Value) -> common::Reply {
    post_json(
        &format!("{}/model/{MODEL}/{method}", fg.url),
        &[("x-conversation-id", "bedrock-1")],
        body,
    )
    .await
}

#[tokio::test]
async fn bedrock_invoke_untouched_goes_byte_for_byte_and_signed() {
    let mock = mock().await;
    let fg = foldgate(&mock).await;
    let sent = body(1);
    let reply = invoke(&fg, "invoke", &sent).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "none");
    assert_eq!(reply.json()["content"][0]["text"], "answer 3");
    let requests = mock.mock.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].uri, format!("/model/{MODEL}/invoke"));
    assert_eq!(requests[0].body, sent.to_string().as_bytes());
    bedrock::verify(&requests[0]).unwrap();
    assert!(mock.seen.refused.lock().unwrap().is_empty());
}

#[tokio::test]
async fn bedrock_long_conversation_folds_signed_and_streams_frames() {
    let mock = mock().await;
    let fg = foldgate(&mock).await;
    let sent = body(30);
    let reply = invoke(&fg, "invoke-with-response-stream", &sent).await;
    reply.assert_ok();
    assert_eq!(
        reply.header("x-foldgate-fold"),
        "new",
        "{:?}",
        reply.headers
    );
    assert_eq!(
        reply.header("content-type"),
        "application/vnd.amazon.eventstream"
    );
    let refused = mock.seen.refused.lock().unwrap().clone();
    assert!(refused.is_empty(), "{refused:?}");
    let bodies = mock.seen.bodies.lock().unwrap().clone();
    let (summarizer, turns): (Vec<_>, Vec<_>) = bodies.iter().partition(|(_, b)| is_summarizer(b));
    assert!(!summarizer.is_empty(), "no summarizer call");
    for (path, _) in &summarizer {
        assert_eq!(path, &format!("/model/{MODEL}/invoke"));
    }
    assert_eq!(turns.len(), 1);
    let (path, view) = &turns[0];
    assert_eq!(path, &format!("/model/{MODEL}/invoke-with-response-stream"));
    assert!(!summary_in(&view["system"]).is_empty(), "{view}");
    assert!(
        view["messages"].as_array().unwrap().len() < sent["messages"].as_array().unwrap().len()
    );
    assert_eq!(
        view["messages"].as_array().unwrap().last(),
        sent["messages"].as_array().unwrap().last()
    );
    // The client's stream: well-formed frames, by the test's reader and
    // foldgate's.
    let events = bedrock::read_frames(&reply.body).unwrap();
    let message = bedrock::message_of(&events);
    assert_eq!(
        message["content"][0]["text"],
        format!("answer {}", view["messages"].as_array().unwrap().len())
    );
    assert_eq!(
        eventstream::frames(&reply.body).unwrap().len(),
        events.len()
    );
    // The next turn reuses the fold.
    let mut next = sent.clone();
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": "fine"}));
    messages.push(json!({"role": "user", "content": "thanks"}));
    let reply = invoke(&fg, "invoke", &next).await;
    reply.assert_ok();
    assert_eq!(reply.header("x-foldgate-fold"), "reused");
    for r in mock.mock.requests.lock().unwrap().iter() {
        bedrock::verify(r).unwrap();
    }
}

#[tokio::test]
async fn bedrock_planted_faults_fail_the_checks() {
    let mock = mock().await;
    let fg = foldgate(&mock).await;
    invoke(&fg, "invoke", &body(1)).await.assert_ok();
    let signed = mock.mock.requests.lock().unwrap()[0].clone();
    bedrock::verify(&signed).unwrap();
    // A body changed after signing.
    let mut changed = signed.clone();
    changed.body = signed.body.slice(..signed.body.len() - 1);
    let why = bedrock::verify(&changed).unwrap_err();
    assert!(why.contains("signature mismatch"), "{why}");
    // A signed header changed.
    let mut moved = signed.clone();
    moved
        .headers
        .insert("host", http::HeaderValue::from_static("127.0.0.1:1"));
    assert!(bedrock::verify(&moved).is_err());
    // No signature at all: Bedrock's 403.
    let unsigned = post_json(
        &format!("{}/model/{MODEL}/invoke", mock.url()),
        &[],
        &body(1),
    )
    .await;
    assert_eq!(unsigned.status, 403);
    assert_eq!(
        unsigned.header("x-amzn-errortype"),
        "InvalidSignatureException"
    );
    // A flipped bit in a frame fails its CRC, for both readers.
    let reply = invoke(&fg, "invoke-with-response-stream", &body(1)).await;
    reply.assert_ok();
    bedrock::read_frames(&reply.body).unwrap();
    let mut bad = reply.body.to_vec();
    let at = bad.len() / 2;
    bad[at] ^= 0x10;
    assert!(bedrock::read_frames(&bad).is_err());
    assert!(eventstream::frames(&bad).is_err());
}

#[tokio::test]
async fn bedrock_errors_and_siblings() {
    let mock = mock().await;
    let fg = foldgate(&mock).await;
    // foldgate's own error, in Bedrock's shape.
    let reply = send(
        http::Method::POST,
        &format!("{}/model/{MODEL}/invoke", fg.url),
        &[("content-type", "application/json")],
        b"{not json".to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.json()["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    // A provider whose keys are not set does not start.
    let toml = bedrock::provider("http://127.0.0.1:9")
        .replace(bedrock::KEY_ID_ENV, "FOLDGATE_TEST_AWS_UNSET_KEY");
    let config = Arc::new(foldgate::config::Config::from_toml(&toml).unwrap());
    let err = foldgate::upstream::Upstreams::new(config)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("providers.bedrock.aws.access_key_id_env"),
        "{err}"
    );
}
