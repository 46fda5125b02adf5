//! Fold economy in the pure fold engine: a fold that must cut deeper than
//! `preserve_recent` allows stubs the tail's older tool outputs in the
//! same rewrite instead, and the stubs it added stay on later requests.

use foldgate::config::{Compress, Placement, Policy};
use foldgate::fold::compress::STUB_PREFIX;
use foldgate::fold::ledger::Ledger;
use foldgate::fold::{
    Budget, Compression, Decision, FoldChain, FoldState, Summary, build_view_with,
};
use serde_json::{Value, json};

use crate::fold_support;
use fold_support::invariants::count;
use fold_support::{decide_stubbed, expect_fold};

/// A system prompt, one task and `steps` tool calls with ~500-token outputs.
fn agent_loop(steps: usize) -> Vec<Value> {
    let mut ms = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "task"}),
    ];
    for k in 0..steps {
        let id = format!("c{k}");
        ms.push(json!({"role": "assistant", "content": format!("m{}-call", ms.len()),
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "sh", "arguments": "{}"}}]}));
        ms.push(json!({"role": "tool", "tool_call_id": id,
            "content": format!("m{}-{id}\n~500", ms.len())}));
    }
    ms
}

fn policy() -> Policy {
    Policy {
        trigger_ratio: 0.8,
        reset_ratio: 0.3,
        preserve_recent: 6,
        ..Policy::default()
    }
}

fn budget() -> Budget {
    Budget {
        context_window: 5000,
        output_reserve: 100,
        overhead: 0,
        summary_reserve: 100,
        now_unix: 0,
    }
}

fn compression(ms: &[Value], with_fold: bool) -> Compression {
    let raw: Vec<u32> = ms.iter().map(count).collect();
    // No batch is due on its own (after_turns): only folds stub here.
    let settings = Compress {
        min_tokens: 300,
        after_turns: 100,
        with_fold,
        ..Compress::default()
    };
    Compression::of(ms, &raw, &settings, 6, true, &count)
}

fn stubs(view: &[Value]) -> usize {
    view.iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.starts_with(STUB_PREFIX))
        })
        .count()
}

/// Plans `ms` against `chain`; a fold is recorded with a placeholder summary.
fn plan(ms: &[Value], chain: &mut FoldChain, with_fold: bool) -> (Decision, Compression) {
    let c = compression(ms, with_fold);
    let raw: Vec<u32> = ms.iter().map(count).collect();
    let counts = c.counts(&raw, |t| t);
    let stubbed = c.stubbed(&counts, |t| t);
    let d = decide_stubbed(
        ms,
        (&counts, &stubbed),
        chain,
        &policy(),
        &budget(),
        Placement::System,
        count,
    );
    (d, c)
}

#[test]
fn a_fold_stubs_the_tails_older_outputs_instead_of_shortening_the_tail() {
    let ms = agent_loop(8);
    let n = ms.len();
    // Three steps (the preserved 6 messages) alone are over the 1,500-token
    // reset target: without stubs the tail shrinks below preserve_recent.
    let mut chain = FoldChain::new();
    let plain = expect_fold(plan(&ms, &mut chain, false).0);
    assert!(n - (plain.pinned + plain.covered) < 6, "{plain:?}");
    // With stubs riding on the fold, the tail keeps 6 messages; all but the
    // newest tool output are stubs, and the view meets the reset target.
    let (d, c) = plan(&ms, &mut chain, true);
    let fold = expect_fold(d);
    assert!(n - (fold.pinned + fold.covered) >= 6, "{fold:?}");
    assert_eq!(fold.retained.stubs_before, n - 2, "{fold:?}");
    assert!(fold.tokens_after <= 1500, "{fold:?}");
    let state = FoldState::after(&fold, Summary::default(), Ledger::default(), 0);
    chain.push(state.clone());
    let view = build_view_with(&ms, Some(&state), Placement::System, &c).unwrap();
    let tail = &view[view.len() - 6..];
    assert_eq!(stubs(tail), 2, "{tail:#?}");
    assert_eq!(tail[5], ms[n - 1], "the newest output stays verbatim");
    // The next request reuses the fold and shows the same stubs: its
    // prompt starts with every message of the fold's.
    let mut next = ms.clone();
    next.extend(agent_loop(9).split_off(n));
    let (d, c) = plan(&next, &mut chain, true);
    let Decision::NoFold(info) = d else {
        panic!("{d:?}")
    };
    let again = build_view_with(&next, info.base.as_ref(), Placement::System, &c).unwrap();
    assert_eq!(again[..view.len()], view[..], "cache-stable after the fold");
}

/// An agent loop of `steps` steps of `calls` parallel calls, each result
/// of about `tokens` tokens.
fn parallel_loop(steps: usize, calls: usize, tokens: u32) -> Vec<Value> {
    let mut ms = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "task"}),
    ];
    for k in 0..steps {
        let ids: Vec<String> = (0..calls).map(|j| format!("c{k}_{j}")).collect();
        let tool_calls: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "sh", "arguments": "{}"}}))
            .collect();
        ms.push(json!({"role": "assistant", "content": format!("m{}-call", ms.len()), "tool_calls": tool_calls}));
        for id in ids {
            ms.push(json!({"role": "tool", "tool_call_id": id,
                "content": format!("m{}-{id}\n~{tokens}", ms.len())}));
        }
    }
    ms
}

/// The fold `ms` gets with `reset_ratio` 0.5 (a 2,500-token target in the
/// 5,000-token window, trigger at 4,000), stubs riding on it.
fn fold_of(ms: &[Value]) -> foldgate::fold::FoldPlan {
    let c = compression(ms, true);
    let raw: Vec<u32> = ms.iter().map(count).collect();
    let counts = c.counts(&raw, |t| t);
    let stubbed = c.stubbed(&counts, |t| t);
    let policy = Policy {
        reset_ratio: 0.5,
        ..policy()
    };
    let chain = FoldChain::new();
    let d = decide_stubbed(
        ms,
        (&counts, &stubbed),
        &chain,
        &policy,
        &budget(),
        Placement::System,
        count,
    );
    expect_fold(d)
}

#[test]
fn a_fold_leaves_four_steps_of_room_sized_by_the_tokens_per_step() {
    // Steps of two ~320-token results: ~680 tokens a step. Four of them
    // below the 4,000-token trigger is a view of at most ~1,280 tokens,
    // deeper than the ratio's 2,500.
    let ms = parallel_loop(6, 2, 320);
    let fold = fold_of(&ms);
    let per_step = fold.retained.step_tokens;
    assert!((600..800).contains(&per_step), "{per_step}");
    assert!(
        u64::from(fold.tokens_after) <= 4_000 - 4 * u64::from(per_step),
        "{fold:?}"
    );
    // Small steps (~110 tokens) keep the ratio's target: the fold stops
    // as soon as the view is under 2,500.
    let small = parallel_loop(40, 1, 100);
    let fold = fold_of(&small);
    assert!(fold.retained.step_tokens < 150, "{fold:?}");
    assert!(
        (2_000..=2_500).contains(&fold.tokens_after),
        "the ratio's target, not deeper: {fold:?}"
    );
}
