//! Property test for the meaning a ledger item keeps: sentences shaped
//! "<subject phrase> is <identifier>." or tied through another verb and its
//! preposition ("<subject phrase> [on node-N] listens on|runs on|was moved
//! to|is owned by… <identifier>.") (subjects of one to four words from a
//! vocabulary, with or without a determiner and an adjective; identifiers of
//! every kind: ports, hosts, versions, paths, ids, names), said by a user or
//! a tool among filler, folded under a tight ledger budget. Every ledger
//! line that keeps one of those identifiers names it by its subject's head
//! noun (the last noun of the phrase) before its value — never a bare
//! identifier — however little room is left.
//!
//! Seeded for reproducible CI; explore others with
//! `PROPTEST_RNG_SEED=<u64> scripts/test -E 'test(/^clause_props::/)'`.

use crate::props_support;
use foldgate::fold::extract::{contains_token, extract, message_text};
use foldgate::fold::ledger::Ledger;
use proptest::prelude::*;
use serde_json::{Value, json};

const DETERMINERS: &[&str] = &["", "the", "our", "The", "Our", "this"];
const ADJECTIVES: &[&str] = &["", "new", "main", "old", "internal", "primary"];
const MODIFIERS: &[&str] = &[
    "metrics", "build", "release", "staging", "database", "cache", "admin", "backup", "billing",
];
const HEADS: &[&str] = &[
    "port",
    "host",
    "version",
    "path",
    "id",
    "manager",
    "owner",
    "server",
    "endpoint",
    "ticket",
    "directory",
    "lead",
];
/// How a sentence ties its subject to its value: the copula, or a verb
/// with its preposition.
const VERBS: &[&str] = &[
    "is",
    "listens on",
    "runs on",
    "was moved to",
    "is owned by",
    "points to",
    "now lives at",
    "has been moved to",
    "is served from",
    "depends on",
    "was renamed to",
    "sits behind",
];
const FIRST: &[&str] = &["Ana", "Dana", "Marek", "Priya", "Tomas", "Keiko"];
const LAST: &[&str] = &["Ortiz", "Whitfield", "Novak", "Raman", "Lindqvist", "Sato"];
const FILLER: &[&str] = &[
    "We looked at the logs again and nothing stood out.",
    "Then we restarted it and waited for a while.",
    "it seems fine now, but keep an eye on it",
    "ok, thanks",
    "Let me know if anything changes later today.",
];

fn count(s: &str) -> u32 {
    (s.len() as u32).div_ceil(4)
}

/// A subject phrase and its head noun: [determiner] [adjective]
/// [modifiers…] head, one to four words besides the determiner.
fn subject() -> impl Strategy<Value = (String, &'static str)> {
    (
        prop::sample::select(DETERMINERS),
        prop::sample::select(ADJECTIVES),
        prop::collection::vec(prop::sample::select(MODIFIERS), 0..3),
        prop::sample::select(HEADS),
    )
        .prop_map(|(det, adj, modifiers, head)| {
            let words: Vec<&str> = [det, adj]
                .into_iter()
                .chain(modifiers)
                .chain([head])
                .filter(|w| !w.is_empty())
                .collect();
            let mut phrase = words.join(" ");
            // A sentence starts with a capital.
            if let Some(first) = phrase.get(..1) {
                phrase.replace_range(..1, &first.to_uppercase());
            }
            (phrase, head)
        })
}

/// An identifier of one of six kinds, made unique by `i`.
fn identifier(kind: u8, i: usize, n: u32) -> String {
    let w = MODIFIERS[n as usize % MODIFIERS.len()];
    match kind {
        0 => (1024 + 1000 * i as u32 + n % 1000).to_string(),
        1 => format!("{w}-{i}.internal.example"),
        2 => format!("v{i}.{}.{}", n % 20, n % 7),
        3 => format!("/srv/{w}/conf{i}.toml"),
        4 => format!("TKT-{i}{:03}", n % 1000),
        _ => format!(
            "{} {}",
            FIRST[i % FIRST.len()],
            LAST[n as usize % LAST.len()]
        ),
    }
}

/// Planted sentences (value, head noun) and the messages that carry them.
fn conversation() -> impl Strategy<Value = (Vec<(String, &'static str)>, Vec<Value>)> {
    let planted = (
        subject(),
        0u8..6,
        any::<u32>(),
        any::<bool>(),
        0..FILLER.len(),
        (prop::sample::select(VERBS), any::<bool>()),
    );
    prop::collection::vec(planted, 1..9).prop_map(|parts| {
        let mut facts = Vec::new();
        let mut messages = Vec::new();
        for (i, ((phrase, head), kind, n, tool, filler, (verb, placed))) in
            parts.into_iter().enumerate()
        {
            // Names repeat across `i`; each value is planted once.
            let value = identifier(kind, i, n);
            if facts.iter().any(|(v, _)| *v == value) {
                continue;
            }
            // A verb other than the copula may follow the subject's place.
            let place = if placed && verb != "is" {
                format!(" on node-{i}")
            } else {
                String::new()
            };
            let text = format!("{} {phrase}{place} {verb} {value}.", FILLER[filler]);
            messages.push(if tool {
                json!({"role": "tool", "tool_call_id": "call_1", "content": text})
            } else {
                json!({"role": "user", "content": text})
            });
            facts.push((value, head));
        }
        (facts, messages)
    })
}

proptest! {
    #![proptest_config(props_support::config(256, 0xc1a5_e0f1))]

    #[test]
    fn every_kept_identifier_keeps_its_head_noun(
        (facts, folded) in conversation(),
        budget in 30u32..140,
    ) {
        // The planted values are what the extractor finds, so no case is vacuous.
        for (message, (value, _)) in folded.iter().zip(&facts) {
            let found = extract(&message_text(message));
            prop_assert!(found.iter().any(|a| a.value == *value), "{value:?} not extracted: {found:?}");
        }
        let refs: Vec<&Value> = folded.iter().collect();
        let update = Ledger::after_fold(&Ledger::default(), None, &refs, "", budget, &count);
        let rendered = update.ledger.render();
        prop_assert!(count(&rendered) <= budget, "{} > {budget}:\n{rendered}", count(&rendered));
        prop_assert!(!update.ledger.is_empty(), "nothing kept in {budget}");
        for (value, head) in &facts {
            let line = rendered.lines().skip(1).find(|l| contains_token(l, value));
            let Some(line) = line else {
                continue;
            };
            // The clause part of the line, before the value.
            let named = line.split(value.as_str()).next().unwrap_or_default();
            prop_assert!(
                contains_token(&named.to_lowercase(), head),
                "{value:?} without its head noun {head:?} (budget {budget}):\n{rendered}"
            );
        }
    }
}
