//! Grounding what the summarizer wrote: each fact, goal, decision and open
//! item must be supported by what the model was shown (the folded messages
//! and the previous summary), or it is dropped as unsupported.
//!
//! An item is supported when every number and every name in it occurs in
//! the source exactly, and at least half of its content words (words of
//! three or more letters that are not stop words) occur there too, compared
//! by a short stem so `reviewed` matches `review`. An item with no content
//! words is judged by its numbers and names alone. Identifiers (and the
//! words and digits inside them) and a leading `key: ` label are left out:
//! identifiers are the invention check's ([`super::check`]), which runs
//! first.

use super::check::without_label;
use crate::fold::Summary;
use crate::fold::extract::{self, Kind, contains_token, is_identifier, is_stop_word};
use std::collections::HashSet;

/// Share of an item's content words the source must hold.
const SUPPORT: f64 = 0.5;

/// Letters of a word compared, after a plural `s`.
const STEM_CHARS: usize = 5;

/// Drops the facts, goals, decisions and open items `source` does not
/// support. Returns how many were dropped.
pub fn drop_unsupported(summary: &mut Summary, source: &str) -> u32 {
    let stems: HashSet<String> = content_words(source).map(|w| stem(&w)).collect();
    let supported = |item: &String| supports(source, &stems, item);
    let mut dropped = 0u32;
    for items in [
        &mut summary.facts,
        &mut summary.goals,
        &mut summary.decisions,
        &mut summary.open_items,
    ] {
        let before = items.len();
        items.retain(supported);
        dropped += (before - items.len()) as u32;
    }
    dropped
}

fn supports(source: &str, stems: &HashSet<String>, item: &str) -> bool {
    let item = &plain(item);
    let numbers = item
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()));
    if !numbers.into_iter().all(|n| contains_token(source, n)) {
        return false;
    }
    let names = extract::extract(item);
    let names = names.iter().filter(|a| a.kind == Kind::Name);
    if !names.into_iter().all(|a| contains_token(source, &a.value)) {
        return false;
    }
    let words: Vec<String> = content_words(item).collect();
    let found = words.iter().filter(|w| stems.contains(&stem(w))).count();
    words.is_empty() || found as f64 >= SUPPORT * words.len() as f64
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

/// A word's first letters, after a plural `s`.
fn stem(word: &str) -> String {
    let word = word.strip_suffix('s').unwrap_or(word);
    word.chars().take(STEM_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "user: we look at the parser and the tokenizer; Dana Whitfield \
                          reviewed it. The database listens on port 5433 with 3 retries.";

    fn kept(items: &[&str]) -> (Vec<String>, u32) {
        let mut s = Summary {
            facts: items.iter().map(|i| (*i).to_owned()).collect(),
            ..Default::default()
        };
        let dropped = drop_unsupported(&mut s, SOURCE);
        (s.facts, dropped)
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
        assert_eq!(kept(&items), (items.map(str::to_owned).to_vec(), 0));
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
        assert_eq!(dropped, 3);
    }

    #[test]
    fn every_list_but_the_narrative_completed_and_artifacts_is_checked() {
        let invented = || vec!["the cluster was rebuilt overnight".to_owned()];
        let mut s = Summary {
            summary: "The cluster was rebuilt overnight.".into(),
            facts: invented(),
            goals: invented(),
            decisions: invented(),
            completed: invented(),
            open_items: invented(),
            artifacts: invented(),
        };
        assert_eq!(drop_unsupported(&mut s, SOURCE), 4);
        assert_eq!(s.completed.len() + s.artifacts.len(), 2);
        assert!(!s.summary.is_empty());
    }
}
