//! Structural xxh3 hash of a JSON value, the key of the count cache.
//!
//! Hashing the parsed value directly avoids serialising every message on
//! every request just to look its count up. Each node is tagged and every
//! string and container is length-prefixed, so different values cannot
//! produce the same byte stream (`["ab"]` vs `["a","b"]`).

use serde_json::Value;
use twox_hash::XxHash3_128;

/// A 128-bit hash of `value`. 128 bits keep the chance of two different
/// messages sharing a cached count negligible even with millions of entries.
pub(crate) fn hash_value(value: &Value) -> u128 {
    hash_values([value])
}

/// One hash over a sequence of values, each framed as in [`hash_value`].
pub(crate) fn hash_values<'a>(values: impl IntoIterator<Item = &'a Value>) -> u128 {
    let mut h = XxHash3_128::new();
    for value in values {
        feed(&mut h, value);
    }
    h.finish_128()
}

fn feed(h: &mut XxHash3_128, value: &Value) {
    match value {
        Value::Null => h.write(b"n"),
        Value::Bool(b) => h.write(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                h.write(b"u");
                h.write(&u.to_le_bytes());
            } else if let Some(i) = n.as_i64() {
                h.write(b"i");
                h.write(&i.to_le_bytes());
            } else {
                h.write(b"d");
                h.write(&n.as_f64().unwrap_or(f64::NAN).to_bits().to_le_bytes());
            }
        }
        Value::String(s) => feed_str(h, b's', s),
        Value::Array(items) => {
            h.write(b"a");
            h.write(&(items.len() as u64).to_le_bytes());
            for item in items {
                feed(h, item);
            }
        }
        Value::Object(map) => {
            h.write(b"o");
            h.write(&(map.len() as u64).to_le_bytes());
            for (key, item) in map {
                feed_str(h, b'k', key);
                feed(h, item);
            }
        }
    }
}

fn feed_str(h: &mut XxHash3_128, tag: u8, s: &str) {
    h.write(&[tag]);
    h.write(&(s.len() as u64).to_le_bytes());
    h.write(s.as_bytes());
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
