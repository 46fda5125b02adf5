//! Property test for the fast path's reader (`foldgate::shallow`):
//! it only delimits the conversation's items (their strings found with
//! `memchr`, not decoded), so on any body the full parser reads, the
//! items it hands out must be exactly the values the full parser finds —
//! whatever the strings hold (quotes, backslashes, brackets, escapes,
//! any code point) and however the JSON is spaced.
//!
//! And on Gemini bodies, whose function responses answer the model turn
//! before them by position: the fast path reads the units, roles and
//! identities the decoder reads, and refuses what it refuses.
//!
//! And on Ollama bodies, whose calls without an id get one made from
//! their message's position: the fast path reads what the decoder reads,
//! refuses what it refuses, and leaves such calls to the decoder.
//!
//! Seeded for reproducible CI; explore others with
//! `PROPTEST_RNG_SEED=<u64> cargo test --test shallow_props`.

use crate::props_support;
use foldgate::api::fuzzing::{codec, fast_read};
use foldgate::message::Role;
use foldgate::shallow::{Spec, read};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const SPEC: Spec = Spec {
    parsed: &["model"],
    raw: &["system"],
    items: "messages",
    held_upstream: &[],
    item_members: false,
};

/// The same, with each item's members delimited in the same pass.
const WITH_MEMBERS: Spec = Spec {
    item_members: true,
    ..SPEC
};

/// Strings heavy in what a string scan can trip on.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        r#"[\\"\[\]{}:, a-z]{0,12}"#,
        "\\PC{0,12}",
        r#"(\\\\|\\"|\\u[0-9a-f]{4}|[ -~]){0,8}"#,
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// `value` written compact or pretty (spaces and newlines between tokens).
fn written(value: &Value, style: u8) -> String {
    match style % 2 {
        0 => value.to_string(),
        _ => serde_json::to_string_pretty(value).unwrap(),
    }
}

/// A Gemini part: text, a function call or response, media, or an oddity
/// (a `null` call, a string part).
fn gemini_part() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(|t| json!({"text": t})),
        (text(), value()).prop_map(|(n, a)| json!({"functionCall": {"name": n, "args": a}})),
        (text(), value())
            .prop_map(|(n, r)| json!({"functionResponse": {"name": n, "response": r}})),
        Just(json!({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}})),
        Just(json!({"functionCall": null})),
        Just(json!({"functionResponse": null, "text": "x"})),
        text().prop_map(Value::from),
    ]
}

/// A Gemini content: mostly `user` and `model` turns, some without a role
/// or with another, some whose parts are not an array; rarely not an
/// object (the decoder refuses it).
fn gemini_content() -> impl Strategy<Value = Value> {
    prop_oneof![12 => gemini_turn(), 1 => value()]
}

fn gemini_turn() -> impl Strategy<Value = Value> {
    let role = prop_oneof![
        4 => Just(Some("user")),
        4 => Just(Some("model")),
        1 => Just(Some("function")),
        1 => Just(None),
    ];
    let parts = prop_oneof![
        8 => prop::collection::vec(gemini_part(), 0..4).prop_map(Value::Array),
        1 => value(),
    ];
    (role, parts).prop_map(|(role, parts)| {
        let mut c = json!({"parts": parts});
        if let Some(role) = role {
            c["role"] = json!(role);
        }
        c
    })
}

/// A system instruction, under either spelling, or none.
fn gemini_system() -> impl Strategy<Value = Option<(&'static str, Value)>> {
    let name = prop_oneof![Just("systemInstruction"), Just("system_instruction")];
    let instruction = prop_oneof![
        4 => prop::collection::vec(gemini_part(), 0..3).prop_map(|p| json!({"parts": p})),
        1 => (text(), value()).prop_map(|(t, r)| json!({"role": r, "parts": [{"text": t}]})),
        1 => value(),
    ];
    prop::option::of((name, instruction))
}

/// An Ollama message: mostly plain turns, some with calls (with or
/// without ids), tool results naming their tool, images, thinking, a
/// member the codec does not read; some without a string role; rarely
/// not an object (the decoder refuses it).
fn ollama_message() -> impl Strategy<Value = Value> {
    let role = prop_oneof![
        4 => Just(json!("user")),
        4 => Just(json!("assistant")),
        1 => Just(json!("tool")),
        1 => Just(json!("system")),
        1 => value(),
    ];
    let call = (prop::option::of(text()), text(), value()).prop_map(|(id, name, args)| {
        let mut call = json!({"function": {"name": name, "arguments": args}});
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        call
    });
    let extra = prop_oneof![
        6 => Just(None),
        1 => prop::collection::vec(call, 1..3).prop_map(|c| Some(("tool_calls", Value::Array(c)))),
        1 => text().prop_map(|t| Some(("tool_name", Value::from(t)))),
        1 => Just(Some(("images", json!(["iVBORw0KGgo="])))),
        1 => text().prop_map(|t| Some(("thinking", Value::from(t)))),
        1 => value().prop_map(|v| Some(("unread", v))),
    ];
    let turn = (role, text(), extra).prop_map(|(role, content, extra)| {
        let mut m = json!({"role": role, "content": content});
        if let Some((name, value)) = extra {
            m[name] = value;
        }
        m
    });
    prop_oneof![12 => turn, 1 => value()]
}

proptest! {
    #![proptest_config(props_support::config(512, 0x5ca1_ab1e))]

    #[test]
    fn items_are_the_values_the_full_parser_finds(
        messages in prop::collection::vec(value(), 0..6),
        system in value(),
        extra in value(),
        style in any::<u8>(),
    ) {
        let body = json!({"system": system, "model": "m", "messages": messages, "extra": extra});
        let text = written(&body, style);
        let fields = read(text.as_bytes(), &SPEC).expect("a body the full parser reads");
        let items: Vec<Value> = fields.items.iter().map(|i| serde_json::from_slice(i).unwrap()).collect();
        prop_assert_eq!(items, messages);
        prop_assert_eq!(fields.raw.len(), 1);
        prop_assert_eq!(serde_json::from_slice::<Value>(fields.raw[0].1).unwrap(), system);
        prop_assert_eq!(&fields.parsed, &Map::from_iter([("model".to_string(), json!("m"))]));
    }

    #[test]
    fn item_members_are_the_members_the_full_parser_finds(
        messages in prop::collection::vec(
            prop::collection::vec((text(), value()), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            0..5,
        ),
        style in any::<u8>(),
    ) {
        let text = written(&json!({"model": "m", "messages": messages}), style);
        let fields = read(text.as_bytes(), &WITH_MEMBERS).expect("a body the full parser reads");
        let plain = read(text.as_bytes(), &SPEC).expect("a body the full parser reads");
        prop_assert_eq!(&fields.items, &plain.items);
        prop_assert_eq!(fields.members.len(), messages.len());
        for (members, message) in fields.members.iter().zip(&messages) {
            let read: Map<String, Value> = members
                .iter()
                .map(|(k, v)| (k.to_string(), serde_json::from_slice(v).unwrap()))
                .collect();
            prop_assert_eq!(&Value::Object(read), message);
            prop_assert_eq!(members.len(), message.as_object().unwrap().len());
        }
    }

    #[test]
    fn an_item_that_is_not_an_object_is_refused_when_members_are_asked(
        item in value().prop_filter("not an object", |v| !v.is_object()),
    ) {
        let text = json!({"model": "m", "messages": [{}, item]}).to_string();
        prop_assert!(read(text.as_bytes(), &WITH_MEMBERS).is_none());
        prop_assert!(read(text.as_bytes(), &SPEC).is_some());
    }

    #[test]
    fn a_body_cut_short_is_refused(
        messages in prop::collection::vec(value(), 1..4),
        style in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let text = written(&json!({"model": "m", "messages": messages}), style);
        let end = text.trim_end().len() - 1;
        let at = cut.index(end);
        prop_assume!(text.is_char_boundary(at));
        prop_assert!(read(&text.as_bytes()[..at], &SPEC).is_none());
        prop_assert!(read(&text.as_bytes()[..at], &WITH_MEMBERS).is_none());
    }

    #[test]
    fn gemini_units_are_the_decoders(
        contents in prop::collection::vec(gemini_content(), 0..8),
        system in gemini_system(),
        extra in value(),
        style in any::<u8>(),
    ) {
        let mut body = json!({"contents": contents, "generationConfig": {"maxOutputTokens": 9}, "extra": extra});
        if let Some((name, instruction)) = system.clone() {
            body[name] = instruction;
        }
        let text = written(&body, style);
        let fast = fast_read("gemini", text.as_bytes());
        let Ok(read) = codec("gemini", text.as_bytes()) else {
            prop_assert!(fast.is_none(), "the fast path took a body the decoder refuses");
            return Ok(());
        };
        // The decoder took it, so every content is an object: the body is
        // the fast path's unless its system instruction is odd or has no
        // text.
        let plain = system.as_ref().is_none_or(|(_, s)| {
            s.as_object().is_some_and(|o| o.len() == 1)
                && s["parts"].as_array().is_some_and(|ps| {
                    !ps.is_empty()
                        && ps.iter().all(|p| p.as_object().is_some_and(|o| o.len() == 1) && p.get("text").is_some_and(|t| t != ""))
                })
        });
        if plain {
            prop_assert!(fast.is_some(), "a plain body falls back to the decoder: {}", text);
        }
        if let Some(fast) = fast {
            let roles: Vec<Role> = read.messages.iter().map(|m| Role::of_message(m).unwrap()).collect();
            prop_assert_eq!(fast.roles, roles, "{}", text);
            prop_assert_eq!(fast.ids, read.ids, "{}", text);
        }
    }

    #[test]
    fn ollama_units_are_the_decoders(
        messages in prop::collection::vec(ollama_message(), 0..8),
        options in prop::option::of(value()),
        extra in value(),
        style in any::<u8>(),
    ) {
        let mut body = json!({"model": "llama3.2", "messages": messages, "keep_alive": extra});
        if let Some(options) = options {
            body["options"] = options;
        }
        let text = written(&body, style);
        let fast = fast_read("ollama", text.as_bytes());
        let Ok(read) = codec("ollama", text.as_bytes()) else {
            prop_assert!(fast.is_none(), "the fast path took a body the decoder refuses");
            return Ok(());
        };
        // The decoder took it: the body is the fast path's unless a call
        // has no id (its made id names its message's position).
        let unnamed = messages.iter().any(|m| {
            m["tool_calls"].as_array().is_some_and(|calls| {
                calls.iter().any(|c| c.get("id").and_then(Value::as_str).is_none_or(str::is_empty))
            })
        });
        prop_assert_eq!(fast.is_some(), !unnamed, "{}", text);
        if let Some(fast) = fast {
            let roles: Vec<Role> = read.messages.iter().map(|m| Role::of_message(m).unwrap()).collect();
            prop_assert_eq!(fast.roles, roles, "{}", text);
            prop_assert_eq!(fast.ids, read.ids, "{}", text);
            prop_assert_eq!(fast.opaque, None);
        }
    }
}
