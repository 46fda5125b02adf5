//! The fast path's reader: a body's top-level fields read in one pass
//! without building a tree. The fields the estimate needs are parsed, the
//! pinned fields and the conversation's items stay JSON text, and every
//! other field is checked as the full parser would read it (strings
//! decoded, numbers in range) and skipped, so a body the full parser
//! refuses is refused from the first request, not only when a fold nears.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

/// Which top-level fields an API's fast path reads, and how.
pub struct Spec {
    /// Parsed into values (the estimate's fields).
    pub parsed: &'static [&'static str],
    /// Kept as JSON text (the pinned fields: `system`, `instructions`).
    pub raw: &'static [&'static str],
    /// The conversation: an array whose items are kept as JSON text.
    pub items: &'static str,
    /// Parsed fields that, set to anything but `null`, say the history is
    /// held upstream (the request then goes upstream untouched).
    pub held_upstream: &'static [&'static str],
}

/// Why a request whose [`Spec::held_upstream`] field is set goes
/// upstream untouched.
pub const HELD_UPSTREAM: &str = "the history is held upstream";

/// A body read by a [`Spec`].
pub struct Fields<'a> {
    /// The parsed fields present, in body order.
    pub parsed: Map<String, Value>,
    /// The raw fields present, in body order.
    pub raw: Vec<(&'static str, &'a RawValue)>,
    /// The conversation's items, as the client wrote them.
    pub items: Vec<&'a RawValue>,
}

/// Reads `bytes` by `spec`. `None` when the body is not a well-formed
/// object with the conversation an array, names a field twice, or holds
/// a string or number the full parser refuses: the full parser then
/// reports exactly what is wrong (or handles the oddity).
pub fn read<'a>(bytes: &'a [u8], spec: &Spec) -> Option<Fields<'a>> {
    // serde does not check the UTF-8 of the raw texts it borrows.
    std::str::from_utf8(bytes).ok()?;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let fields = Reader(spec).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(fields)
}

struct Reader<'s>(&'s Spec);

impl<'de> DeserializeSeed<'de> for Reader<'_> {
    type Value = Fields<'de>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Reader<'_> {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let spec = self.0;
        let mut out = Fields {
            parsed: Map::new(),
            raw: Vec::new(),
            items: Vec::new(),
        };
        let mut seen: Vec<Cow<'de, str>> = Vec::new();
        let mut has_items = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if seen.contains(&key) {
                return Err(de::Error::custom("a field named twice"));
            }
            if key == spec.items {
                out.items = map.next_value()?;
                has_items = true;
            } else if let Some(name) = spec.raw.iter().find(|n| **n == key) {
                out.raw.push((name, map.next_value()?));
            } else if spec.parsed.contains(&key.as_ref()) {
                out.parsed.insert(key.to_string(), map.next_value()?);
            } else {
                map.next_value::<Checked>()?;
            }
            seen.push(key);
        }
        if !has_items {
            return Err(de::Error::missing_field("conversation"));
        }
        Ok(out)
    }
}

/// Any JSON value, read as the full parser reads it and dropped: strings
/// are decoded (a lone surrogate escape fails) and numbers parsed (one
/// out of `f64`'s range fails), unlike `serde::de::IgnoredAny`, which only
/// skips.
struct Checked;

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: Spec = Spec {
        parsed: &["model", "tools"],
        raw: &["system"],
        items: "messages",
        held_upstream: &[],
    };

    #[test]
    fn reads_parsed_raw_and_items_and_checks_the_rest() {
        let body = br#"{"model":"m","system":[{"type":"text","text":"s"}],"temperature":0.5,
            "messages":[{"role":"user","content":"a"}, {"role":"assistant","content":"b"}]}"#;
        let f = read(body, &SPEC).unwrap();
        assert_eq!(f.parsed["model"], "m");
        assert_eq!(f.raw[0].0, "system");
        assert_eq!(f.raw[0].1.get(), r#"[{"type":"text","text":"s"}]"#);
        assert_eq!(f.items.len(), 2);
        assert_eq!(f.items[1].get(), r#"{"role":"assistant","content":"b"}"#);
    }

    #[test]
    fn refuses_what_the_full_parser_refuses_in_skipped_fields() {
        for body in [
            &br#"{"model":"m","messages":[],"user":"\udfff"}"#[..],
            br#"{"model":"m","messages":[],"temperature":1e400}"#,
            br#"{"model":"m","messages":[],"metadata":{"a":[1,"\ud800x"]}}"#,
            br#"{"model":"m","messages":[],"model":"n"}"#,
            br#"{"model":"m","messages":{}}"#,
            br#"{"model":"m"}"#,
            br#"[{"model":"m","messages":[]}]"#,
            br#"{"model":"m","messages":[]} x"#,
        ] {
            let text = String::from_utf8_lossy(body);
            assert!(read(body, &SPEC).is_none(), "{text}");
            let full = serde_json::from_slice::<Map<String, Value>>(body);
            let dup_or_shape = text.contains(r#""model":"n""#) || !text.contains(r#""messages":["#);
            assert!(full.is_err() || dup_or_shape, "{text}");
        }
        let ok = br#"{"model":"m","messages":[],"user":"\ud83d\ude00","n":1e300}"#;
        assert!(read(ok, &SPEC).is_some());
    }
}
