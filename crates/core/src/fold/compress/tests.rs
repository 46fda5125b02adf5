//! Unit tests of older-turn compression: selection in batches and stubs.
use super::*;
use serde_json::json;

fn settings(batch: usize) -> Compress {
    Compress {
        enabled: true,
        assistant: false,
        min_tokens: 100,
        after_turns: 2,
        batch,
        with_fold: true,
        when_it_pays: false,
    }
}

#[test]
fn candidates_are_old_long_tool_results_in_batches() {
    use Role::*;
    let roles: Vec<Option<Role>> = [
        Pinned, User, Assistant, Tool, Assistant, Tool, Tool, Assistant, Tool, User, Assistant,
        Tool, Assistant,
    ]
    .into_iter()
    .map(Some)
    .collect();
    let tokens = [50, 500, 500, 500, 10, 50, 500, 10, 500, 500, 10, 500, 10];
    // Turns start at 1, 3, 5, 8, 9, 11; index 8 has two after it, 11 none.
    // The 50-token result 5 is long enough with its step's other result (6).
    assert_eq!(select(&roles, &tokens, &settings(1), 2), [3, 5, 6, 8]);
    assert_eq!(select(&roles, &tokens, &settings(2), 2), [3, 5, 6, 8]);
    assert_eq!(select(&roles, &tokens, &settings(3), 2), [3, 5, 6]);
    assert_eq!(
        select(&roles, &tokens, &settings(5), 2),
        Vec::<usize>::new()
    );
    // The preserved tail is never compressed.
    assert_eq!(select(&roles, &tokens, &settings(1), 6), [3, 5, 6]);
    let assistant = Compress {
        assistant: true,
        ..settings(1)
    };
    assert_eq!(select(&roles, &tokens, &assistant, 2), [2, 3, 5, 6, 8]);
}

#[test]
fn a_stub_keeps_the_pair_and_names_what_it_was() {
    let long = format!(
        "total 4 files in /srv/app\n{}\nlistening on port 5433",
        "x ".repeat(400)
    );
    let ms = vec![
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_7", "name": "bash", "content": long}),
    ];
    let s = stub(&ms, 1, 420, true).unwrap();
    assert_eq!(s["role"], "tool");
    assert_eq!(s["tool_call_id"], "call_7");
    assert_eq!(s["name"], "bash");
    let text = s["content"].as_str().unwrap();
    assert!(text.starts_with(STUB_PREFIX), "{text}");
    assert!(text.contains("`bash`, call `call_7`; 420 tokens"), "{text}");
    assert!(
        text.contains("First line: total 4 files in /srv/app"),
        "{text}"
    );
    assert!(
        text.contains("- /srv/app") && text.contains("port 5433"),
        "{text}"
    );
    assert!(text.contains("query \"call_7\""), "{text}");
    assert_eq!(
        stub(&ms, 1, 420, true),
        Some(s),
        "the same bytes every time"
    );
    let quiet = stub(&ms, 1, 420, false).unwrap();
    assert!(!quiet.to_string().contains("foldgate_recall"), "{quiet}");
    // A stub that is not smaller than its message is not used.
    let count = |m: &Value| m["content"].as_str().map_or(0, |t| t.len() as u32 / 4);
    let all = Compress {
        min_tokens: 0,
        after_turns: 1,
        batch: 1,
        ..Compress::default()
    };
    let mut ms = ms;
    ms.push(json!({"role": "user", "content": "next"}));
    let raw = [10, 420, 1];
    assert_eq!(Compression::of(&ms, &raw, &all, 1, true, &count).len(), 1);
    assert!(Compression::of(&ms, &[10, 20, 1], &all, 1, true, &count).is_empty());
}

#[test]
fn a_stub_unused_for_the_idle_time_leaves_the_cache_and_is_made_again() {
    let ms = vec![
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "a.txt\n".repeat(300)}),
    ];
    let cache = StubCache::new(1 << 20, std::time::Duration::from_millis(200));
    let made = std::cell::Cell::new(0);
    let count = |_: &Value| {
        made.set(made.get() + 1);
        40
    };
    let get = || cache.get(&ms, 1, (7, 500), ("m", true), &count);
    let first = get();
    assert!(first.is_some());
    assert_eq!(get(), first);
    assert_eq!(made.get(), 1, "a stub in use is made once");
    std::thread::sleep(std::time::Duration::from_millis(400));
    cache.0.run_pending_tasks();
    assert_eq!(cache.0.entry_count(), 0, "unused past the idle time: gone");
    assert_eq!(get(), first, "made again, the same bytes");
    assert_eq!(made.get(), 2);
}

/// A cache hit gives the stub a fresh render gives, byte for byte, for
/// messages with fields around the content, after it, and without one;
/// an entry keeps the stub's text only and is charged its bytes.
#[test]
fn a_cached_stub_is_the_rendered_one_and_charged_its_text() {
    let ms = vec![
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "a.txt\n".repeat(300), "name": "ls"}),
        json!({"role": "assistant", "tool_calls": [], "reasoning": {"x": [1, 2]}}),
        json!({"content": [{"type": "text", "text": "answer ".repeat(200)}], "role": "assistant", "z": 1}),
    ];
    let cache = StubCache::new(1 << 20, std::time::Duration::from_secs(60));
    let count = |v: &Value| u32::try_from(v.to_string().len() / 4).unwrap_or(0);
    for i in 1..ms.len() {
        let id = crate::message::message_id(&ms[i]);
        let made = cache.get(&ms, i, (id, 500), ("m", true), &count);
        let hit = cache.get(&ms, i, (id, 500), ("m", true), &count);
        let fresh = stub(&ms, i, 500, true);
        assert!(fresh.is_some(), "{i}");
        assert_eq!(made.as_ref().map(|m| &m.0), fresh.as_ref(), "{i}");
        assert_eq!(hit, made, "{i}");
        assert_eq!(
            hit.map(|h| h.0.to_string()),
            fresh.map(|f| f.to_string()),
            "{i}: key order"
        );
    }
    cache.0.run_pending_tasks();
    let texts: u64 = (1..ms.len())
        .filter_map(|i| stub(&ms, i, 500, true)?["content"].as_str().map(str::len))
        .map(|n| n as u64 + u64::from(STUB_ENTRY_BYTES))
        .sum();
    assert_eq!(cache.0.entry_count(), 3);
    assert_eq!(cache.bytes(), texts);
}

/// An agent loop of `steps` steps, each one call and a 1,000-token result.
fn tool_loop(steps: usize) -> (Vec<Value>, Vec<u32>) {
    let mut ms = vec![
        json!({"role": "system", "content": "s"}),
        json!({"role": "user", "content": "task"}),
    ];
    let mut tokens = vec![10, 10];
    for k in 0..steps {
        let id = format!("c{k}");
        ms.push(json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "sh", "arguments": "{}"}}]}));
        ms.push(json!({"role": "tool", "tool_call_id": id, "content": format!("out {k}")}));
        tokens.extend([20, 1000]);
    }
    (ms, tokens)
}

fn shown_in(ms: &[Value], tokens: &[u32], settings: &Compress, room: Room) -> Vec<usize> {
    let c = Compression::within(ms, tokens, (settings, 2), room, &mut |i| {
        Some((
            json!({"role": "tool", "content": "stub"}),
            50 + u32::try_from(i).unwrap_or(0) % 2,
        ))
    });
    c.indices().collect()
}

#[test]
fn a_batch_is_shown_on_its_own_only_when_it_pays() {
    let pays = Compress {
        when_it_pays: true,
        ..settings(2)
    };
    let (ms, tokens) = tool_loop(8);
    let due = shown_in(&ms, &tokens, &settings(2), Room::of(0.8, 200_000));
    assert_eq!(due, [3, 5, 7, 9, 11, 13], "three batches are due");
    // A 200k window: nowhere near the trigger, and 2 × 950 tokens saved
    // over the few requests so far do not pay for rewriting the ~4,000
    // tokens after them at cache-write prices.
    assert!(shown_in(&ms, &tokens, &pays, Room::of(0.8, 200_000)).is_empty());
    // Off, or without a window to judge by: every due batch.
    assert_eq!(
        shown_in(&ms, &tokens, &settings(2), Room::of(0.8, 200_000)),
        due
    );
    assert_eq!(shown_in(&ms, &tokens, &pays, Room::default()), due);
    // A 12k window: 8 steps of ~1,020 tokens plus two more reach the
    // 9,600-token trigger. The window at risk is the fold plan's to judge
    // (a restub or a fold stubs every batch in one rewrite): batch by
    // batch, each shown as it forms, it would rewrite the prompt every
    // few steps.
    assert!(shown_in(&ms, &tokens, &pays, Room::of(0.8, 12_000)).is_empty());
    // A batch that saves a lot over a long conversation pays at once: the
    // same first batch after 200 short steps.
    let (mut long, mut counts) = (ms[..2].to_vec(), tokens[..2].to_vec());
    for k in 0..200 {
        long.push(json!({"role": "user", "content": format!("q{k}")}));
        long.push(json!({"role": "assistant", "content": format!("a{k}")}));
        counts.extend([5, 5]);
    }
    let (tail, tail_tokens) = tool_loop(8);
    long.extend(tail[2..].iter().cloned());
    counts.extend(&tail_tokens[2..]);
    let shown = shown_in(&long, &counts, &pays, Room::of(0.8, 200_000));
    assert_eq!(shown.len(), 6, "{shown:?}");
    // The same conversation in a 12k window is past the 9,600-token
    // trigger: the fold plan stubs the batch at its next rewrite anyway,
    // so there are no requests left for it to save on by itself.
    let shown = shown_in(&long, &counts, &pays, Room::of(0.8, 12_000));
    assert!(shown.is_empty(), "{shown:?}");
}

#[test]
fn the_results_of_one_step_are_long_enough_together() {
    use Role::*;
    // A step of three 300-token results, then one of a single 300-token
    // result; `min_tokens` 500, two turns after.
    let roles: Vec<Option<Role>> = [
        Pinned, User, Assistant, Tool, Tool, Tool, Assistant, Tool, User, Assistant, Tool, User,
    ]
    .into_iter()
    .map(Some)
    .collect();
    let tokens = [10, 10, 20, 300, 300, 300, 20, 300, 10, 20, 300, 10];
    let s = Compress {
        min_tokens: 500,
        ..settings(1)
    };
    // The parallel step's results are stubbed (900 together); the lone
    // 300-token result is not.
    assert_eq!(select(&roles, &tokens, &s, 1), [3, 4, 5]);
    let lone: Vec<usize> = eligible(&roles, &tokens, &s).collect();
    assert_eq!(lone, [3, 4, 5]);
}
