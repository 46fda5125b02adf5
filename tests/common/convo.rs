//! Building tagged conversations for folding tests, and sending them.

use super::llm::Llm;
use super::{Foldgate, Reply, post_json};
use serde_json::{Value, json};

const FILLER: &str = "we look at the parser, the tokenizer and the cache layer, then decide on the next step together";

/// A conversation whose every message carries a unique `[mN]` tag.
pub struct Convo {
    pub messages: Vec<Value>,
    tag: u32,
    call: u32,
}

impl Convo {
    /// A history of `turns` user/assistant pairs after a system prompt; 55
    /// turns fold on the first request against a `tiny-*` model.
    pub fn with_turns(turns: usize) -> Self {
        let mut c = Self {
            messages: vec![
                json!({"role": "system", "content": "You are a careful coding assistant."}),
            ],
            tag: 0,
            call: 0,
        };
        for i in 0..turns {
            c.push("user", &format!("question {i}"));
            c.push("assistant", &format!("answer {i}"));
        }
        c
    }

    /// A conversation that folds on its first request against a `tiny-*`
    /// model: `fact` in its first, folded, user message, 54 short turns,
    /// then `question` last (what a recall test asks for).
    pub fn fact_then_question(fact: &str, question: &str) -> Self {
        let mut convo = Self::with_turns(0);
        convo.user(&format!("note that {fact}")).assistant("noted");
        for i in 0..54 {
            convo
                .user(&format!("question {i}"))
                .assistant(&format!("answer {i}"));
        }
        convo.user(question);
        convo
    }

    pub fn push(&mut self, role: &str, what: &str) -> &mut Self {
        self.tag += 1;
        let content = format!("[m{}] {what}: {FILLER}", self.tag);
        self.messages
            .push(json!({"role": role, "content": content}));
        self
    }

    /// One more exchange: the assistant's answer to the last turn and a new
    /// user message.
    pub fn next_turn(&mut self, what: &str) -> &mut Self {
        self.push("assistant", "done").push("user", what)
    }

    pub fn user(&mut self, what: &str) -> &mut Self {
        self.push("user", what)
    }

    pub fn assistant(&mut self, what: &str) -> &mut Self {
        self.push("assistant", what)
    }

    /// An assistant message with `n` parallel tool calls, then their results.
    pub fn tools(&mut self, n: usize) -> &mut Self {
        self.tag += 1;
        let content = format!("[m{}] calling tools: {FILLER}", self.tag);
        let ids: Vec<String> = (0..n)
            .map(|_| {
                self.call += 1;
                format!("call_{}", self.call)
            })
            .collect();
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"src/lib.rs\"}"}}))
            .collect();
        self.messages
            .push(json!({"role": "assistant", "content": content, "tool_calls": calls}));
        for id in ids {
            self.tag += 1;
            let content = format!("[m{}] file contents: {FILLER}", self.tag);
            self.messages
                .push(json!({"role": "tool", "tool_call_id": id, "content": content}));
        }
        self
    }

    /// The request body for `tiny-model`, not streamed.
    pub fn body(&self) -> Value {
        self.body_for("tiny-model", false)
    }

    /// The request body for `model`.
    pub fn body_for(&self, model: &str, stream: bool) -> Value {
        json!({"model": model, "messages": self.messages, "max_tokens": 100, "stream": stream, "temperature": 0.2})
    }
}

/// foldgate's config in front of `llm`, with a small window for `tiny-*`
/// models, plus `extra` sections.
pub fn config(llm: &Llm, extra: &str) -> String {
    format!(
        "{}\
         [models.\"tiny-*\"]\ncontext_window = 4000\n\
         [policy]\nreset_ratio = 0.45\nmode = \"inline\"\n\
         [summarizer]\nmax_summary_tokens = 400\nretries = 2\nbackoff = \"5ms\"\ntimeout = \"5s\"\n{extra}",
        super::providers(llm.url())
    )
}

/// Sends the conversation as tenant `sk-tenant-a`.
pub async fn chat(fg: &Foldgate, conversation: &str, convo: &Convo) -> Reply {
    post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &[
            ("x-conversation-id", conversation),
            ("authorization", "Bearer sk-tenant-a"),
        ],
        &convo.body(),
    )
    .await
}

/// The `x-foldgate-fold` header.
pub fn label(reply: &Reply) -> &str {
    reply
        .headers
        .get("x-foldgate-fold")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("missing")
}
