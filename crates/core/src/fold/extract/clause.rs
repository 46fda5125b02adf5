//! The clause that says what a specific is: the few subject words next to
//! it ("The metrics port is 9187." → `metrics port`; "deploy to
//! falcon.corp, the build host" → `build host`), so a ledger line never
//! reads as a bare identifier while its meaning fits.
//!
//! Tried in order, the first that finds words wins:
//! 1. a subject linked to the value: `<subject> is|are|was|were [now|still|
//!    currently|set to] <value>`, or `<subject>: <value>`, `<subject>=<value>`;
//! 2. a subject tied to the value through a verb and its preposition:
//!    `<subject> [on <x>] [was|is|has been…] <verb> <prep> <value>` ("the
//!    service on node-3 listens on port 5003" → `service`; "runs on", "was
//!    moved to", "is owned by");
//! 3. a noun phrase right before the value, after a determiner:
//!    `the build host falcon.corp`, `our metrics 9187`;
//! 4. after the value: `<value> (<phrase>)`, `<value>, <det> <phrase>`,
//!    `<value> is <det> <phrase>` (`Ana Ortiz is the release manager`).
//!
//! A phrase is at most [`MAX_WORDS`] words of letters (`-`, `_` inside),
//! none a stop word or a sentence starter; one `of`/`for` may join two
//! parts before a value (`timeout for outbound calls`). Its head noun
//! ([`head`]) is its last word, or the last word before `of`/`for`.

use super::Kind;
use super::words::{STARTERS, STOP, is_in};

/// Words of a clause, at most (joining `of`/`for` not counted).
pub const MAX_WORDS: usize = 4;

/// Verbs that link a subject to its value.
const COPULAS: &[&str] = &["are", "becomes", "is", "remains", "was", "were"];

/// Words between the copula and the value that change nothing of the subject.
const LINK_FILLERS: &[&str] = &["currently", "now", "set", "still", "to"];

/// Words that open a noun phrase (sorted).
const DETERMINERS: &[&str] = &[
    "a", "an", "her", "his", "its", "my", "our", "that", "the", "their", "these", "this", "those",
    "your",
];

/// Prepositions that may join two parts of a subject before its value.
const JOINS: &[&str] = &["for", "of"];

/// Prepositions between a verb and its value (sorted).
const PREPOSITIONS: &[&str] = &[
    "as", "at", "behind", "by", "for", "from", "in", "inside", "into", "on", "onto", "over",
    "through", "to", "toward", "towards", "under", "via", "with", "within",
];

/// Auxiliaries and adverbs between a subject and its verb (sorted).
const AUXILIARIES: &[&str] = &[
    "already",
    "also",
    "always",
    "are",
    "be",
    "been",
    "being",
    "currently",
    "gets",
    "got",
    "had",
    "has",
    "have",
    "is",
    "now",
    "still",
    "was",
    "were",
];

/// Verbs in their base form that take a value through a preposition
/// (`the workers listen on 5003`); other verbs are known by their ending.
const BASE_VERBS: &[&str] = &[
    "belong", "bind", "connect", "depend", "forward", "go", "hang", "listen", "live", "map",
    "move", "point", "redirect", "report", "resolve", "route", "run", "send", "serve", "sit",
    "talk", "went", "write",
];

/// Irregular past forms of such verbs.
const IRREGULAR: &[&str] = &[
    "bound", "built", "gone", "kept", "put", "ran", "sat", "sent", "set",
];

/// The clause of `line[start..end]`, a specific of `kind`; empty when none
/// is found. Commands describe themselves and get none.
pub(super) fn clause(line: &str, start: usize, end: usize, kind: Kind) -> String {
    if kind == Kind::Code {
        return String::new();
    }
    let (before, after) = (&line[..start], &line[end..]);
    let words = linked_before(before)
        .or_else(|| verb_before(before))
        .or_else(|| determined_before(before))
        .or_else(|| after_value(after))
        .unwrap_or_default();
    words.join(" ")
}

/// The head noun of a clause: its last word, or the last one before a
/// joining `of`/`for` ("timeout for outbound calls" → "timeout").
pub fn head(clause: &str) -> &str {
    let mut last = "";
    for word in clause.split(' ') {
        if is_in(JOINS, word) && !last.is_empty() {
            return last;
        }
        last = word;
    }
    last
}

/// `<subject> is <value>`, `<subject>: <value>`, `<subject>=<value>`.
fn linked_before(before: &str) -> Option<Vec<&str>> {
    let mut s = before.trim_end_matches([' ', '`', '"', '\'']);
    let mut linked = false;
    while let Some((rest, word)) = last_word(s) {
        if is_in(COPULAS, word) {
            s = rest;
            linked = true;
            break;
        }
        if !is_in(LINK_FILLERS, word) {
            break;
        }
        s = rest;
    }
    if !linked {
        let t = s.trim_end();
        let t = t.strip_suffix([':', '='])?;
        s = t.trim_end_matches(['`', '"', '\'']);
    }
    let (words, _) = phrase_back(s, true);
    (!words.is_empty()).then_some(words)
}

/// `<subject> [<prep> <x>] [<aux>…] <verb> <prep>… <value>`: the subject
/// of the verb whose preposition takes the value ("the service on node-3
/// listens on port 5003" → `service`). At least one preposition: a verb
/// without one ("We deploy falcon.corp") gives no clause.
fn verb_before(before: &str) -> Option<Vec<&str>> {
    if !before.ends_with(' ') {
        return None;
    }
    let mut s = before;
    let mut preps = 0;
    while let Some((rest, word)) = last_word(s) {
        if preps == 2 || !is_in(PREPOSITIONS, word) {
            break;
        }
        preps += 1;
        s = rest;
    }
    if preps == 0 {
        return None;
    }
    let (rest, verb) = last_word(s)?;
    if !is_verb(verb) {
        return None;
    }
    s = rest;
    while let Some((rest, _)) = last_word(s).filter(|(_, w)| is_in(AUXILIARIES, w)) {
        s = rest;
    }
    // A subject placed at an identifier ("the service on
    // node-0.cluster.example") is the words before it, not its last label.
    let trimmed = s.trim_end_matches(' ');
    let token = &trimmed[trimmed.rfind(' ').map_or(0, |i| i + 1)..];
    let identifier = token
        .trim_end_matches(['.', ','])
        .chars()
        .any(|c| !is_word_char(c));
    if !identifier {
        let (words, _) = phrase_back(s, true);
        if !words.is_empty() {
            return Some(words);
        }
    }
    // The subject's own place: "the service on node-3", "the job in ci-7".
    let rest = match identifier {
        true => &trimmed[..trimmed.len() - token.len()],
        false => last_word(s.trim_end_matches(['.', ',']))?.0,
    };
    let (rest, prep) = last_word(rest)?;
    if !is_in(PREPOSITIONS, prep) {
        return None;
    }
    let (words, _) = phrase_back(rest, true);
    (!words.is_empty()).then_some(words)
}

/// Whether `word` reads as a verb that takes a preposition: a known base
/// or irregular form, or an ending (`listens`, `moved`, `running`, `owned`).
fn is_verb(word: &str) -> bool {
    if !word.chars().all(|c| c.is_ascii_alphabetic()) || word.len() < 2 {
        return false;
    }
    let lower = word.to_ascii_lowercase();
    if is_in(STOP, &lower) || is_in(DETERMINERS, &lower) {
        return false;
    }
    is_in(BASE_VERBS, &lower)
        || is_in(IRREGULAR, &lower)
        || lower.ends_with("ed")
        || lower.ends_with("ing")
        || (lower.ends_with('s') && !lower.ends_with("ss") && lower.len() > 3)
}

/// `<det> <phrase> <value>`: a noun phrase opened by a determiner.
fn determined_before(before: &str) -> Option<Vec<&str>> {
    if !before.ends_with(' ') {
        return None;
    }
    let (words, rest) = phrase_back(before, false);
    let (_, det) = last_word(rest)?;
    (!words.is_empty() && is_in(DETERMINERS, det)).then_some(words)
}

/// `<value> (<phrase>)`, `<value>, <det> <phrase>`, `<value> is <det> <phrase>`.
fn after_value(after: &str) -> Option<Vec<&str>> {
    if let Some(inner) = after.strip_prefix(" (") {
        let rest = skip_determiner(inner);
        let (words, tail) = phrase_forward(rest);
        return (!words.is_empty() && tail.starts_with(')')).then_some(words);
    }
    let rest = match after.strip_prefix(", ") {
        Some(rest) => rest,
        None => {
            let (copula, rest) = first_word(after.strip_prefix(' ')?)?;
            if !is_in(COPULAS, copula) {
                return None;
            }
            rest.trim_start()
        }
    };
    let (det, rest) = first_word(rest)?;
    if !is_in(DETERMINERS, det) {
        return None;
    }
    let (words, _) = phrase_forward(rest.trim_start());
    (!words.is_empty()).then_some(words)
}

/// A word that may be part of a clause.
fn clause_word(word: &str) -> bool {
    word.chars().count() >= 2
        && word.starts_with(|c: char| c.is_alphabetic())
        && word
            .chars()
            .all(|c| c.is_alphabetic() || c == '-' || c == '_')
        && !is_in(STOP, word)
        && !is_in(STARTERS, word)
        && !is_in(COPULAS, word)
}

/// The phrase ending `s` (words in text order) and the text before it.
/// With `join`, one `of`/`for` between clause words is taken in.
fn phrase_back(s: &str, join: bool) -> (Vec<&str>, &str) {
    let mut words: Vec<&str> = Vec::new();
    let mut s = s;
    let mut joined = !join;
    while words.iter().filter(|&&w| !is_in(JOINS, w)).count() < MAX_WORDS {
        let Some((rest, word)) = last_word(s) else {
            break;
        };
        if clause_word(word) {
            words.push(word);
            s = rest;
            continue;
        }
        let next = last_word(rest).filter(|(_, w)| clause_word(w));
        if !joined && !words.is_empty() && is_in(JOINS, word) && next.is_some() {
            joined = true;
            words.push(word);
            s = rest;
            continue;
        }
        break;
    }
    words.reverse();
    (words, s)
}

/// The phrase starting `s` and the text after it; it ends before a word in
/// `-ing`/`-ed` once it has one ("the build host running CI" → `build host`).
fn phrase_forward(s: &str) -> (Vec<&str>, &str) {
    let mut words = Vec::new();
    let mut s = s;
    while words.len() < MAX_WORDS {
        let Some((word, rest)) = first_word(s) else {
            break;
        };
        let verb_like = word.ends_with("ing") || word.ends_with("ed");
        if !clause_word(word) || (verb_like && !words.is_empty()) {
            break;
        }
        words.push(word);
        s = rest;
        if !s.starts_with(' ') || !s[1..].starts_with(|c: char| c.is_alphabetic()) {
            break;
        }
        s = &s[1..];
    }
    (words, s)
}

/// `rest` without a leading determiner and its space.
fn skip_determiner(rest: &str) -> &str {
    match first_word(rest) {
        Some((det, tail)) if is_in(DETERMINERS, det) => tail.trim_start(),
        _ => rest,
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '-' || c == '_'
}

/// The word ending `s` (after spaces) and the text before it; none when
/// `s` ends with anything else.
fn last_word(s: &str) -> Option<(&str, &str)> {
    let t = s.trim_end_matches(' ');
    let at = t
        .char_indices()
        .rev()
        .take_while(|&(_, c)| is_word_char(c))
        .last()?
        .0;
    Some((&t[..at], &t[at..]))
}

/// The word starting `s` and the text after it.
fn first_word(s: &str) -> Option<(&str, &str)> {
    let end = s.find(|c: char| !is_word_char(c)).unwrap_or(s.len());
    (end > 0).then(|| (&s[..end], &s[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(line: &str, value: &str) -> String {
        let start = line.find(value).unwrap_or(0);
        clause(line, start, start + value.len(), Kind::Host)
    }

    #[test]
    fn subject_words_next_to_the_value() {
        assert_eq!(of("The metrics port is 9187.", "9187"), "metrics port");
        assert_eq!(
            of("Our new build host is now falcon.corp", "falcon.corp"),
            "new build host"
        );
        assert_eq!(
            of("The metrics port is set to 9187.", "9187"),
            "metrics port"
        );
        assert_eq!(of("Build host: falcon.corp", "falcon.corp"), "Build host");
        assert_eq!(of("metrics_port=9187", "9187"), "metrics_port");
        assert_eq!(
            of("then the build host falcon.corp failed", "falcon.corp"),
            "build host"
        );
        assert_eq!(
            of("deploy to falcon.corp, the build host", "falcon.corp"),
            "build host"
        );
        assert_eq!(
            of("use falcon.corp (staging) now", "falcon.corp"),
            "staging"
        );
        assert_eq!(
            of("Ana Ortiz is the release manager.", "Ana Ortiz"),
            "release manager"
        );
        assert_eq!(
            of("The timeout for outbound calls is 2 seconds.", "2 seconds"),
            "timeout for outbound calls"
        );
    }

    #[test]
    fn the_subject_of_a_verb_and_its_preposition() {
        assert_eq!(
            of("the service on node-3 listens on port 5003", "port 5003"),
            "service"
        );
        // Placed at a dotted host: the subject, not the host's last label.
        assert_eq!(
            of(
                "the service on node-0.cluster.example listens on port 5001",
                "port 5001"
            ),
            "service"
        );
        assert_eq!(
            of("The billing worker runs on falcon.corp.", "falcon.corp"),
            "billing worker"
        );
        assert_eq!(
            of(
                "The backup directory was moved to /srv/backup",
                "/srv/backup"
            ),
            "backup directory"
        );
        assert_eq!(
            of("The metrics server is owned by Ana Ortiz.", "Ana Ortiz"),
            "metrics server"
        );
        assert_eq!(
            of(
                "our cache has already been moved over to cache-2.internal",
                "cache-2.internal"
            ),
            "cache"
        );
        assert_eq!(of("the workers listen on 5003", "5003"), "workers");
        for verb in ["moved", "deployed", "running", "points", "sat", "went"] {
            assert!(is_verb(verb), "{verb}");
        }
        for word in ["the", "host", "of", "class", "v1"] {
            assert!(!is_verb(word), "{word}");
        }
    }

    #[test]
    fn word_lists_are_sorted() {
        for list in [
            PREPOSITIONS,
            AUXILIARIES,
            BASE_VERBS,
            IRREGULAR,
            DETERMINERS,
        ] {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
    }

    #[test]
    fn no_clause_from_verbs_pronouns_or_lists() {
        assert_eq!(of("We moved to falcon.corp", "falcon.corp"), "");
        assert_eq!(of("It runs on falcon.corp", "falcon.corp"), "");
        assert_eq!(of("deploy to falcon.corp", "falcon.corp"), "");
        assert_eq!(of("It is 9187.", "9187"), "");
        assert_eq!(of("We deploy falcon.corp today", "falcon.corp"), "");
        assert_eq!(of("Check falcon.corp first", "falcon.corp"), "");
        assert_eq!(of("ports 80, and 443", "443"), "");
        assert_eq!(of("falcon.corp, then restart", "falcon.corp"), "");
        assert_eq!(of("falcon.corp is down", "falcon.corp"), "");
        let cmd = "cargo test --lib";
        assert_eq!(clause(cmd, 0, cmd.len(), Kind::Code), "");
    }

    #[test]
    fn the_head_noun_is_the_last_word_before_a_join() {
        assert_eq!(head("new metrics port"), "port");
        assert_eq!(head("timeout for outbound calls"), "timeout");
        assert_eq!(head("staging"), "staging");
        assert_eq!(head(""), "");
    }
}
