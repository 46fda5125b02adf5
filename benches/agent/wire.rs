//! The agent loop in each API's wire shape: a chat-completions history
//! (see `tooloop`) rendered as an Anthropic Messages, Responses or Gemini
//! request, and the prefix a forwarded request presents to a prompt cache.

use super::prices::Request;
use serde_json::{Value, json};

/// An API a loop speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Chat,
    Anthropic,
    Responses,
    Gemini,
}

impl Wire {
    pub const ALL: [Wire; 4] = [Wire::Chat, Wire::Anthropic, Wire::Responses, Wire::Gemini];

    pub fn name(self) -> &'static str {
        match self {
            Wire::Chat => "chat",
            Wire::Anthropic => "Anthropic Messages",
            Wire::Responses => "Responses",
            Wire::Gemini => "Gemini",
        }
    }

    /// The request path on foldgate for `model`.
    pub fn path(self, model: &str) -> String {
        match self {
            Wire::Chat => "/v1/chat/completions".into(),
            Wire::Anthropic => "/v1/messages".into(),
            Wire::Responses => "/v1/responses".into(),
            Wire::Gemini => format!("/v1beta/models/{model}:generateContent"),
        }
    }

    /// The provider section pointing at `upstream`.
    pub fn provider(self, upstream: &str) -> String {
        match self {
            Wire::Chat | Wire::Responses => {
                format!("[providers.mock]\nbase_url = \"{upstream}/v1\"\n")
            }
            Wire::Anthropic => {
                format!("[providers.mock]\nbase_url = \"{upstream}/v1\"\napi = \"anthropic\"\n")
            }
            Wire::Gemini => {
                format!("[providers.google]\nbase_url = \"{upstream}\"\napi = \"gemini\"\n")
            }
        }
    }

    /// The request body for the chat-completions history `ms` (a system
    /// message first).
    pub fn body(self, model: &str, ms: &[Value], max_tokens: u32) -> Value {
        let system = ms[0]["content"].clone();
        let rest = &ms[1..];
        match self {
            Wire::Chat => json!({"model": model, "messages": ms, "max_tokens": max_tokens}),
            Wire::Anthropic => json!({"model": model, "max_tokens": max_tokens,
                "system": system, "messages": marked(anthropic(rest))}),
            Wire::Responses => json!({"model": model, "instructions": system,
                "input": responses(rest), "max_output_tokens": max_tokens, "store": false}),
            Wire::Gemini => json!({"systemInstruction": {"parts": [{"text": system}]},
                "contents": gemini(rest), "generationConfig": {"maxOutputTokens": max_tokens}}),
        }
    }

    /// A forwarded body's prefix units, in order: its system part, then
    /// each item.
    pub fn prefix(self, body: &Value) -> Vec<Value> {
        let (system, items) = match self {
            Wire::Chat => (Value::Null, &body["messages"]),
            Wire::Anthropic => (body["system"].clone(), &body["messages"]),
            Wire::Responses => (body["instructions"].clone(), &body["input"]),
            Wire::Gemini => (body["systemInstruction"].clone(), &body["contents"]),
        };
        std::iter::once(system)
            .chain(items.as_array().cloned().unwrap_or_default())
            .collect()
    }
}

impl Wire {
    /// A forwarded body as a prompt cache sees it: its prefix units
    /// without their `cache_control` markers (not prompt bytes), billed
    /// `tokens` in all. Breakpoints: an Anthropic body's own (the
    /// client's, foldgate's after the summary); on the other APIs one
    /// after the last unit, as a client using Anthropic's rules would mark.
    pub fn priced(self, body: &Value, tokens: u64) -> Request {
        let units = self.prefix(body);
        let breakpoints = match self {
            Wire::Anthropic => (0..units.len())
                .filter(|&i| units[i].to_string().contains("\"cache_control\""))
                .collect(),
            _ => vec![units.len() - 1],
        };
        let steps = (0..units.len())
            .filter(|&i| self.starts_step(&units[i]))
            .collect();
        let bytes: Vec<String> = units.into_iter().map(|u| unmarked(u).to_string()).collect();
        Request::new(&bytes, tokens, breakpoints, steps)
    }

    /// Whether a unit starts a step (the model's turn).
    fn starts_step(self, unit: &Value) -> bool {
        match self {
            Wire::Chat | Wire::Anthropic => unit["role"] == "assistant",
            Wire::Responses => unit["type"] == "reasoning",
            Wire::Gemini => unit["role"] == "model",
        }
    }
}

/// `v` without `cache_control` members.
pub fn unmarked(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("cache_control");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

/// The client's prompt-caching breakpoint on its last message's last
/// block, as Claude Code marks each request.
fn marked(mut ms: Vec<Value>) -> Vec<Value> {
    if let Some(last) = ms.last_mut() {
        if let Some(text) = last["content"].as_str() {
            last["content"] = json!([{"type": "text", "text": text}]);
        }
        if let Some(block) = last["content"].as_array_mut().and_then(|b| b.last_mut()) {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
    }
    ms
}

fn args(call: &Value) -> Value {
    serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("{}")).unwrap_or_default()
}

fn calls(m: &Value) -> Vec<Value> {
    m["tool_calls"].as_array().cloned().unwrap_or_default()
}

/// Tool results go in one user message after the calls.
fn anthropic(ms: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for m in ms {
        match m["role"].as_str().unwrap_or_default() {
            "user" => out.push(json!({"role": "user", "content": m["content"]})),
            "assistant" => {
                let mut blocks = vec![json!({"type": "text", "text": m["content"]})];
                blocks.extend(calls(m).iter().map(|c| {
                    json!({"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": args(c)})
                }));
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            _ => {
                let block = json!({"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]});
                match out.last_mut() {
                    Some(last) if last["role"] == "user" && last["content"].is_array() => {
                        last["content"].as_array_mut().unwrap().push(block);
                    }
                    _ => out.push(json!({"role": "user", "content": [block]})),
                }
            }
        }
    }
    out
}

/// A reasoning item, then the calls; each output its own item.
fn responses(ms: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    for m in ms {
        match m["role"].as_str().unwrap_or_default() {
            "user" => out.push(json!({"type": "message", "role": "user", "content": m["content"]})),
            "assistant" => {
                let cs = calls(m);
                let lead = cs[0]["id"].as_str().unwrap_or_default().replace("call_", "rs_");
                out.push(json!({"type": "reasoning", "id": lead,
                    "summary": [{"type": "summary_text", "text": m["content"]}]}));
                for c in &cs {
                    let id = c["id"].as_str().unwrap_or_default();
                    out.push(json!({"type": "function_call", "id": id.replace("call_", "fc_"), "call_id": id,
                        "name": c["function"]["name"], "arguments": c["function"]["arguments"], "status": "completed"}));
                }
            }
            _ => out.push(json!({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})),
        }
    }
    out
}

/// A model turn with its calls, then one user turn with every response.
fn gemini(ms: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for m in ms {
        match m["role"].as_str().unwrap_or_default() {
            "user" => out.push(json!({"role": "user", "parts": [{"text": m["content"]}]})),
            "assistant" => {
                let mut parts = vec![json!({"text": m["content"]})];
                parts.extend(calls(m).iter().map(
                    |c| json!({"functionCall": {"name": c["function"]["name"], "args": args(c)}}),
                ));
                out.push(json!({"role": "model", "parts": parts}));
            }
            _ => {
                let part = json!({"functionResponse": {"name": "bash", "response": {"output": m["content"]}}});
                match out.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["parts"][0].get("functionResponse").is_some() =>
                    {
                        last["parts"].as_array_mut().unwrap().push(part);
                    }
                    _ => out.push(json!({"role": "user", "parts": [part]})),
                }
            }
        }
    }
    out
}
