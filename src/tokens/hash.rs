//! Structural xxh3 hash of a JSON value, the key of the count cache.
//!
//! Hashing the parsed value directly avoids serialising every message on
//! every request just to look its count up. Each node is tagged and every
//! string and container is length-prefixed, so different values cannot
//! produce the same byte stream (`["ab"]` vs `["a","b"]`).

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3Default;

/// A 128-bit hash of `value`. 128 bits keep the chance of two different
/// messages sharing a cached count negligible even with millions of entries.
pub(crate) fn hash_value(value: &Value) -> u128 {
    hash_values([value])
}

/// One hash over a sequence of values, each framed as in [`hash_value`].
pub(crate) fn hash_values<'a>(values: impl IntoIterator<Item = &'a Value>) -> u128 {
    let mut h = Xxh3Default::new();
    for value in values {
        feed(&mut h, value);
    }
    h.digest128()
}

fn feed(h: &mut Xxh3Default, value: &Value) {
    match value {
        Value::Null => h.update(b"n"),
        Value::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                h.update(b"u");
                h.update(&u.to_le_bytes());
            } else if let Some(i) = n.as_i64() {
                h.update(b"i");
                h.update(&i.to_le_bytes());
            } else {
                h.update(b"d");
                h.update(&n.as_f64().unwrap_or(f64::NAN).to_bits().to_le_bytes());
            }
        }
        Value::String(s) => feed_str(h, b's', s),
        Value::Array(items) => {
            h.update(b"a");
            h.update(&(items.len() as u64).to_le_bytes());
            for item in items {
                feed(h, item);
            }
        }
        Value::Object(map) => {
            h.update(b"o");
            h.update(&(map.len() as u64).to_le_bytes());
            for (key, item) in map {
                feed_str(h, b'k', key);
                feed(h, item);
            }
        }
    }
}

fn feed_str(h: &mut Xxh3Default, tag: u8, s: &str) {
    h.update(&[tag]);
    h.update(&(s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_values_equal_hashes() {
        let a = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
        let b: Value =
            serde_json::from_str(r#"{ "role":"user", "content":[{"type":"text","text":"hi"}] }"#)
                .unwrap();
        assert_eq!(hash_value(&a), hash_value(&b));
        assert_ne!(
            hash_values([&a, &Value::Null]),
            hash_values([&Value::Null, &a])
        );
    }

    #[test]
    fn boundaries_matter() {
        let pairs = [
            (json!(["ab"]), json!(["a", "b"])),
            (json!({"a": "b"}), json!({"ab": ""})),
            (json!(1), json!(1.0)),
            (json!("1"), json!(1)),
            (json!(null), json!("")),
            (
                json!({"role": "user", "content": "x"}),
                json!({"role": "assistant", "content": "x"}),
            ),
        ];
        for (a, b) in pairs {
            assert_ne!(hash_value(&a), hash_value(&b), "{a} vs {b}");
        }
    }
}
