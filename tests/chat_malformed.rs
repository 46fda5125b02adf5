//! Chat bodies the fast path once forwarded untouched although they are
//! not a JSON object (found by fuzzing `chat::fast::parse`, see
//! `fuzz/fuzz_targets/chat_parse.rs`): the full parser answers them with
//! a 400 and the upstream never sees them.

use crate::common;

use common::llm::Llm;
use common::{Foldgate, config_for, send};
use http::Method;

async fn post_raw(fg: &Foldgate, body: &'static [u8]) -> common::Reply {
    send(
        Method::POST,
        &format!("{}/v1/chat/completions", fg.url),
        &[("content-type", "application/json")],
        body,
    )
    .await
}

#[tokio::test]
async fn bodies_that_are_not_a_json_object_get_a_400_and_never_reach_the_upstream() {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&config_for(llm.url(), "")).await;

    // Invalid UTF-8 inside a field the fast path does not read.
    let reply = post_raw(
        &fg,
        b"{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\":\"\xf4ype\"}",
    )
    .await;
    reply.assert_envelope(400, "invalid_request");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );

    // Invalid UTF-8 inside a message, and inside a key of one: the fast
    // path does not check the body's UTF-8 in a pass of its own, a
    // message's bytes are checked when its text is first read.
    for body in [
        &b"{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"h\xffi\"}]}"[..],
        b"{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"n\xc3\":1}]}",
        b"{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"\xe9\":1}",
    ] {
        let reply = post_raw(&fg, body).await;
        reply.assert_envelope(400, "invalid_request");
    }

    // A top-level array, which serde would read into the request's fields.
    let reply = post_raw(&fg, br#"["gpt-4o", [{"role":"user","content":"hi"}]]"#).await;
    reply.assert_envelope(400, "invalid_request");

    assert!(llm.chat_requests().is_empty(), "nothing was forwarded");

    // The well-formed request still goes through.
    post_raw(
        &fg,
        br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await
    .assert_ok();
    assert_eq!(llm.chat_requests().len(), 1);

    // A message seen (and read) before, then a new one with invalid UTF-8
    // beside it: the new one is read, and refused.
    let reply = post_raw(
        &fg,
        b"{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\xc3\x28\"}]}",
    )
    .await;
    reply.assert_envelope(400, "invalid_request");
    assert_eq!(llm.chat_requests().len(), 1, "nothing more was forwarded");
}
