//! The fast path's reader: a body's top-level fields read in one pass
//! without building a tree. The fields the estimate needs are parsed, the
//! pinned fields and the conversation's items stay JSON text, and every
//! other field is checked as the full parser would read it (strings
//! decoded, numbers in range) and skipped, so a body the full parser
//! refuses is refused from the first request, not only when a fold nears.
//!
//! The pinned fields and the items are only delimited here (their
//! strings found with `memchr`, not decoded, and their bytes not checked
//! as UTF-8): each is read in full by the serde parser when its text is
//! first seen ([`crate::api::codec::raw_unit`]), which checks its UTF-8,
//! and a text seen before was read then — the count cache keeps only
//! texts that read, keyed by a 128-bit hash of their bytes. Keys and the
//! other fields are checked as they are read. So every byte of an
//! accepted body has been checked as the full parser checks it, once,
//! and the items of a long conversation are looked at once per request
//! (delimited and hashed), at memory speed: no UTF-8 pass over the whole
//! body (4,700 instructions of the chat bench's 32 KB, docs/benchmarks.md,
//! "Instructions per request").

use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
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
    /// Each item must be an object, and its members are delimited too
    /// ([`Fields::members`]), in the same pass.
    pub item_members: bool,
}

/// Why a request whose [`Spec::held_upstream`] field is set goes
/// upstream untouched.
pub const HELD_UPSTREAM: &str = "the history is held upstream";

/// A body read by a [`Spec`].
pub struct Fields<'a> {
    /// The parsed fields present, in body order.
    pub parsed: Map<String, Value>,
    /// The raw fields present, in body order, as the client wrote them
    /// (delimited, not yet read: their UTF-8 is not checked yet).
    pub raw: Vec<(&'static str, &'a [u8])>,
    /// The conversation's items, as the client wrote them (delimited, not
    /// yet read: their UTF-8 is not checked yet).
    pub items: Vec<&'a [u8]>,
    /// Each item's members, when [`Spec::item_members`] asks for them.
    pub members: Vec<Members<'a>>,
}

/// An object's members, in order: keys decoded, values delimited (not
/// read, their UTF-8 not checked).
pub type Members<'a> = Vec<(Cow<'a, str>, &'a [u8])>;

/// Reads `bytes` by `spec`. `None` when the body is not a well-formed
/// object with the conversation an array, names a field twice, or holds
/// a string or number the full parser refuses outside the raw fields and
/// items: the full parser then reports exactly what is wrong (or handles
/// the oddity).
pub fn read<'a>(bytes: &'a [u8], spec: &Spec) -> Option<Fields<'a>> {
    let mut at = Cursor::new(bytes);
    let mut out = Fields {
        parsed: Map::new(),
        raw: Vec::new(),
        items: Vec::new(),
        members: Vec::new(),
    };
    let mut keys: Vec<Cow<'a, str>> = Vec::new();
    let mut has_items = false;
    at.entries(*b"{}", |at| {
        let key = at.key()?;
        at.expect(b':')?;
        if keys.contains(&key) {
            return None;
        }
        if key == spec.items {
            // Delimited item by item where it stands: the array is looked
            // at once.
            if spec.item_members {
                (out.items, out.members) = at.entries(*b"[]", Cursor::object)?.into_iter().unzip();
            } else {
                out.items = at.entries(*b"[]", Cursor::value)?;
            }
            has_items = true;
        } else {
            let value = at.value()?;
            if let Some(name) = spec.raw.iter().find(|n| **n == key) {
                out.raw.push((name, value));
            } else if spec.parsed.contains(&key.as_ref()) {
                out.parsed
                    .insert(key.to_string(), serde_json::from_slice(value).ok()?);
            } else if !checked(value) {
                return None;
            }
        }
        keys.push(key);
        Some(())
    })?;
    at.end()?;
    has_items.then_some(out)
}

/// The members of the JSON object `text` holds, in order: keys decoded,
/// values delimited (not read). `None` when `text` is not one object.
pub fn members(text: &[u8]) -> Option<Members<'_>> {
    let mut at = Cursor::new(text);
    let members = at.entries(*b"{}", Cursor::member)?;
    at.end()?;
    Some(members)
}

/// The elements of the JSON array `text` holds, in order, delimited (not
/// read). `None` when `text` is not one array.
pub fn elements(text: &[u8]) -> Option<Vec<&[u8]>> {
    let mut at = Cursor::new(text);
    let elements = at.entries(*b"[]", Cursor::value)?;
    at.end()?;
    Some(elements)
}

/// Whether `text` is one JSON value the full parser reads (UTF-8,
/// strings decoded, numbers in range), checked without building it.
pub(crate) fn checked(text: &[u8]) -> bool {
    serde_json::from_slice::<Checked>(text).is_ok()
}

/// A position in JSON text. It finds where values begin and end; it does
/// not read them (nor check their UTF-8).
struct Cursor<'a> {
    text: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a [u8]) -> Self {
        Self { text, pos: 0 }
    }

    /// The comma-separated entries between `open` and `close` that start
    /// here, each taken by `entry`.
    fn entries<T>(
        &mut self,
        [open, close]: [u8; 2],
        mut entry: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<Vec<T>> {
        let mut out = Vec::new();
        self.expect(open)?;
        let mut more = !self.eat(close);
        while more {
            out.push(entry(self)?);
            more = self.eat(b',');
            if !more {
                self.expect(close)?;
            }
        }
        Some(out)
    }

    /// One member of an object: its key, decoded, and its value, delimited.
    fn member(&mut self) -> Option<(Cow<'a, str>, &'a [u8])> {
        let key = self.key()?;
        self.expect(b':')?;
        Some((key, self.value()?))
    }

    /// The object that starts here: its text and its members.
    fn object(&mut self) -> Option<(&'a [u8], Members<'a>)> {
        self.skip_space();
        let start = self.pos;
        let members = self.entries(*b"{}", Self::member)?;
        Some((self.text.get(start..self.pos)?, members))
    }

    fn bytes(&self) -> &'a [u8] {
        self.text
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes().get(self.pos) {
            self.pos += 1;
        }
    }

    /// Takes `byte` (after any space) if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        let next = self.bytes().get(self.pos) == Some(&byte);
        self.pos += usize::from(next);
        next
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// Only space is left.
    fn end(&mut self) -> Option<()> {
        self.skip_space();
        (self.pos == self.text.len()).then_some(())
    }

    /// An object's key, decoded (its UTF-8 checked).
    fn key(&mut self) -> Option<Cow<'a, str>> {
        self.skip_space();
        let start = self.pos;
        (self.bytes().get(start) == Some(&b'"')).then_some(())?;
        self.skip_string()?;
        let quoted = self.text.get(start..self.pos)?;
        let inner = quoted.get(1..quoted.len() - 1)?;
        if inner.iter().any(|&b| b == b'\\' || b < 0x20) {
            serde_json::from_slice::<String>(quoted)
                .ok()
                .map(Cow::Owned)
        } else {
            std::str::from_utf8(inner).ok().map(Cow::Borrowed)
        }
    }

    /// The text of the next value: a string, an object or array (to its
    /// matching bracket), or a literal (to the next delimiter).
    fn value(&mut self) -> Option<&'a [u8]> {
        self.skip_space();
        let start = self.pos;
        match *self.bytes().get(start)? {
            b'"' => self.skip_string()?,
            b'{' | b'[' => self.skip_nested()?,
            _ => {
                let len = self.bytes()[start..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(self.bytes().len() - start);
                (len > 0).then_some(())?;
                self.pos += len;
            }
        }
        self.text.get(start..self.pos)
    }

    /// Past the string that starts here: its end is the first quote not
    /// escaped, found with `memchr` (an escape is a backslash and the byte
    /// after it; `\uXXXX`'s digits hold no quote).
    fn skip_string(&mut self) -> Option<()> {
        self.pos += 1;
        loop {
            let found = memchr::memchr2(b'"', b'\\', self.bytes().get(self.pos..)?)?;
            self.pos += found;
            if self.bytes()[self.pos] == b'"' {
                self.pos += 1;
                return Some(());
            }
            self.pos += 2;
        }
    }

    /// Past the object or array that starts here, to its matching bracket
    /// (the kinds of brackets are matched by the parser that reads it).
    fn skip_nested(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match *self.bytes().get(self.pos)? {
                b'"' => {
                    self.skip_string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos += 1;
                        return Some(());
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
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
        item_members: false,
    };

    #[test]
    fn reads_parsed_raw_and_items_and_checks_the_rest() {
        let body = br#"{"model":"m","system":[{"type":"text","text":"s"}],"temperature":0.5,
            "messages":[{"role":"user","content":"a"}, {"role":"assistant","content":"b"}]}"#;
        let f = read(body, &SPEC).unwrap();
        assert_eq!(f.parsed["model"], "m");
        assert_eq!(f.raw[0].0, "system");
        assert_eq!(f.raw[0].1, br#"[{"type":"text","text":"s"}]"#);
        assert_eq!(f.items.len(), 2);
        assert_eq!(f.items[1], br#"{"role":"assistant","content":"b"}"#);
    }

    #[test]
    fn items_end_where_the_parser_ends_them() {
        let items = [
            r#"{"role":"user","content":"a \"quoted\" ] } [ {"}"#,
            r#"{"content":"ends in a backslash \\","role":"assistant"}"#,
            r#"{"role":"tool","content":[{"type":"text","text":"\u005d\""}],"n":[1,-2.5e3,true,null]}"#,
            r#""a string item""#,
            "12",
            "{}",
            "[[],[[]]]",
            r#"{"k":"\u00e9t\u00e9 \ud83d\ude00 café"}"#,
        ];
        for spacing in ["", " \n\t "] {
            let joined = items.join(&format!("{spacing},{spacing}"));
            let body = format!(
                r#"{spacing}{{"model":"m",{spacing}"messages"{spacing}:{spacing}[{spacing}{joined}{spacing}]{spacing}}}{spacing}"#
            );
            let f = read(body.as_bytes(), &SPEC).unwrap_or_else(|| panic!("{body}"));
            let texts: Vec<&[u8]> = items.iter().map(|i| i.as_bytes()).collect();
            assert_eq!(f.items, texts, "{body}");
            let parsed: Map<String, Value> = serde_json::from_str(&body).unwrap();
            let reparsed: Vec<Value> = f
                .items
                .iter()
                .map(|i| serde_json::from_slice(i).unwrap())
                .collect();
            assert_eq!(parsed["messages"], Value::Array(reparsed));
        }
    }

    #[test]
    fn escaped_keys_are_decoded() {
        let body = br#"{"mod\u0065l":"m","messages":[],"\u006dodel":"n"}"#;
        assert!(
            read(body, &SPEC).is_none(),
            "the same key twice, once escaped"
        );
        let body = br#"{"\u006dessages":[{"role":"user","content":"a"}],"model":"m"}"#;
        assert_eq!(read(body, &SPEC).map(|f| f.items.len()), Some(1));
    }

    #[test]
    fn refuses_broken_structure() {
        for body in [
            &br#"{"model":"m","messages":[{"role":"user"}"#[..],
            br#"{"model":"m","messages":[{"role":"user"},]}"#,
            br#"{"model":"m","messages":[,]}"#,
            br#"{"model":"m","messages":["unterminated]}"#,
            br#"{"model":"m","messages":["ends in \"#,
            br#"{"model":"m","messages":[] "x":1}"#,
            br#"{"model":"m",}"#,
            br#"{"model" "m","messages":[]}"#,
            br#"{"model":"m","messages":[]}"#,
            b"{\"model\":\"m\",\"messages\":[],\"x\":\"\xff\"}",
            br#"{"model":"m","messages":[]}}"#,
            b"",
        ] {
            assert!(
                read(body, &SPEC).is_none(),
                "{}",
                String::from_utf8_lossy(body)
            );
            assert!(serde_json::from_slice::<Value>(body).is_err());
        }
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
