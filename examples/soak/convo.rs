//! A soak client's growing conversation in one API's shape (chat
//! completions, Anthropic Messages or Responses): user turns, half of them
//! with a tool call and its 1–3 KB result (old results become compression
//! stubs), and the answers. It starts over, under a new id, past its
//! item bound (`--conversation-items`, default [`MAX_ITEMS`]).

use super::answers::{Api, TEXT};
use super::rng::Rng;
use serde_json::{Value, json};

/// A conversation starts over past this many messages (or input items).
pub const MAX_ITEMS: usize = 160;
const SYSTEM: &str = "You are a coding agent working on the soak project.";

pub struct Convo {
    pub api: Api,
    worker: usize,
    /// Past this many items the conversation starts over, as a new one.
    max_items: usize,
    /// Conversations started before this one.
    pub round: usize,
    calls: u64,
    items: Vec<Value>,
}

impl Convo {
    pub fn new(api: Api, worker: usize, max_items: usize) -> Self {
        let mut convo = Self {
            api,
            worker,
            max_items,
            round: 0,
            calls: 0,
            items: Vec::new(),
        };
        convo.start();
        convo
    }

    fn start(&mut self) {
        self.items.clear();
        if self.api == Api::Chat {
            self.items
                .push(json!({"role": "system", "content": SYSTEM}));
        }
    }

    /// The route it is sent to.
    pub fn path(&self) -> &'static str {
        match self.api {
            Api::Chat => "/v1/chat/completions",
            Api::Anthropic => "/v1/messages",
            Api::Responses => "/v1/responses",
        }
    }

    /// Its `x-conversation-id`.
    pub fn id(&self) -> String {
        let api = match self.api {
            Api::Chat => "chat",
            Api::Anthropic => "anthropic",
            Api::Responses => "responses",
        };
        format!("soak-{api}-{}-{}", self.worker, self.round)
    }

    /// Adds a user turn and, half the time, a tool call with its result.
    pub fn turn(&mut self, rng: &mut Rng) {
        if self.items.len() > self.max_items {
            self.round += 1;
            self.start();
        }
        self.push_user(user_text(rng));
        if rng.below(2) == 0 {
            self.calls += 1;
            let cmd = json!({"cmd": format!("cat src/mod_{}.rs", rng.below(50))});
            let output = tool_output(rng);
            let n = self.calls;
            let (call, result) = match self.api {
                Api::Chat => (
                    json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{n}"),
                        "type": "function", "function": {"name": "bash", "arguments": cmd.to_string()}}]}),
                    json!({"role": "tool", "tool_call_id": format!("call_{n}"), "content": output}),
                ),
                Api::Anthropic => (
                    json!({"role": "assistant", "content": [{"type": "text", "text": "Running it."},
                        {"type": "tool_use", "id": format!("toolu_{n}"), "name": "bash", "input": cmd}]}),
                    json!({"role": "user", "content": [{"type": "tool_result",
                        "tool_use_id": format!("toolu_{n}"), "content": output}]}),
                ),
                Api::Responses => (
                    json!({"type": "function_call", "call_id": format!("call_{n}"), "name": "bash",
                        "arguments": cmd.to_string()}),
                    json!({"type": "function_call_output", "call_id": format!("call_{n}"), "output": output}),
                ),
            };
            self.items.push(call);
            self.items.push(result);
        }
    }

    fn push_user(&mut self, text: String) {
        self.items.push(json!({"role": "user", "content": text}));
    }

    /// Appends the answer the client got (or a placeholder).
    pub fn answered(&mut self, ok: bool) {
        let text = if ok { TEXT } else { "(no answer)" };
        self.items.push(match self.api {
            Api::Anthropic => {
                json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
            }
            Api::Chat | Api::Responses => json!({"role": "assistant", "content": text}),
        });
    }

    /// The request body of the conversation as it stands.
    pub fn body(&self, stream: bool) -> Value {
        match self.api {
            Api::Chat => json!({"model": "soak-model", "stream": stream, "messages": self.items}),
            Api::Anthropic => json!({"model": "soak-model", "max_tokens": 256, "system": SYSTEM,
                "stream": stream, "messages": self.items}),
            Api::Responses => json!({"model": "soak-model", "instructions": SYSTEM, "store": false,
                "stream": stream, "input": self.items}),
        }
    }

    /// The body with one more user message, not kept (a request whose
    /// answer the client hangs up on).
    pub fn body_with_question(&self, rng: &mut Rng, stream: bool) -> Value {
        let mut body = self.body(stream);
        let field = if self.api == Api::Responses {
            "input"
        } else {
            "messages"
        };
        if let Some(items) = body[field].as_array_mut() {
            items.push(json!({"role": "user", "content": user_text(rng)}));
        }
        body
    }
}

/// A user message of 100 to 600 tokens with identifiers in it.
pub fn user_text(rng: &mut Rng) -> String {
    let n = 100 + rng.below(500);
    let mut text = format!(
        "Task {}: fix ticket SOAK-{} in src/mod_{}.rs.",
        rng.next() % 1000,
        rng.below(10_000),
        rng.below(50)
    );
    while (text.len() as u64) < n * 4 {
        text.push_str(" the build on port 5433 fails after version 1.2.");
        text.push_str(&rng.below(100).to_string());
    }
    text
}

/// A tool's output of 1 to 3 KB: source lines full of identifiers.
fn tool_output(rng: &mut Rng) -> String {
    let n = 1024 + rng.below(2048) as usize;
    let mut text = format!("$ cat src/mod_{}.rs\n", rng.below(50));
    while text.len() < n {
        text.push_str(&format!(
            "fn handler_{}() {{ listen(\"127.0.0.1:{}\"); }} // SOAK-{}\n",
            rng.below(1000),
            5000 + rng.below(1000),
            rng.below(10_000)
        ));
    }
    text
}
