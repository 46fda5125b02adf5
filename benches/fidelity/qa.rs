//! The long-conversation QA set ([`super::locomo`]) through foldgate:
//! per question category, whether the evidence turns are in the view and
//! reachable (in view, or among the recall's top hits for the question),
//! against trimming to the window and plain BM25 over the whole history,
//! in the same run. A question with two evidence turns counts only when
//! both are there (each in view or found).

use super::common::llm::{Llm, Sum, content_text};
use super::common::{Foldgate, post_json, send};
use super::locomo::{self, Category, Question};
use super::paraphrase::bm25;
use foldgate::fold::summary::HEADING_PREFIX;
use serde_json::json;

/// Hits counted: the recall's and plain BM25's top 10.
pub const TOP: usize = 10;

/// Counts over one category's questions.
#[derive(Default, Clone, Copy)]
pub struct Tally {
    pub questions: usize,
    pub trimmed: usize,
    pub bm25: usize,
    pub in_view: usize,
    /// In the history's messages the view shows verbatim.
    pub verbatim: usize,
    /// In the injected block.
    pub block: usize,
    pub recall: usize,
    pub reachable: usize,
    /// Tokens of the verbatim messages of the history in view, summed.
    pub history_tokens: u64,
    /// The same for trimming.
    pub trimmed_tokens: u64,
    /// Tokens of the injected block, summed.
    pub injected_tokens: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.questions += o.questions;
        self.trimmed += o.trimmed;
        self.bm25 += o.bm25;
        self.in_view += o.in_view;
        self.verbatim += o.verbatim;
        self.block += o.block;
        self.recall += o.recall;
        self.reachable += o.reachable;
        self.history_tokens += o.history_tokens;
        self.trimmed_tokens += o.trimmed_tokens;
        self.injected_tokens += o.injected_tokens;
    }
}

/// Whitespace runs as one space, lowercase.
fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Whether every evidence group of `q` satisfies `found` for one of its
/// (message, sentence) pairs.
fn all_groups(q: &Question, found: impl Fn(usize, &str) -> bool) -> bool {
    q.evidence
        .iter()
        .all(|g| g.iter().any(|(i, s)| found(*i, s)))
}

/// Runs every question of every conversation at `window` with `policy`
/// (`[policy]` keys: the shipped default, background folding, when
/// empty): one tally per category, in [`Category::ALL`]'s order.
pub async fn run(window: u32, policy: &str) -> [Tally; 4] {
    let llm = Llm::start().await;
    llm.answer_always(Sum::Lossy);
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"bench-*\"]\ncontext_window = {window}\n\
         [policy]\n{policy}",
        llm.url()
    ))
    .await;
    let url = format!("{}/v1/chat/completions", fg.url);
    let counter = foldgate::tokens::TokenCounter::new(&foldgate::config::Config::default());
    let tokens = |m: &serde_json::Value| u64::from(counter.message_tokens("bench-model", m));
    let mut out = [Tally::default(); 4];
    let system = json!({"role": "system", "content": "You are a friendly assistant in a chat between two friends."});
    for c in 0..locomo::CONVERSATIONS {
        let convo = locomo::conversation(c);
        let id = format!("qa-{c}");
        let texts: Vec<String> = convo.messages.iter().map(content_text).collect();
        let history: std::collections::HashSet<String> =
            convo.messages.iter().map(|m| m.to_string()).collect();
        for q in &convo.questions {
            let cat = Category::ALL
                .iter()
                .position(|&k| k == q.category)
                .unwrap_or(0);
            let t = &mut out[cat];
            t.questions += 1;
            let asked = json!({"role": "user", "content": q.text});
            // Trimming: the newest messages that fit beside the system
            // message, the question and the output reserve.
            let mut room = i64::from(window) - 200 - tokens(&system) as i64 - tokens(&asked) as i64;
            let mut kept_from = convo.messages.len();
            while kept_from > 0 {
                room -= tokens(&convo.messages[kept_from - 1]) as i64;
                if room < 0 {
                    break;
                }
                kept_from -= 1;
            }
            t.trimmed += usize::from(all_groups(q, |i, _| i >= kept_from));
            t.trimmed_tokens += convo.messages[kept_from..].iter().map(tokens).sum::<u64>();
            let top = bm25(&texts, &q.text, TOP, false);
            t.bm25 += usize::from(all_groups(q, |i, _| top.contains(&i)));
            let mut messages = vec![system.clone()];
            messages.extend(convo.messages.iter().cloned());
            messages.push(asked.clone());
            let body = json!({"model": "bench-model", "messages": messages, "max_tokens": 200});
            post_json(&url, &[("x-conversation-id", id.as_str())], &body)
                .await
                .assert_ok();
            let view = llm.chat_requests().pop().unwrap_or_default();
            let shown: Vec<serde_json::Value> =
                view["messages"].as_array().cloned().unwrap_or_default();
            let shown_texts: Vec<String> = shown.iter().map(content_text).collect();
            if std::env::var_os("FIDELITY_DUMP").is_some() && std::ptr::eq(q, &convo.questions[0]) {
                let summary = shown_texts.iter().find(|t| t.contains(HEADING_PREFIX));
                eprintln!(
                    "--- {id} at {window}, {policy:?}: {}",
                    summary.map_or("", String::as_str)
                );
            }
            let seen = normalized(&shown_texts.join("\n"));
            let recalled = |t: &String| t.starts_with("[foldgate] Recalled");
            let verbatim = normalized(
                &shown
                    .iter()
                    .filter(|m| history.contains(&m.to_string()))
                    .map(content_text)
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
            let block = normalized(
                &shown_texts
                    .iter()
                    .filter(|t| recalled(t))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n"),
            );
            t.injected_tokens += shown
                .iter()
                .filter(|m| recalled(&content_text(m)))
                .map(tokens)
                .sum::<u64>();
            t.history_tokens += shown
                .iter()
                .filter(|m| history.contains(&m.to_string()))
                .map(tokens)
                .sum::<u64>();
            let in_view = |_: usize, s: &str| seen.contains(&normalized(s));
            t.in_view += usize::from(all_groups(q, in_view));
            t.verbatim += usize::from(all_groups(q, |_, s| verbatim.contains(&normalized(s))));
            t.block += usize::from(all_groups(q, |_, s| block.contains(&normalized(s))));
            let hits = recall_hits(&fg, &id, &q.text).await;
            let found = |_: usize, s: &str| hits.iter().take(TOP).any(|h| h.contains(s));
            t.recall += usize::from(all_groups(q, found));
            let reachable = all_groups(q, |i, s| in_view(i, s) || found(i, s));
            t.reachable += usize::from(reachable);
            if !reachable && std::env::var_os("FIDELITY_MISSES").is_some() {
                // The start of the verbatim run that ends the history.
                let mut first_verbatim = convo.messages.len();
                for m in shown.iter().rev().skip(1) {
                    match convo.messages[..first_verbatim]
                        .iter()
                        .rposition(|h| h == m)
                    {
                        Some(i) if i + 1 == first_verbatim => first_verbatim = i,
                        _ => break,
                    }
                }
                let sizes: Vec<u64> = shown
                    .iter()
                    .filter(|m| !history.contains(&m.to_string()))
                    .map(tokens)
                    .collect();
                let evidence: Vec<Vec<(usize, bool, bool)>> = q
                    .evidence
                    .iter()
                    .map(|g| {
                        g.iter()
                            .map(|(i, s)| (*i, in_view(*i, s), found(*i, s)))
                            .collect()
                    })
                    .collect();
                eprintln!(
                    "miss {id} {:?} n={} trimmed_from={kept_from} verbatim_from={first_verbatim} other_sizes={sizes:?} evidence(i,in_view,found)={evidence:?} q={:?}",
                    q.category,
                    convo.messages.len(),
                    q.text
                );
                for h in hits.iter().take(TOP) {
                    eprintln!("    hit: {}", h.chars().take(140).collect::<String>());
                }
            }
        }
    }
    out
}

/// The texts of the archive search's hits for `query`, best first.
async fn recall_hits(fg: &Foldgate, id: &str, query: &str) -> Vec<String> {
    let q: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
    let url = format!(
        "{}/foldgate/conversations/{id}/archive?q={q}&limit={TOP}",
        fg.url
    );
    let reply = send(http::Method::GET, &url, &[], "").await;
    if reply.status != 200 {
        return Vec::new();
    }
    reply.json()["results"][0]["hits"]
        .as_array()
        .map(|hits| hits.iter().map(|h| content_text(&h["message"])).collect())
        .unwrap_or_default()
}

/// Prints the table: per window and folding mode, one row per category
/// and one for all questions.
pub async fn table(inline: &str) {
    let stats: Vec<(usize, usize, usize)> = (0..locomo::CONVERSATIONS)
        .map(|c| {
            let convo = locomo::conversation(c);
            let sessions = convo
                .messages
                .iter()
                .filter(|m| content_text(m).contains("] Hi "))
                .count();
            (convo.messages.len(), sessions, convo.questions.len())
        })
        .collect();
    let messages: Vec<usize> = stats.iter().map(|s| s.0).collect();
    println!(
        "\n## Long-conversation QA ({} two-person conversations of {}–{} messages over {}–{} dated sessions, {} questions with evidence turns marked, summarizer keeps none)\n",
        locomo::CONVERSATIONS,
        messages.iter().min().unwrap_or(&0),
        messages.iter().max().unwrap_or(&0),
        stats.iter().map(|s| s.1).min().unwrap_or(0),
        stats.iter().map(|s| s.1).max().unwrap_or(0),
        stats.iter().map(|s| s.2).sum::<usize>(),
    );
    println!(
        "| window | folding | category | questions | trimming: in view | plain BM25, whole history: top {TOP} | foldgate: in view | … in the verbatim history | … in the injected block | recall top {TOP} | reachable (view or recall top {TOP}) | history tokens in view: foldgate / trimming | injected tokens per question |"
    );
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // `FIDELITY_WINDOWS=8192` and `FIDELITY_MODES=defaults` narrow the run.
    let windows = std::env::var("FIDELITY_WINDOWS").unwrap_or_default();
    let modes = std::env::var("FIDELITY_MODES").unwrap_or_default();
    for window in [4_096u32, 8_192] {
        if !windows.is_empty() && !windows.split(',').any(|w| w.trim() == window.to_string()) {
            continue;
        }
        for (how, policy) in [("defaults (background)", ""), ("inline", inline)] {
            if !modes.is_empty() && !how.starts_with(modes.as_str()) {
                continue;
            }
            let tallies = run(window, policy).await;
            let mut all = Tally::default();
            for t in &tallies {
                all.add(t);
            }
            let names = Category::ALL.map(Category::name);
            for (name, t) in names.iter().zip(&tallies).chain([(&"all", &all)]) {
                let pct = |n: usize| 100.0 * n as f64 / t.questions.max(1) as f64;
                println!(
                    "| {window} | {how} | {name} | {} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.0} / {:.0} | {:.0} |",
                    t.questions,
                    pct(t.trimmed),
                    pct(t.bm25),
                    pct(t.in_view),
                    pct(t.verbatim),
                    pct(t.block),
                    pct(t.recall),
                    pct(t.reachable),
                    t.history_tokens as f64 / t.questions.max(1) as f64,
                    t.trimmed_tokens as f64 / t.questions.max(1) as f64,
                    t.injected_tokens as f64 / t.questions.max(1) as f64,
                );
            }
        }
    }
}
