//! The artifact ledger: the exact specifics of folded messages (paths,
//! commands, ids, numbers…) that the LLM summary does not carry, kept
//! verbatim by foldgate beside it, newest first, within a token budget.
//!
//! Previous ledger items survive every later fold until the budget evicts
//! them; identifiers of the previous summary enter when the new summary
//! drops them, so a rewrite cannot silently lose what an earlier one kept.

use super::extract::{contains_token, extract, is_identifier, message_text};
use super::summary::HEADING_PREFIX;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;

/// The heading line of the rendered ledger section.
pub const LEDGER_HEADING: &str = "## Ledger (exact details from folded messages, newest first)";

/// Context of an item that only an earlier summary still carried.
const FROM_EARLIER_SUMMARY: &str = "from an earlier summary";

/// Longest value kept, in characters: longer ones are data, not specifics.
const MAX_VALUE_CHARS: usize = 200;

/// Specifics that the LLM summary lacks, kept by foldgate verbatim, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ledger {
    items: Vec<LedgerItem>,
}

/// One kept specific.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerItem {
    /// The specific, verbatim.
    pub value: String,
    /// A few words of where it came from.
    pub context: String,
    /// Rendered without its context, to leave room for more items.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub brief: bool,
}

/// What one fold did to the ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerUpdate {
    /// The ledger after the fold.
    pub ledger: Ledger,
    /// Items that left the ledger for lack of budget (oldest first), so a
    /// later archive can keep them searchable.
    pub evicted: Vec<LedgerItem>,
}

impl Ledger {
    /// The items, newest first.
    pub fn items(&self) -> &[LedgerItem] {
        &self.items
    }

    /// Whether the ledger holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// How many items the ledger holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// The ledger after a fold.
    /// - `previous`: the ledger of the fold being rewritten (empty for a first fold)
    /// - `previous_summary`: the previous fold's rendered summary text, if any — its
    ///   identifiers are candidates too, so a summary rewrite cannot silently lose
    ///   one that an earlier summary carried
    /// - `folded`: the messages this fold folds, oldest first
    /// - `summary`: the NEW summary's rendered text (without any ledger)
    /// - `budget`: tokens the rendered ledger (heading included) may take
    /// - `count`: tokens of a string
    ///
    /// Candidates, newest first: the artifacts of `folded` (last message
    /// first, text order within one), then `previous`'s items, then the
    /// identifiers of `previous_summary`. New artifacts and earlier-summary
    /// identifiers enter only when `summary` lacks them; previous items stay
    /// regardless. Each value enters once, at its newest place. When they
    /// do not all fit `budget`, the oldest are rendered without their
    /// context first, and only then do the oldest leave.
    pub fn after_fold(
        previous: &Ledger,
        previous_summary: Option<&str>,
        folded: &[&Value],
        summary: &str,
        budget: u32,
        count: &dyn Fn(&str) -> u32,
    ) -> LedgerUpdate {
        let mut candidates = Candidates::default();
        for message in folded.iter().rev() {
            for artifact in extract(&message_text(message)) {
                if !contains_token(summary, &artifact.value) {
                    candidates.offer(artifact.value, artifact.context);
                }
            }
        }
        for item in &previous.items {
            candidates.offer(item.value.clone(), item.context.clone());
        }
        if let Some(text) = previous_summary {
            // A summary rendered with its ledger: those items came in as
            // `previous`. Its heading line ("… (24 messages folded):") is
            // foldgate's own, not a specific of the conversation.
            let narrative = text
                .split_once(LEDGER_HEADING)
                .map_or(text, |(head, _)| head);
            let narrative = match narrative.split_once('\n') {
                Some((first, rest)) if first.starts_with(HEADING_PREFIX) => rest,
                _ => narrative,
            };
            for artifact in extract(narrative).into_iter().filter(is_identifier) {
                if !contains_token(summary, &artifact.value) {
                    candidates.offer(artifact.value, FROM_EARLIER_SUMMARY.to_owned());
                }
            }
        }
        let mut items = candidates.items;
        let (kept, detailed) = fit(&items, budget, count);
        let evicted = items.split_off(kept).into_iter().rev().collect();
        for (i, item) in items.iter_mut().enumerate() {
            item.brief = i >= detailed;
        }
        LedgerUpdate {
            ledger: Ledger { items },
            evicted,
        }
    }

    /// "" when empty; else [`LEDGER_HEADING`] then one line per item:
    /// "- {value} — {context}" (just "- {value}" when context is empty).
    /// Deterministic: the same ledger renders to the same bytes.
    pub fn render(&self) -> String {
        render_items(&self.items)
    }
}

/// Candidate items in order, each value once (the first offer wins).
#[derive(Default)]
struct Candidates {
    items: Vec<LedgerItem>,
    seen: HashSet<String>,
}

impl Candidates {
    fn offer(&mut self, value: String, context: String) {
        if value.is_empty()
            || value.chars().nth(MAX_VALUE_CHARS).is_some()
            || self.seen.contains(&value)
        {
            return;
        }
        self.seen.insert(value.clone());
        self.items.push(LedgerItem {
            value,
            context,
            brief: false,
        });
    }
}

fn render_items(items: &[LedgerItem]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut out = String::from(LEDGER_HEADING);
    for item in items {
        out.push('\n');
        push_line(&mut out, item);
    }
    out
}

fn push_line(out: &mut String, item: &LedgerItem) {
    out.push_str("- ");
    push_one_line(out, &item.value);
    if !item.brief && !item.context.is_empty() {
        out.push_str(" — ");
        push_one_line(out, &item.context);
    }
}

/// Items deserialized from an older store may hold line breaks; a line
/// break would split the item and break the list.
fn push_one_line(out: &mut String, text: &str) {
    out.extend(
        text.chars()
            .map(|c| if matches!(c, '\n' | '\r') { ' ' } else { c }),
    );
}

/// How many of `items` (newest first) the budget holds, and how many of
/// those, the newest, keep their context: every item in full when all fit;
/// otherwise as many items as fit without context, then context for the
/// newest of them while it still fits. Binary searches: O(log n) renders.
fn fit(items: &[LedgerItem], budget: u32, count: &dyn Fn(&str) -> u32) -> (usize, usize) {
    let n = items.len();
    let fits = |kept: usize, detailed: usize| {
        kept == 0 || count(&render_items(&with_detail(&items[..kept], detailed))) <= budget
    };
    let kept = largest_fitting(n, |k| fits(k, 0));
    (kept, largest_fitting(kept, |d| fits(kept, d)))
}

/// The largest `x` in `0..=limit` with `ok(x)`, given `ok(0)` and `ok`
/// monotone, by bisection.
fn largest_fitting(limit: usize, ok: impl Fn(usize) -> bool) -> usize {
    if ok(limit) {
        return limit;
    }
    let (mut lo, mut hi) = (0, limit);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `items` with only the first `detailed` keeping their context.
fn with_detail(items: &[LedgerItem], detailed: usize) -> Vec<LedgerItem> {
    let mut out = items.to_vec();
    for item in &mut out[detailed.min(items.len())..] {
        item.brief = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn count(s: &str) -> u32 {
        (s.len() as u32).div_ceil(4)
    }

    fn item(value: &str, context: &str) -> LedgerItem {
        LedgerItem {
            value: value.to_owned(),
            context: context.to_owned(),
            brief: false,
        }
    }

    fn all_brief(items: &[LedgerItem]) -> Ledger {
        Ledger {
            items: with_detail(items, 0),
        }
    }

    fn values(ledger: &Ledger) -> Vec<&str> {
        ledger.items().iter().map(|i| i.value.as_str()).collect()
    }

    fn fold(previous: &Ledger, folded: &[Value], summary: &str, budget: u32) -> LedgerUpdate {
        let refs: Vec<&Value> = folded.iter().collect();
        Ledger::after_fold(previous, None, &refs, summary, budget, &count)
    }

    #[test]
    fn keeps_what_the_summary_lacks_newest_first() {
        let folded = [
            json!({"role": "user", "content": "Config is in /etc/app/a.toml and JIRA-1 tracks it."}),
            json!({"role": "assistant", "content": "Edited src/lib.rs; see JIRA-2."}),
        ];
        let update = fold(&Ledger::default(), &folded, "Worked on JIRA-1.", 10_000);
        assert_eq!(
            values(&update.ledger),
            ["src/lib.rs", "JIRA-2", "/etc/app/a.toml"]
        );
        assert!(update.evicted.is_empty());
    }

    #[test]
    fn merges_dedups_and_survives_rewrites() {
        let first = fold(
            &Ledger::default(),
            &[json!({"role": "tool", "content": "wrote /tmp/out.csv for JIRA-7"})],
            "",
            10_000,
        );
        assert_eq!(values(&first.ledger), ["/tmp/out.csv", "JIRA-7"]);
        // The rewrite's summary now mentions the path: the item stays anyway,
        // and JIRA-7 seen again moves to the newest place with its new context.
        let second = fold(
            &first.ledger,
            &[json!({"role": "user", "content": "close JIRA-7 and open JIRA-8"})],
            "Wrote /tmp/out.csv.",
            10_000,
        );
        assert_eq!(values(&second.ledger), ["JIRA-7", "JIRA-8", "/tmp/out.csv"]);
        assert_eq!(
            second.ledger.items()[0].context,
            "close JIRA-7 and open JIRA-8"
        );
    }

    #[test]
    fn earlier_summary_identifiers_come_back_when_dropped() {
        let previous = Ledger {
            items: vec![item("JIRA-1", "old")],
        };
        let earlier = format!(
            "Deployed v1.2.3 to db.example.com; Dana agreed.\n\n{LEDGER_HEADING}\n- JIRA-9 — x"
        );
        let update = Ledger::after_fold(
            &previous,
            Some(&earlier),
            &[],
            "Deployed v1.2.3.",
            10_000,
            &count,
        );
        assert_eq!(values(&update.ledger), ["JIRA-1", "db.example.com"]);
        assert_eq!(update.ledger.items()[1].context, FROM_EARLIER_SUMMARY);
    }

    #[test]
    fn drops_context_before_evicting_oldest_first() {
        let previous = Ledger {
            items: (0..20)
                .map(|i| item(&format!("JIRA-{i}"), "a context line"))
                .collect(),
        };
        let full = fold(&previous, &[], "", 10_000).ledger.render();
        let brief = all_brief(&previous.items).render();
        for budget in [0, 5, 20, 25, 60, 100, count(&brief), count(&full) - 1] {
            let update = fold(&previous, &[], "", budget);
            let ledger = &update.ledger;
            assert!(count(&ledger.render()) <= budget, "budget {budget}");
            let kept = ledger.len();
            let values: Vec<_> = ledger.items().iter().map(|i| &i.value).collect();
            let expected: Vec<_> = previous.items[..kept].iter().map(|i| &i.value).collect();
            assert_eq!(values, expected);
            let evicted: Vec<_> = previous.items[kept..].iter().rev().cloned().collect();
            assert_eq!(update.evicted, evicted);
            // The newest keep their context, the oldest kept lose it.
            let detailed = ledger.items().iter().take_while(|i| !i.brief).count();
            assert!(ledger.items()[detailed..].iter().all(|i| i.brief));
            if kept < previous.len() {
                // Items leave only when even without context one more would not fit.
                assert!(count(&all_brief(&previous.items[..=kept]).render()) > budget);
                assert_eq!(detailed, 0, "budget {budget}");
            } else if detailed < kept {
                let mut more = ledger.items().to_vec();
                more[detailed].brief = false;
                assert!(count(&Ledger { items: more }.render()) > budget);
            }
        }
        let update = fold(&previous, &[], "", count(&full));
        assert_eq!(update.ledger.len(), 20);
        assert!(update.ledger.items().iter().all(|i| !i.brief));
        assert!(fold(&previous, &[], "", 16).ledger.is_empty());
    }

    #[test]
    fn fit_holds_for_counters_that_are_not_additive() {
        let items: Vec<LedgerItem> = (0..50).map(|i| item(&format!("JIRA-{i}"), "ctx")).collect();
        let framed = |s: &str| 4 + (s.len() as u32).div_ceil(4);
        let lines = |s: &str| 3 * s.lines().count() as u32;
        for counter in [&framed as &dyn Fn(&str) -> u32, &lines] {
            for budget in [0, 10, 50, 100, 151, 1000] {
                let (k, d) = fit(&items, budget, counter);
                let rendered = render_items(&with_detail(&items[..k], d));
                assert!(k == 0 || counter(&rendered) <= budget);
                let more = render_items(&with_detail(&items[..(k + 1).min(50)], 0));
                assert!(k == items.len() || counter(&more) > budget);
            }
        }
    }

    #[test]
    fn the_earlier_heading_is_not_a_specific() {
        let earlier = "[foldgate] Summary of the earlier conversation (24 messages folded):\n\nShipped v1.2.3.";
        let update = Ledger::after_fold(&Ledger::default(), Some(earlier), &[], "", 10_000, &count);
        let values = values(&update.ledger);
        assert!(values.iter().all(|v| !v.contains("24")), "{values:?}");
        assert!(values.iter().any(|v| v.contains("v1.2.3")), "{values:?}");
    }

    #[test]
    fn render_bytes() {
        assert_eq!(Ledger::default().render(), "");
        let ledger = Ledger {
            items: vec![
                item("src/lib.rs", "edited src/lib.rs"),
                item("JIRA-2", ""),
                item("a\nb", "c\r\nd"),
                LedgerItem {
                    brief: true,
                    ..item("JIRA-3", "context left out")
                },
            ],
        };
        assert_eq!(
            ledger.render(),
            format!(
                "{LEDGER_HEADING}\n- src/lib.rs — edited src/lib.rs\n- JIRA-2\n- a b — c  d\n- JIRA-3"
            )
        );
        assert_eq!(ledger.render(), ledger.clone().render());
    }

    #[test]
    fn long_values_are_ignored() {
        let long = "x".repeat(MAX_VALUE_CHARS + 1);
        let previous = Ledger {
            items: vec![item(&long, ""), item("JIRA-3", "")],
        };
        assert_eq!(values(&fold(&previous, &[], "", 10_000).ledger), ["JIRA-3"]);
    }

    #[test]
    fn serializes_as_a_list() {
        let brief = LedgerItem {
            brief: true,
            ..item("JIRA-3", "")
        };
        let ledger = Ledger {
            items: vec![item("JIRA-2", "ctx"), brief],
        };
        let text = serde_json::to_string(&ledger).unwrap_or_default();
        assert_eq!(
            text,
            r#"[{"value":"JIRA-2","context":"ctx"},{"value":"JIRA-3","context":"","brief":true}]"#
        );
        let back: Ledger = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back, ledger);
    }
}
