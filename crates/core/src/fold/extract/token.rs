//! Classifying one token (no whitespace, surrounding punctuation removed):
//! whether it is a specific by itself, a number or a plain word.

use super::words::{
    ATTACHED_UNITS, JS_FRAMEWORKS, NUMBER_SUFFIXES, TECH_WORDS, TICKET_EXCLUDE, is_in,
};
use super::{Kind, net};

/// Longest value worth keeping; longer tokens are data, not specifics.
pub(super) const MAX_VALUE: usize = 200;

/// A number token: `5433`, `1,200`, `3.21s`, `42%`, `$1,200`, `#4521`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Num {
    /// The integer part, saturating.
    pub int: u64,
    /// Digits in the integer part.
    pub digits: usize,
    pub decimal: bool,
    /// A unit, percent sign or currency is attached.
    pub unit: bool,
    /// Written `#123` (an issue or PR reference).
    pub hash: bool,
    /// Written with thousands separators.
    pub commas: bool,
}

impl Num {
    /// Below 10 and whole: meaningless without a unit or a strong noun.
    pub fn small(&self) -> bool {
        self.int < 10 && !self.decimal
    }

    /// A bare four-digit year.
    pub fn year(&self) -> bool {
        self.digits == 4 && !self.commas && !self.decimal && (1900..=2100).contains(&self.int)
    }
}

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// A specific by itself.
    Art(Kind),
    /// A number, a specific only with a unit or a meaningful word beside it.
    Num(Num),
    /// A word of letters only: a unit, a noun before a number, part of a name.
    Word,
    Other,
}

/// Which ASCII punctuation a token holds, gathered in one pass so the
/// classifiers below only run on tokens that can match them.
#[derive(Default)]
struct Shape {
    digit: bool,
    punct: bool,
    colon: bool,
    dot: bool,
    slash: bool,
    at: bool,
    dash: bool,
    backslash: bool,
}

impl Shape {
    fn of(t: &str) -> Shape {
        let mut s = Shape::default();
        for &c in t.as_bytes() {
            s.digit |= c.is_ascii_digit();
            if c.is_ascii_punctuation() {
                s.punct = true;
                match c {
                    b':' => s.colon = true,
                    b'.' => s.dot = true,
                    b'/' => s.slash = true,
                    b'@' => s.at = true,
                    b'-' => s.dash = true,
                    b'\\' => s.backslash = true,
                    _ => {}
                }
            }
        }
        s
    }
}

/// Classifies a cleaned token.
pub(super) fn classify(t: &str) -> Class {
    if t.is_empty() || t.len() > MAX_VALUE {
        return Class::Other;
    }
    let shape = Shape::of(t);
    // Fast paths for the bulk of any text: plain words and plain numbers.
    if !shape.punct {
        if !shape.digit {
            return letters(t);
        }
        if t.bytes().all(|c| c.is_ascii_digit()) {
            return parse_num(t).map_or(Class::Other, Class::Num);
        }
    }
    if shape.colon && shape.slash && t.contains("://") {
        let whole = net::find_url(t) == Some((0, t.len()));
        return art_if(whole, Kind::Url);
    }
    if shape.dash && is_uuid(t) {
        return Class::Art(Kind::Id);
    }
    if shape.at {
        return net::at_sign(t).map_or(Class::Other, Class::Art);
    }
    if shape.dot && shape.digit && net::is_ipv4_host(t) {
        return Class::Art(Kind::Host);
    }
    if (shape.backslash || shape.colon) && net::is_windows_path(t) {
        return Class::Art(Kind::Path);
    }
    if shape.slash {
        return match slash(t) {
            Class::Other if shape.digit && is_generic_id(t) => Class::Art(Kind::Id),
            class => class,
        };
    }
    if let Some(flag) = t.strip_prefix("--") {
        return art_if(is_flag(flag), Kind::Symbol);
    }
    if shape.colon && t.contains("::") {
        return art_if(is_path_expr(t), Kind::Symbol);
    }
    if shape.dot && shape.digit && is_version(t) {
        return Class::Art(Kind::Version);
    }
    if shape.dot && net::is_file_name(t) {
        return Class::Art(Kind::Path);
    }
    if (shape.dot || shape.colon) && net::is_host(t) {
        return Class::Art(Kind::Host);
    }
    if shape.digit && (is_ticket(t) || is_hex_id(t) || is_upper_code(t)) {
        return Class::Art(Kind::Id);
    }
    if let Some(stem) = t.strip_suffix("()") {
        return art_if(is_ident_chain(stem), Kind::Symbol);
    }
    if let Some(kind) = ident_kind(t) {
        return Class::Art(kind);
    }
    if shape.dot && is_code_chain(t) {
        return Class::Art(Kind::Symbol);
    }
    if shape.dash && is_date(t) {
        return Class::Art(Kind::Number);
    }
    if shape.digit {
        if let Some(num) = parse_num(t).filter(|n| !is_build_number(n)) {
            return Class::Num(num);
        }
        if is_generic_id(t) {
            return Class::Art(Kind::Id);
        }
    }
    if shape.dot && is_dotted_name(t) {
        return Class::Art(Kind::Host);
    }
    Class::Other
}

/// The general rule, for every identifier shape no rule above names: at
/// least four characters of letters, digits and inner separators (`-`, `_`,
/// `.`, `:`, `/`, `#`), mixing letters and digits (`INV-QP20931`,
/// `ZN-7-FF01A`, `s3cr3tpass`) or digits and separators (`10:30`,
/// `1-800-555-0199`). Ordinals (`21st`), clock times with `am`/`pm` and a
/// few technical words (`utf8`, `sha256`) are words, not identifiers.
fn is_generic_id(t: &str) -> bool {
    let b = t.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || b"-_.:/#".contains(c);
    if b.len() < 4
        || !b.iter().all(inner)
        || !b[0].is_ascii_alphanumeric()
        || !b[b.len() - 1].is_ascii_alphanumeric()
    {
        return false;
    }
    let letters = b.iter().filter(|c| c.is_ascii_alphabetic()).count();
    let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return false;
    }
    if letters == 0 {
        return digits < b.len();
    }
    let lower = t.to_ascii_lowercase();
    let tail = lower.trim_start_matches(|c: char| c.is_ascii_digit());
    let number_then_suffix =
        tail.len() < lower.len() && tail.bytes().all(|c| c.is_ascii_alphabetic());
    let ordinal_or_time = number_then_suffix && is_in(NUMBER_SUFFIXES, tail);
    !(ordinal_or_time || is_in(TECH_WORDS, &lower))
}

/// A decimal whose integer part is too long for a quantity written by
/// hand (`20251130.7`): a build number or a timestamp, so an identifier.
fn is_build_number(n: &Num) -> bool {
    n.decimal && !n.commas && !n.unit && n.digits >= 5
}

/// `falcon.corp`, `billing.svc.local`: dotted words, each of two or more
/// letters, digits or hyphens, the last starting with a letter: a host or
/// file name whatever its suffix. Not `e.g`, not `done.Then` (a missing
/// space after a full stop), not `Node.js` (a framework's name).
fn is_dotted_name(t: &str) -> bool {
    let mut parts = t.split('.');
    let Some(first) = parts.next() else {
        return false;
    };
    let last = t.rsplit('.').next().unwrap_or("");
    let word = |p: &str| {
        p.len() >= 2
            && p.starts_with(|c: char| c.is_ascii_alphanumeric())
            && p.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    };
    let sentence_joint = first.bytes().all(|c| c.is_ascii_lowercase())
        && last.starts_with(|c: char| c.is_ascii_uppercase())
        && last[1..].bytes().all(|c| c.is_ascii_lowercase());
    t.contains('.')
        && word(first)
        && parts.all(word)
        && last.starts_with(|c: char| c.is_ascii_alphabetic())
        && !first.bytes().all(|c| c.is_ascii_digit())
        && !sentence_joint
        && !(last == "js" && is_in(JS_FRAMEWORKS, first))
}

/// A token without digits or ASCII punctuation.
fn letters(t: &str) -> Class {
    let b = t.as_bytes();
    if b.len() == 9 && t.eq_ignore_ascii_case("localhost") {
        Class::Art(Kind::Host)
    } else if b[0].is_ascii_uppercase() && net::is_file_name(t) {
        Class::Art(Kind::Path)
    } else if is_camel(b) {
        Class::Art(Kind::Symbol)
    } else if t.chars().all(char::is_alphabetic) {
        Class::Word
    } else {
        Class::Other
    }
}

fn art_if(yes: bool, kind: Kind) -> Class {
    if yes { Class::Art(kind) } else { Class::Other }
}

fn is_uuid(t: &str) -> bool {
    t.len() == 36
        && t.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A token with a `/`: a schemeless URL, a path, or neither (`and/or`).
fn slash(t: &str) -> Class {
    if net::is_schemeless_url(t) {
        return Class::Art(Kind::Url);
    }
    art_if(net::is_path(t), Kind::Path)
}

fn is_flag(f: &str) -> bool {
    f.len() >= 2
        && f.starts_with(|c: char| c.is_ascii_alphabetic())
        && f.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

fn is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// `foo::bar`, `std::collections::HashMap`, `Vec::new()`.
fn is_path_expr(t: &str) -> bool {
    let t = t.strip_suffix("()").unwrap_or(t);
    let t = t.strip_prefix("::").unwrap_or(t);
    t.split("::").all(|s| is_ident(s) || s == "*")
}

/// `fn_name`, `obj.method` — what may stand before `()`.
fn is_ident_chain(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(is_ident)
}

/// `config.max_tokens`, `self.foldState`: a dotted chain with a code-like part.
fn is_code_chain(t: &str) -> bool {
    t.contains('.')
        && is_ident_chain(t)
        && t.split('.').any(|s| is_snake(s) || is_camel(s.as_bytes()))
}

fn is_snake(s: &str) -> bool {
    let inner = s.trim_matches('_');
    !inner.is_empty() && (inner.contains('_') || (s.starts_with("__") && s.len() > 4))
}

fn is_camel(b: &[u8]) -> bool {
    b.iter().any(u8::is_ascii_lowercase)
        && b.windows(2).any(|w| {
            (w[0].is_ascii_lowercase() || w[0].is_ascii_digit()) && w[1].is_ascii_uppercase()
        })
}

/// `ORCHID-7`, `JIRA-4521`, `CVE-2024-1234`.
fn is_ticket(t: &str) -> bool {
    let Some((prefix, rest)) = t.split_once('-') else {
        return false;
    };
    prefix.len() >= 2
        && prefix.starts_with(|c: char| c.is_ascii_uppercase())
        && prefix
            .bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        && prefix.bytes().filter(u8::is_ascii_uppercase).count() >= 2
        && !is_in(TICKET_EXCLUDE, prefix)
        && rest
            .split('-')
            .all(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
}

/// Git SHAs and other hex digests: seven or more hex digits, mixed.
fn is_hex_id(t: &str) -> bool {
    let b = t.as_bytes();
    (7..=128).contains(&b.len())
        && b.iter().all(u8::is_ascii_hexdigit)
        && b.iter().any(u8::is_ascii_digit)
        && (b.iter().any(u8::is_ascii_lowercase) != b.iter().any(u8::is_ascii_uppercase))
}

/// `X9K2P`, `SHA256`: upper-case letters and digits, several of each.
fn is_upper_code(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 5
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        && b.iter().filter(|c| c.is_ascii_uppercase()).count() >= 2
        && b.iter().filter(|c| c.is_ascii_digit()).count() >= 2
}

/// Identifier-shaped tokens: `snake_case`, `ENV_VAR`, `CamelCase`, random ids.
fn ident_kind(t: &str) -> Option<Kind> {
    if !is_ident(t) {
        return None;
    }
    let b = t.as_bytes();
    let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
    let lower = b.iter().any(u8::is_ascii_lowercase);
    if is_snake(t) {
        // `ENV_VAR`s are names even with digits; `snake_case_2` looks generated.
        return Some(if lower && digits > 0 {
            Kind::Id
        } else {
            Kind::Symbol
        });
    }
    if t.contains('_') {
        return None;
    }
    let upper = b.iter().any(u8::is_ascii_uppercase);
    if upper && lower && digits >= 2 && b.len() >= 8 {
        return Some(Kind::Id);
    }
    is_camel(b).then_some(Kind::Symbol)
}

/// `v2.14.1`, `1.2.3`, `1.0.0-beta.2`; two-part numbers need a product word
/// and are handled by the line scanner.
fn is_version(t: &str) -> bool {
    let (core, v) = match t.strip_prefix(['v', 'V']) {
        Some(r) => (r, true),
        None => (t, false),
    };
    let b = core.as_bytes();
    if !b.first().is_some_and(u8::is_ascii_digit) {
        return false;
    }
    let mut i = 0;
    let mut parts = 1;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        if b[i] == b'.' {
            if !b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                return false;
            }
            parts += 1;
        }
        i += 1;
    }
    let rest = &core[i..];
    let rest_ok = rest.is_empty()
        || (rest.len() > 1
            && rest.starts_with(['-', '+'])
            && rest[1..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b".-+".contains(&c)));
    rest_ok && parts >= if v { 2 } else { 3 }
}

/// `2024-03-15`, `2024-03-15T10:00:00Z`.
fn is_date(t: &str) -> bool {
    let b = t.as_bytes();
    let date = b.len() >= 10
        && b[..10].iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        });
    date && (b.len() == 10
        || (b[10] == b'T'
            && b[11..]
                .iter()
                .all(|c| c.is_ascii_digit() || b":.+-Z".contains(c))))
}

/// Parses number tokens; `None` for anything else (`3rd`, `10,7`, `1.2.3`).
pub(super) fn parse_num(t: &str) -> Option<Num> {
    let (hash, s) = t.strip_prefix('#').map_or((false, t), |r| (true, r));
    let (currency, s) = s
        .strip_prefix(['$', '€', '£', '¥'])
        .map_or((false, s), |r| (true, r));
    let b = s.as_bytes();
    let (mut int, mut digits, mut group, mut commas) = (0u64, 0usize, 0usize, false);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c @ b'0'..=b'9' => {
                int = int.saturating_mul(10).saturating_add(u64::from(c - b'0'));
                digits += 1;
                group += 1;
            }
            b',' if digits > 0 => {
                if (commas && group != 3) || (!commas && group > 3) {
                    return None;
                }
                commas = true;
                group = 0;
            }
            _ => break,
        }
        i += 1;
    }
    if digits == 0 || (commas && group != 3) {
        return None;
    }
    let mut decimal = false;
    if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        decimal = true;
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    let rest = &s[i..];
    let suffix = !rest.is_empty();
    if suffix && rest != "%" && ATTACHED_UNITS.binary_search(&rest).is_err() {
        return None;
    }
    if hash && (currency || decimal || suffix || commas) {
        return None;
    }
    Some(Num {
        int,
        digits,
        decimal,
        unit: currency || suffix,
        hash,
        commas,
    })
}
