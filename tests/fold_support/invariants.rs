//! The fold contract's invariants (`crates/core/src/fold/mod.rs`) of one view, shared by the fold property
//! tests (`tests/fold_props.rs`) and the fold fuzz target
//! (`fuzz/fuzz_targets/fold_plan.rs`).
//! Messages are recognised by their label: the first word of their text.

use foldgate::fold::Compression;
use foldgate::fold::compress::{STUB_ITEMS, STUB_PREFIX};
use foldgate::fold::extract::{contains_token, extract, message_text};
use foldgate::fold::ledger::Ledger;
use foldgate::fold::summary::HEADING_PREFIX;
use foldgate::fold::{FoldPlan, FoldState, Summary, pinned_len};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};

/// A message's label: the first word of its text.
pub fn label(message: &Value) -> &str {
    let content = &message["content"];
    let text = content
        .as_str()
        .or_else(|| content[0]["text"].as_str())
        .unwrap_or("");
    text.split(' ').next().unwrap_or("")
}

/// The test counter: 4 tokens of framing, 8 per tool call, and per text
/// the sum of its `~N` markers plus a quarter of its length.
pub fn count(message: &Value) -> u32 {
    let content = match message.get("content") {
        Some(Value::String(s)) => text_tokens(s),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(text_tokens)
            .sum(),
        _ => 0,
    };
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map_or(0, Vec::len) as u32;
    4 + content + 8 * calls
}

fn text_tokens(text: &str) -> u32 {
    let markers: u32 = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix('~').and_then(|n| n.parse::<u32>().ok()))
        .sum();
    markers + (text.len() / 4) as u32
}

/// Records a fold under the fake summary `S<k>` (`k`: folds so far): its
/// folded set is its base's plus the messages it folds, none of them
/// pinned or folded before. Returns the new state.
pub fn record_fold(
    fold: &FoldPlan,
    folds: &mut HashMap<String, BTreeSet<usize>>,
    made_at: u64,
) -> FoldState {
    if fold.restub {
        // Only the stub mark moves: nothing is folded, the summary stands.
        assert!(fold.fold.is_empty(), "a restub folds nothing");
        return FoldState::restubbed(fold, made_at).expect("a restub has a base");
    }
    let mut set = fold
        .base
        .as_ref()
        .map(|b| folds[&b.summary.summary].clone())
        .unwrap_or_default();
    for &i in &fold.fold {
        assert!(
            i >= fold.pinned && set.insert(i),
            "message {i} folded twice or pinned"
        );
    }
    let name = format!("S{}", folds.len());
    folds.insert(name.clone(), set);
    let summary = Summary {
        summary: name,
        ..Default::default()
    };
    FoldState::after(fold, summary, Ledger::default(), made_at)
}

/// Checks one view of the request `ms` against the folded sets recorded
/// per fake summary (`folds`, keyed by the summary's narrative): exactly
/// one summary, order kept, every message either shown or folded into the
/// summary shown (never both), the pinned head and the last user message
/// shown, and every tool result still right after its call.
///
/// The view may show messages compressed: a stub
/// stands for its message (shown, not folded) and must be one that
/// `compression` chose; it keeps the message's role and pairing (`role`,
/// `tool_call_id`, `tool_calls`), carries the specifics of its message
/// (the first [`STUB_ITEMS`] the extractor finds) and follows its call.
/// Returns the indices shown as stubs.
pub fn check_view_with(
    ms: &[Value],
    index: &HashMap<String, usize>,
    view: &[Value],
    state: Option<&FoldState>,
    folds: &HashMap<String, BTreeSet<usize>>,
    compression: &Compression,
) -> Vec<usize> {
    let mark = state.map_or(0, |s| s.retained.stubs_before);
    let stubbed = check_stubs(ms, view, compression, mark);
    let Some(state) = state else {
        let unstubbed: Vec<Value> = view
            .iter()
            .enumerate()
            .map(|(j, m)| match stubbed.iter().find(|(at, _)| *at == j) {
                Some((_, i)) => ms[*i].clone(),
                None => m.clone(),
            })
            .collect();
        assert_eq!(unstubbed, ms, "no state: no change but stubs");
        return stubbed.into_iter().map(|(_, i)| i).collect();
    };
    let p = pinned_len(ms);
    let folded = &folds[&state.summary.summary];
    let mut present = Vec::new();
    let mut summaries = 0;
    for (j, m) in view.iter().enumerate() {
        let stub = stubbed.iter().find(|(at, _)| *at == j).map(|(_, i)| i);
        match index
            .get(label(m))
            .filter(|&&i| i < ms.len() && ms[i] == *m)
            .or(stub)
        {
            Some(&i) => present.push(i),
            None => {
                let rendered = m.to_string();
                if rendered.contains(HEADING_PREFIX) {
                    summaries += 1;
                    assert!(rendered.contains(&format!("\\n\\n{}", state.summary.summary)));
                } else {
                    assert_eq!(m["content"], "Noted.", "unknown message in view");
                }
            }
        }
    }
    assert_eq!(summaries, 1, "exactly one summary in the view");
    assert!(present.windows(2).all(|w| w[0] < w[1]), "order preserved");
    // With the summary merged into the last pinned message, that message
    // is shown changed.
    let merged = (p > 0 && !present.contains(&(p - 1))).then(|| p - 1);
    for i in 0..ms.len() {
        let shown = present.binary_search(&i).is_ok() || merged == Some(i);
        assert!(
            shown != folded.contains(&i),
            "message {i}: shown={shown}, folded={}",
            folded.contains(&i)
        );
        if i < p {
            assert!(shown, "pinned message {i} kept");
        }
    }
    if let Some(last_user) = ms.iter().rposition(|m| m["role"] == "user") {
        assert!(present.contains(&last_user), "last user message kept");
    }
    assert_tool_pairs(ms, view);
    stubbed.into_iter().map(|(_, i)| i).collect()
}

/// The stubs of `view`, as `(view position, message index)`, each checked
/// (see [`check_view_with`]).
fn check_stubs(
    ms: &[Value],
    view: &[Value],
    compression: &Compression,
    mark: usize,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (j, m) in view.iter().enumerate() {
        let text = m["content"].as_str().unwrap_or("");
        if !text.starts_with(STUB_PREFIX) {
            continue;
        }
        let i = compression
            .stubbable()
            .into_iter()
            .find(|&i| compression.stub_of(i) == Some(m))
            .unwrap_or_else(|| panic!("a stub compression did not choose: {m}"));
        assert!(
            compression.is_selected(i) || i < mark,
            "stub of {i}: neither chosen by its batch nor under the fold's mark {mark}"
        );
        // The newest exchange (and the last message) is the one the model
        // answers: no fold's mark stubs it on this request.
        let newest = ms
            .iter()
            .rposition(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
            .unwrap_or(ms.len() - 1);
        assert!(
            compression.is_selected(i) || i < newest,
            "stub of {i} at or after the newest exchange ({newest})"
        );
        let original = &ms[i];
        for key in ["role", "tool_call_id", "tool_calls"] {
            assert_eq!(m.get(key), original.get(key), "stub of {i} keeps its {key}");
        }
        let content = json!({"content": original["content"]});
        let wanted = extract(&message_text(&content))
            .into_iter()
            .map(|a| a.value)
            .filter(|v| !v.contains('\n') && v.chars().count() <= 200)
            .take(STUB_ITEMS);
        for value in wanted {
            assert!(
                contains_token(text, &value),
                "stub of {i} lacks the specific {value:?}: {text}"
            );
        }
        if m["role"] == "tool" {
            assert!(owner(view, j).is_some(), "stub of {i} lost its call");
        }
        out.push((j, i));
    }
    out
}

/// Every tool result that follows its call in the request (only tool
/// results between) follows it in the view too.
pub fn assert_tool_pairs(ms: &[Value], view: &[Value]) {
    for (j, m) in view.iter().enumerate() {
        if m["role"] != "tool" {
            continue;
        }
        let paired_in_request = ms
            .iter()
            .position(|x| x == m)
            .is_some_and(|i| owner(ms, i).is_some());
        if paired_in_request {
            assert!(owner(view, j).is_some(), "tool result at {j} lost its call");
        }
    }
}

/// The assistant message whose `tool_calls` the tool result at `j`
/// answers, when only tool results stand between them.
fn owner(ms: &[Value], j: usize) -> Option<usize> {
    let id = &ms[j]["tool_call_id"];
    let start = ms[..j].iter().rposition(|x| x["role"] != "tool")?;
    ms[start]["tool_calls"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["id"] == *id))
        .then_some(start)
}
