//! Which ledger items carry the most information: templates that differ
//! only by a number collapse into one line (`Step 1–20`, a file with its
//! line numbers), and eviction takes the least informative items first —
//! by kind (a counter or a bare number, then what only tool-call arguments
//! named, before a quantity or a name, before an id, a path or a URL) and,
//! within a kind, the oldest first.

use super::LedgerItem;
use crate::fold::extract::{Kind, extract};
use std::collections::HashMap;

/// How much an item is worth keeping; lower tiers are evicted first.
/// 0: counters, bare numbers, numbers only the assistant wrote;
/// 1: anything else only tool-call arguments named (what was asked, not
///    what was observed);
/// 2: quantities (`512 MB`, `3 retries`) without a clause, names, code
///    symbols;
/// 3: ids, paths, URLs, hosts, e-mails, versions, commands, and numbers
///    named by the word before them (`port 5433`) or by their clause
///    (`9187` of "The metrics port is 9187.").
pub(super) fn tier(item: &LedgerItem) -> u8 {
    let named = item.value.starts_with(|c: char| c.is_alphabetic()) || !item.clause.is_empty();
    let observed = match kind_of(item) {
        Some(Kind::Number) if item.assistant || !item.numbers.is_empty() => return 0,
        Some(Kind::Number) if named => 3,
        Some(Kind::Number) if is_bare_number(&item.value) => return 0,
        Some(Kind::Number | Kind::Name | Kind::Symbol) | None => 2,
        Some(_) => 3,
    };
    if item.argument { 1 } else { observed }
}

/// The item's kind: stored, or for items stored before kinds were, what
/// the extractor makes of the value alone.
pub(super) fn kind_of(item: &LedgerItem) -> Option<Kind> {
    item.kind.or_else(|| {
        extract(&item.value)
            .into_iter()
            .find(|a| a.value == item.value)
            .map(|a| a.kind)
    })
}

/// A number written alone, without unit, sign or the word before it.
pub(crate) fn is_bare_number(value: &str) -> bool {
    value.bytes().any(|c| c.is_ascii_digit())
        && value
            .bytes()
            .all(|c| c.is_ascii_digit() || c == b'.' || c == b',')
}

/// Largest number a counter template collapses; larger ones (ports,
/// amounts) are facts of their own.
const COUNTER_MAX: u64 = 999;

/// A value split around its number slot: what collapses with what.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Template {
    kind: Option<Kind>,
    prefix: String,
    suffix: String,
}

/// The item's template and numbers, when it is a counter (`Step 19`,
/// `26 messages`) or a path with a line number (`src/a.rs:120`): the last
/// run of digits is the slot (for a collapsed item, its rendered numbers).
fn template(item: &LedgerItem) -> Option<(Template, Vec<u64>)> {
    let kind = kind_of(item);
    let value = &item.value;
    let (start, end, numbers) = if item.numbers.is_empty() {
        let end = value.rfind(|c: char| c.is_ascii_digit())? + 1;
        let start = value[..end]
            .rfind(|c: char| !c.is_ascii_digit())
            .map_or(0, |i| i + 1);
        let n: u64 = value[start..end].parse().ok()?;
        (start, end, vec![n])
    } else {
        let slot = render_numbers(&item.numbers);
        let start = value.rfind(&slot)?;
        (start, start + slot.len(), item.numbers.clone())
    };
    let (prefix, suffix) = (&value[..start], &value[end..]);
    let eligible = match kind {
        Some(Kind::Number) => {
            numbers.iter().all(|&n| n <= COUNTER_MAX)
                && !prefix.ends_with(['.', ',', '-'])
                && !suffix.starts_with(['.', ','])
                && prefix.len() + suffix.len() > 0
        }
        Some(Kind::Path) => prefix.ends_with(':') && suffix.is_empty(),
        _ => false,
    };
    eligible.then(|| {
        let t = Template {
            kind,
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        };
        (t, numbers)
    })
}

/// `1–3, 7, 12–13`: ascending, runs of consecutive numbers as ranges.
fn render_numbers(numbers: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < numbers.len() {
        let mut j = i;
        while j + 1 < numbers.len() && numbers[j + 1] == numbers[j] + 1 {
            j += 1;
        }
        parts.push(match j - i {
            0 => numbers[i].to_string(),
            1 => format!("{}, {}", numbers[i], numbers[j]),
            _ => format!("{}–{}", numbers[i], numbers[j]),
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// Merges the items (newest first) that share a template into one, at the
/// place of the newest, with every number once: `Step 19`, `Step 20` and a
/// kept `Step 1–18` become `Step 1–20`. The merged item keeps the newest
/// member's context and clause, and is the assistant's only when every member was.
pub(super) fn collapse(items: Vec<LedgerItem>) -> Vec<LedgerItem> {
    let templates: Vec<Option<(Template, Vec<u64>)>> = items.iter().map(template).collect();
    let mut members: HashMap<&Template, Vec<usize>> = HashMap::new();
    for (i, t) in templates.iter().enumerate() {
        if let Some((t, _)) = t {
            members.entry(t).or_default().push(i);
        }
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let group = templates[i]
            .as_ref()
            .and_then(|(t, _)| members.get(t))
            .filter(|g| g.len() > 1);
        let Some(group) = group else {
            out.push(item.clone());
            continue;
        };
        if group[0] != i {
            continue;
        }
        let mut numbers: Vec<u64> = group
            .iter()
            .filter_map(|&m| templates[m].as_ref())
            .flat_map(|(_, n)| n.iter().copied())
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        let Some((t, _)) = &templates[i] else {
            continue;
        };
        out.push(LedgerItem {
            value: format!("{}{}{}", t.prefix, render_numbers(&numbers), t.suffix),
            context: item.context.clone(),
            clause: item.clause.clone(),
            brief: false,
            shrunk: false,
            kind: t.kind,
            assistant: group.iter().all(|&m| items[m].assistant),
            argument: group.iter().all(|&m| items[m].argument),
            numbers,
            done: false,
        });
    }
    out
}

/// The order in which `items` (newest first) leave the ledger: lowest tier
/// first, and within a tier the oldest first.
pub(super) fn eviction_order(items: &[LedgerItem]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| (tier(&items[i]), std::cmp::Reverse(i)));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(value: &str, kind: Kind) -> LedgerItem {
        LedgerItem {
            value: value.to_owned(),
            context: format!("ctx of {value}"),
            clause: String::new(),
            brief: false,
            shrunk: false,
            kind: Some(kind),
            assistant: false,
            argument: false,
            numbers: Vec::new(),
            done: false,
        }
    }

    fn values(items: &[LedgerItem]) -> Vec<&str> {
        items.iter().map(|i| i.value.as_str()).collect()
    }

    #[test]
    fn counters_collapse_into_ranges_at_the_newest_place() {
        let items = vec![
            item("Step 20", Kind::Number),
            item("JIRA-4", Kind::Id),
            item("Step 19", Kind::Number),
            item("Step 7", Kind::Number),
            item("26 messages", Kind::Number),
            item("27 messages", Kind::Number),
            item("port 5433", Kind::Number),
            item("port 5434", Kind::Number),
        ];
        let out = collapse(items);
        assert_eq!(
            values(&out),
            [
                "Step 7, 19, 20",
                "JIRA-4",
                "26, 27 messages",
                "port 5433",
                "port 5434"
            ]
        );
        assert_eq!(out[0].context, "ctx of Step 20");
        assert_eq!(out[0].numbers, [7, 19, 20]);
        // A later fold adds to the collapsed item.
        let again = collapse(vec![
            item("Step 8", Kind::Number),
            out[0].clone(),
            item("Step 21", Kind::Number),
        ]);
        assert_eq!(values(&again), ["Step 7, 8, 19–21"]);
    }

    #[test]
    fn a_file_keeps_its_line_numbers_on_one_line() {
        let out = collapse(vec![
            item("src/queue/mod3.rs:120", Kind::Path),
            item("src/queue/mod3.rs:40", Kind::Path),
            item("src/queue/mod4.rs:40", Kind::Path),
            item("src/queue/mod3.rs", Kind::Path),
            item("TKT-101", Kind::Id),
            item("TKT-102", Kind::Id),
        ]);
        assert_eq!(
            values(&out),
            [
                "src/queue/mod3.rs:40, 120",
                "src/queue/mod4.rs:40",
                "src/queue/mod3.rs",
                "TKT-101",
                "TKT-102"
            ]
        );
    }

    #[test]
    fn eviction_takes_counters_and_bare_numbers_first() {
        let mut assistant = item("ack 26 messages", Kind::Number);
        assistant.assistant = true;
        let items = vec![
            item("db.example.com", Kind::Host),
            item("src/queue/mod1.rs", Kind::Path),
            item("7311", Kind::Number),
            item("port 5433", Kind::Number),
            item("512 MB", Kind::Number),
            assistant,
            item("--step", Kind::Symbol),
            item("INV-QP20931", Kind::Id),
        ];
        let order: Vec<&str> = eviction_order(&items)
            .into_iter()
            .map(|i| items[i].value.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "ack 26 messages",
                "7311",
                "--step",
                "512 MB",
                "INV-QP20931",
                "port 5433",
                "src/queue/mod1.rs",
                "db.example.com",
            ]
        );
    }

    #[test]
    fn what_only_call_arguments_named_leaves_before_what_was_observed() {
        let mut asked = item("svc-27-0", Kind::Id);
        asked.argument = true;
        let items = vec![
            asked,
            item("--step", Kind::Symbol),
            item("FACT-AG0000", Kind::Id),
            item("7311", Kind::Number),
        ];
        let order: Vec<&str> = eviction_order(&items)
            .into_iter()
            .map(|i| items[i].value.as_str())
            .collect();
        assert_eq!(order, ["7311", "svc-27-0", "--step", "FACT-AG0000"]);
    }

    #[test]
    fn numbers_render_as_ranges() {
        assert_eq!(render_numbers(&[1, 2, 3, 5, 7, 8, 10]), "1–3, 5, 7, 8, 10");
        assert_eq!(render_numbers(&[4]), "4");
    }
}
