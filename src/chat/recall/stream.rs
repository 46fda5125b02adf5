//! Recall on a streamed answer. Each round's events go to the client as
//! they arrive until a tool-call delta names the recall tool; from there
//! the round is held. If the round ends with only recall calls, foldgate
//! answers them and streams the next round into the same response; if a
//! client tool call shows up too, what was held is released with the
//! recall deltas removed, and the rest passes filtered.

use super::Session;
use super::answer::{self, Calls};
use crate::body::BoxError;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use tokio::sync::mpsc::Sender;

/// Largest event held while looking for its end; a longer one passes raw.
const MAX_EVENT: usize = 4 << 20;

type Tx = Sender<Result<Bytes, BoxError>>;

/// Streams the rounds into `tx` until one ends without recall calls, the
/// client goes away, or the upstream fails.
pub(super) async fn run(mut session: Session, mut incoming: Incoming, tx: Tx) {
    loop {
        let Some(held) = round(&mut session, incoming, &tx).await else {
            return;
        };
        let next = session
            .next_round(&held.content, held.calls.recalls(), held.usage.as_ref())
            .await;
        incoming = match next {
            Ok((head, body)) if head.status.is_success() => body,
            Ok((head, body)) => {
                let detail = body
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let error = serde_json::from_slice::<Value>(&detail).unwrap_or_else(|_| {
                    serde_json::json!({"error": {"message": format!("upstream answered {}", head.status), "type": "server_error"}})
                });
                let _ = tx.send(Ok(event(&error))).await;
                return;
            }
            Err(e) => {
                let error = serde_json::json!({"error": {"message": e.to_string(), "type": "server_error", "code": e.code()}});
                let _ = tx.send(Ok(event(&error))).await;
                return;
            }
        };
    }
}

/// Streams one round. Returns the round when it ended holding recall
/// calls only (foldgate answers them), `None` when the client's response
/// is complete or cannot go on.
async fn round(session: &mut Session, mut incoming: Incoming, tx: &Tx) -> Option<Round> {
    let mut round = Round {
        last: session.last(),
        ..Round::default()
    };
    let mut events = Events::default();
    while let Some(frame) = incoming.frame().await {
        let data = match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return None;
            }
        };
        for raw in events.push(&data) {
            for bytes in round.event(raw, &session.usage) {
                tx.send(Ok(bytes)).await.ok()?;
            }
        }
    }
    session.report_prompt(round.usage.as_ref());
    let rest = events.rest();
    if !rest.is_empty() {
        tx.send(Ok(rest)).await.ok()?;
    }
    round.held.is_some().then_some(round)
}

/// One round's reading of the stream.
#[derive(Default)]
struct Round {
    /// The round's request went without the tool: any recall call is
    /// a stray, removed.
    last: bool,
    /// Events held since the first recall delta, with their chunk.
    held: Option<Vec<(Bytes, Option<Value>)>>,
    /// Recall and client calls in one answer: recall deltas are removed.
    mixed: bool,
    calls: Calls,
    content: String,
    usage: Option<Value>,
}

impl Round {
    /// Takes one event; returns what goes to the client now. `prior` is
    /// the earlier rounds' usage, added to this round's.
    fn event(&mut self, raw: Bytes, prior: &Value) -> Vec<Bytes> {
        let chunk = chunk_of(&raw);
        if let Some(chunk) = &chunk {
            self.read(chunk);
        }
        let recall = self.calls.recall_indices();
        let mut out = Vec::new();
        if !recall.is_empty() && !self.mixed {
            if self.last || self.calls.any_client() {
                self.mixed = true;
                for (raw, chunk) in self.held.take().unwrap_or_default() {
                    out.push(self.outgoing(raw, chunk, &recall, prior));
                }
            } else if self.held.is_none() {
                self.held = Some(Vec::new());
            }
        }
        match &mut self.held {
            Some(held) => held.push((raw, chunk)),
            None => out.push(self.outgoing(raw, chunk, &recall, prior)),
        }
        out
    }

    /// Gathers the chunk's text, tool-call deltas and usage.
    fn read(&mut self, chunk: &Value) {
        let delta = chunk.pointer("/choices/0/delta");
        if let Some(text) = delta.and_then(|d| d.get("content")).and_then(Value::as_str) {
            self.content.push_str(text);
        }
        let deltas = delta
            .and_then(|d| d.get("tool_calls"))
            .and_then(Value::as_array);
        for (pos, d) in deltas.into_iter().flatten().enumerate() {
            let index = d.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            self.calls.feed(index, d);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
    }

    /// The event as the client gets it: recall deltas removed once the
    /// answer is mixed, and usage summed over the rounds.
    fn outgoing(&self, raw: Bytes, chunk: Option<Value>, recall: &[u64], prior: &Value) -> Bytes {
        let Some(mut chunk) = chunk else {
            return raw;
        };
        let mut changed = self.mixed && answer::hide_in_chunk(&mut chunk, recall);
        if let Some(usage) = chunk
            .get_mut("usage")
            .filter(|u| u.is_object() && !prior.is_null())
        {
            let mut total = prior.clone();
            answer::add_usage(&mut total, usage);
            *usage = total;
            changed = true;
        }
        if changed { event(&chunk) } else { raw }
    }
}

/// The JSON chunk of a `data:` event (`None`: `[DONE]`, comments, other).
fn chunk_of(raw: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(raw).ok()?;
    let data = text.lines().find_map(|l| l.strip_prefix("data:"))?.trim();
    serde_json::from_str::<Value>(data)
        .ok()
        .filter(Value::is_object)
}

/// One SSE event carrying `value`.
fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// Splits a byte stream into SSE events (each ending with a blank line).
#[derive(Default)]
struct Events {
    buf: BytesMut,
}

impl Events {
    /// Adds `data`; returns the events it completed, whole.
    fn push(&mut self, data: &[u8]) -> Vec<Bytes> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        while let Some(end) = boundary(&self.buf) {
            out.push(self.buf.split_to(end).freeze());
        }
        if self.buf.len() > MAX_EVENT {
            out.push(self.buf.split().freeze());
        }
        out
    }

    /// What is left after the last complete event.
    fn rest(self) -> Bytes {
        self.buf.freeze()
    }
}

/// The end of the first event in `buf`, blank line included.
fn boundary(buf: &[u8]) -> Option<usize> {
    let lf = find(buf, b"\n\n").map(|i| i + 2);
    let crlf = find(buf, b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(v: Value) -> Bytes {
        event(&v)
    }

    fn delta(d: Value) -> Bytes {
        ev(json!({"choices": [{"index": 0, "delta": d}]}))
    }

    fn recall_start() -> Bytes {
        delta(
            json!({"tool_calls": [{"index": 0, "id": "r1", "type": "function",
            "function": {"name": "foldgate_recall", "arguments": ""}}]}),
        )
    }

    #[test]
    fn events_split_across_chunks_and_line_endings() {
        let mut e = Events::default();
        assert!(e.push(b"data: 1\n").is_empty());
        assert_eq!(
            e.push(b"\ndata: 2\r\n\r\ndata: 3"),
            ["data: 1\n\n", "data: 2\r\n\r\n"]
        );
        assert_eq!(e.rest(), "data: 3");
    }

    #[test]
    fn text_passes_until_a_recall_delta_then_the_round_is_held() {
        let mut r = Round::default();
        let prior = Value::Null;
        assert_eq!(
            r.event(
                delta(json!({"role": "assistant", "content": "Let me"})),
                &prior
            )
            .len(),
            1
        );
        assert!(r.event(recall_start(), &prior).is_empty());
        assert!(r.event(delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"query\":\"x\"}"}}]})), &prior).is_empty());
        assert!(
            r.event(Bytes::from_static(b"data: [DONE]\n\n"), &prior)
                .is_empty()
        );
        assert!(r.held.is_some() && !r.mixed);
        assert_eq!(r.content, "Let me");
        assert_eq!(r.calls.recalls()[0].query().as_deref(), Some("x"));
    }

    #[test]
    fn a_client_call_releases_the_held_events_without_the_recall_deltas() {
        let mut r = Round::default();
        let prior = Value::Null;
        assert!(r.event(recall_start(), &prior).is_empty());
        let out = r.event(
            delta(json!({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "ls", "arguments": "{}"}}]})),
            &prior,
        );
        assert!(r.mixed && r.held.is_none());
        assert_eq!(out.len(), 2);
        let released = chunk_of(&out[0]).unwrap_or_default();
        assert!(released.pointer("/choices/0/delta/tool_calls").is_none());
        let client = chunk_of(&out[1]).unwrap_or_default();
        assert_eq!(client["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(client["choices"][0]["delta"]["tool_calls"][0]["id"], "c1");
    }

    #[test]
    fn the_last_round_drops_stray_recall_calls_and_sums_usage() {
        let mut r = Round {
            last: true,
            ..Round::default()
        };
        let prior = json!({"prompt_tokens": 100, "completion_tokens": 5});
        let out = r.event(recall_start(), &prior);
        assert_eq!(out.len(), 1);
        assert!(
            chunk_of(&out[0]).is_some_and(|c| c.pointer("/choices/0/delta/tool_calls").is_none())
        );
        let out = r.event(
            ev(json!({"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 7}})),
            &prior,
        );
        let usage = chunk_of(&out[0]).unwrap_or_default();
        assert_eq!(usage["usage"]["prompt_tokens"], 220);
        assert_eq!(usage["usage"]["completion_tokens"], 12);
    }
}
