//! Scanning one line: command lines, inline code, URLs, then tokens, with
//! the rules that need a token's neighbours (numbers, versions, names).

use super::Kind;
use super::net::find_url;
use super::token::{Class, MAX_VALUE, Num, classify};
use super::words::{
    COMMANDS, NOT_NAME, NOT_PRODUCT, PRODUCTS, PROSE_AFTER_COMMAND, SPECIAL_FILES, STARTERS, STOP,
    STRONG_NOUNS, UNIT_WORDS, is_in,
};

/// A specific found in the text, as a byte range of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

/// What surrounds a line.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Mode {
    /// Inside a fenced code block: no names.
    pub fenced: bool,
    /// Inside a unified diff: no names.
    pub diff: bool,
    /// A `diff --git`/`---`/`+++` line: only its paths count.
    pub diff_header: bool,
}

/// A cleaned token of the line, as a byte range of the line.
#[derive(Debug, Clone, Copy)]
struct Tok {
    start: usize,
    end: usize,
    class: Class,
}

/// Token storage reused from line to line.
#[derive(Debug, Default)]
pub(super) struct Scratch(Vec<Tok>);

/// Appends the specifics of `line` (which starts at byte `base` of the text).
pub(super) fn scan(
    line: &str,
    base: usize,
    mode: Mode,
    scratch: &mut Scratch,
    out: &mut Vec<Span>,
) {
    let mut push = |kind, start: usize, end: usize| {
        out.push(Span {
            kind,
            start: base + start,
            end: base + end,
        })
    };
    if !mode.diff_header {
        if let Some((start, end)) = command(line) {
            // The whole command is the specific; its parts add nothing.
            push(Kind::Code, start, end);
            return;
        }
    }
    let toks = &mut scratch.0;
    toks.clear();
    let mut from = 0;
    for (outer, inner) in inline_code(line) {
        tokens(line, from, outer.0, toks, &mut push);
        code_span(line, inner, &mut push);
        from = outer.1;
    }
    tokens(line, from, line.len(), toks, &mut push);
    for i in 0..toks.len() {
        let t = toks[i];
        match t.class {
            Class::Art(Kind::Path) if mode.diff_header => {
                let text = &line[t.start..t.end];
                let strip = (text.starts_with("a/") || text.starts_with("b/")) && text.len() > 2;
                push(Kind::Path, t.start + if strip { 2 } else { 0 }, t.end);
            }
            _ if mode.diff_header => {}
            Class::Art(Kind::Version) => {
                let (start, end) = match product_before(line, toks, i) {
                    Some(p) => quoted(line, gap(line, toks, i), p, t.end),
                    None => (t.start, t.end),
                };
                push(Kind::Version, start, end);
            }
            Class::Art(kind) => push(kind, t.start, t.end),
            Class::Num(num) => {
                if let Some((kind, start, end)) = number(line, toks, i, num) {
                    push(kind, start, end);
                } else if num.digits >= 3 && !mode.diff {
                    // A bare number ("The admin port is 7311."): kept with
                    // the line around it as its context.
                    push(Kind::Number, t.start, t.end);
                }
            }
            Class::Word | Class::Other => {}
        }
    }
    if !mode.fenced && !mode.diff && !mode.diff_header && is_prose(line) {
        names(line, toks, &mut push);
    }
}

/// A shell command line: `$ cmd …`, `# cmd …`, `user@host:~$ cmd …`, or a
/// line starting with a well-known command and its arguments.
fn command(line: &str) -> Option<(usize, usize)> {
    let lead = line.len() - line.trim_start().len();
    let t = line.trim();
    let prompt_end = if t.starts_with("$ ") || t.starts_with("# ") {
        Some(2)
    } else {
        t.find('$')
            .filter(|&i| {
                let p = &t[..i];
                t.as_bytes().get(i + 1) == Some(&b' ')
                    && !p.is_empty()
                    && !p.contains(char::is_whitespace)
                    && p.contains(['@', ':'])
            })
            .map(|i| i + 2)
    };
    let (offset, cmd) = match prompt_end {
        Some(p) => {
            let rest = &t[p..];
            (p + rest.len() - rest.trim_start().len(), rest.trim_start())
        }
        None => (0, t),
    };
    if cmd.is_empty() || cmd.len() > MAX_VALUE {
        return None;
    }
    let mut words = cmd.split_whitespace();
    let first = words.next()?;
    let second = words.next();
    let known = COMMANDS.binary_search(&first).is_ok() && second.is_some();
    let ok = match prompt_end {
        // Root's `#` prompt looks like a markdown heading: demand a command.
        Some(_) if t.starts_with('#') => known,
        Some(_) => first.starts_with(|c: char| c.is_ascii_alphabetic() || "./~".contains(c)),
        None => {
            let prose_end = cmd.ends_with(['.', '?', '!', ':'])
                && cmd[..cmd.len() - 1].ends_with(|c: char| c.is_alphanumeric());
            known && !second.is_some_and(|w| is_in(PROSE_AFTER_COMMAND, w)) && !prose_end
        }
    };
    ok.then_some((lead + offset, lead + t.len()))
}

/// Inline code spans as (outer, inner) byte ranges: the backticks included,
/// and the content.
fn inline_code(line: &str) -> Vec<((usize, usize), (usize, usize))> {
    let b = line.as_bytes();
    let mut spans = Vec::new();
    // Run lengths known to have no closing run further on: keeps the scan linear.
    let mut unmatched = [false; 17];
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let open = i;
        while i < b.len() && b[i] == b'`' {
            i += 1;
        }
        let n = i - open;
        if n >= unmatched.len() || unmatched[n] {
            continue;
        }
        let mut j = i;
        let mut close = None;
        while j < b.len() {
            if b[j] == b'`' {
                let s = j;
                while j < b.len() && b[j] == b'`' {
                    j += 1;
                }
                if j - s == n {
                    close = Some(s);
                    break;
                }
            } else {
                j += 1;
            }
        }
        match close {
            Some(c) => {
                spans.push(((open, c + n), (i, c)));
                i = c + n;
            }
            None => unmatched[n] = true,
        }
    }
    spans
}

/// The specific of an inline code span: what its content is as a token,
/// or the content itself as code.
fn code_span(line: &str, (s, e): (usize, usize), push: &mut impl FnMut(Kind, usize, usize)) {
    let raw = &line[s..e];
    let content = raw.trim();
    if content.is_empty() || content.len() > MAX_VALUE {
        return;
    }
    let start = s + raw.len() - raw.trim_start().len();
    let end = start + content.len();
    if !content.contains(char::is_whitespace) {
        if let Some((cs, ce)) = clean(line, start, end) {
            if let Class::Art(kind) = classify(&line[cs..ce]) {
                push(kind, cs, ce);
                return;
            }
        }
    }
    if content.chars().count() >= 2 {
        push(Kind::Code, start, end);
    }
}

/// Splits `line[from..to]` into tokens, pushing the URLs found on the way.
fn tokens(
    line: &str,
    from: usize,
    to: usize,
    toks: &mut Vec<Tok>,
    push: &mut impl FnMut(Kind, usize, usize),
) {
    let mut chunk_start = None;
    for (i, c) in line[from..to]
        .char_indices()
        .map(|(i, c)| (from + i, c))
        .chain([(to, ' ')])
    {
        match (c.is_whitespace(), chunk_start) {
            (false, None) => chunk_start = Some(i),
            (true, Some(s)) => {
                chunk(line, s, i, toks, push);
                chunk_start = None;
            }
            _ => {}
        }
    }
}

/// One whitespace-free chunk: URLs first (they hold delimiters), then the
/// pieces between delimiters.
fn chunk(
    line: &str,
    mut s: usize,
    e: usize,
    toks: &mut Vec<Tok>,
    push: &mut impl FnMut(Kind, usize, usize),
) {
    if let Some(tok) = plain_word(line, s, e) {
        toks.push(tok);
        return;
    }
    while let Some((us, ue)) = line.as_bytes()[s..e]
        .contains(&b':')
        .then(|| find_url(&line[s..e]))
        .flatten()
    {
        pieces(line, s, s + us, toks);
        if ue - us <= MAX_VALUE {
            push(Kind::Url, s + us, s + ue);
        }
        s += ue;
    }
    pieces(line, s, e, toks);
}

/// The bulk of prose: a lower-case ASCII word, maybe capitalised, maybe
/// followed by sentence punctuation — a plain word without further checks.
fn plain_word(line: &str, s: usize, e: usize) -> Option<Tok> {
    let b = &line.as_bytes()[s..e];
    let first = *b.first()?;
    let rest = b.get(1..)?;
    let letters = 1 + rest.iter().take_while(|c| c.is_ascii_lowercase()).count();
    let plain = (first.is_ascii_lowercase() || (first.is_ascii_uppercase() && letters > 1))
        && b[letters..].iter().all(|c| b".,;:!?".contains(c))
        && b[..letters] != *b"localhost"
        && !(first.is_ascii_uppercase()
            && SPECIAL_FILES.binary_search(&&line[s..s + letters]).is_ok());
    plain.then_some(Tok {
        start: s,
        end: s + letters,
        class: Class::Word,
    })
}

fn pieces(line: &str, s: usize, e: usize, toks: &mut Vec<Tok>) {
    let b = line.as_bytes();
    // JSON escapes split tokens, except in Windows paths where `\n` is `\new`.
    let windows = || line[s..e].contains(":\\") || line[s..e].starts_with(".\\");
    let mut start = s;
    let mut i = s;
    while i < e {
        let c = b[i];
        let width = match c {
            b'"' | b'\'' | b';' | b'[' | b']' | b'{' | b'}' | b'<' | b'>' | b'|' | b'=' | b'`'
            | b'&' => 1,
            b',' if !(i > s
                && b[i - 1].is_ascii_digit()
                && i + 1 < e
                && b[i + 1].is_ascii_digit()) =>
            {
                1
            }
            b'(' if !(i + 1 < e && b[i + 1] == b')') => 1,
            b')' if !(i > s && b[i - 1] == b'(') => 1,
            b'\\' if i + 1 < e && b"ntr\"\\'/".contains(&b[i + 1]) && !windows() => 2,
            // `3f2a1b9..8c4d5e6`, `main...feature`: two ends of a range.
            b'.' if i > s && b[i - 1].is_ascii_alphanumeric() => {
                let dots = b[i..e].iter().take_while(|&&c| c == b'.').count();
                let next = b.get(i + dots).filter(|_| i + dots < e);
                if (2..=3).contains(&dots) && next.is_some_and(u8::is_ascii_alphanumeric) {
                    dots
                } else {
                    0
                }
            }
            _ => 0,
        };
        if width == 0 {
            i += 1;
            continue;
        }
        token(line, start, i, toks);
        i += width;
        start = i;
    }
    token(line, start, e, toks);
}

fn token(line: &str, s: usize, e: usize, toks: &mut Vec<Tok>) {
    if let Some((start, end)) = clean(line, s, e) {
        let class = classify(&line[start..end]);
        toks.push(Tok { start, end, class });
    }
}

/// Trims the punctuation around a token; `None` when nothing is left.
fn clean(line: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let raw = &line[s..e];
    let b = raw.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'/';
    if b.first().is_some_and(edge) && b.last().is_some_and(edge) {
        return Some((s, e));
    }
    let mut t = raw.trim_start_matches([
        '*', '!', '?', ',', ':', ';', '(', ')', '“', '‘', '«', '¿', '¡', '•',
    ]);
    // A diff's `+line`/`-line` marker, but not `--flag`, `+10` or `-5`.
    for sign in ['+', '-'] {
        if let Some(r) = t.strip_prefix(sign) {
            if !r.starts_with([sign, '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']) {
                t = r;
            }
        }
    }
    let start = s + raw.len() - t.len();
    let t = t.trim_end_matches(['.', ',', ';', ':', '!', '?', '*', '(', '”', '’', '»', '…']);
    let t = if t.ends_with(')') && !t.ends_with("()") {
        &t[..t.len() - 1]
    } else {
        t
    };
    (!t.is_empty()).then_some((start, start + t.len()))
}

/// The bytes between token `i - 1` and token `i`.
fn gap<'a>(line: &'a str, toks: &[Tok], i: usize) -> &'a str {
    if i == 0 {
        &line[..toks[0].start]
    } else {
        &line[toks[i - 1].end..toks[i].start]
    }
}

/// A separator between a key and its value: ` `, `: `, `=`, `": `, `": "`.
fn key_gap(g: &str) -> bool {
    !g.is_empty()
        && g.len() <= 4
        && g.chars().all(|c| " :=\"'".contains(c))
        && g.chars().filter(|&c| c == ':' || c == '=').count() <= 1
}

/// Widens `start..end` over quotes that the key-value gap opens, so a value
/// such as `"port": 5433` stays balanced.
fn quoted(line: &str, g: &str, start: usize, end: usize) -> (usize, usize) {
    let b = line.as_bytes();
    match g.chars().find(|&c| c == '"' || c == '\'') {
        Some(q) => {
            let q = q as u8;
            let start = if start > 0 && b[start - 1] == q {
                start - 1
            } else {
                start
            };
            let end = if g.ends_with(q as char) && b.get(end) == Some(&q) {
                end + 1
            } else {
                end
            };
            (start, end)
        }
        None => (start, end),
    }
}

/// The start of the product word before a version ("PostgreSQL 15.4"), if any.
fn product_before(line: &str, toks: &[Tok], i: usize) -> Option<usize> {
    let prev = toks.get(i.checked_sub(1)?)?;
    let word = &line[prev.start..prev.end];
    let g = gap(line, toks, i);
    let capitalised = matches!(prev.class, Class::Word | Class::Art(Kind::Symbol))
        && word.starts_with(char::is_uppercase)
        && word.chars().all(char::is_alphanumeric)
        && !is_in(NOT_PRODUCT, word)
        && !is_in(STARTERS, word)
        && !is_in(STOP, word);
    if g == " " && capitalised {
        return Some(prev.start);
    }
    (prev.class == Class::Word && is_in(PRODUCTS, word) && key_gap(g)).then_some(prev.start)
}

/// A number with what gives it meaning: its unit ("30s", "512 MB"), a
/// product (a two-part version) or the noun before it ("port 5433").
fn number(line: &str, toks: &[Tok], i: usize, num: Num) -> Option<(Kind, usize, usize)> {
    let t = toks[i];
    let text = &line[t.start..t.end];
    if num.decimal && !num.unit && !num.commas && text.bytes().filter(|&c| c == b'.').count() == 1 {
        if let Some(p) = product_before(line, toks, i) {
            let (start, end) = quoted(line, gap(line, toks, i), p, t.end);
            return Some((Kind::Version, start, end));
        }
    }
    if num.unit {
        return Some((Kind::Number, t.start, t.end));
    }
    if let Some(next) = toks.get(i + 1) {
        let unit = is_in(UNIT_WORDS, &line[next.start..next.end]);
        if unit && gap(line, toks, i + 1) == " " {
            return Some((Kind::Number, t.start, next.end));
        }
    }
    let noun = i.checked_sub(1).map(|p| toks[p]).filter(|p| {
        let word = &line[p.start..p.end];
        p.class == Class::Word
            && word.chars().count() >= 2
            && !is_in(STOP, word)
            && key_gap(gap(line, toks, i))
    });
    match noun {
        Some(p) => {
            let word = &line[p.start..p.end];
            let meaningful = (!num.small() && !num.year()) || num.hash || is_in(STRONG_NOUNS, word);
            let (start, end) = quoted(line, gap(line, toks, i), p.start, t.end);
            meaningful.then_some((Kind::Number, start, end))
        }
        None => (num.hash && num.int >= 10).then_some((Kind::Number, t.start, t.end)),
    }
}

/// Whether a line reads as prose, where capitalised words may be names.
fn is_prose(line: &str) -> bool {
    let b = line.as_bytes();
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    let code = (0..b.len()).any(|i| match b[i] {
        b'{' | b'}' => true,
        b'-' | b'=' if at(i + 1) == b'>' => true,
        b':' => at(i + 1) == b':',
        b'=' => at(i + 1) == b'=',
        b' ' => at(i + 1) == b'=' && at(i + 2) == b' ',
        b'"' => at(i + 1) == b':',
        b'&' => at(i + 1) == b'&',
        b'|' => at(i + 1) == b'|',
        b'(' => at(i + 1) == b')' && at(i + 2) == b';',
        _ => false,
    });
    !code && !line.trim_start().starts_with(['#', '{', '[', '"'])
}

fn capitalised(line: &str, t: &Tok) -> bool {
    let mut chars = line[t.start..t.end].chars();
    t.class == Class::Word
        && !line.as_bytes()[t.start].is_ascii_lowercase()
        && chars.next().is_some_and(char::is_uppercase)
        && chars.clone().next().is_some()
        && chars.all(char::is_lowercase)
}

/// Runs of two or three capitalised words ("Dana Whitfield"), and single
/// capitalised words that do not start a sentence.
fn names(line: &str, toks: &[Tok], push: &mut impl FnMut(Kind, usize, usize)) {
    let mut j = 0;
    while j < toks.len() {
        if !capitalised(line, &toks[j]) {
            j += 1;
            continue;
        }
        let mut k = j + 1;
        while k < toks.len() && capitalised(line, &toks[k]) && gap(line, toks, k) == " " {
            k += 1;
        }
        let word = |i: usize| &line[toks[i].start..toks[i].end];
        let mut s = j;
        while s < k && is_in(STARTERS, word(s)) {
            s += 1;
        }
        let run = &toks[s..k];
        let plain = (s..k).all(|i| !is_in(NOT_NAME, word(i)) && !is_in(STARTERS, word(i)));
        let sentence_start = s == j && (j == 0 || gap(line, toks, j).contains(BREAKS));
        match run.len() {
            2 | 3 if plain => push(Kind::Name, run[0].start, run[run.len() - 1].end),
            1 if plain && !sentence_start => push(Kind::Name, run[0].start, run[0].end),
            _ => {}
        }
        j = k;
    }
}

/// Characters after which a capitalised word starts a sentence or a quote.
const BREAKS: &[char] = &[
    '.', '!', '?', ':', ';', '"', '\'', '“', '”', '‘', '’', '(', '[', '{', '>', '*', '•', '—', '–',
    '-', '#', '|', '`',
];
