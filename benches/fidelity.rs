//! Fidelity: how many planted identifiers of folded messages reach the
//! upstream, with a summarizer that keeps none of them (the mock writes a
//! narrative and message tags only), in the LLM-written summary alone
//! against the whole summary message (summary plus ledger).
//!
//! Run: `cargo bench --bench fidelity` (`FIDELITY_ONLY=identifiers`,
//! `inventions`, `paraphrase` or `qa` for one part; `qa` is the
//! long-conversation QA set of `fidelity/locomo.rs`, per question category;
//! `FIDELITY_WINDOWS=8192`, `FIDELITY_MODES=defaults` or `inline` narrow
//! it, `FIDELITY_MISSES=1` prints each question nothing reaches).
//! Everything runs in-process on loopback: a mock upstream (chat model +
//! summarizer) and foldgate, on the shipped defaults beside inline, a 60-turn agent conversation with tool calls in which every turn
//! plants six identifiers (a path, a port, a version, a ticket, a host and a
//! command), for three window sizes. An identifier counts as reachable when
//! it is in the view, or in the top 3 hits of the archive search for a
//! query made of the other words of the message that planted it (what a
//! user who has forgotten the identifier would ask with).
//!
//! The messages carry no `[m17]` tags: a tag of four or more characters is
//! an identifier by the extractor's general rule, and would compete with
//! the planted ones for the ledger's room. `FIDELITY_DUMP=1` prints each
//! window's last ledger.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark fails loudly; the no-panic rule is for the request path"
)]

#[allow(dead_code, reason = "a bench uses a part of the test harness")]
#[path = "../tests/common/mod.rs"]
mod common;

#[path = "fidelity/paraphrase.rs"]
mod paraphrase;

#[path = "fidelity/locomo.rs"]
mod locomo;

#[path = "fidelity/qa.rs"]
mod qa;

use common::llm::{Llm, content_text};
use common::{Foldgate, metric, post_json};
use foldgate::fold::ledger::LEDGER_HEADING;
use foldgate::fold::summary::HEADING_PREFIX;
use serde_json::{Value, json};

const TURNS: usize = 60;

/// The `[policy]` key of the inline rows, measured beside the shipped
/// default (background folding).
const INLINE: &str = "mode = \"inline\"\n";

/// After each answer in background mode (a `[policy]` without
/// [`INLINE`]), the time a real model's next turn would take: the fold
/// the answer started lands before the next request.
async fn think(policy: &str) {
    if !policy.contains(INLINE.trim()) {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let only = std::env::var("FIDELITY_ONLY").unwrap_or_default();
        if only.is_empty() || only == "identifiers" {
            println!("## Identifiers of folded messages kept in the view ({TURNS}-turn agent conversation, summarizer keeps none)\n");
            println!(
                "| window | folds | summarizer calls / failures | views checked | folded identifiers in the LLM summary | in the summary message (with ledger) | in the view | in the view or top 3 recall hits | ledger tokens per fold (mean / max) | ledger evictions | last ledger's planted items with their clause |"
            );
            println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            // The defaults (background folding), inline beside them.
            for window in [2_048u32, 4_096, 8_192] {
                run(window, "").await;
                run(window, INLINE).await;
            }
            // The same at the fold depth before fold economy (shallower folds
            // fold fewer identifiers into the same ledger budget).
            for window in [2_048u32, 4_096] {
                run(window, "reset_ratio = 0.7\n").await;
                run(window, &format!("{INLINE}reset_ratio = 0.7\n")).await;
            }
        }
        if only.is_empty() || only == "identifiers" || only == "inventions" {
            inventions("").await;
            inventions(INLINE).await;
        }
        if only.is_empty() || only == "paraphrase" {
            paraphrases().await;
        }
        if only.is_empty() || only == "qa" {
            qa::table(INLINE).await;
        }
    });
}

/// A summarizer that invents: each summary holds two items the folded
/// turns support and six nobody said, two of each kind: invented names and
/// numbers, invented prose (work reported done that never was), and
/// swaps (a true value tied to another turn's subject, two facts merged
/// into one sentence); how many of each reach a view (`policy`: `[policy]`
/// keys, [`INLINE`] or none), and the dropped items by reason.
async fn inventions(policy: &str) {
    const SUPPORTED: [&str; 2] = [
        "Tests pass on v1.0.3",
        "the service on node-0.cluster.example listens on port 5000",
    ];
    const KINDS: [(&str, [&str; 2]); 3] = [
        (
            "invented names and numbers",
            [
                "Bob Marley approved the parser rewrite",
                "the tokenizer has 17 failing tests",
            ],
        ),
        (
            "invented prose",
            [
                "the team migrated everything to the cloud yesterday",
                "Migrated the billing service to Kubernetes.",
            ],
        ),
        (
            "swapped values",
            [
                "the service on node-0.cluster.example listens on port 5001",
                "Tests pass on v1.1.3 for src/mod_0/file_0.rs",
            ],
        ),
    ];
    let [(_, ids), (_, prose), (_, swaps)] = KINDS;
    let llm = Llm::start().await;
    llm.answer_always(common::llm::Sum::Raw(
        json!({"summary": "Work continues.", "facts": [SUPPORTED[0], ids[0], swaps[0]],
            "goals": [SUPPORTED[1]], "decisions": [prose[0]], "completed": [prose[1]],
            "open_items": [ids[1], swaps[1]], "artifacts": []})
        .to_string(),
    ));
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"bench-*\"]\ncontext_window = 4096\n[policy]\n{policy}",
        llm.url()
    ))
    .await;
    let url = format!("{}/v1/chat/completions", fg.url);
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding assistant."})];
    for i in 0..TURNS {
        messages.extend(turn(i));
        let body = json!({"model": "bench-model", "messages": messages, "max_tokens": 200});
        post_json(&url, &[("x-conversation-id", "invent")], &body)
            .await
            .assert_ok();
        think(policy).await;
    }
    let (mut views, mut kept, mut supported) = (0usize, [0usize; 3], 0usize);
    for request in llm.chat_requests() {
        let text = request["messages"].to_string();
        if !text.contains(HEADING_PREFIX) {
            continue;
        }
        views += 1;
        for (k, (_, items)) in KINDS.iter().enumerate() {
            kept[k] += items.iter().filter(|i| text.contains(*i)).count();
        }
        supported += SUPPORTED.iter().filter(|i| text.contains(*i)).count();
    }
    let metrics = fg.metrics().await;
    let dropped = |reason: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with("foldgate_summary_items_dropped_total{"))
            .filter(|l| reason.is_empty() || l.contains(&format!("reason=\"{reason}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    println!(
        "\n## A summarizer that invents (4096 window, {TURNS} turns, {}; each summary: 2 supported items, 2 invented names or numbers, 2 invented prose, 2 swapped values)\n",
        if policy.is_empty() {
            "defaults (background)"
        } else {
            "inline"
        }
    );
    let of = views * 2;
    println!(
        "| folded views | summarizer calls | items dropped: invented / unsupported / swap / unconfirmed | {} in views (of {of}) | {} in views (of {of}) | {} in views (of {of}) | supported items in views (of {of}) |",
        KINDS[0].0, KINDS[1].0, KINDS[2].0,
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {views} | {} | {} / {} / {} / {} | {} | {} | {} | {supported} |",
        metric(&metrics, "foldgate_summarizer_calls_total"),
        dropped("invented"),
        dropped("unsupported"),
        dropped("swap"),
        dropped("unconfirmed"),
        kept[0],
        kept[1],
        kept[2],
    );
}

/// The paraphrase-question set: evidence in view and reachable, against
/// trimming and plain BM25 over the whole history, in the same run.
async fn paraphrases() {
    use paraphrase::KS;
    let [k1, k2, k3] = KS;
    println!(
        "\n## Paraphrase questions ({} two-person conversations of {} messages, questions worded differently from their evidence, summarizer keeps none)\n",
        paraphrase::CONVERSATIONS,
        paraphrase::conversation(0).messages.len()
    );
    println!(
        "| window | recall | questions | trimming: in view | plain BM25, whole history: top {k1} / {k2} / {k3} | stemmed BM25, whole history: top {k1} / {k2} / {k3} | foldgate: in view | … of it in the verbatim messages | recall hits top {k1} / {k2} / {k3} | reachable (view or recall top {k1} / {k2} / {k3}) | reachable, questions sharing a stem | injected tokens per question |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // `auto` is the default (no key): the model is marked as calling tools.
    let modes = [
        ("tool", "recall = \"tool\"\n"),
        ("auto (default)", ""),
        ("inject", "recall = \"inject\"\n"),
    ];
    let folding = [("", ""), (", inline", INLINE)];
    for window in [4_096u32, 8_192] {
        for ((mode, keys), (how, policy)) in
            modes.into_iter().flat_map(|m| folding.map(move |f| (m, f)))
        {
            let mode = format!("{mode}{how}");
            let t = paraphrase::run(window, keys, policy).await;
            let pct = |n: usize| 100.0 * n as f64 / t.questions.max(1) as f64;
            let three = |v: [usize; 3]| {
                format!("{:.0}% / {:.0}% / {:.0}%", pct(v[0]), pct(v[1]), pct(v[2]))
            };
            println!(
                "| {window} | {mode} | {} | {:.0}% | {} | {} | {:.0}% | {:.0}% | {} | {} | {} of {} | {:.0} |",
                t.questions,
                pct(t.trimmed),
                three(t.bm25),
                three(t.stemmed),
                pct(t.in_view),
                pct(t.verbatim),
                three(t.recall),
                three(t.reachable),
                t.stem_reachable,
                t.stem_questions,
                t.injected_tokens as f64 / t.questions.max(1) as f64,
            );
        }
    }
}

/// The six identifiers planted in turn `i`.
fn planted(i: usize) -> [String; 6] {
    [
        format!("src/mod_{i}/file_{i}.rs"),
        format!("port {}", 5000 + i),
        format!("v1.{i}.3"),
        format!("TKT-{}", 100 + i),
        format!("node-{i}.cluster.example"),
        format!("cargo test -p crate_{i}"),
    ]
}

/// One turn: a user request, a tool call and its result, an answer.
fn turn(i: usize) -> Vec<Value> {
    let [path, port, version, ticket, host, command] = planted(i);
    let id = format!("call_{i}");
    vec![
        json!({"role": "user", "content": format!("Ticket {ticket}: the service on {host} listens on {port}; check {path}.")}),
        json!({"role": "assistant", "content": "Running the tests.",
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "shell", "arguments": json!({"cmd": command}).to_string()}}]}),
        json!({"role": "tool", "tool_call_id": id, "content": format!("$ {command}\ntest result: ok. 12 passed; 0 failed\nbuilt {version}")}),
        json!({"role": "assistant", "content": format!("Tests pass on {version}; {path} is fine.")}),
    ]
}

/// One window; `policy` adds `[policy]` keys (shown in the row).
async fn run(window: u32, policy: &str) {
    let llm = Llm::start().await;
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"bench-*\"]\ncontext_window = {window}\n\
         [policy]\n{policy}",
        llm.url()
    ))
    .await;
    let url = format!("{}/v1/chat/completions", fg.url);
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding assistant."})];
    let mut sent: Vec<(usize, usize)> = Vec::new(); // (turns sent, messages sent)
    for i in 0..TURNS {
        messages.extend(turn(i));
        let body = json!({"model": "bench-model", "messages": messages, "max_tokens": 200});
        let reply = post_json(&url, &[("x-conversation-id", "fidelity")], &body).await;
        reply.assert_ok();
        sent.push((i + 1, messages.len()));
        think(policy).await;
    }
    let counter = foldgate::tokens::TokenCounter::new(&foldgate::config::Config::default());
    let (mut folded, mut in_summary, mut in_message, mut views) = (0usize, 0usize, 0usize, 0usize);
    let (mut in_view, mut reachable) = (0usize, 0usize);
    let mut recalled = std::collections::HashMap::new();
    let mut ledger_tokens: Vec<u32> = Vec::new();
    let mut last_ledger = String::new();
    for (request, &(turns, count)) in llm.chat_requests().iter().zip(&sent) {
        let view = request["messages"].as_array().cloned().unwrap_or_default();
        let Some(summary) = view
            .iter()
            .map(content_text)
            .find(|t| t.contains(HEADING_PREFIX))
        else {
            continue;
        };
        views += 1;
        let (narrative, ledger) = summary
            .split_once(LEDGER_HEADING)
            .map_or((summary.as_str(), ""), |(a, b)| (a, b));
        if ledger != last_ledger {
            last_ledger = ledger.to_string();
            ledger_tokens.push(counter.message_tokens(
                "bench-model",
                &json!({"role": "system", "content": format!("{LEDGER_HEADING}{ledger}")}),
            ));
        }
        let verbatim: Vec<String> = view
            .iter()
            .filter(|m| messages[..count].contains(m))
            .map(|m| m.to_string())
            .collect();
        for i in 0..turns {
            for id in planted(i) {
                if verbatim.iter().any(|m| m.contains(&id)) {
                    continue;
                }
                folded += 1;
                in_summary += usize::from(narrative.contains(&id));
                in_message += usize::from(summary.contains(&id));
                if view.iter().any(|m| m.to_string().contains(&id)) {
                    in_view += 1;
                    reachable += 1;
                    continue;
                }
                if !recalled.contains_key(&id) {
                    recalled.insert(id.clone(), recall_finds(&fg, i, &id).await);
                }
                reachable += usize::from(recalled[&id]);
            }
        }
    }
    if std::env::var_os("FIDELITY_DUMP").is_some() {
        eprintln!("--- last ledger at {window}:{last_ledger}");
    }
    // A planted item's line has its clause when words come before the
    // identifier ("- port listens on port 5003", not "- 5003").
    let (mut items, mut with_clause) = (0usize, 0usize);
    for line in last_ledger.lines().filter_map(|l| l.strip_prefix("- ")) {
        let id = (0..TURNS)
            .flat_map(planted)
            .filter_map(|id| line.find(&id).map(|at| (at, id)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, _)) = id {
            items += 1;
            with_clause += usize::from(line[..at].chars().any(char::is_alphabetic));
        }
    }
    let metrics = fg.metrics().await;
    let get = |name: &str| metric(&metrics, name);
    let folds: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("foldgate_folds_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let pct = |n: usize| 100.0 * n as f64 / folded.max(1) as f64;
    let mean = ledger_tokens.iter().map(|&t| f64::from(t)).sum::<f64>()
        / ledger_tokens.len().max(1) as f64;
    println!(
        "| {window}{} | {folds} | {} / {} | {views} | {in_summary} of {folded} ({:.1}%) | {in_message} of {folded} ({:.1}%) | {:.1}% | {:.1}% | {mean:.0} / {} | {} | {with_clause} of {items} |",
        if policy.is_empty() {
            String::new()
        } else {
            format!(" ({})", policy.trim().replace('\n', "; "))
        },
        get("foldgate_summarizer_calls_total"),
        get("foldgate_fold_failures_total"),
        pct(in_summary),
        pct(in_message),
        pct(in_view),
        pct(reachable),
        ledger_tokens.iter().max().copied().unwrap_or(0),
        get("foldgate_ledger_evictions_total"),
    );
}

/// Whether a recall query made of the words around `id` in the first
/// message of turn `i` that holds it (the identifier itself and the
/// message tags left out) finds a message holding `id` among the archive
/// search's top 3 hits.
async fn recall_finds(fg: &Foldgate, i: usize, id: &str) -> bool {
    let Some(text) = turn(i)
        .iter()
        .map(|m| format!("{} {}", content_text(m), m["tool_calls"]))
        .find(|t| t.contains(id))
    else {
        return false;
    };
    let stripped = text.replace(id, " ");
    let tag =
        |w: &str| w.starts_with('m') && w.len() > 1 && w[1..].bytes().all(|c| c.is_ascii_digit());
    let json_keys = ["null", "id", "type", "function", "name", "arguments", "cmd"];
    let words: Vec<&str> = stripped
        .split(|c: char| !(c.is_alphanumeric() || "._-/".contains(c)))
        .map(|w| w.trim_matches(['.', '-', '/', '_']))
        .filter(|w| w.len() >= 2 && !tag(w) && !json_keys.contains(w))
        .take(12)
        .collect();
    let q: String = words
        .join(" ")
        .bytes()
        .map(|b| match b {
            b' ' => "+".to_string(),
            b if b.is_ascii_alphanumeric() => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    let url = format!(
        "{}/foldgate/conversations/fidelity/archive?q={q}&limit=3",
        fg.url
    );
    let reply = common::send(http::Method::GET, &url, &[], "").await;
    if reply.status != 200 {
        return false;
    }
    reply.json()["results"][0]["hits"]
        .as_array()
        .is_some_and(|hits| hits.iter().any(|h| h["message"].to_string().contains(id)))
}
