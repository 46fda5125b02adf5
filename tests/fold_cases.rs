//! Case tests for the fold engine: triggers and their priority, hysteresis,
//! cooldown, cut rules (tool pairs, agent loops, giant messages), placements,
//! state matching, and the `strict-memory` example config.

use foldgate::config::{Config, Placement, Policy};
use foldgate::fold::ledger::Ledger;
use foldgate::fold::{
    ACK_TEXT, Budget, CannotFit, Decision, FoldChain, FoldState, Reason, Summary, build_view,
    view_differs,
};
use serde_json::{Value, json};

use crate::fold_support;
use fold_support::*;

// ---- triggers ---------------------------------------------------------------

#[test]
fn below_every_trigger_nothing_changes() {
    let ms = chat(5, 40);
    let d = decide(
        &ms,
        &FoldChain::new(),
        &policy(),
        &budget(1000),
        Placement::System,
    );
    let Decision::NoFold(info) = d else {
        panic!("{d:?}")
    };
    assert!(info.base.is_none() && !info.changed() && info.skipped.is_none());
    assert_eq!(info.tokens, 420);
    let view = build_view(&ms, None, Placement::System).unwrap();
    assert!(!view_differs(&ms, &view));
}

#[test]
fn token_trigger_folds_down_to_the_reset_target() {
    let ms = chat(10, 40); // 20 + 800 tokens, trigger at 800
    let mut chain = FoldChain::new();
    let (plan, state) = fold_once(&ms, &mut chain, &policy(), &budget(1000), Placement::System);
    assert_eq!(plan.reason, Reason::Token);
    assert_eq!(plan.tokens_before, 820);
    // Reset target 500 = 20 pinned + 50 reserve + a tail of at most 430.
    assert_eq!(plan.fold, (1..11).collect::<Vec<_>>());
    assert_eq!(
        (plan.covered, plan.kept_user, plan.tokens_after),
        (10, None, 470)
    );
    let view = build_view(&ms, Some(&state), Placement::System).unwrap();
    assert_eq!(view.len(), 12);
    assert_eq!(view[2], ms[11]);
    assert!(view_tokens(&view) <= 500);
}

#[test]
fn hysteresis_keeps_the_next_turn_from_folding_again() {
    let mut ms = chat(10, 40);
    let mut chain = FoldChain::new();
    let (_, first) = fold_once(&ms, &mut chain, &policy(), &budget(1000), Placement::System);
    ms.push(m("user", "next", 40));
    let d = decide(&ms, &chain, &policy(), &budget(1000), Placement::System);
    let Decision::NoFold(info) = d else {
        panic!("{d:?}")
    };
    assert_eq!(info.base.as_ref(), Some(&first));
    assert!(info.changed() && info.tokens < 800);
}

#[test]
fn cooldown_holds_the_token_trigger_until_enough_new_messages() {
    let mut ms = chat(10, 40);
    let mut chain = FoldChain::new();
    let pol = Policy {
        cooldown_messages: 4,
        ..policy()
    };
    fold_once(&ms, &mut chain, &pol, &budget(1000), Placement::System);
    ms.push(m("user", "big", 200));
    ms.push(m("assistant", "big", 200));
    let d = decide(&ms, &chain, &pol, &budget(1000), Placement::System);
    let Decision::NoFold(info) = d else {
        panic!("cooldown ignored: {d:?}")
    };
    assert!(info.tokens >= 800 && info.tokens <= 1000, "{}", info.tokens);
    ms.push(m("user", "u", 10));
    ms.push(m("assistant", "a", 10));
    let plan = expect_fold(decide(&ms, &chain, &pol, &budget(1000), Placement::System));
    assert_eq!(plan.reason, Reason::Token);
    assert_eq!(plan.base.as_ref().map(|b| b.depth), Some(1));
}

#[test]
fn emergency_overrides_cooldown_and_min_messages() {
    let mut ms = chat(10, 40);
    let mut chain = FoldChain::new();
    let pol = Policy {
        cooldown_messages: 50,
        min_messages: 500,
        ..policy()
    };
    let b = Budget {
        output_reserve: 100,
        ..budget(1000)
    };
    ms.push(m("user", "more", 90)); // 910 + 100 > 1000
    let (plan, _) = fold_once(&ms, &mut chain, &pol, &b, Placement::System);
    assert_eq!(plan.reason, Reason::Emergency);
    ms.push(m("assistant", "huge", 500));
    ms.push(m("user", "again", 40));
    let plan = expect_fold(decide(&ms, &chain, &pol, &b, Placement::System));
    assert_eq!(plan.reason, Reason::Emergency);
    assert!(plan.tokens_after + 100 <= 1000);
}

#[test]
fn overflow_trigger_counts_unfolded_messages() {
    let pol = Policy {
        preserve_recent: 4,
        overflow_buffer: 2,
        ..policy()
    };
    let ms = chat(3, 10); // 6 unfolded: not more than 4 + 2
    let d = decide(
        &ms,
        &FoldChain::new(),
        &pol,
        &budget(10_000),
        Placement::System,
    );
    assert!(matches!(d, Decision::NoFold(_)), "{d:?}");
    let mut ms = ms;
    ms.push(m("user", "seventh", 10));
    let plan = expect_fold(decide(
        &ms,
        &FoldChain::new(),
        &pol,
        &budget(10_000),
        Placement::System,
    ));
    assert_eq!(plan.reason, Reason::Overflow);
    // Tail of preserve_recent..=preserve_recent+buffer messages, starting at a user.
    assert_eq!(plan.fold, vec![1, 2]);
    assert_eq!(ms[plan.fold.len() + 1]["role"], "user");
}

#[test]
fn safety_trigger_counts_user_messages_since_the_last_fold() {
    let pol = Policy {
        safety_user_turns: 3,
        ..policy()
    };
    let mut chain = FoldChain::new();
    let mut ms = chat(2, 10);
    assert!(matches!(
        decide(&ms, &chain, &pol, &budget(10_000), Placement::System),
        Decision::NoFold(_)
    ));
    ms.push(m("user", "third", 10));
    let (plan, _) = fold_once(&ms, &mut chain, &pol, &budget(10_000), Placement::System);
    assert_eq!(plan.reason, Reason::Safety);
    assert_eq!(plan.user_turns, 3);
    ms.push(m("assistant", "ok", 10));
    ms.push(m("user", "fourth", 10));
    ms.push(m("assistant", "ok", 10));
    ms.push(m("user", "fifth", 10));
    assert!(matches!(
        decide(&ms, &chain, &pol, &budget(10_000), Placement::System),
        Decision::NoFold(_)
    ));
    ms.push(m("assistant", "ok", 10));
    ms.push(m("user", "sixth", 10));
    let plan = expect_fold(decide(
        &ms,
        &chain,
        &pol,
        &budget(10_000),
        Placement::System,
    ));
    assert_eq!(plan.reason, Reason::Safety);
}

#[test]
fn trigger_priority_is_token_then_overflow_then_safety() {
    let all = Policy {
        overflow_buffer: 1,
        safety_user_turns: 1,
        ..policy()
    };
    let ms = chat(10, 40);
    let token = expect_fold(decide(
        &ms,
        &FoldChain::new(),
        &all,
        &budget(1000),
        Placement::System,
    ));
    assert_eq!(token.reason, Reason::Token);
    let overflow = expect_fold(decide(
        &ms,
        &FoldChain::new(),
        &all,
        &budget(100_000),
        Placement::System,
    ));
    assert_eq!(overflow.reason, Reason::Overflow);
    let safety_only = Policy {
        overflow_buffer: 0,
        ..all
    };
    let safety = expect_fold(decide(
        &ms,
        &FoldChain::new(),
        &safety_only,
        &budget(100_000),
        Placement::System,
    ));
    assert_eq!(safety.reason, Reason::Safety);
}

#[test]
fn min_messages_holds_every_trigger_but_emergency() {
    let pol = Policy {
        min_messages: 30,
        safety_user_turns: 1,
        overflow_buffer: 1,
        ..policy()
    };
    let ms = chat(10, 40);
    assert!(matches!(
        decide(
            &ms,
            &FoldChain::new(),
            &pol,
            &budget(1000),
            Placement::System
        ),
        Decision::NoFold(_)
    ));
}

// ---- cuts -------------------------------------------------------------------

/// sys, then a user question answered with parallel tool calls, repeated.
fn parallel_tools(rounds: usize) -> Vec<Value> {
    let mut ms = vec![m("system", "sys", 20)];
    for r in 0..rounds {
        let (a, b, c) = (format!("r{r}a"), format!("r{r}b"), format!("r{r}c"));
        ms.push(m("user", &format!("q{r}"), 30));
        ms.push(call(&[&a, &b, &c]));
        ms.push(tool(&a, 30));
        ms.push(tool(&b, 30));
        ms.push(tool(&c, 30));
        ms.push(m("assistant", &format!("ans{r}"), 30));
    }
    ms
}

#[test]
fn parallel_tool_calls_and_results_stay_together() {
    for preserve in 2..9 {
        let ms = parallel_tools(6);
        let pol = Policy {
            preserve_recent: preserve,
            overflow_buffer: 1,
            ..policy()
        };
        let plan = expect_fold(decide(
            &ms,
            &FoldChain::new(),
            &pol,
            &budget(100_000),
            Placement::System,
        ));
        let state = FoldState::after(&plan, summarize(&plan), Ledger::default(), 0);
        let view = build_view(&ms, Some(&state), Placement::System).unwrap();
        assert_ne!(view[2]["role"], "tool");
        assert_tool_pairs_whole(&view);
        assert_no_drop(&ms, &view, &plan.fold);
        assert!(view.len() - 2 >= preserve);
    }
}

#[test]
fn the_tail_never_starts_with_a_tool_message_and_prefers_a_user_message() {
    let ms = parallel_tools(8);
    for window in [900, 1200, 1500, 2000] {
        let plan = expect_fold(decide(
            &ms,
            &FoldChain::new(),
            &policy(),
            &budget(window),
            Placement::System,
        ));
        let first = &ms[plan.pinned + plan.covered];
        assert_eq!(first["role"], "user", "window {window}");
    }
}

#[test]
fn names_unknown_fields_and_multipart_content_are_kept_verbatim() {
    let mut ms = chat(6, 70);
    ms.push(json!({"role": "user", "name": "alice", "x-custom": {"keep": [1, 2]},
        "content": [{"type": "text", "text": text("parts", 40)}, {"type": "image_url", "image_url": {"url": "data:x"}}]}));
    ms.push(json!({"role": "assistant", "name": "bot", "content": "sure", "refusal": null}));
    ms.push(json!({"content": "last", "role": "user", "zz": true}));
    let plan = expect_fold(decide(
        &ms,
        &FoldChain::new(),
        &policy(),
        &budget(1000),
        Placement::System,
    ));
    let state = FoldState::after(&plan, summarize(&plan), Ledger::default(), 0);
    let view = build_view(&ms, Some(&state), Placement::System).unwrap();
    let tail = &ms[plan.pinned + plan.covered..];
    assert_eq!(&view[view.len() - tail.len()..], tail);
    assert_eq!(
        serde_json::to_string(&view[view.len() - 1]).unwrap(),
        r#"{"content":"last","role":"user","zz":true}"#
    );
}

#[test]
fn consecutive_user_messages_are_never_the_last_folded() {
    let mut ms = chat(6, 60);
    ms.push(m("user", "one", 60));
    ms.push(m("user", "two", 60));
    ms.push(m("user", "three", 200));
    let plan = expect_fold(decide(
        &ms,
        &FoldChain::new(),
        &policy(),
        &budget(1000),
        Placement::System,
    ));
    let last_user = ms.len() - 1;
    assert!(!plan.fold.contains(&last_user));
    assert_eq!(ms[plan.pinned + plan.covered]["role"], "user");
}

#[test]
fn leading_developer_messages_are_pinned() {
    let mut ms = vec![m("developer", "dev", 20), m("system", "sys", 20)];
    ms.extend(chat(10, 40).into_iter().skip(1));
    let plan = expect_fold(decide(
        &ms,
        &FoldChain::new(),
        &policy(),
        &budget(1000),
        Placement::System,
    ));
    assert_eq!(plan.pinned, 2);
    assert!(plan.fold.iter().all(|&i| i >= 2));
    let state = FoldState::after(&plan, summarize(&plan), Ledger::default(), 0);
    let view = build_view(&ms, Some(&state), Placement::System).unwrap();
    assert_eq!(&view[..2], &ms[..2]);
    assert_eq!(view[2]["role"], "system");
}

/// sys, one user task, then `exchanges` tool round trips.
fn agent_loop(exchanges: usize) -> Vec<Value> {
    let mut ms = vec![m("system", "sys", 20), m("user", "task: fix the build", 30)];
    for i in 0..exchanges {
        push_exchange(&mut ms, i);
    }
    ms
}

fn push_exchange(ms: &mut Vec<Value>, i: usize) {
    let id = format!("call_{i}");
    ms.push(call(&[&id]));
    ms.push(tool(&id, 40));
}

#[test]
fn agent_loop_keeps_the_task_verbatim_after_the_summary() {
    let mut ms = agent_loop(40);
    let pol = Policy {
        preserve_recent: 6,
        ..policy()
    };
    let b = budget(3000);
    let mut chain = FoldChain::new();
    let (plan, state) = fold_once(&ms, &mut chain, &pol, &b, Placement::System);
    assert_eq!(plan.kept_user, Some(0));
    assert!(!plan.fold.contains(&1));
    let view = build_view(&ms, Some(&state), Placement::System).unwrap();
    assert_eq!(view[2], ms[1], "task right after the summary");
    assert_eq!(view[3]["role"], "assistant");
    assert!(view[3]["tool_calls"].is_array());
    assert_tool_pairs_whole(&view);
    assert_no_drop(&ms, &view, &plan.fold);
    assert!(view_tokens(&view) <= 1500);

    // The loop goes on: the next fold keeps the same task.
    let mut folded = plan.fold.clone();
    for i in 40..80 {
        push_exchange(&mut ms, i);
    }
    let (plan, state) = fold_once(&ms, &mut chain, &pol, &b, Placement::System);
    assert_eq!(plan.kept_user, Some(0));
    assert!(!plan.fold.contains(&1));
    folded.extend(&plan.fold);
    let view = build_view(&ms, Some(&state), Placement::System).unwrap();
    assert_eq!(view[2], ms[1]);
    assert_no_drop(&ms, &view, &folded);

    // A new task arrives: the next fold folds the old kept task too.
    ms.push(m("assistant", "build fixed", 30));
    ms.push(m("user", "now the tests", 30));
    for i in 80..120 {
        push_exchange(&mut ms, i);
    }
    let (plan, state) = fold_once(&ms, &mut chain, &pol, &b, Placement::System);
    assert_eq!(plan.fold.first(), Some(&1), "old kept task folded first");
    let new_task = ms.len() - 81;
    assert_eq!(plan.kept_user, Some(new_task - 1));
    folded.extend(&plan.fold);
    let view = build_view(&ms, Some(&state), Placement::System).unwrap();
    assert_eq!(view[2], ms[new_task]);
    assert!(!view.contains(&ms[1]));
    assert_no_drop(&ms, &view, &folded);
    assert_eq!(state.depth, 3);
}

#[test]
fn a_giant_message_cannot_fit_and_nothing_is_dropped() {
    let mut ms = chat(3, 20);
    ms.push(m("user", "giant paste", 5000));
    let d = decide(
        &ms,
        &FoldChain::new(),
        &policy(),
        &budget(1000),
        Placement::System,
    );
    let Decision::CannotFit(CannotFit {
        reason,
        view,
        smallest,
        limit,
    }) = d
    else {
        panic!("{d:?}")
    };
    assert_eq!(reason, Reason::Emergency);
    assert!(view.base.is_none());
    assert_eq!(limit, 1000);
    assert!(smallest.is_some_and(|s| s > 1000));
}

#[test]
fn a_short_conversation_with_no_valid_cut_cannot_fit() {
    let ms = vec![m("system", "sys", 20), m("user", "giant", 5000)];
    let d = decide(
        &ms,
        &FoldChain::new(),
        &policy(),
        &budget(1000),
        Placement::System,
    );
    assert!(
        matches!(d, Decision::CannotFit(CannotFit { smallest: None, .. })),
        "{d:?}"
    );
}

#[test]
fn a_trigger_without_a_valid_cut_is_reported_but_not_an_error() {
    let pol = Policy {
        safety_user_turns: 1,
        ..policy()
    };
    let ms = vec![m("system", "sys", 20), m("user", "hi", 10)];
    let d = decide(
        &ms,
        &FoldChain::new(),
        &pol,
        &budget(1000),
        Placement::System,
    );
    let Decision::NoFold(info) = d else {
        panic!("{d:?}")
    };
    assert_eq!(info.skipped, Some(Reason::Safety));
    assert!(!info.changed());
}

#[test]
fn a_large_tail_shrinks_below_preserve_recent_down_to_two() {
    let mut ms = chat(4, 20);
    for i in 0..3 {
        ms.push(m("user", &format!("big{i}"), 300));
        ms.push(m("assistant", &format!("ok{i}"), 20));
    }
    let pol = Policy {
        preserve_recent: 6,
        ..policy()
    };
    let plan = expect_fold(decide(
        &ms,
        &FoldChain::new(),
        &pol,
        &budget(1000),
        Placement::System,
    ));
    assert_eq!(ms.len() - plan.pinned - plan.covered, 2);
    assert!(plan.tokens_after <= 500);
}

// ---- placement --------------------------------------------------------------

fn placed(ms: &[Value], covered: usize, kept: Option<usize>, placement: Placement) -> Vec<Value> {
    let summary = Summary {
        summary: "Story.".into(),
        facts: vec!["f1".into()],
        ..Default::default()
    };
    build_view(ms, Some(&state_for(ms, covered, kept, summary)), placement).unwrap()
}

const RENDERED: &str = "[foldgate] Summary of the earlier conversation (2 messages folded):\n\nStory.\n\n## Facts\n- f1";

#[test]
fn system_placement_adds_a_system_message_after_the_pinned_head() {
    let ms = chat(3, 10);
    let view = placed(&ms, 2, None, Placement::System);
    assert_eq!(
        view[..2],
        [
            ms[0].clone(),
            json!({"role": "system", "content": RENDERED})
        ]
    );
    assert_eq!(view[2..], ms[3..]);
}

#[test]
fn merge_placement_appends_to_the_last_pinned_message() {
    let ms = chat(3, 10);
    let view = placed(&ms, 2, None, Placement::Merge);
    let merged = format!("{}\n\n{RENDERED}", ms[0]["content"].as_str().unwrap());
    assert_eq!(view[0], json!({"role": "system", "content": merged}));
    assert_eq!(view[1..], ms[3..]);

    let mut parts = ms.clone();
    parts[0] = json!({"role": "system", "content": [{"type": "text", "text": "rules"}]});
    let view = placed(&parts, 2, None, Placement::Merge);
    assert_eq!(
        view[0]["content"][1],
        json!({"type": "text", "text": RENDERED})
    );

    let unpinned: Vec<Value> = ms[1..].to_vec();
    let view = placed(&unpinned, 2, None, Placement::Merge);
    assert_eq!(
        view[0],
        json!({"role": "system", "content": RENDERED}),
        "falls back to system"
    );
}

#[test]
fn user_placement_alternates_roles_with_a_fixed_acknowledgement() {
    let ms = chat(3, 10);
    let view = placed(&ms, 2, None, Placement::User);
    assert_eq!(view[1], json!({"role": "user", "content": RENDERED}));
    assert_eq!(view[2], json!({"role": "assistant", "content": ACK_TEXT}));
    assert_eq!(view[3..], ms[3..]);
    // Next message is the assistant: no acknowledgement needed.
    let view = placed(&ms, 3, None, Placement::User);
    assert_eq!(view[2], ms[4]);
}

#[test]
fn rendering_is_deterministic_across_serde_round_trips() {
    let ms = agent_loop(30);
    let mut chain = FoldChain::new();
    let (_, state) = fold_once(&ms, &mut chain, &policy(), &budget(2000), Placement::User);
    let stored = serde_json::to_string(&chain).unwrap();
    let back: FoldChain = serde_json::from_str(&stored).unwrap();
    assert_eq!(back, chain);
    for placement in [Placement::System, Placement::Merge, Placement::User] {
        let a = serde_json::to_vec(&build_view(&ms, Some(&state), placement).unwrap()).unwrap();
        let b = serde_json::to_vec(&build_view(&ms, back.latest(), placement).unwrap()).unwrap();
        assert_eq!(a, b);
    }
}

// ---- state matching ---------------------------------------------------------

#[test]
fn an_edited_history_never_reuses_a_state() {
    let mut ms = chat(10, 40);
    let mut chain = FoldChain::new();
    let (_, state) = fold_once(&ms, &mut chain, &policy(), &budget(1000), Placement::System);
    assert_eq!(chain.best_match(&ms), Some(&state));
    ms[3]["content"] = json!("edited");
    assert_eq!(chain.best_match(&ms), None);
    assert!(matches!(
        build_view(&ms, Some(&state), Placement::System),
        Err(foldgate::fold::FoldError::StateMismatch { .. })
    ));
    let d = decide(&ms, &chain, &policy(), &budget(1000), Placement::System);
    assert!(d.base().is_none());
}

#[test]
fn a_branched_history_gets_the_longest_fold_that_still_matches() {
    let mut ms = chat(10, 40);
    let mut chain = FoldChain::new();
    let (_, first) = fold_once(&ms, &mut chain, &policy(), &budget(1000), Placement::System);
    for i in 0..8 {
        ms.push(m("user", &format!("v{i}"), 40));
        ms.push(m("assistant", &format!("w{i}"), 40));
    }
    let (_, second) = fold_once(&ms, &mut chain, &policy(), &budget(1000), Placement::System);
    assert!(second.covered > first.covered);
    assert_eq!(chain.best_match(&ms), Some(&second));
    // Edit a message inside the second fold's span but after the first's.
    let mut branch = ms.clone();
    branch[first.covered + 3]["content"] = json!("another branch");
    assert_eq!(chain.best_match(&branch), Some(&first));
}

// ---- example config ---------------------------------------------------------

#[test]
fn strict_memory_example_loads_with_its_policy() {
    let config = Config::from_toml(include_str!("../examples/strict-memory.toml")).unwrap();
    let (provider, _) = config.provider_for(Some("gpt-4o")).unwrap();
    let p = config.policy_for(provider, "gpt-4o");
    assert_eq!(p.trigger_ratio, 0.70);
    assert_eq!(p.preserve_recent, 6);
    assert_eq!(p.overflow_buffer, 4);
    assert_eq!(p.safety_user_turns, 10);
    assert_eq!(config.summary.placement, Placement::System);

    // Eleven unfolded messages fold; ten do not.
    let mut ms = chat(5, 10);
    let b = budget(100_000);
    assert!(matches!(
        decide(&ms, &FoldChain::new(), &p, &b, Placement::System),
        Decision::NoFold(_)
    ));
    ms.push(m("user", "eleventh", 10));
    let plan = expect_fold(decide(&ms, &FoldChain::new(), &p, &b, Placement::System));
    assert_eq!(plan.reason, Reason::Overflow);
    assert!(ms.len() - plan.pinned - plan.covered >= 6);
}
