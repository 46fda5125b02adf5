//! The artifact ledger: the exact specifics of folded messages (paths,
//! commands, ids, numbers…) that the LLM summary does not carry, kept
//! verbatim by foldgate beside it, newest first, within a token budget.
//!
//! Previous ledger items survive every later fold until the budget evicts
//! them; identifiers of the previous summary enter when the new summary
//! drops them, so a rewrite cannot silently lose what an earlier one kept.
//! Each item carries the clause that says what it is (`metrics port 9187`,
//! `build host falcon.corp`). When the budget is short, the oldest items
//! lose their context line first, then their clause shrinks to its head
//! noun (`port 9187`), and only then do items leave, the least informative
//! first ([`rank`]): counters collapse into one line, a bare number or a
//! number only the assistant wrote goes first, then what only tool-call
//! arguments named (what was asked, not observed), before any id, path or
//! host a user, a tool result or the assistant's text gave.

mod rank;

use super::extract::{
    Kind, call_text, clause_head, contains_token, content_text, extract, is_identifier,
    message_text,
};
use super::summary::HEADING_PREFIX;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

/// The heading line of the rendered ledger section.
pub const LEDGER_HEADING: &str = "## Ledger (exact details from folded messages, newest first)";

/// Context of an item that only an earlier summary still carried.
const FROM_EARLIER_SUMMARY: &str = "from an earlier summary";

/// Longest value kept, in characters: longer ones are data, not specifics.
const MAX_VALUE_CHARS: usize = 200;

/// Bare numbers one message offers, at most: a table of figures is data,
/// and stays in the archive.
const MAX_BARE_PER_MESSAGE: usize = 12;

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
    /// The subject words that say what the value is ("metrics port"),
    /// rendered before it; empty when its line had none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub clause: String,
    /// Rendered without its context, to leave room for more items.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub brief: bool,
    /// Rendered with only the head noun of its clause (`port 9187`), to
    /// leave room for more items; set only on a brief item.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shrunk: bool,
    /// What kind of specific it is; unset in ledgers stored before kinds
    /// were kept (the value is classified again when needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    /// A number only the assistant wrote (about the conversation itself:
    /// "Step 19", "26 messages"): the first to leave when room is short.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub assistant: bool,
    /// Found only in tool-call arguments (what the agent asked, not what it
    /// observed): leaves before anything a user, a tool result or the
    /// assistant's own text said.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argument: bool,
    /// For a collapsed template (`Step 1–20`), its numbers, ascending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numbers: Vec<u64>,
    /// Named by an item the newest plan-tool call marks completed:
    /// rendered apart from the open ones, so finished work is not redone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
}

impl LedgerItem {
    /// An item of `kind` with its context, in full.
    pub fn new(value: String, context: String, kind: Option<Kind>) -> Self {
        Self {
            value,
            context,
            clause: String::new(),
            brief: false,
            shrunk: false,
            kind,
            assistant: false,
            argument: false,
            numbers: Vec::new(),
            done: false,
        }
    }
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
    /// regardless. Each value enters once, at its newest place; a bare
    /// number enters only from text a user or a tool wrote. Templates that
    /// differ only by a small number collapse into one item. Each item
    /// keeps its artifact's clause. When they do not all fit `budget`, the
    /// oldest are rendered without their context first, then with only the
    /// head noun of their clause, and only then do items leave, least
    /// informative first ([`rank::eviction_order`]).
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
            let assistant = message.get("role").and_then(Value::as_str) == Some("assistant");
            let mut bare = 0;
            let content = content_text(message);
            let calls = call_text(message);
            for artifact in extract(&message_text(message)) {
                if contains_token(summary, &artifact.value) {
                    continue;
                }
                let number = artifact.kind == Kind::Number;
                if number && rank::is_bare_number(&artifact.value) {
                    bare += 1;
                    if assistant || bare > MAX_BARE_PER_MESSAGE {
                        continue;
                    }
                }
                let mut item =
                    LedgerItem::new(artifact.value, artifact.context, Some(artifact.kind));
                item.clause = artifact.clause;
                item.assistant = assistant && number;
                item.argument = !calls.is_empty()
                    && contains_token(&calls, &item.value)
                    && !contains_token(&content, &item.value);
                candidates.offer(item);
            }
        }
        for item in &previous.items {
            candidates.offer(LedgerItem {
                brief: false,
                shrunk: false,
                ..item.clone()
            });
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
            let identifiers = extract(narrative)
                .into_iter()
                .filter(|a| is_identifier(a) && !rank::is_bare_number(&a.value));
            for artifact in identifiers {
                if !contains_token(summary, &artifact.value) {
                    let context = FROM_EARLIER_SUMMARY.to_owned();
                    let mut item = LedgerItem::new(artifact.value, context, Some(artifact.kind));
                    item.clause = artifact.clause;
                    candidates.offer(item);
                }
            }
        }
        let items = rank::collapse(candidates.items);
        let order = rank::eviction_order(&items);
        let (gone, detail) = fit(&items, &order, budget, count);
        let evicted = order[..gone].iter().map(|&i| items[i].clone()).collect();
        let kept = with_detail(&staying(&items, &order[..gone]), detail);
        LedgerUpdate {
            ledger: Ledger { items: kept },
            evicted,
        }
    }

    /// "" when empty; else [`LEDGER_HEADING`] then one line per item:
    /// "- {clause} {value} — {context}", without the context when it is
    /// empty or the item brief, with only the clause's head noun when the
    /// item is shrunk, and without a clause when it has none.
    /// Deterministic: the same ledger renders to the same bytes.
    pub fn render(&self) -> String {
        render_items(&self.items)
    }

    /// Marks the items that `completed` (texts of the plan's completed
    /// entries) name, word for word, as done; the others as open.
    pub fn mark_done(&mut self, completed: &[String]) {
        for item in &mut self.items {
            item.done = completed.iter().any(|t| contains_token(t, &item.value));
        }
    }
}

/// Candidate items in order, each value once (the first offer wins).
#[derive(Default)]
struct Candidates {
    items: Vec<LedgerItem>,
    /// Where each value is in `items`.
    seen: HashMap<String, usize>,
}

impl Candidates {
    /// Adds `item` unless its value is already in; a value offered again
    /// from text other than the assistant's stops being the assistant's,
    /// and one offered again from outside call arguments stops being an
    /// argument.
    fn offer(&mut self, item: LedgerItem) {
        if item.value.is_empty() || item.value.chars().nth(MAX_VALUE_CHARS).is_some() {
            return;
        }
        if let Some(&at) = self.seen.get(&item.value) {
            self.items[at].assistant &= item.assistant;
            self.items[at].argument &= item.argument;
            return;
        }
        self.seen.insert(item.value.clone(), self.items.len());
        self.items.push(item);
    }
}

fn render_items(items: &[LedgerItem]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut out = String::from(LEDGER_HEADING);
    for item in items.iter().filter(|i| !i.done) {
        out.push('\n');
        push_line(&mut out, item);
    }
    if items.iter().any(|i| i.done) {
        out.push('\n');
        out.push_str(DONE_HEADING);
        for item in items.iter().filter(|i| i.done) {
            out.push('\n');
            push_line(&mut out, item);
        }
    }
    out
}

/// Heads the ledger items the plan marks completed (after the open ones).
pub const DONE_HEADING: &str = "Completed (per the plan; do not redo):";

fn push_line(out: &mut String, item: &LedgerItem) {
    out.push_str("- ");
    let clause = if item.shrunk {
        clause_head(&item.clause)
    } else {
        &item.clause
    };
    if !clause.is_empty() {
        push_one_line(out, clause);
        out.push(' ');
    }
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

/// How much of the kept items is rendered: the newest `context` keep
/// their context line, the newest `clause` (at least as many) their whole
/// clause; the rest are brief, with only their clause's head noun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Detail {
    context: usize,
    clause: usize,
}

/// How many of `items` (newest first) leave, the first of `order`, and how
/// much of those that stay is rendered: every item in full when all fit;
/// otherwise as few leave as lets the rest fit with only their head nouns,
/// then the newest get their whole clause while it fits, and then their
/// context. So the budget strips context first (oldest first), then
/// shrinks clauses to their head noun, and evicts only after that — never
/// a bare identifier while its head noun fits. Binary searches: O(log n)
/// renders.
fn fit(
    items: &[LedgerItem],
    order: &[usize],
    budget: u32,
    count: &dyn Fn(&str) -> u32,
) -> (usize, Detail) {
    let fits = |kept: &[LedgerItem], detail: Detail| {
        kept.is_empty() || count(&render_items(&with_detail(kept, detail))) <= budget
    };
    let least = Detail {
        context: 0,
        clause: 0,
    };
    let n = items.len();
    let gone = n - largest_fitting(n, |k| fits(&staying(items, &order[..n - k]), least));
    let kept = staying(items, &order[..gone]);
    let clause = largest_fitting(kept.len(), |c| fits(&kept, Detail { clause: c, ..least }));
    let context = largest_fitting(clause, |d| fits(&kept, Detail { context: d, clause }));
    (gone, Detail { context, clause })
}

/// `items` but those at the positions of `leaving`, in their order.
fn staying(items: &[LedgerItem], leaving: &[usize]) -> Vec<LedgerItem> {
    let mut leaves = vec![false; items.len()];
    for &i in leaving {
        leaves[i] = true;
    }
    items
        .iter()
        .zip(leaves)
        .filter(|(_, leaves)| !leaves)
        .map(|(item, _)| item.clone())
        .collect()
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

/// `items` rendered to `detail`.
fn with_detail(items: &[LedgerItem], detail: Detail) -> Vec<LedgerItem> {
    let mut out = items.to_vec();
    for (i, item) in out.iter_mut().enumerate() {
        item.brief = i >= detail.context;
        item.shrunk = i >= detail.clause;
    }
    out
}

#[cfg(test)]
mod tests;
