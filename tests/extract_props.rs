//! Property tests for the extractor's general identifier rule: identifier
//! shapes no specific rule names (random prefixes, separators, lengths and
//! cases, dotted host names with any suffix, bare numbers of three or more
//! digits) come out whole wherever they stand — prose, JSON, logs, code,
//! markdown — while plain words and plain one- or two-digit numbers do not.
//!
//! Seeded for reproducible CI; explore others with
//! `PROPTEST_RNG_SEED=<u64> cargo test --test extract_props`.

use crate::props_support;
use foldgate::fold::extract::{Kind, contains_token, extract};
use proptest::prelude::*;

/// Words of letters and digits that name a standard or an architecture:
/// the extractor treats them as words, so the generator avoids them.
const NOT_IDS: &[&str] = &["utf8", "sha256", "base64", "ipv4", "ipv6", "http2", "amd64"];

/// Letters and digits mixed, in segments joined by one separator each:
/// `INV-QP20931`, `ZN-7-FF01A`, `s3cr3tpass`, `build#12ab`.
fn mixed_id() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        "[A-Za-z]{1,5}[0-9]{1,6}[A-Za-z0-9]{0,4}",
        "[0-9]{1,4}[A-Za-z]{1,4}[0-9]{1,3}",
        "[A-Z]{1,4}",
        "[0-9]{1,5}",
    ];
    let sep = prop::sample::select(&["-", "_", ".", ":", "/", "#", ""][..]);
    (segment.clone(), prop::collection::vec((sep, segment), 0..4))
        .prop_map(|(first, rest)| {
            let mut id = first;
            for (sep, seg) in rest {
                id.push_str(sep);
                id.push_str(&seg);
            }
            id
        })
        .prop_filter("a mix of letters and digits, 4+ chars", |id| {
            id.len() >= 4
                && id.bytes().any(|c| c.is_ascii_digit())
                && id.bytes().any(|c| c.is_ascii_alphabetic())
                && !NOT_IDS.contains(&id.to_ascii_lowercase().as_str())
                && !id.contains("::")
        })
}

/// Digits with inner punctuation: `12-3456`, `10:30:15`, `1-800-555-0199`.
fn punctuated_digits() -> impl Strategy<Value = String> {
    let sep = prop::sample::select(&["-", "_", ":", "/", "#"][..]);
    (
        "[0-9]{1,5}",
        prop::collection::vec((sep, "[0-9]{1,5}"), 1..4),
    )
        .prop_map(|(first, rest)| {
            rest.into_iter().fold(first, |mut id, (sep, digits)| {
                id.push_str(sep);
                id.push_str(&digits);
                id
            })
        })
        .prop_filter("four characters or more", |id| id.len() >= 4)
}

/// Dotted names whatever their suffix: `falcon.corp`, `billing.svc.local9`.
fn dotted_name() -> impl Strategy<Value = String> {
    (
        "[a-z][a-z0-9-]{1,7}[a-z0-9]",
        prop::collection::vec("[a-z][a-z0-9]{1,6}", 1..3),
    )
        .prop_map(|(first, rest)| format!("{first}.{}", rest.join(".")))
        .prop_filter("not a framework's name", |n| !n.ends_with(".js"))
}

/// A number of three or more digits, written alone.
fn bare_number() -> impl Strategy<Value = String> {
    "[1-9][0-9]{2,6}"
}

/// `value` placed in a line of some kind of text.
fn placed(value: String) -> impl Strategy<Value = (String, String)> {
    let filler = prop::sample::select(
        &[
            "the", "we", "then", "checked", "value", "is", "now", "after", "deploy",
        ][..],
    );
    (0usize..8, filler.clone(), filler).prop_map(move |(at, a, b)| {
        let v = &value;
        let text = match at {
            0 => format!("The {a} {b} is {v}."),
            1 => format!("{v} is what {a} {b} said"),
            2 => format!(r#"{{"{a}": "{v}", "{b}": 1}}"#),
            3 => format!("2026-11-24T10:00:01Z INFO {a}: {v} {b}"),
            4 => format!("let {a} = \"{v}\";"),
            5 => format!("- **{v}** ({a} {b})"),
            6 => format!("Use `{v}` for {a}, {b}?"),
            _ => format!("{a} {b}\n{a} ({v}), {b}"),
        };
        (value.clone(), text)
    })
}

/// Whether some artifact of `text` holds `value` whole.
fn found_whole(text: &str, value: &str) -> bool {
    extract(text)
        .iter()
        .any(|a| a.value == value || contains_token(&a.value, value))
}

proptest! {
    #![proptest_config(props_support::config(512, 0x1d5_0f1d))]

    #[test]
    fn mixed_identifiers_come_out_whole((id, text) in mixed_id().prop_flat_map(placed)) {
        prop_assert!(found_whole(&text, &id), "{id:?} not found whole in {text:?}: {:?}", extract(&text));
    }

    #[test]
    fn punctuated_digits_come_out_whole((id, text) in punctuated_digits().prop_flat_map(placed)) {
        prop_assert!(found_whole(&text, &id), "{id:?} not found whole in {text:?}: {:?}", extract(&text));
    }

    #[test]
    fn dotted_names_come_out_whole((name, text) in dotted_name().prop_flat_map(placed)) {
        prop_assert!(found_whole(&text, &name), "{name:?} not found whole in {text:?}: {:?}", extract(&text));
    }

    #[test]
    fn bare_numbers_come_out((n, text) in bare_number().prop_flat_map(placed)) {
        prop_assert!(found_whole(&text, &n), "{n:?} not found in {text:?}: {:?}", extract(&text));
    }

    #[test]
    fn plain_words_and_small_numbers_are_not_specifics(
        words in prop::collection::vec("[a-z]{1,10}|[0-9]{1,2}", 1..20),
    ) {
        let text = format!("Then {}.", words.join(" "));
        for a in extract(&text) {
            prop_assert!(
                a.kind == Kind::Code || !words.contains(&a.value),
                "{:?} came out of {text:?} as {:?}", a.value, a.kind
            );
        }
    }
}
