//! The Anthropic Messages, OpenAI Responses and Gemini codecs (and chat
//! completions') on arbitrary bodies. The first byte picks the API. Besides
//! not panicking: every engine message has a string role; the units cover
//! the conversation's items in order, each item exactly once, pinned
//! top-level fields first; a view that keeps every message and adds
//! nothing encodes back to the very body that was read; and where the
//! fast path reads a body, the decoder reads it too, with the same
//! identities and roles and the same reason to forward it untouched.

#![no_main]

use foldgate::api::fuzzing::{codec, fast_read};
use foldgate::message::Role;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let api = ["chat", "anthropic", "responses", "gemini"][usize::from(pick) % 4];
    let fast = fast_read(api, body);
    let Ok(read) = codec(api, body) else {
        assert!(fast.is_none(), "the fast path read a body the decoder refuses");
        return;
    };
    if let Some(fast) = fast {
        assert_eq!(fast.ids, read.ids, "the fast path and the decoder disagree");
        let roles: Vec<_> = read.messages.iter().filter_map(Role::of_message).collect();
        assert_eq!(fast.roles, roles, "the fast path and the decoder disagree on roles");
        assert_eq!(fast.opaque, read.opaque);
    }
    assert!(read.messages.iter().all(|m| m.get("role").is_some_and(Value::is_string)));
    if api != "chat" {
        assert_eq!(read.units.len(), read.messages.len());
        let pinned = read.units.iter().take_while(|u| u.is_none()).count();
        let mut next = 0;
        for unit in &read.units[pinned..] {
            let range = unit.clone().expect("pinned fields come first");
            assert_eq!(range.start, next, "units are consecutive");
            assert!(range.end > range.start, "units are not empty");
            next = range.end;
        }
        assert_eq!(next, read.items, "units cover every item");
    }
    let original: Value = serde_json::from_slice(body).expect("a decoded body is JSON");
    if api == "responses" && original.get("input").is_some_and(Value::is_string) {
        // A string input is read as one message and never re-encoded
        // (such requests are forwarded untouched).
        return;
    }
    assert_eq!(read.reencoded, original, "the identity view changed the body");
});
