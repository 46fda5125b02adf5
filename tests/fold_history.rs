//! Case tests for the fold engine's history rules added with the ledger:
//! re-sent older histories, rebuilds after `max_depth`, the idle trigger,
//! and the ledger's place in the rendered summary.

use foldgate::config::Placement;
use foldgate::fold::ledger::Ledger;
use foldgate::fold::{Decision, FoldChain, FoldState, Reason, Summary, build_view};
use serde_json::{Value, json};
use std::time::Duration;

use crate::fold_support;
use fold_support::*;

/// Folds `ms` once more on top of `chain`, with a summary naming the fold.
fn fold_at(ms: &[Value], chain: &mut FoldChain, window: u32) -> FoldState {
    let pol = policy_keeping(4);
    fold_once(ms, chain, &pol, &budget(window), Placement::System).1
}

fn policy_keeping(preserve_recent: usize) -> foldgate::config::Policy {
    foldgate::config::Policy {
        preserve_recent,
        ..policy()
    }
}

/// Verbatim messages after the summary message in a view.
fn verbatim_after_summary(view: &[Value]) -> usize {
    let at = view
        .iter()
        .position(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("Summary of the earlier"))
        })
        .expect("a summary message");
    view.len() - at - 1
}

/// A chain with a fold of the first 10 messages of a 30-pair history and
/// one of its first 56 (made from the whole history), and a re-sent prefix
/// that ends one message after the second fold's span.
fn resent_setup() -> (FoldChain, Vec<Value>, FoldState, FoldState) {
    let long = chat(30, 40);
    let first = state_for(&long[..12], 10, None, Summary::default());
    let mut second = state_for(&long, 56, None, Summary::default());
    second.id = "second".into();
    second.depth = 2;
    let mut chain = FoldChain::new();
    chain.push(first.clone());
    chain.push(second.clone());
    (chain, long[..1 + 56 + 1].to_vec(), first, second)
}

#[test]
fn a_resent_older_history_does_not_get_a_later_fold_that_leaves_too_little() {
    let (chain, resent, first, _) = resent_setup();
    let pol = policy_keeping(4);
    // 47 messages of 44 tokens after the first fold fit under 0.8 × 4000.
    let d = decide(&resent, &chain, &pol, &budget(4000), Placement::System);
    let Decision::NoFold(info) = d else {
        panic!("the earlier fold serves the request: {d:?}")
    };
    let base = info.base.expect("the earlier fold applies");
    assert_eq!(base.id, first.id);
    let view = build_view(&resent, Some(&base), Placement::System).unwrap();
    assert!(verbatim_after_summary(&view) >= 4, "{view:?}");
}

#[test]
fn a_resent_history_keeps_the_later_fold_when_nothing_earlier_fits() {
    let (chain, resent, _, second) = resent_setup();
    let pol = policy_keeping(4);
    // Under a 1000-token window the earlier fold's view crosses the trigger.
    let info = match decide(&resent, &chain, &pol, &budget(1000), Placement::System) {
        Decision::NoFold(info) => info,
        Decision::Fold(plan) => panic!("unexpected fold {plan:?}"),
        Decision::CannotFit(c) => c.view,
    };
    assert_eq!(info.base.map(|b| b.id), Some(second.id));
}

#[test]
fn max_depth_rebuilds_from_the_raw_messages() {
    let mut chain = FoldChain::new();
    let mut ms = chat(12, 40);
    let pol = foldgate::config::Policy {
        max_depth: 2,
        ..policy()
    };
    let b = budget(1000);
    let mut depths = Vec::new();
    for round in 0..4 {
        let (plan, state) = fold_once(&ms, &mut chain, &pol, &b, Placement::System);
        if plan.rebuild {
            // Every message of the new span but a kept one is summarized again.
            let expected: Vec<usize> = (1..1 + plan.covered)
                .filter(|&i| Some(i) != plan.kept_user.map(|k| k + 1))
                .collect();
            assert_eq!(plan.fold, expected, "round {round}");
        }
        depths.push(state.depth);
        for i in 0..8 {
            ms.push(m("user", &format!("r{round}u{i}"), 40));
            ms.push(m("assistant", &format!("r{round}a{i}"), 40));
        }
    }
    assert_eq!(depths, vec![1, 2, 1, 2]);
}

#[test]
fn idle_conversations_fold_after_the_configured_time() {
    let mut chain = FoldChain::new();
    let ms = chat(12, 40);
    let state = fold_at(&ms, &mut chain, 1000);
    let mut next = ms.clone();
    for i in 0..3 {
        next.push(m("user", &format!("n{i}"), 10));
        next.push(m("assistant", &format!("n{i}"), 10));
    }
    let pol = foldgate::config::Policy {
        idle_fold_after: Some(Duration::from_secs(600)),
        cooldown_messages: 100,
        ..policy_keeping(4)
    };
    let at = |now: u64| foldgate::fold::Budget {
        now_unix: now,
        ..budget(1000)
    };
    let soon = decide(
        &next,
        &chain,
        &pol,
        &at(state.created_at + 599),
        Placement::System,
    );
    assert!(matches!(soon, Decision::NoFold(_)), "{soon:?}");
    let later = decide(
        &next,
        &chain,
        &pol,
        &at(state.created_at + 600),
        Placement::System,
    );
    let Decision::Fold(plan) = later else {
        panic!("{later:?}")
    };
    assert_eq!(plan.reason, Reason::Idle);
}

#[test]
fn the_ledger_renders_after_the_summary_and_is_frozen() {
    let ms = chat(6, 40);
    let summary = Summary {
        summary: "Work on the parser.".into(),
        ..Default::default()
    };
    let folded = [
        json!({"role": "user", "content": "Deploy v2.14.1 to db-03.internal.example on port 5433."}),
    ];
    let refs: Vec<&Value> = folded.iter().collect();
    let update = Ledger::after_fold(
        &Ledger::default(),
        None,
        &refs,
        &summary.render(4),
        500,
        &|s: &str| (s.len() as u32).div_ceil(4),
    );
    let mut state = state_for(&ms, 4, None, summary);
    state.ledger = update.ledger;
    let text = state.render();
    let ledger_at = text
        .find(foldgate::fold::ledger::LEDGER_HEADING)
        .expect("ledger");
    assert!(text[..ledger_at].contains("Work on the parser."));
    for value in ["v2.14.1", "db-03.internal.example", "5433"] {
        assert!(
            text[ledger_at..].contains(value),
            "{value} missing from {text}"
        );
    }
    let again: FoldState = serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
    assert_eq!(again.render(), text);
    let view = build_view(&ms, Some(&state), Placement::System).unwrap();
    assert_eq!(view[1]["content"], json!(text));
}

#[test]
fn states_stored_before_the_ledger_still_load() {
    let ms = chat(6, 40);
    let state = state_for(&ms, 4, None, Summary::default());
    let mut stored = serde_json::to_value(&state).unwrap();
    stored.as_object_mut().unwrap().remove("ledger");
    let loaded: FoldState = serde_json::from_value(stored).unwrap();
    assert!(loaded.ledger.is_empty());
}
