//! Tokens that name places: URLs, e-mail addresses, hosts and file paths.

use super::Kind;
use super::words::{
    AMBIGUOUS_TLDS, DOTFILES, EXTENSIONS, JS_FRAMEWORKS, SPECIAL_FILES, TLDS, WELL_KNOWN_PORTS,
    is_in,
};

/// The first `scheme://…` URL in `s`, trailing punctuation excluded, as a
/// byte range. Its length is not limited: the caller skips long ones whole.
pub(super) fn find_url(s: &str) -> Option<(usize, usize)> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(rel) = b[from..].iter().position(|&c| c == b':') {
        let at = from + rel;
        if !b[at..].starts_with(b"://") {
            from = at + 1;
            continue;
        }
        let mut start = at;
        while start > 0 && (b[start - 1].is_ascii_alphanumeric() || b"+.-".contains(&b[start - 1]))
        {
            start -= 1;
        }
        while start < at && !b[start].is_ascii_alphabetic() {
            start += 1;
        }
        let mut end = at + 3;
        while end < b.len() && !(b[end].is_ascii_whitespace() || b"\"<>`{}|\\^".contains(&b[end])) {
            end += 1;
        }
        while end > at + 3 {
            let last = b[end - 1];
            let unbalanced = last == b')' && {
                let url = &b[start..end];
                url.iter().filter(|&&c| c == b'(').count()
                    < url.iter().filter(|&&c| c == b')').count()
            };
            if b".,;:!?'\"]}*".contains(&last) || unbalanced {
                end -= 1;
            } else {
                break;
            }
        }
        if at - start >= 2 && end > at + 3 {
            return Some((start, end));
        }
        from = at + 3;
    }
    None
}

/// `dana@example.com`, `git@github.com:org/repo.git`, `deploy@10.0.0.12`.
pub(super) fn at_sign(t: &str) -> Option<Kind> {
    let (local, domain) = t.split_once('@')?;
    let local_ok = !local.is_empty()
        && !local.starts_with('.')
        && local
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._%+-".contains(&c));
    if !local_ok || domain.contains('@') {
        return None;
    }
    if let Some((host, path)) = domain.split_once(':') {
        let known = is_dotted_host(host) || is_ipv4(host) || host.eq_ignore_ascii_case("localhost");
        if known && !path.is_empty() && !path.bytes().all(|c| c.is_ascii_digit()) {
            return Some(Kind::Url);
        }
    }
    if is_email_domain(domain) {
        return Some(Kind::Email);
    }
    (is_ipv4_host(domain) || is_host(domain)).then_some(Kind::Host)
}

fn is_email_domain(d: &str) -> bool {
    let mut labels = 0;
    let mut last = "";
    for label in d.split('.') {
        if !is_label(label) {
            return false;
        }
        labels += 1;
        last = label;
    }
    labels >= 2 && last.len() >= 2 && last.bytes().all(|c| c.is_ascii_alphabetic())
}

fn is_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && !l.starts_with('-')
        && !l.ends_with('-')
        && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

fn is_ipv4(h: &str) -> bool {
    let mut parts = 0;
    for p in h.split('.') {
        let ok = (1..=3).contains(&p.len()) && p.bytes().all(|c| c.is_ascii_digit());
        if !ok || p.parse::<u16>().map_or(true, |n| n > 255) {
            return false;
        }
        parts += 1;
    }
    parts == 4
}

/// IPv4 with an optional `:port` or `/prefix`.
pub(super) fn is_ipv4_host(t: &str) -> bool {
    let (h, rest) = t.find([':', '/']).map_or((t, ""), |i| t.split_at(i));
    is_ipv4(h)
        && (rest.is_empty()
            || rest.strip_prefix(':').is_some_and(|p| port(p).is_some())
            || rest
                .strip_prefix('/')
                .is_some_and(|p| p.parse::<u8>().is_ok_and(|n| n <= 32)))
}

fn port(p: &str) -> Option<u64> {
    let ok = (1..=5).contains(&p.len()) && p.bytes().all(|c| c.is_ascii_digit());
    ok.then(|| p.parse::<u64>().ok())
        .flatten()
        .filter(|&n| n <= 65535)
}

/// `host:port` split when the suffix is a port.
fn split_port(t: &str) -> (&str, Option<u64>) {
    match t.rsplit_once(':') {
        Some((h, p)) => match port(p) {
            Some(n) => (h, Some(n)),
            None => (t, None),
        },
        None => (t, None),
    }
}

fn is_dotted_host(h: &str) -> bool {
    if h.len() > 253 || !h.contains('.') {
        return false;
    }
    let mut labels = 0;
    let mut last = "";
    for label in h.split('.') {
        if !is_label(label) {
            return false;
        }
        labels += 1;
        last = label;
    }
    labels >= 2 && is_in(TLDS, last) && (labels >= 3 || !is_in(AMBIGUOUS_TLDS, last))
}

/// `api.example.com`, `localhost:8080`, `db:5432`, `app.internal:9000`.
pub(super) fn is_host(t: &str) -> bool {
    let (h, port) = split_port(t);
    if h.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if is_dotted_host(h) {
        return true;
    }
    let Some(port) = port else {
        return false;
    };
    // A port rescues a two-label name with an ambiguous last label.
    if h.contains('.') {
        let (rest, last) = h.rsplit_once('.').unwrap_or((h, ""));
        return is_label(rest) && is_in(TLDS, last);
    }
    let single = h.len() >= 2
        && h.starts_with(|c: char| c.is_ascii_lowercase())
        && h.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    single && (port >= 1000 || WELL_KNOWN_PORTS.contains(&port))
}

pub(super) fn is_windows_path(t: &str) -> bool {
    let b = t.as_bytes();
    let drive = b.len() > 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b"\\/".contains(&b[2]);
    let relative = t.starts_with(".\\") || t.starts_with("..\\") || t.starts_with("\\\\");
    (drive || relative) && b[2..].iter().any(u8::is_ascii_alphabetic)
}

/// `src/main.rs:10:5` → `src/main.rs`.
fn strip_line_suffix(t: &str) -> &str {
    let mut core = t;
    for _ in 0..2 {
        match core.rsplit_once(':') {
            Some((head, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => {
                core = head
            }
            _ => break,
        }
    }
    core
}

pub(super) fn is_path(t: &str) -> bool {
    let core = strip_line_suffix(t);
    let mut rest = core;
    let mut rooted = false;
    for prefix in ["~/", "./", "../", "/"] {
        while let Some(r) = rest.strip_prefix(prefix) {
            rest = r;
            rooted = true;
        }
    }
    let chars_ok = rest
        .chars()
        .all(|c| c.is_alphanumeric() || "/._-+@~%*,$".contains(c));
    let letters = rest.bytes().filter(u8::is_ascii_alphabetic).count();
    if !chars_ok || letters == 0 || rest.contains("//") {
        return false;
    }
    if rooted {
        return letters >= 2;
    }
    let trailing = rest.ends_with('/');
    let segments = rest.trim_end_matches('/').split('/').count();
    let last = rest.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    segments >= 3 || has_extension(last) || (trailing && rest.len() > 2)
}

fn has_extension(name: &str) -> bool {
    match name.rsplit_once('.') {
        Some((stem, ext)) => {
            !stem.is_empty()
                && (1..=8).contains(&ext.len())
                && ext.bytes().all(|c| c.is_ascii_alphanumeric())
                && ext.bytes().any(|c| c.is_ascii_alphabetic())
        }
        None => false,
    }
}

/// `Cargo.toml`, `main.py`, `Makefile`, `.env`, `src.rs:42`.
pub(super) fn is_file_name(t: &str) -> bool {
    let core = strip_line_suffix(t);
    if SPECIAL_FILES.binary_search(&core).is_ok() {
        return true;
    }
    if core.starts_with('.') {
        return is_in(DOTFILES, core) || core.starts_with(".env.");
    }
    let Some((stem, ext)) = core.rsplit_once('.') else {
        return false;
    };
    let stem_ok = !stem.is_empty()
        && stem
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"_-.+@".contains(&c))
        && stem.bytes().any(|c| c.is_ascii_alphanumeric());
    stem_ok
        && EXTENSIONS.binary_search(&ext).is_ok()
        && !(ext == "js" && is_in(JS_FRAMEWORKS, stem))
}

/// `github.com/org/repo`: a host, then a path.
pub(super) fn is_schemeless_url(t: &str) -> bool {
    t.split_once('/')
        .is_some_and(|(head, _)| !is_file_name(head) && is_dotted_host(split_port(head).0))
}
