//! A folded chat without tools keeps the history a question needs in view
//! (issue 52): the room the window leaves after the fold holds the newest
//! folded messages verbatim, about what trimming to the window keeps less
//! what foldgate adds, and their start moves by steps, not every turn; an
//! agent loop keeps the fold's reset target. And the recall holds a
//! question's words together: a message holding the one word the best
//! hits lack comes up front. Through the real server, a summarizer that
//! keeps nothing.

use crate::common;

use common::llm::{Llm, Sum, content_text};
use common::{Foldgate, post_json, send};
use foldgate::config::Config;
use foldgate::tokens::TokenCounter;
use serde_json::{Value, json};

const WINDOW: u32 = 8192;
const RESERVE: u32 = 200;

fn line(i: usize) -> Value {
    let role = if i % 2 == 0 { "user" } else { "assistant" };
    let who = if i % 2 == 0 { "Maya" } else { "Theo" };
    json!({"role": role, "content": format!(
        "{who}: message {i}. The weather was fine and we walked by the river for a while. \
         Work was busy but the evening was quiet, we cooked soup number {i}."
    )})
}

async fn start() -> (Llm, Foldgate) {
    let llm = Llm::start().await;
    llm.answer_always(Sum::Lossy);
    let fg = Foldgate::start(&format!(
        "[providers.mock]\nbase_url = \"{}/v1\"\n[models.\"chat-*\"]\ncontext_window = {WINDOW}\n",
        llm.url()
    ))
    .await;
    (llm, fg)
}

/// Sends `history` and a question; returns the forwarded request.
async fn ask(llm: &Llm, fg: &Foldgate, history: &[Value], extra: Value) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "Two friends chat."})];
    messages.extend(history.iter().cloned());
    messages.push(json!({"role": "user", "content": "What did we cook?"}));
    let mut body = json!({"model": "chat-model", "messages": messages, "max_tokens": RESERVE});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let url = format!("{}/v1/chat/completions", fg.url);
    post_json(&url, &[("x-conversation-id", "fill")], &body)
        .await
        .assert_ok();
    llm.chat_requests().pop().unwrap()
}

/// Tokens of the history's messages the view shows verbatim, and the
/// index of the first one.
fn verbatim(view: &Value, history: &[Value], counter: &TokenCounter) -> (u64, Option<usize>) {
    let shown = view["messages"].as_array().unwrap();
    let kept: Vec<usize> = shown
        .iter()
        .filter_map(|m| history.iter().position(|h| h == m))
        .collect();
    let tokens = kept
        .iter()
        .map(|&i| u64::from(counter.message_tokens("chat-model", &history[i])))
        .sum();
    (tokens, kept.first().copied())
}

/// What the fill of `view` (the request that sent `history`) showed, in
/// tokens, and what the window's room would take: trimming's history
/// (`trimmed`) less the fold's tail (from its cut on) and what foldgate
/// adds and keeps free — the summary and every other message of its own,
/// the tools, an injected block's whole budget, a twentieth of the window
/// for estimates.
async fn filled(
    fg: &Foldgate,
    view: &Value,
    history: &[Value],
    counter: &TokenCounter,
) -> (u64, u64) {
    let count = |m: &Value| u64::from(counter.message_tokens("chat-model", m));
    let (tokens, _) = verbatim(view, history, counter);
    let mut room = u64::from(WINDOW - RESERVE) - 40;
    let trimmed: u64 = history
        .iter()
        .rev()
        .map(count)
        .take_while(|&t| {
            let fits = t <= room;
            room = room.saturating_sub(t);
            fits
        })
        .sum();
    let own: u64 = view["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| !history.contains(m))
        .map(count)
        .sum();
    let tools = view.get("tools").map_or(0, |t| {
        u64::from(counter.message_tokens(
            "chat-model",
            &json!({"role": "tool", "content": t.to_string()}),
        ))
    });
    let url = format!("{}/foldgate/conversations/fill", fg.url);
    let state = send(http::Method::GET, &url, &[], "").await.json();
    let covered = state["states"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["folds"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["covered"].as_u64())
        .max()
        .unwrap() as usize;
    assert!(own > 0, "the view is folded");
    // The system message is pinned: `covered` counts history messages.
    let tail: u64 = history[covered..].iter().map(count).sum();
    let by_room = (trimmed + 40).saturating_sub(own + tools + 600 + u64::from(WINDOW / 20) + tail);
    (tokens - tail, by_room)
}

#[tokio::test]
async fn a_folded_chat_shows_about_what_trimming_keeps() {
    let (llm, fg) = start().await;
    let counter = TokenCounter::new(&Config::default());
    let count = |m: &Value| u64::from(counter.message_tokens("chat-model", m));
    let history: Vec<Value> = (0..400).map(line).collect();
    // One step of the fill's grid: what rounding its start may leave out.
    let step = foldgate::fold::fill::STEP as u64 * history.iter().map(count).max().unwrap();
    let band = u64::from(WINDOW) * 3 / 10;
    let mut firsts = Vec::new();
    for turn in 0..8 {
        let upto = 380 + 2 * turn;
        let view = ask(&llm, &fg, &history[..upto], json!({})).await;
        firsts.push(verbatim(&view, &history[..upto], &counter).1);
        let (fill, by_room) = filled(&fg, &view, &history[..upto], &counter).await;
        if turn == 0 {
            // The request the fold landed on (the first one folds): the
            // fill takes the window's room less two steps of the
            // conversation (4 messages, half a grid step), which is more
            // than the band between the reset target and the trigger.
            assert!(
                by_room > band + step && fill + step + step / 2 >= by_room,
                "landing: {fill} tokens filled, the room takes {by_room} (band {band}, step {step})"
            );
        }
        // Later turns: never past the room, and less than it by at most a
        // third of the band (the budget's step), two steps of the
        // conversation and a grid step of messages.
        assert!(
            fill <= by_room + u64::from(WINDOW / 50)
                && fill + step + step / 2 + band / 3 >= by_room,
            "turn {turn}: {fill} tokens filled, the room takes {by_room}"
        );
    }
    // The fill's first message moves when the budget steps down (a third
    // of the band's growth, about a dozen turns of these messages), not
    // with every turn: at most once in 8 turns.
    let moves = firsts.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(moves <= 1, "first verbatim message per turn: {firsts:?}");
}

#[tokio::test]
async fn an_agent_loop_keeps_the_reset_target() {
    let (llm, fg) = start().await;
    let counter = TokenCounter::new(&Config::default());
    let history: Vec<Value> = (0..400).map(line).collect();
    let tools = json!({"tools": [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]});
    let view = ask(&llm, &fg, &history, tools).await;
    let (tokens, _) = verbatim(&view, &history, &counter);
    assert!(
        tokens <= u64::from(WINDOW) / 2,
        "an agent loop's view is cut to the reset target: {tokens}"
    );
}

#[tokio::test]
async fn recall_holds_the_question_words_together() {
    let (llm, fg) = start().await;
    // 25 short messages hold two of the question's words; the one that
    // holds the third is a long story, which BM25's length norm puts
    // below all of them.
    let mut history: Vec<Value> = Vec::new();
    for i in 0..500 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let text = if i == 30 {
            format!(
                "{} In the end my cousin opened a bakery in Graz. {}",
                "We talked about the long drive and the weather on the coast. ".repeat(12),
                "Then we drove home late and slept. ".repeat(12)
            )
        } else if i % 4 == 1 && i < 110 {
            format!("The garden party with the neighbours was fun, message {i}.")
        } else {
            format!("Nothing much happened today, message {i}.")
        };
        history.push(json!({"role": role, "content": text}));
    }
    ask(&llm, &fg, &history, json!({})).await;
    let q = "garden+party+bakery";
    let url = format!(
        "{}/foldgate/conversations/fill/archive?q={q}&limit=16",
        fg.url
    );
    let reply = send(http::Method::GET, &url, &[], "").await;
    assert_eq!(reply.status, 200);
    let hits: Vec<String> = reply.json()["results"][0]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| content_text(&h["message"]))
        .collect();
    assert!(hits.len() >= 3, "{hits:?}");
    assert!(
        hits[..3].iter().any(|h| h.contains("bakery in Graz")),
        "the message holding the word the others lack is up front: {:?}",
        &hits[..3]
    );
}

/// The recall block injected before a turn's question stays before that
/// question, with the same bytes, on the next turns (until a fold absorbs
/// the question): the next request's prefix keeps it, as a prompt cache
/// needs. It moved to the newest question on every turn before, which
/// re-billed it and the question after it every turn (issue 54).
#[tokio::test]
async fn an_injected_block_keeps_its_place_on_the_next_turns() {
    let (llm, fg) = start().await;
    // Early answers, each holding one fact a question asks for.
    const FACTS: [(&str, &str); 6] = [
        (
            "My passport sits under the piano.",
            "Where does my passport sit?",
        ),
        ("The violin went to aunt Greta.", "Who got the violin?"),
        (
            "Our canoe rests behind the garage.",
            "Where does our canoe rest?",
        ),
        (
            "Grandma's teapot broke in March.",
            "When did grandma's teapot break?",
        ),
        ("The telescope belongs to Ingrid.", "Whose telescope is it?"),
        (
            "My bicycle helmet hangs near the boiler.",
            "Where does my bicycle helmet hang?",
        ),
    ];
    let history: Vec<Value> = (0..200)
        .map(|i| match i % 2 == 1 && i / 2 < FACTS.len() {
            true => json!({"role": "assistant", "content": format!("Theo: {}", FACTS[i / 2].0)}),
            false => line(i),
        })
        .collect();
    let question = |j: usize| json!({"role": "user", "content": FACTS[j].1});
    let answer = |j: usize| json!({"role": "assistant", "content": format!("Soup {j}, I think.")});
    let is_block = |m: &Value| {
        m["content"]
            .as_str()
            .is_some_and(|t| t.starts_with("[foldgate] Recalled"))
    };
    let url = format!("{}/v1/chat/completions", fg.url);
    let mut blocks: Vec<Option<Value>> = Vec::new();
    let (mut kept, mut moved) = (0, Vec::new());
    for t in 0..6 {
        let mut messages = vec![json!({"role": "system", "content": "Two friends chat."})];
        messages.extend(history.iter().cloned());
        for j in 0..t {
            messages.extend([question(j), answer(j)]);
        }
        messages.push(question(t));
        let body = json!({"model": "chat-model", "messages": messages, "max_tokens": RESERVE});
        let reply = post_json(&url, &[("x-conversation-id", "sticky")], &body).await;
        reply.assert_ok();
        let sent = llm.chat_requests().pop().unwrap()["messages"]
            .as_array()
            .unwrap()
            .clone();
        assert!(
            reply.tokens_out() + RESERVE <= WINDOW,
            "turn {t}: {} tokens",
            reply.tokens_out()
        );
        // The blocks of the earlier turns: before their questions.
        for (j, block) in blocks.iter().enumerate() {
            let Some(block) = block else { continue };
            let Some(at) = sent.iter().position(|m| *m == question(j)) else {
                continue;
            };
            if at > 0 && sent[at - 1] == *block {
                kept += 1;
            } else if reply.header("x-foldgate-fold") != "new" {
                moved.push((t, j));
            }
        }
        let last = sent.len() - 1;
        assert_eq!(sent[last], question(t));
        blocks.push((last > 0 && is_block(&sent[last - 1])).then(|| sent[last - 1].clone()));
    }
    assert!(
        blocks.iter().filter(|b| b.is_some()).count() >= 3,
        "too few injections to tell: {blocks:?}"
    );
    assert!(kept >= 3, "kept {kept}, moved {moved:?}");
    assert!(moved.is_empty(), "blocks not at their places: {moved:?}");
}
