//! The chat body parsers on arbitrary bytes: the fast path's shallow read
//! and the full parser. Besides not panicking, the fast path must read
//! exactly what a full JSON parse reads (model, each message, the fields
//! the estimate uses), and the full parser must only accept what it
//! promises (a non-empty string `model`, messages with a string `role`).

#![no_main]

use foldgate::api::fuzzing::{fast_parse, full_parse};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn has_role(m: &Value) -> bool {
    m.get("role").is_some_and(Value::is_string)
}

fuzz_target!(|data: &[u8]| {
    let full = full_parse(data);
    if let Ok(map) = &full {
        assert!(matches!(map.get("model"), Some(Value::String(m)) if !m.is_empty()));
        let messages = map.get("messages").and_then(Value::as_array);
        assert!(messages.is_some_and(|ms| ms.iter().all(has_role)));
    }
    let Some(fast) = fast_parse(data) else {
        return;
    };
    // Every field the fast path skips is checked as the full parser reads
    // it (strings decoded, numbers in range): what it reads is JSON.
    let parsed = serde_json::from_slice::<Value>(data);
    let Ok(Value::Object(body)) = parsed else {
        panic!("the fast path read a body that is not a JSON object");
    };
    assert_eq!(body.get("model"), Some(&Value::String(fast.model.clone())));
    let Some(Value::Array(messages)) = body.get("messages") else {
        panic!("the fast path read a body without a messages array");
    };
    assert_eq!(messages.len(), fast.messages.len());
    for (raw, parsed) in fast.messages.iter().zip(messages) {
        let raw: Value = serde_json::from_str(raw).expect("a raw message is JSON");
        assert_eq!(&raw, parsed);
    }
    for (key, value) in &fast.rest {
        assert_eq!(body.get(key), Some(value), "{key}");
    }
    if messages.iter().all(has_role) {
        assert!(
            full.is_ok(),
            "fast path read it, full parser refused: {full:?}"
        );
    }
});
