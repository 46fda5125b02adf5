//! Builders and checks shared by the fold engine's case tests: messages
//! with exact token counts, a deterministic counter, plan-and-record helpers.

pub mod invariants;

use foldgate::config::{Placement, Policy};
use foldgate::fold::hash::{chain_of, ids_of};
use foldgate::fold::ledger::Ledger;
use foldgate::fold::{
    Budget, Decision, FoldChain, FoldPlan, FoldState, Messages, Reason, Summary, pinned_len, plan,
};
use serde_json::{Value, json};

// ---- builders -------------------------------------------------------------

/// Text that the test counter charges exactly `tokens` tokens for.
pub fn text(label: &str, tokens: u32) -> String {
    let chars = (tokens.saturating_sub(4) * 4) as usize;
    let mut s = format!("{label} ");
    while s.len() < chars {
        s.push('.');
    }
    s.truncate(chars.max(label.len()));
    s
}

pub fn m(role: &str, label: &str, tokens: u32) -> Value {
    json!({"role": role, "content": text(label, tokens)})
}

pub fn call(ids: &[&str]) -> Value {
    let calls: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "type": "function", "function": {"name": "run", "arguments": "{}"}}))
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

pub fn tool(id: &str, tokens: u32) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": text(id, tokens)})
}

/// 4 tokens of framing plus a quarter of the text's characters.
pub fn count(message: &Value) -> u32 {
    let content = match message.get("content") {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| t.chars().count())
            .sum(),
        _ => 0,
    };
    let calls = message.get("tool_calls").map_or(0, |c| c.to_string().len());
    4 + ((content + calls) / 4) as u32
}

pub fn policy() -> Policy {
    Policy {
        trigger_ratio: 0.8,
        reset_ratio: 0.5,
        preserve_recent: 2,
        overflow_buffer: 0,
        safety_user_turns: 0,
        cooldown_messages: 0,
        min_messages: 0,
        ..Policy::default()
    }
}

pub fn budget(window: u32) -> Budget {
    Budget {
        context_window: window,
        output_reserve: 0,
        overhead: 0,
        summary_reserve: 50,
        now_unix: 0,
        lands_later: false,
    }
}

pub fn decide(
    ms: &[Value],
    chain: &FoldChain,
    policy: &Policy,
    budget: &Budget,
    placement: Placement,
) -> Decision {
    decide_with(ms, chain, policy, budget, placement, count)
}

/// Plans the request `ms` against `chain`, counting with `count`.
pub fn decide_with(
    ms: &[Value],
    chain: &FoldChain,
    policy: &Policy,
    budget: &Budget,
    placement: Placement,
    count: fn(&Value) -> u32,
) -> Decision {
    let counts = ms.iter().map(count).collect::<Vec<u32>>();
    decide_counted(ms, &counts, chain, policy, budget, placement, count)
}

/// Plans the request `ms` whose messages count `counts` (e.g. with some
/// compressed to stubs) against `chain`; `count` counts foldgate's own.
pub fn decide_counted(
    ms: &[Value],
    counts: &[u32],
    chain: &FoldChain,
    policy: &Policy,
    budget: &Budget,
    placement: Placement,
    count: fn(&Value) -> u32,
) -> Decision {
    decide_stubbed(ms, (counts, &[]), chain, policy, budget, placement, count)
}

/// [`decide_counted`] where a fold may also stub the messages `stubbed`
/// counts as stubs ([`foldgate::fold::Compression::stubbed`]).
pub fn decide_stubbed(
    ms: &[Value],
    (counts, stubbed): (&[u32], &[u32]),
    chain: &FoldChain,
    policy: &Policy,
    budget: &Budget,
    placement: Placement,
    count: fn(&Value) -> u32,
) -> Decision {
    let ids = ids_of(ms);
    let roles = foldgate::message::roles_of(ms);
    let request = Messages {
        values: ms,
        roles: &roles,
        ids: &ids,
        counts,
        stubbed,
    };
    plan(request, Some(chain), policy, budget, &count, placement)
}

pub fn expect_fold(d: Decision) -> FoldPlan {
    match d {
        Decision::Fold(p) => p,
        other => panic!("expected a fold, got {other:?}"),
    }
}

/// A summary naming how many messages the plan folds.
pub fn summarize(plan: &FoldPlan) -> Summary {
    Summary {
        summary: format!("folded {}", plan.fold.len()),
        ..Default::default()
    }
}

/// Plans, expects a fold, records the state and returns it with the plan.
pub fn fold_once(
    ms: &[Value],
    chain: &mut FoldChain,
    policy: &Policy,
    budget: &Budget,
    placement: Placement,
) -> (FoldPlan, FoldState) {
    let plan = expect_fold(decide(ms, chain, policy, budget, placement));
    let state = FoldState::after(&plan, summarize(&plan), Ledger::default(), 1_700_000_000);
    chain.push(state.clone());
    (plan, state)
}

/// `sys(20)` then `pairs` user/assistant pairs of `tokens` each.
pub fn chat(pairs: usize, tokens: u32) -> Vec<Value> {
    let mut ms = vec![m("system", "sys", 20)];
    for i in 0..pairs {
        ms.push(m("user", &format!("u{i}"), tokens));
        ms.push(m("assistant", &format!("a{i}"), tokens));
    }
    ms
}

pub fn view_tokens(view: &[Value]) -> u32 {
    view.iter().map(count).sum()
}

pub fn state_for(
    ms: &[Value],
    covered: usize,
    kept_user: Option<usize>,
    summary: Summary,
) -> FoldState {
    let p = pinned_len(ms);
    FoldState {
        id: "test".into(),
        parent: None,
        depth: 1,
        summary,
        ledger: Ledger::default(),
        covered,
        kept_user,
        chain: chain_of(&ms[p..p + covered]),
        user_turns: 0,
        messages: ms.len(),
        created_at: 0,
        tokens_before: 0,
        tokens_after: 0,
        reason: Reason::Token,
        summarizer: None,
        api: "chat".into(),
        recall: false,
        retained: Default::default(),
        background: false,
        restub: false,
    }
}

/// No message is missing from the view unless the plan chain folded it.
pub fn assert_no_drop(ms: &[Value], view: &[Value], folded: &[usize]) {
    for (i, msg) in ms.iter().enumerate() {
        assert!(
            view.contains(msg) || folded.contains(&i),
            "message {i} dropped without a fold"
        );
    }
}

pub fn assert_tool_pairs_whole(view: &[Value]) {
    for (j, msg) in view.iter().enumerate() {
        if msg["role"] == "tool" {
            let id = &msg["tool_call_id"];
            let owner = view[..j].iter().rposition(|a| {
                a["tool_calls"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| &c["id"] == id))
            });
            let owner = owner.unwrap_or_else(|| panic!("tool result {j} without its call"));
            assert!(
                view[owner + 1..j].iter().all(|x| x["role"] == "tool"),
                "pair split at {j}"
            );
        }
    }
}
