//! Deterministic extraction of the specifics a message carries — paths,
//! URLs, hosts, versions, ids, commands, code symbols, numbers with their
//! unit, names — so the ledger can keep what an LLM summary loses.
//!
//! A hand-written linear scan, line by line (`line`): command lines and
//! inline code first (they are kept whole), then URLs, then tokens split at
//! punctuation, each classified alone (`token`, `net`) and then with its
//! neighbours for the rules that need context ("port 5433", "PostgreSQL
//! 15.4", "Dana Whitfield"). Word lists live in `words`; the clause that
//! says what each specific is, in `clause`.

mod clause;
mod line;
mod net;
mod token;
mod words;

pub use clause::head as clause_head;
use line::{Mode, Scratch, Span};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::HashSet;

/// What kind of specific an artifact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A file or directory: `/etc/nginx/nginx.conf`, `src/fold/cut.rs`, `Cargo.toml`.
    Path,
    /// `https://…`, `postgres://user@host:5432/db`, `git@github.com:org/repo.git`.
    Url,
    /// `db-03.internal.example`, `localhost:8080`, `10.0.0.12`.
    Host,
    /// `dana@example.com`.
    Email,
    /// `v2.14.1`, `1.0.0-beta.2`, `PostgreSQL 15.4`.
    Version,
    /// UUIDs, hashes, tickets (`JIRA-4521`), generated codes (`X9K2P`).
    Id,
    /// Inline code and shell command lines.
    Code,
    /// Code identifiers: `fold_state`, `FoldState`, `foo::bar`, `--flag`.
    Symbol,
    /// A number with its unit or the word before it: `512 MB`, `port 5433`.
    Number,
    /// Proper names: `Dana Whitfield`.
    Name,
}

/// One specific found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// What kind of specific it is.
    pub kind: Kind,
    /// The specific, verbatim as it appears in the text.
    pub value: String,
    /// A few words of the sentence/line it came from (<= ~80 chars, may be
    /// trimmed with "…"), for the ledger line. Never contains a newline.
    pub context: String,
    /// The few subject words that say what the specific is ("metrics port"
    /// for "The metrics port is 9187."); empty when the line has none.
    pub clause: String,
}

/// The artifacts of `text`, in order of first appearance, each value once.
pub fn extract(text: &str) -> Vec<Artifact> {
    let mut spans: Vec<Span> = Vec::new();
    let mut span_lines: Vec<(usize, usize)> = Vec::new();
    let mut mode = Mode::default();
    let mut scratch = Scratch::default();
    let mut offset = 0;
    for raw in text.split('\n') {
        let base = offset;
        offset += raw.len() + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~") {
            mode.fenced = !mode.fenced;
            continue;
        }
        mode.diff_header = is_diff_header(line);
        mode.diff =
            mode.diff_header || line.starts_with("@@ ") || (mode.diff && continues_diff(line));
        line::scan(line, base, mode, &mut scratch, &mut spans);
        span_lines.resize(spans.len(), (base, base + line.len()));
    }
    // Earliest first; at one spot the larger span first, so what it contains
    // (the host inside a URL, the flag inside a command) is dropped.
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| (spans[i].start, Reverse(spans[i].end)));
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut reach = 0;
    for i in order {
        let span = spans[i];
        if span.end <= reach {
            continue;
        }
        reach = span.end;
        let value = &text[span.start..span.end];
        if !seen.insert(value) {
            continue;
        }
        let (ls, le) = span_lines[i];
        let (line, start, end) = (&text[ls..le], span.start - ls, span.end - ls);
        out.push(Artifact {
            kind: span.kind,
            value: value.to_owned(),
            context: context(line, start, end),
            clause: clause::clause(line, start, end, span.kind),
        });
    }
    out
}

fn is_diff_header(line: &str) -> bool {
    [
        "diff --git ",
        "--- a/",
        "+++ b/",
        "--- /dev/null",
        "+++ /dev/null",
    ]
    .iter()
    .any(|p| line.starts_with(p))
}

fn continues_diff(line: &str) -> bool {
    line.is_empty()
        || line.starts_with([' ', '+', '-', '\\', '@'])
        || [
            "index ",
            "new file mode",
            "deleted file mode",
            "similarity index",
            "rename ",
        ]
        .iter()
        .any(|p| line.starts_with(p))
}

/// Characters of context around a specific.
const CONTEXT_CHARS: usize = 80;

/// The line around `line[start..end]`: the whole line when short, else the
/// sentence or a window of words around it; empty when it adds nothing.
fn context(line: &str, start: usize, end: usize) -> String {
    let ts = line.len() - line.trim_start().len();
    let te = line.trim_end().len();
    let value_chars = line[start..end].chars().count();
    let short = line[ts..te].chars().take(CONTEXT_CHARS + 1).count() <= CONTEXT_CHARS;
    let text = if short {
        line[ts..te].to_owned()
    } else if value_chars + 10 >= CONTEXT_CHARS {
        return String::new();
    } else {
        window(line, (ts, te), start, end, CONTEXT_CHARS - value_chars)
    };
    let mut clean = String::with_capacity(text.len());
    for c in text.chars() {
        let c = if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
            ' '
        } else {
            c
        };
        if !(c == ' ' && clean.ends_with(' ')) {
            clean.push(c);
        }
    }
    // Context that only repeats the value (a command line, a lone path) is noise.
    let alnum = |s: &str| s.chars().filter(|c| c.is_alphanumeric()).count();
    if alnum(&clean).saturating_sub(alnum(&line[start..end])) < 3 {
        return String::new();
    }
    clean
}

/// About `room` characters around `line[start..end]`, cut at a sentence
/// boundary when one is near, else at a word with "…".
fn window(line: &str, (ts, te): (usize, usize), start: usize, end: usize, room: usize) -> String {
    let mut left = start;
    for (taken, (i, _)) in line[ts..start].char_indices().rev().enumerate() {
        if taken == room / 2 {
            break;
        }
        left = ts + i;
    }
    let b = line.as_bytes();
    let is_break = |w: &[u8]| b".?!;".contains(&w[0]) && w[1] == b' ';
    let mut cut_left = left > ts;
    if let Some(p) = b[left..start].windows(2).rposition(is_break) {
        left += p + 2;
        cut_left = false;
    } else if cut_left {
        // Start at a word, unless the only space is right before the value.
        if let Some(p) = line[left..start]
            .find(' ')
            .filter(|&p| 2 * p < start - left)
        {
            left += p + 1;
        }
    }
    let used = line[left..start].chars().count();
    let mut right = end;
    for (taken, (i, c)) in line[end..te].char_indices().enumerate() {
        if taken >= room.saturating_sub(used) {
            break;
        }
        right = end + i + c.len_utf8();
    }
    let mut cut_right = right < te;
    if let Some(p) = b[end..right].windows(2).position(is_break) {
        right = end + p + 1;
        cut_right = false;
    } else if cut_right {
        if let Some(p) = line[end..right].rfind(' ').filter(|&p| 2 * p > right - end) {
            right = end + p;
        }
    }
    let mut out = String::new();
    if cut_left {
        out.push('…');
    }
    out.push_str(line[left..right].trim());
    if cut_right {
        out.push('…');
    }
    out
}

/// The text of a chat-completions message that extraction reads: its
/// `content` (a string, or the `text` of its parts), the `name` and
/// `arguments` of each `tool_calls[].function` and of `function_call`.
/// Not tool-call ids (`call_…`), not the role.
pub fn message_text(message: &Value) -> String {
    let mut parts: Vec<Cow<'_, str>> = Vec::new();
    content_parts(message, &mut parts);
    call_parts(message, &mut parts);
    parts.join("\n")
}

/// The `content` part of [`message_text`]: what a user, a tool or the
/// assistant wrote.
pub fn content_text(message: &Value) -> String {
    let mut parts: Vec<Cow<'_, str>> = Vec::new();
    content_parts(message, &mut parts);
    parts.join("\n")
}

/// The tool-call part of [`message_text`]: names and arguments, what the
/// assistant asked for.
pub fn call_text(message: &Value) -> String {
    let mut parts: Vec<Cow<'_, str>> = Vec::new();
    call_parts(message, &mut parts);
    parts.join("\n")
}

fn content_parts<'a>(message: &'a Value, parts: &mut Vec<Cow<'a, str>>) {
    match message.get("content") {
        Some(Value::String(s)) => parts.push(Cow::Borrowed(s)),
        Some(Value::Array(items)) => {
            for item in items {
                if let Some(Value::String(t)) = item.get("text") {
                    parts.push(Cow::Borrowed(t));
                }
            }
        }
        _ => {}
    }
}

fn call_parts<'a>(message: &'a Value, parts: &mut Vec<Cow<'a, str>>) {
    let calls = message.get("tool_calls").and_then(Value::as_array);
    let functions = calls
        .into_iter()
        .flatten()
        .filter_map(|call| call.get("function"))
        .chain(message.get("function_call"));
    for function in functions {
        if let Some(Value::String(name)) = function.get("name") {
            parts.push(Cow::Borrowed(name));
        }
        match function.get("arguments") {
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(args @ (Value::Object(_) | Value::Array(_))) => argument_lines(&args, parts),
                _ => parts.push(Cow::Borrowed(s)),
            },
            // Some clients send arguments as an object rather than a string.
            Some(args @ (Value::Object(_) | Value::Array(_))) => argument_lines(args, parts),
            _ => {}
        }
    }
}

/// Tool-call arguments as lines of their own, so a command, path or URL
/// argument reads as it would in a shell or an editor: each string value
/// alone, each number after its key (`port 5433`). Nested values up to a
/// few levels deep.
fn argument_lines(args: &Value, parts: &mut Vec<Cow<'_, str>>) {
    fn walk(key: Option<&str>, value: &Value, depth: usize, parts: &mut Vec<Cow<'_, str>>) {
        match value {
            Value::String(s) => parts.push(Cow::Owned(s.clone())),
            Value::Number(n) => parts.push(Cow::Owned(match key {
                Some(k) => format!("{k} {n}"),
                None => n.to_string(),
            })),
            Value::Object(map) if depth < 4 => {
                for (k, v) in map {
                    walk(Some(k), v, depth + 1, parts);
                }
            }
            Value::Array(items) if depth < 4 => {
                for v in items {
                    walk(key, v, depth + 1, parts);
                }
            }
            _ => {}
        }
    }
    walk(None, args, 0, parts);
}

/// Whether `needle` occurs in `text` as a whole specific, not as the start
/// or end of a longer one: "port 80" is not in "port 8080", "TKT-12" not in
/// "TKT-123", "v1.2" not in "v1.2.3"; "lib.rs" is in "src/lib.rs." (a
/// separator before it, a full stop after it).
pub fn contains_token(text: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let (first, last) = (needle.chars().next(), needle.chars().next_back());
    text.match_indices(needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let mut after = text[at + needle.len()..].chars();
        let next = after.next();
        let joined_before = first.is_some_and(word) && before.is_some_and(word);
        let joined_after = last.is_some_and(word)
            && next.is_some_and(|c| {
                word(c) || (matches!(c, '.' | '-') && after.next().is_some_and(word))
            });
        !joined_before && !joined_after
    })
}

/// Whether `word` carries no meaning of its own ("the", "with", "would"),
/// ignoring ASCII case.
pub fn is_stop_word(word: &str) -> bool {
    words::is_in(words::STOP, word)
}

/// Whether `artifact` counts as an identifier for invention checks: every
/// kind except names and numbers below 10 ("3 retries", "line 7"), which a
/// summary may well phrase on its own.
pub fn is_identifier(artifact: &Artifact) -> bool {
    match artifact.kind {
        Kind::Name => false,
        Kind::Number => !is_small_number(&artifact.value),
        _ => true,
    }
}

/// Whether the first number in `value` is whole and below 10.
fn is_small_number(value: &str) -> bool {
    let Some(at) = value.find(|c: char| c.is_ascii_digit()) else {
        return true;
    };
    let rest = &value[at..];
    let int_end = rest
        .find(|c: char| !c.is_ascii_digit() && c != ',')
        .unwrap_or(rest.len());
    let decimal = rest[int_end..].starts_with('.')
        && rest[int_end + 1..].starts_with(|c: char| c.is_ascii_digit());
    let int: u64 = rest[..int_end]
        .bytes()
        .filter(u8::is_ascii_digit)
        .fold(0, |n, d| {
            n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        });
    int < 10 && !decimal
}

#[cfg(test)]
mod tests;
