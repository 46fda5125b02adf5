//! Checking what the summarizer wrote against what it was shown: an item
//! that carries an identifier found neither in the folded messages nor in
//! the previous summary is an invention, and is dropped.

use crate::fold::Summary;
use crate::fold::extract::{self, Artifact, Kind, contains_token};

/// Drops every list item, and every sentence of the narrative, that names
/// an identifier `source` does not contain. Returns how many were dropped.
pub fn drop_inventions(summary: &mut Summary, source: &str) -> u32 {
    let mut dropped = 0u32;
    let invented = |text: &str| {
        extract::extract(without_label(text))
            .iter()
            .filter(|a| extract::is_identifier(a))
            .any(|a| !seen(a, source))
    };
    let lists = [
        &mut summary.facts,
        &mut summary.goals,
        &mut summary.decisions,
        &mut summary.completed,
        &mut summary.open_items,
        &mut summary.artifacts,
    ];
    for items in lists {
        let before = items.len();
        items.retain(|item| !invented(item));
        dropped += (before - items.len()) as u32;
    }
    let sentences = split_sentences(&summary.summary);
    let kept: Vec<&str> = sentences
        .iter()
        .filter(|(sentence, _)| !invented(sentence))
        .map(|(_, span)| *span)
        .collect();
    if kept.len() < sentences.len() {
        dropped += (sentences.len() - kept.len()) as u32;
        // The kept sentences keep their own separators: joined with spaces,
        // lines merged into new "word number" identifiers (found by fuzzing).
        summary.summary = kept.concat().trim_end().to_string();
    }
    dropped
}

/// An item without its leading `key: ` label, when it has one made of
/// letters and underscores: an object flattened to `key: value` items (or a
/// model writing `database_host: …` on its own) names a field, not a
/// specific it saw.
pub(super) fn without_label(item: &str) -> &str {
    match item.split_once(": ") {
        Some((label, rest))
            if !label.is_empty() && label.chars().all(|c| c.is_alphabetic() || c == '_') =>
        {
            rest
        }
        _ => item,
    }
}

/// Whether the identifier occurs in the source (a whole source, or one
/// sentence of it). A number with its unit or the word before it counts
/// when its digits occur (the summary may phrase the unit differently).
pub(super) fn seen(artifact: &Artifact, source: &str) -> bool {
    if contains_token(source, &artifact.value) {
        return true;
    }
    artifact.kind == Kind::Number
        && artifact
            .value
            .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
            .filter(|t| t.chars().any(|c| c.is_ascii_digit()))
            .all(|digits| contains_token(source, digits.trim_matches(['.', ','])))
}

/// The narrative's sentences, each with its closing punctuation, beside
/// its span: the sentence and the whitespace up to the next one.
pub(super) fn split_sentences(text: &str) -> Vec<(&str, &str)> {
    let mut sentences = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let ends = matches!(b, b'.' | b'!' | b'?' | b'\n')
            && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace());
        if ends {
            sentences.extend(trimmed(text, start, i + 1));
            start = i + 1;
        }
    }
    sentences.extend(trimmed(text, start, text.len()));
    let starts: Vec<usize> = sentences.iter().map(|&(at, _)| at).collect();
    sentences
        .iter()
        .enumerate()
        .map(|(k, &(at, sentence))| {
            let end = starts.get(k + 1).copied().unwrap_or(text.len());
            (sentence, &text[at..end])
        })
        .collect()
}

/// `text[from..to]` trimmed, with the offset where it starts; `None` when
/// only whitespace is left.
fn trimmed(text: &str, from: usize, to: usize) -> Option<(usize, &str)> {
    let slice = &text[from..to];
    let sentence = slice.trim();
    (!sentence.is_empty()).then(|| (from + (slice.len() - slice.trim_start().len()), sentence))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invented_identifiers_are_dropped() {
        let source =
            "The project is ORCHID-7; PostgreSQL 15.4 runs on db-03.internal.example port 5433.";
        let mut s = Summary {
            summary:
                "Project ORCHID-7 is moving. It was started on 2024-03-15. The database stays."
                    .into(),
            facts: vec![
                "project ORPHIC-7".into(),
                "database PostgreSQL 15.4 on db-03.internal.example".into(),
                "listens on port 5433".into(),
                "owner is friendly".into(),
            ],
            ..Default::default()
        };
        let dropped = drop_inventions(&mut s, source);
        assert_eq!(dropped, 2, "{s:?}");
        assert_eq!(
            s.facts,
            vec![
                "database PostgreSQL 15.4 on db-03.internal.example",
                "listens on port 5433",
                "owner is friendly"
            ]
        );
        assert_eq!(s.summary, "Project ORCHID-7 is moving. The database stays.");
    }

    #[test]
    fn sentences_split_on_terminal_punctuation_only() {
        let sentences = split_sentences("Use v1.2.3 now. Then stop!\nDone");
        assert_eq!(
            sentences.iter().map(|s| s.0).collect::<Vec<_>>(),
            vec!["Use v1.2.3 now.", "Then stop!", "Done"]
        );
        assert_eq!(
            sentences.iter().map(|s| s.1).collect::<Vec<_>>(),
            vec!["Use v1.2.3 now. ", "Then stop!\n", "Done"]
        );
    }

    #[test]
    fn dropping_sentences_keeps_the_others_line_breaks() {
        // Found by fuzzing: kept lines were joined with spaces, so `sed` and
        // `0` on their own lines became `sed 0`, an identifier a second
        // check then dropped.
        let mut s = Summary {
            summary: "e buildNon tr op5s\n\n\nsed\n\n0\n\nz\n_____\n".into(),
            ..Default::default()
        };
        let dropped = drop_inventions(&mut s, "");
        assert_eq!(dropped, 1, "{s:?}");
        assert_eq!(s.summary, "sed\n\n0\n\nz\n_____");
        assert_eq!(
            drop_inventions(&mut s.clone(), ""),
            0,
            "a second check drops nothing"
        );
    }
}
