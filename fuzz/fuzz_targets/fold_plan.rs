//! Fold planning over arbitrary message arrays: roles in any order, tool
//! results with or without their call, parallel calls, pinned heads, any
//! policy and budget. The client resends a growing history; each request
//! is planned against the conversation's fold chain, a fold gets a fake
//! summary `S<k>` whose folded set is tracked, and every view is checked
//! against the fold contract's invariants (`tests/fold_support/invariants.rs`,
//! shared with the property tests): every message absent from the view is
//! folded into the summary shown, tool results stay with their calls, the
//! last user message and the pinned head stay. Plans are deterministic and
//! no message is folded twice.

#![no_main]

#[path = "../../tests/fold_support/mod.rs"]
mod fold_support;

use arbitrary::Arbitrary;
use fold_support::decide_with;
use fold_support::invariants::{check_view, count, label, record_fold};
use foldgate::config::{Placement, Policy};
use foldgate::fold::{Budget, Decision, FoldChain, build_view};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};

/// One message; the numbers are sizes (in units of 8 tokens).
#[derive(Arbitrary, Debug)]
enum Shape {
    System(u8),
    Developer(u8),
    User(u8),
    /// A user message with content parts.
    UserParts(u8),
    Assistant(u8),
    /// An assistant message calling 1 to 4 tools.
    Calls(u8, u8),
    /// A tool result for call `k` of the latest calls (an orphan when
    /// there were none).
    Tool(u8, u8),
    /// A role foldgate does not know.
    Other(u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    messages: Vec<Shape>,
    /// Messages added between two requests, minus one.
    steps: Vec<u8>,
    trigger: u8,
    reset: u8,
    preserve_recent: u8,
    overflow_buffer: u8,
    safety_user_turns: u8,
    cooldown: u8,
    min_messages: u8,
    window: u16,
    reserve_percent: u8,
    overhead: u8,
    summary_reserve: u8,
    placement: u8,
}

fn text(label: &str, size: u8) -> String {
    format!("{label} ~{}", u32::from(size) * 8)
}

fn build(shapes: &[Shape]) -> Vec<Value> {
    let mut ms = Vec::new();
    let mut calls: Vec<String> = Vec::new();
    for shape in shapes.iter().take(80) {
        let label = format!("m{}", ms.len());
        let m = match *shape {
            Shape::System(s) => json!({"role": "system", "content": text(&label, s)}),
            Shape::Developer(s) => json!({"role": "developer", "content": text(&label, s)}),
            Shape::User(s) => json!({"role": "user", "content": text(&label, s)}),
            Shape::UserParts(s) => {
                json!({"role": "user", "content": [{"type": "text", "text": text(&label, s)}]})
            }
            Shape::Assistant(s) => json!({"role": "assistant", "content": text(&label, s)}),
            Shape::Calls(n, s) => {
                calls = (0..=n % 4).map(|k| format!("c{}_{k}", ms.len())).collect();
                let list: Vec<Value> = calls
                    .iter()
                    .map(|id| json!({"id": id, "type": "function", "function": {"name": "sh", "arguments": "{}"}}))
                    .collect();
                json!({"role": "assistant", "content": text(&label, s), "tool_calls": list})
            }
            Shape::Tool(k, s) => {
                let id = match calls.len() {
                    0 => format!("orphan{}", ms.len()),
                    n => calls[usize::from(k) % n].clone(),
                };
                json!({"role": "tool", "tool_call_id": id, "content": text(&label, s)})
            }
            Shape::Other(s) => json!({"role": "function", "name": "f", "content": text(&label, s)}),
        };
        ms.push(m);
    }
    ms
}

fn setup(input: &Input) -> (Policy, Budget, Placement) {
    let trigger = 0.3 + f64::from(input.trigger % 71) / 100.0;
    let policy = Policy {
        trigger_ratio: trigger,
        reset_ratio: (0.2 + f64::from(input.reset % 81) / 100.0).min(trigger),
        preserve_recent: usize::from(input.preserve_recent % 10),
        overflow_buffer: usize::from(input.overflow_buffer % 8),
        safety_user_turns: usize::from(input.safety_user_turns % 6),
        cooldown_messages: usize::from(input.cooldown % 5),
        min_messages: usize::from(input.min_messages % 8),
        ..Policy::default()
    };
    let window = 200 + u32::from(input.window % 8000);
    let budget = Budget {
        context_window: window,
        output_reserve: window * u32::from(input.reserve_percent % 26) / 100,
        overhead: u32::from(input.overhead),
        summary_reserve: 20 + u32::from(input.summary_reserve),
        now_unix: 0,
    };
    let placement = match input.placement % 3 {
        0 => Placement::System,
        1 => Placement::Merge,
        _ => Placement::User,
    };
    (policy, budget, placement)
}

fuzz_target!(|input: Input| {
    let history = build(&input.messages);
    if history.is_empty() {
        return;
    }
    let (policy, budget, placement) = setup(&input);
    let index: HashMap<String, usize> = history
        .iter()
        .enumerate()
        .map(|(i, m)| (label(m).to_string(), i))
        .collect();
    let mut points = Vec::new();
    let mut n = 0;
    for step in input.steps.iter().chain(std::iter::repeat(&3)) {
        n = (n + 1 + usize::from(step % 8)).min(history.len());
        points.push(n);
        if n == history.len() {
            break;
        }
    }
    let mut chain = FoldChain::new();
    let mut folds: HashMap<String, BTreeSet<usize>> = HashMap::new();
    for (step, &n) in points.iter().enumerate() {
        let ms = &history[..n];
        let decide = || decide_with(ms, &chain, &policy, &budget, placement, count);
        let decision = decide();
        assert_eq!(decision, decide(), "plan is deterministic");
        let state = match decision {
            Decision::NoFold(info) => info.base,
            Decision::CannotFit(c) => c.view.base,
            Decision::Fold(fold) => {
                let state = record_fold(&fold, &mut folds, step as u64);
                chain.push(state.clone());
                Some(state)
            }
        };
        let view = build_view(ms, state.as_ref(), placement).expect("the planned state matches");
        check_view(ms, &index, &view, state.as_ref(), &folds);
    }
});
