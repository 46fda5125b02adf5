//! The tokens of Rust source that name things: identifiers, `::` and
//! punctuation, with comments, literals' contents and lifetimes skipped
//! (a doc example's or a string's `crate::…` is not an import); and where
//! a group, an item or an attribute ends.

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
    /// A number, string or character literal: never part of a path.
    Lit,
}

/// The tokens of Rust source, without comments, literals' contents and
/// lifetimes.
pub fn lex(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_start = |ch: char| ch.is_alphabetic() || ch == '_';
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    // The end of a string starting at `i` (at the opening `"` or at the
    // first `#` of a raw string), with `raw` saying whether escapes count.
    let string_end = |mut i: usize, raw: bool| -> usize {
        let mut hashes = 0;
        while c.get(i) == Some(&'#') {
            hashes += 1;
            i += 1;
        }
        i += 1; // the opening quote
        while i < c.len() {
            if !raw && c[i] == '\\' {
                i += 2;
                continue;
            }
            if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
                return i + 1 + hashes;
            }
            i += 1;
        }
        i
    };
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i = string_end(i, false);
            out.push(Tok::Lit);
        } else if ch == '\'' {
            if c.get(i + 1) == Some(&'\\') {
                // An escaped character: up to the closing quote.
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push(Tok::Lit);
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push(Tok::Lit);
            } else {
                // A lifetime or label.
                i += 1;
                while i < c.len() && ident_char(c[i]) {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            out.push(Tok::Lit);
        } else if ident_start(ch) {
            let start = i;
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let next = c.get(i).copied();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            let plain_prefix = matches!(word.as_str(), "b" | "c");
            if raw_prefix && next == Some('#') && c.get(i + 1).is_some_and(|&n| ident_start(n)) {
                // A raw identifier, `r#type`.
                let start = i + 1;
                i = start;
                while i < c.len() && ident_char(c[i]) {
                    i += 1;
                }
                out.push(Tok::Ident(c[start..i].iter().collect()));
            } else if raw_prefix && matches!(next, Some('"') | Some('#')) {
                i = string_end(i, true);
                out.push(Tok::Lit);
            } else if plain_prefix && next == Some('"') {
                i = string_end(i, false);
                out.push(Tok::Lit);
            } else if word == "b" && next == Some('\'') {
                i += 1;
                if c.get(i + 1) == Some(&'\\') {
                    i += 2;
                }
                while i + 1 < c.len() && c[i + 1] != '\'' {
                    i += 1;
                }
                i += 2;
                out.push(Tok::Lit);
            } else {
                out.push(Tok::Ident(word));
            }
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Tok::Sep);
            i += 2;
        } else if ch == '$' && c.get(i + 1).is_some_and(|&n| ident_start(n)) {
            // `$crate` is the crate; other metavariables name nothing here.
            let start = i;
            i += 1;
            while i < c.len() && ident_char(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            out.push(Tok::Ident(if word == "$crate" {
                "crate".into()
            } else {
                word
            }));
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

pub fn is(tok: Option<&Tok>, word: &str) -> bool {
    matches!(tok, Some(Tok::Ident(w)) if w == word)
}

pub fn punct(tok: Option<&Tok>, ch: char) -> bool {
    tok == Some(&Tok::Punct(ch))
}

/// The index after the group opened at `i` (`(`, `[` or `{`).
pub fn group_end(toks: &[Tok], i: usize) -> usize {
    let mut depth = 0usize;
    let mut j = i;
    while j < toks.len() {
        match toks[j] {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    toks.len()
}

/// The index after the item or statement starting at `i` (after its
/// attributes): at its `;`, or at the `}` that closes its body.
pub fn item_end(toks: &[Tok], i: usize) -> usize {
    let mut k = i;
    if is(toks.get(k), "pub") {
        k += 1;
        if punct(toks.get(k), '(') {
            k = group_end(toks, k);
        }
    }
    while ["unsafe", "async", "extern", "default", "auto"]
        .iter()
        .any(|w| is(toks.get(k), w))
        || (is(toks.get(k), "const")
            && ["fn", "unsafe", "async", "extern"]
                .iter()
                .any(|w| is(toks.get(k + 1), w)))
    {
        k += 1;
    }
    let semicolon_only = ["use", "const", "static", "type", "let"]
        .iter()
        .any(|w| is(toks.get(k), w));
    let mut j = i;
    while j < toks.len() {
        match toks[j] {
            Tok::Punct(';') => return j + 1,
            Tok::Punct('{') if !semicolon_only => return group_end(toks, j),
            Tok::Punct('(' | '[' | '{') => j = group_end(toks, j),
            Tok::Punct('}') => return j,
            _ => j += 1,
        }
    }
    toks.len()
}

/// Whether the attribute group `toks` (from `#` to `]`) is `cfg(test)`.
pub fn is_cfg_test(toks: &[Tok]) -> bool {
    let inner: Vec<&Tok> = toks
        .iter()
        .filter(|t| !matches!(t, Tok::Punct('#' | '!' | '[' | ']')))
        .collect();
    inner
        == [
            &Tok::Ident("cfg".into()),
            &Tok::Punct('('),
            &Tok::Ident("test".into()),
            &Tok::Punct(')'),
        ]
}
