//! Grounding what the summarizer wrote: each fact, goal, decision, open
//! item and completed item is checked as a claim against what the model
//! was shown (the folded messages and the previous summary), or it is
//! dropped, counted by why ([`Drops`]).
//!
//! - **Supported**: every number and every name in it occurs in the source
//!   exactly, and one source sentence holds at least [`SUPPORT`] of its
//!   content words (words of three or more letters that are not stop
//!   words, compared by their Porter stem so `reviewed` matches `review`);
//!   a claim that joins parts with `and`, `but`, `while` or `;` needs
//!   such a sentence for each part.
//!   An item with no content words is judged by its numbers and names
//!   alone. Identifiers (and the words and digits inside them) and a
//!   leading `key: ` label are left out of the words: identifiers are the
//!   invention check's ([`super::check`]), which runs first.
//! - **No swap**: every value the item ties to a subject (the clause the
//!   extractor finds for it: "The metrics port is 5433." → `metrics port`)
//!   occurs in one source sentence with that subject's words; a value said
//!   only of another subject is a swap. The narrative's sentences are
//!   checked for swaps too.
//! - **Confirmed**: a completed item needs its supporting sentence to say
//!   the work was done (a completion verb, and no intent, plan or
//!   negation); a decision, a sentence that decides. Items the previous
//!   summary listed as completed or decided confirm themselves.

use super::check::{seen, split_sentences, without_label};
use crate::fold::Summary;
use crate::fold::extract::{self, Artifact, Kind, contains_token, is_identifier, is_stop_word};
use crate::stem::stem;
use std::collections::HashSet;

/// Share of an item's content words one source sentence must hold.
pub const SUPPORT: f64 = 0.6;

/// Words of a reply that confirms the sentence before it ("Done.", "Yes,
/// it is fixed now."), at most.
const SHORT_REPLY: usize = 5;

/// Words that say work was done (lower-case, sorted). A past participle
/// of the item's own verb counts too ("Migrated …" by "was migrated").
#[rustfmt::skip]
const DONE: &[&str] = &[
    "added", "applied", "built", "changed", "closed", "committed", "complete", "completed",
    "configured", "created", "deleted", "deployed", "disabled", "done", "enabled", "finished",
    "fixed", "implemented", "installed", "landed", "merged", "migrated", "moved", "ok", "passed",
    "passes", "pushed", "ran", "released", "removed", "renamed", "replaced", "resolved",
    "restarted", "rotated", "set", "shipped", "succeeded", "success", "successful",
    "successfully", "updated", "upgraded", "verified", "written", "wrote",
];

/// Words that make a sentence an intent, a plan or a denial rather than a
/// report of finished work (lower-case, sorted).
#[rustfmt::skip]
const NOT_DONE: &[&str] = &[
    "can't", "cannot", "could", "didn't", "failed", "going", "later", "let's", "maybe", "must",
    "need", "needs", "never", "next", "not", "plan", "planned", "please", "shall", "should",
    "todo", "tomorrow", "want", "wants", "will", "won't", "would", "yet",
];

/// Words that make a sentence a decision (lower-case, sorted).
#[rustfmt::skip]
const DECIDE: &[&str] = &[
    "adopt", "adopted", "agree", "agreed", "approve", "approved", "choose", "chose", "chosen",
    "decide", "decided", "decision", "go", "going", "instead", "keep", "let's", "opt", "opted",
    "pick", "picked", "prefer", "settled", "should", "stick", "switch", "use", "will",
];

/// Items dropped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// Not supported by one source sentence (its words), or a number or
    /// name the source lacks.
    pub unsupported: u32,
    /// A value tied to a subject it was never said with.
    pub swaps: u32,
    /// A completed item no sentence says was done, or a decision no
    /// sentence takes.
    pub unconfirmed: u32,
}

impl Drops {
    /// All items dropped.
    pub fn total(&self) -> u32 {
        self.unsupported + self.swaps + self.unconfirmed
    }
}

/// One sentence of the source, with the stems of its content words.
struct Sentence<'a> {
    text: &'a str,
    stems: HashSet<String>,
    /// Its lower-cased words, for the verb lists.
    words: Vec<String>,
}

/// What a claim is checked against.
struct Source<'a> {
    text: &'a str,
    sentences: Vec<Sentence<'a>>,
    /// Items the previous summary listed as completed and as decided.
    done: Vec<Sentence<'a>>,
    decided: Vec<Sentence<'a>>,
}

impl<'a> Source<'a> {
    fn new(text: &'a str, previous: Option<&'a Summary>) -> Self {
        let listed = |items: Option<&'a Vec<String>>| -> Vec<Sentence<'a>> {
            items
                .into_iter()
                .flatten()
                .map(|s| sentence(s.as_str()))
                .collect()
        };
        Self {
            text,
            sentences: source_sentences(text).into_iter().map(sentence).collect(),
            done: listed(previous.map(|p| &p.completed)),
            decided: listed(previous.map(|p| &p.decisions)),
        }
    }
}

fn sentence(text: &str) -> Sentence<'_> {
    Sentence {
        text,
        stems: content_words(text).map(|w| stem(&w)).collect(),
        words: text
            .split(|c: char| !(c.is_alphabetic() || c == '\''))
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect(),
    }
}

/// The source's sentences: its lines, each split after `.` `!` `?`
/// followed by a space; not the transcript's `### role` headings.
fn source_sentences(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| !line.starts_with("### "))
        .flat_map(|line| split_sentences(line).into_iter().map(|(s, _)| s))
        .collect()
}

/// Which check a list's items face beyond support and swaps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Claim {
    Plain,
    Done,
    Decided,
}

/// Drops the facts, goals, decisions, open items and completed items
/// `source` does not support, that swap a value to another subject, or
/// (completed and decisions) that no sentence confirms; and the
/// narrative's sentences that swap a value. `previous` is the summary the
/// model was shown, whose completed and decided items confirm themselves.
pub fn drop_unsupported(summary: &mut Summary, source: &str, previous: Option<&Summary>) -> Drops {
    let source = Source::new(source, previous);
    let mut drops = Drops::default();
    for (items, claim) in [
        (&mut summary.facts, Claim::Plain),
        (&mut summary.goals, Claim::Plain),
        (&mut summary.decisions, Claim::Decided),
        (&mut summary.open_items, Claim::Plain),
        (&mut summary.completed, Claim::Done),
    ] {
        items.retain(|item| match judge(&source, item, claim) {
            Ok(()) => true,
            Err(reason) => {
                *reason.counter(&mut drops) += 1;
                false
            }
        });
    }
    let sentences = split_sentences(&summary.summary);
    let kept: Vec<&str> = sentences
        .iter()
        .filter(|(sentence, _)| swap(&source, sentence).is_none())
        .map(|(_, span)| *span)
        .collect();
    if kept.len() < sentences.len() {
        drops.swaps += (sentences.len() - kept.len()) as u32;
        summary.summary = kept.concat().trim_end().to_string();
    }
    drops
}

/// Why an item is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Unsupported,
    Swap,
    Unconfirmed,
}

impl Reason {
    fn counter(self, drops: &mut Drops) -> &mut u32 {
        match self {
            Reason::Unsupported => &mut drops.unsupported,
            Reason::Swap => &mut drops.swaps,
            Reason::Unconfirmed => &mut drops.unconfirmed,
        }
    }
}

fn judge(source: &Source<'_>, item: &str, claim: Claim) -> Result<(), Reason> {
    let plain = plain(item);
    let numbers = plain
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()));
    if !numbers.into_iter().all(|n| contains_token(source.text, n)) {
        return Err(Reason::Unsupported);
    }
    let names = extract::extract(&plain);
    let names = names.iter().filter(|a| a.kind == Kind::Name);
    if !names
        .into_iter()
        .all(|a| contains_token(source.text, &a.value))
    {
        return Err(Reason::Unsupported);
    }
    // A value moved to another subject is a swap, whatever else holds.
    if let Some(reason) = swap(source, item) {
        return Err(reason);
    }
    // Each part of a merged claim ("X listens on 5433 and Y is 9187") is
    // supported on its own; the claim's words together by one sentence.
    for part in parts(&plain) {
        let words: Vec<String> = content_words(part).map(|w| stem(&w)).collect();
        if !words.is_empty() && !source.sentences.iter().any(|s| holds(s, &words)) {
            return Err(Reason::Unsupported);
        }
    }
    let words: Vec<String> = content_words(&plain).map(|w| stem(&w)).collect();
    let supports = |s: &Sentence<'_>| holds(s, &words);
    let confirmed = match claim {
        Claim::Plain => true,
        Claim::Done => {
            source.done.iter().any(supports)
                || confirmed_by(&source.sentences, &supports, |s| says_done(s, &words))
        }
        Claim::Decided => {
            source.decided.iter().any(supports)
                || confirmed_by(&source.sentences, &supports, decides)
        }
    };
    if confirmed {
        Ok(())
    } else {
        Err(Reason::Unconfirmed)
    }
}

/// The parts of a claim joined by `;`, `and`, `but`, `while`.
fn parts(claim: &str) -> impl Iterator<Item = &str> {
    claim
        .split("; ")
        .flat_map(|p| p.split(" and "))
        .flat_map(|p| p.split(" but "))
        .flat_map(|p| p.split(" while "))
}

/// Whether `s` holds at least [`SUPPORT`] of `stems`.
fn holds(s: &Sentence<'_>, stems: &[String]) -> bool {
    let found = stems.iter().filter(|w| s.stems.contains(*w)).count();
    found as f64 >= SUPPORT * stems.len() as f64
}

/// Whether a sentence that supports the claim says what `says` asks, or
/// a short sentence right after it does ("Can you rotate the keys?" —
/// "Done.").
fn confirmed_by(
    sentences: &[Sentence<'_>],
    supports: &dyn Fn(&Sentence<'_>) -> bool,
    says: impl Fn(&Sentence<'_>) -> bool,
) -> bool {
    sentences.iter().enumerate().any(|(i, s)| {
        supports(s)
            && (says(s)
                || sentences
                    .get(i + 1)
                    .is_some_and(|next| next.words.len() <= SHORT_REPLY && says(next)))
    })
}

/// Whether `s` reports finished work: a completion verb, or a past form of
/// one of the claim's own words, and no intent, plan or denial.
fn says_done(s: &Sentence<'_>, claim_stems: &[String]) -> bool {
    let done = s.words.iter().any(|w| {
        in_list(DONE, w)
            || ((w.ends_with("ed") || w.ends_with("en")) && claim_stems.contains(&stem(w)))
    });
    done && !s
        .words
        .iter()
        .any(|w| in_list(NOT_DONE, w) || w.ends_with("n't"))
}

/// Whether `s` takes a decision.
fn decides(s: &Sentence<'_>) -> bool {
    s.words.iter().any(|w| in_list(DECIDE, w))
}

fn in_list(list: &[&str], word: &str) -> bool {
    list.binary_search(&word).is_ok()
}

/// A value of `item` tied to a subject it was never said with: no source
/// sentence holds the value and most of its subject's words (all of one
/// or two, two of three, three of four).
fn swap(source: &Source<'_>, item: &str) -> Option<Reason> {
    let item = without_label(item);
    for artifact in extract::extract(item) {
        let subject: Vec<String> = subject_words(&artifact).map(|w| stem(&w)).collect();
        if subject.is_empty() || artifact.kind == Kind::Code {
            continue;
        }
        let need = (2 * subject.len()).div_ceil(3);
        let together = source.sentences.iter().any(|s| {
            seen(&artifact, s.text)
                && subject.iter().filter(|w| s.stems.contains(*w)).count() >= need
        });
        // A value that is nowhere in the source is the other checks' to judge.
        if !together && source.sentences.iter().any(|s| seen(&artifact, s.text)) {
            return Some(Reason::Swap);
        }
    }
    parts(item)
        .any(|part| identified_swap(source, part))
        .then_some(Reason::Swap)
}

/// Whether `part` (one clause of an item) ties a value (a number, a
/// version) to an identifier naming a thing (a host, a path, a ticket…)
/// that the source never says together: "the service on node-0 listens on
/// port 5001" when port 5001 was said of node-1. Both must be in the
/// source (one absent is the invention check's); a list of things
/// ("src/a.rs, src/b.rs") or of values ties none to another.
fn identified_swap(source: &Source<'_>, part: &str) -> bool {
    let ids: Vec<Artifact> = extract::extract(part)
        .into_iter()
        .filter(|a| is_identifier(a) && a.kind != Kind::Code)
        .filter(|a| source.sentences.iter().any(|s| seen(a, s.text)))
        .collect();
    let value = |a: &Artifact| matches!(a.kind, Kind::Number | Kind::Version);
    ids.iter().enumerate().any(|(i, a)| {
        ids[i + 1..].iter().any(|b| {
            value(a) != value(b)
                && !source
                    .sentences
                    .iter()
                    .any(|s| seen(a, s.text) && seen(b, s.text))
        })
    })
}

/// The words that say what `artifact` is: its clause's, and for a number
/// the word before its digits (`port` of `port 5433`).
fn subject_words(artifact: &Artifact) -> impl Iterator<Item = String> + '_ {
    let lead = match artifact.kind {
        Kind::Number => artifact
            .value
            .split(|c: char| c.is_ascii_digit())
            .next()
            .unwrap_or_default(),
        _ => "",
    };
    content_words(&artifact.clause).chain(content_words(lead))
}

/// `item` without its label and its identifiers.
fn plain(item: &str) -> String {
    let text = without_label(item);
    let mut out = text.to_owned();
    for artifact in extract::extract(text).iter().filter(|a| is_identifier(a)) {
        out = out.replace(&artifact.value, " ");
    }
    out
}

/// The words of `text` that carry its content, lower-cased.
fn content_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphabetic())
        .filter(|w| w.chars().count() >= 3 && !is_stop_word(w))
        .map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "user: we look at the parser and the tokenizer; Dana Whitfield \
                          reviewed it. The database listens on port 5433 with 3 retries.";

    fn kept(items: &[&str]) -> (Vec<String>, Drops) {
        let mut s = Summary {
            facts: items.iter().map(|i| (*i).to_owned()).collect(),
            ..Default::default()
        };
        let dropped = drop_unsupported(&mut s, SOURCE, None);
        (s.facts, dropped)
    }

    #[test]
    fn word_lists_are_sorted() {
        for list in [DONE, NOT_DONE, DECIDE] {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
    }

    #[test]
    fn supported_items_stay() {
        let items = [
            "the parser and the tokenizer were reviewed",
            "Dana Whitfield reviews the parser",
            "the database listens on port 5433",
            "3 retries",
            "ok",
            "host: db-03.internal.example",
            "listen_port: 5433",
        ];
        assert_eq!(
            kept(&items),
            (items.map(str::to_owned).to_vec(), Drops::default())
        );
    }

    #[test]
    fn unsupported_items_leave() {
        let (facts, dropped) = kept(&[
            "the team migrated everything to the cloud yesterday",
            "Bob Marley reviewed the parser",
            "the database listens on port 5433 with 5 retries",
            "the tokenizer was reviewed",
        ]);
        assert_eq!(facts, ["the tokenizer was reviewed"]);
        assert_eq!(dropped.unsupported, 3);
    }

    #[test]
    fn support_comes_from_one_sentence() {
        let source =
            "The billing service runs on Nomad. We looked at Kubernetes for the search cluster.";
        let mut s = Summary {
            facts: vec![
                "billing runs on Nomad".into(),
                "the billing service moved to Kubernetes".into(),
                "the billing service runs on Nomad and moved to Kubernetes".into(),
                "billing is on Nomad and Kubernetes was looked at for search".into(),
            ],
            ..Default::default()
        };
        let dropped = drop_unsupported(&mut s, source, None);
        assert_eq!(
            s.facts,
            [
                "billing runs on Nomad",
                "billing is on Nomad and Kubernetes was looked at for search"
            ]
        );
        // "moved to Kubernetes" ties Kubernetes to the billing service: a swap.
        assert_eq!((dropped.unsupported, dropped.swaps), (1, 1));
    }

    #[test]
    fn a_value_moved_to_another_subject_is_a_swap() {
        let source = "### user\nPostgres listens on port 5433.\n\
                      ### tool\nThe metrics port is 9187 and the admin user is Ana Ortiz.";
        let mut s = Summary {
            summary: "Postgres is on 5433. The metrics port is 5433.".into(),
            facts: vec![
                "The metrics port is 5433.".into(),
                "metrics port: 9187".into(),
                "The postgres port is 9187".into(),
                "Postgres listens on port 5433 and the metrics port is 9187".into(),
                "The postgres user is Ana Ortiz".into(),
            ],
            ..Default::default()
        };
        let dropped = drop_unsupported(&mut s, source, None);
        assert_eq!(
            s.facts,
            [
                "metrics port: 9187",
                "Postgres listens on port 5433 and the metrics port is 9187"
            ]
        );
        assert_eq!(s.summary, "Postgres is on 5433.");
        assert_eq!(
            dropped,
            Drops {
                swaps: 4,
                ..Drops::default()
            }
        );
    }

    #[test]
    fn a_value_moved_to_another_identified_subject_is_a_swap() {
        let source = "### user\nTicket TKT-100: the service on node-0.cluster.example listens on \
                      port 5000; check src/mod_0/file_0.rs.\n### assistant\nTests pass on v1.0.3; \
                      src/mod_0/file_0.rs is fine.\n### user\nTicket TKT-101: the service on \
                      node-1.cluster.example listens on port 5001; check src/mod_1/file_1.rs.\n\
                      ### assistant\nTests pass on v1.1.3; src/mod_1/file_1.rs is fine.";
        let mut s = Summary {
            facts: vec![
                "the service on node-0.cluster.example listens on port 5001".into(),
                "Tests pass on v1.1.3 for src/mod_0/file_0.rs".into(),
                // Things listed together, each said in its own turn.
                "checked src/mod_0/file_0.rs, src/mod_1/file_1.rs and node-1.cluster.example"
                    .into(),
                "the service on node-1.cluster.example listens on port 5001".into(),
                "Tests pass on v1.0.3 for src/mod_0/file_0.rs".into(),
                // Two true facts merged: each value keeps its subject.
                "node-0.cluster.example listens on port 5000 and tests pass on v1.1.3".into(),
            ],
            ..Default::default()
        };
        let dropped = drop_unsupported(&mut s, source, None);
        assert_eq!(
            s.facts,
            [
                "checked src/mod_0/file_0.rs, src/mod_1/file_1.rs and node-1.cluster.example",
                "the service on node-1.cluster.example listens on port 5001",
                "Tests pass on v1.0.3 for src/mod_0/file_0.rs",
                "node-0.cluster.example listens on port 5000 and tests pass on v1.1.3",
            ]
        );
        assert_eq!(dropped.swaps, 2, "{dropped:?}");
    }

    #[test]
    fn completed_work_needs_a_sentence_that_says_so() {
        let source = "### user\nWe should migrate the billing service to Kubernetes next quarter.\n\
                      ### assistant\nThe parser tests were fixed and pass now.\n\
                      ### user\nCan you rotate the staging keys?\n### assistant\nDone.";
        let previous = Summary {
            completed: vec!["Upgraded the cache to Redis 7".into()],
            ..Default::default()
        };
        let mut s = Summary {
            completed: vec![
                "Migrated the billing service to Kubernetes.".into(),
                "Fixed the parser tests".into(),
                "Rotated the staging keys".into(),
                "Upgraded the cache to Redis 7".into(),
            ],
            decisions: vec![
                "Move billing to Kubernetes".into(),
                "The parser tests pass".into(),
            ],
            ..Default::default()
        };
        let source = format!(
            "{source}\n{}",
            serde_json::to_string_pretty(&previous).unwrap_or_default()
        );
        let dropped = drop_unsupported(&mut s, &source, Some(&previous));
        assert_eq!(
            s.completed,
            [
                "Fixed the parser tests",
                "Rotated the staging keys",
                "Upgraded the cache to Redis 7"
            ]
        );
        assert_eq!(s.decisions, ["Move billing to Kubernetes"]);
        assert_eq!(dropped.unconfirmed, 2, "{dropped:?}");
    }
}
