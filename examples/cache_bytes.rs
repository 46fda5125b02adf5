//! What an entry of the caches that grow with conversations costs on the
//! heap, counted by the allocator: `cargo run --example cache_bytes
//! --features heap-stats`. Entries are made as the soak's traffic makes
//! them (chat tool results of 1–3 KB, their stubs; conversations of 60
//! recorded turns), `N` at a time, and the live heap bytes they add are
//! divided by `N`. Prints each entry's bytes beside what its cache charges
//! for it (docs/benchmarks.md, "What bounds memory").

use foldgate::fold::compress::{StubCache, stub};
use foldgate::heap::{Counting, live_bytes};
use foldgate::state::ConvKey;
use foldgate::state::turns::{CONVERSATION_BYTES, TurnFold, Turns};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

#[global_allocator]
static ALLOC: Counting<std::alloc::System> = Counting(std::alloc::System);

/// Entries made per measurement.
const N: usize = 20_000;

/// A chat conversation's tool call and its 1–3 KB result, as the soak
/// sends them.
fn pair(n: usize) -> [Value; 2] {
    let output = format!("$ cat src/mod_{}.rs\n", n % 50)
        + &format!("fn handler_{n}() {{ listen(\"127.0.0.1:5{n:03}\"); }} // SOAK-{n}\n")
            .repeat(20 + n % 40);
    [
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{n}"),
            "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"cat\"}"}}]}),
        json!({"role": "tool", "tool_call_id": format!("call_{n}"), "content": output}),
    ]
}

/// Live heap bytes `make` adds, per entry, and what it returned (kept
/// alive while counting).
fn per_entry<T>(make: impl FnOnce() -> T) -> (f64, T) {
    let before = live_bytes().unwrap_or(0);
    let kept = make();
    let after = live_bytes().unwrap_or(0);
    ((after as f64 - before as f64) / N as f64, kept)
}

fn main() {
    if live_bytes().is_none() {
        eprintln!("cache_bytes: build with --features heap-stats");
        std::process::exit(2);
    }
    let messages: Vec<[Value; 2]> = (0..N).map(pair).collect();
    let count = |v: &Value| u32::try_from(v.to_string().len() / 4).unwrap_or(0);

    // The stub cache as it was: the whole stub, a JSON tree, per entry.
    let (old, old_cache) = per_entry(|| {
        let cache = moka::sync::Cache::<u128, Arc<(Value, u32)>>::builder()
            .max_capacity(1 << 30)
            .weigher(|_, v: &Arc<(Value, u32)>| {
                let text = serde_json::to_vec(&v.0).map_or(0, |t| t.len());
                u32::try_from(2 * text + 128).unwrap_or(u32::MAX)
            })
            .build();
        for (n, m) in messages.iter().enumerate() {
            if let Some(s) = stub(m, 1, 700, true) {
                let counted = count(&s);
                cache.insert(n as u128, Arc::new((s, counted)));
            }
        }
        cache.run_pending_tasks();
        cache
    });
    let old_charged = old_cache.weighted_size() as f64 / N as f64;
    drop(old_cache);

    // The stub cache now: the stub's text.
    let (new, new_cache) = per_entry(|| {
        let cache = StubCache::new(1 << 30, Duration::from_secs(600));
        for (n, m) in messages.iter().enumerate() {
            let _ = cache.get(m, 1, (n as u128, 700), ("soak-model", true), &count);
        }
        cache
    });
    let new_charged = new_cache.bytes() as f64 / N as f64;
    drop(new_cache);
    let text = stub(&messages[0], 1, 700, true)
        .and_then(|s| s["content"].as_str().map(str::len))
        .unwrap_or(0);
    println!("stub text of the first: {text} bytes");
    println!(
        "stub cache entry, whole stub (before): {old:.0} bytes on the heap, charged {old_charged:.0}"
    );
    println!(
        "stub cache entry, its text (now): {new:.0} bytes on the heap, charged {new_charged:.0}"
    );

    // The turn recorder: conversations of 60 turns and of 120.
    for turns_each in [60u32, 120] {
        let (per, kept) = per_entry(|| {
            let turns = Turns::new(1 << 34, Duration::from_secs(3600));
            for c in 0..N {
                let key = ConvKey {
                    tenant: "default".into(),
                    conversation: format!("soak-chat-{}-{c}", c % 8),
                };
                for t in 0..turns_each {
                    turns.record(key.clone(), (t, t), TurnFold::None, &[1, 2]);
                }
            }
            turns.conversations();
            turns
        });
        println!(
            "turn recorder, a conversation of {turns_each} turns: {per:.0} bytes on the heap, charged {} (with its key)",
            CONVERSATION_BYTES + 20
        );
        drop(kept);
    }
}
