//! Recall on a streamed answer. Each round's events go to the client as
//! they arrive until a delta names the recall tool; from there the round
//! is held. If the round ends with only recall calls, foldgate answers
//! them and streams the next round into the same response; if a client
//! tool call shows up too, what was held is released with the recall
//! calls removed, and the rest passes filtered. Each API reads its own
//! events ([`Round`]); the splitting and the rounds are here.
//!
//! A round that breaks while held (cut, or still calling the tool after
//! the last round) falls back like a whole answer, the fallback streamed
//! on into the same response; one that breaks after showing part of its
//! answer, or whose fallback breaks, ends the stream with the API's error
//! event: what was shown cannot be taken back.

use super::Session;
use super::broken::Cause;
use super::calls::{Calls, Carry, Gap, Turn};
use crate::body::BoxError;
use crate::tokens::UsageScanner;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use tokio::sync::mpsc::Sender;

/// Largest event held while looking for its end; a longer one passes raw.
const MAX_EVENT: usize = 4 << 20;

type Tx = Sender<Result<Bytes, BoxError>>;

/// An event as it came, with its JSON data when it has some.
pub type Chunk = (Bytes, Option<Value>);

/// Whether a round is holding its events back, and why not.
#[derive(Debug, Default)]
pub struct Hold {
    /// Events held since the first recall call, with their data.
    held: Option<Vec<Chunk>>,
    /// Recall and client calls in one answer: recall calls are removed.
    pub mixed: bool,
}

impl Hold {
    /// Whether the round holds recall calls only (so far).
    pub fn holding(&self) -> bool {
        self.held.is_some()
    }
}

/// One API's reading of one round's events.
pub(super) trait Round: Send {
    /// Gathers what the event tells: text, calls, usage.
    fn read(&mut self, event: &Value);
    /// The round's calls so far.
    fn calls(&self) -> &Calls;
    /// Whether the round's request could not offer recall again.
    fn last(&self) -> bool;
    fn hold(&mut self) -> &mut Hold;
    /// Whether text was shown, in this round or before it.
    fn gap(&mut self) -> &mut Gap;
    /// The event as the client gets it, if at all: recall calls removed
    /// once the answer is mixed, numbering and usage carried over from
    /// earlier rounds (`prior`: their usage, summed).
    fn outgoing(
        &mut self,
        raw: Bytes,
        event: Option<Value>,
        recall: &[u64],
        prior: &Value,
    ) -> Option<Bytes>;
    /// At the end of the round's stream: the turn foldgate answers, when
    /// the round held recall calls only.
    fn end(self: Box<Self>) -> Option<Turn>;

    /// Takes one whole event; returns what goes to the client now. Events
    /// pass until one shows a recall call; from there they are held, until
    /// a client call releases them filtered. A round that could not offer
    /// the tool holds too: its recall call breaks it ([`run`]).
    fn event(&mut self, raw: Bytes, prior: &Value) -> Vec<Bytes> {
        let event = chunk_of(&raw);
        if let Some(event) = &event {
            self.read(event);
        }
        let recall = self.calls().recall_indices();
        let mut out = Vec::new();
        if !recall.is_empty() && !self.hold().mixed {
            if self.calls().any_client() {
                self.hold().mixed = true;
                for (raw, event) in self.hold().held.take().unwrap_or_default() {
                    out.extend(self.outgoing(raw, event, &recall, prior));
                }
            } else if self.hold().held.is_none() {
                self.hold().held = Some(Vec::new());
            }
        }
        match &mut self.hold().held {
            Some(held) => held.push((raw, event)),
            None => out.extend(self.outgoing(raw, event, &recall, prior)),
        }
        out
    }
}

/// How one streamed round ended.
enum Ended {
    /// The client's response is complete, or the client went away.
    Done,
    /// The round held recall calls only: foldgate answers them.
    Turn(Turn),
    /// The round broke while held: nothing of what broke was shown, so
    /// the fallback can continue from `Carry`.
    Broken(Cause, String, Carry),
    /// The round broke after showing part of itself.
    Failed(Cause, String),
}

/// Streams the rounds into `tx` until one ends without recall calls, the
/// client goes away, or a round breaks with no fallback left.
pub(super) async fn run(mut session: Session, mut incoming: Incoming, tx: Tx) {
    let mut carry = Carry::default();
    loop {
        let gap = carry.gap.next_round();
        let mut round = session.stream_round(std::mem::take(&mut carry));
        *round.gap() = gap;
        let mut next = match stream_round(&mut session, round, incoming, &tx).await {
            Ended::Done => return,
            Ended::Turn(turn) => {
                carry = turn.carry.clone();
                session.next_round(turn).await
            }
            Ended::Broken(cause, detail, shown) => {
                carry = shown;
                session.fall_back(cause, &detail).await
            }
            Ended::Failed(cause, detail) => Err(session.failed(cause, &detail)),
        };
        // A later round that is not an event stream cannot be read as one.
        incoming = loop {
            match next {
                Ok((head, body)) if super::super::is_sse(&head.headers) => break body,
                Ok((head, _)) => {
                    let detail = format!("a {} answer that is not an event stream", head.status);
                    next = session.fall_back(Cause::Unparseable, &detail).await;
                }
                Err(e) => {
                    let _ = tx.send(Ok(session.error_event(&e.to_string()))).await;
                    return;
                }
            }
        };
    }
}

/// Streams one round through `round`, and says how it ended.
async fn stream_round(
    session: &mut Session,
    mut round: Box<dyn Round>,
    mut incoming: Incoming,
    tx: &Tx,
) -> Ended {
    let mut scanner = session.observe.is_some().then(|| UsageScanner::new(true));
    let mut events = Events::default();
    while let Some(frame) = incoming.frame().await {
        let data = match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
            Err(e) => {
                let detail = format!("reading a stream: {e}");
                if !round.hold().holding() {
                    return Ended::Failed(Cause::Cut, detail);
                }
                let gap = *round.gap();
                let mut shown = round.end().map(|t| t.carry).unwrap_or_default();
                shown.gap = gap;
                return Ended::Broken(Cause::Cut, detail, shown);
            }
        };
        if let Some(scanner) = &mut scanner {
            scanner.feed(&data);
        }
        for raw in events.push(&data) {
            for bytes in round.event(raw, &session.usage) {
                if tx.send(Ok(bytes)).await.is_err() {
                    return Ended::Done;
                }
            }
        }
    }
    if let (Some(tokens), Some(observe)) = (
        scanner.and_then(UsageScanner::finish),
        session.observe.take(),
    ) {
        observe(tokens);
    }
    session.observe = None;
    // An event the stream did not end with a blank line is still read
    // (and held) like the others: it may be the one naming the tool.
    let rest = events.rest();
    if !rest.is_empty() {
        for bytes in round.event(rest, &session.usage) {
            if tx.send(Ok(bytes)).await.is_err() {
                return Ended::Done;
            }
        }
    }
    let (gap, last) = (*round.gap(), round.last());
    let Some(mut turn) = round.end() else {
        return Ended::Done;
    };
    turn.carry.gap = gap;
    if last {
        let detail = "the answer still calls the recall tool".to_string();
        return Ended::Broken(Cause::RecallAfterLast, detail, turn.carry);
    }
    Ended::Turn(turn)
}

/// The JSON object of a `data:` event (`None`: `[DONE]`, comments, pings
/// without data), lone surrogate escapes read as U+FFFD.
pub fn chunk_of(raw: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(raw).ok()?;
    let data = text.lines().find_map(|l| l.strip_prefix("data:"))?.trim();
    super::input::parse(data.as_bytes()).filter(Value::is_object)
}

/// An SSE event carrying `value` as its data.
pub fn data_event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// An SSE event named `name` carrying `value`.
pub fn named_event(name: &str, value: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {value}\n\n"))
}

/// Puts the separator `gap` says is due in front of the text at
/// `pointer`; returns whether it did.
pub fn separate(value: &mut Value, pointer: &str, gap: &mut Gap) -> bool {
    let Some(Value::String(text)) = value.pointer_mut(pointer) else {
        return false;
    };
    match gap.text(text) {
        Some(separated) => {
            *text = separated;
            true
        }
        None => false,
    }
}

/// Sets the string at `pointer` to `to` when it is `from`; returns
/// whether it did.
pub fn replace_str(value: &mut Value, pointer: &str, from: &str, to: &str) -> bool {
    match value.pointer_mut(pointer) {
        Some(slot) if slot.as_str() == Some(from) => {
            *slot = Value::String(to.to_string());
            true
        }
        _ => false,
    }
}

/// Renumbers the index in `value`'s `field` for the client: after the
/// `offset` items shown in earlier rounds, less the `hidden` (removed)
/// ones before it. `None` when the item is hidden itself; else whether the
/// number changed (no index: unchanged).
pub fn renumber(value: &mut Value, field: &str, offset: u64, hidden: &[u64]) -> Option<bool> {
    let Some(index) = value.get(field).and_then(Value::as_u64) else {
        return Some(false);
    };
    if hidden.contains(&index) {
        return None;
    }
    let below = hidden.iter().filter(|&&h| h < index).count() as u64;
    let to = offset + index - below;
    if to != index {
        value[field] = Value::from(to);
    }
    Some(to != index)
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
    fn chunks_are_the_json_data_of_events() {
        let named = named_event("message_stop", &json!({"type": "message_stop"}));
        assert_eq!(chunk_of(&named), Some(json!({"type": "message_stop"})));
        assert_eq!(chunk_of(b"data: [DONE]\n\n"), None);
        assert_eq!(chunk_of(b": keep-alive\n\n"), None);
        let mut v = json!({"index": 4});
        assert_eq!(renumber(&mut v, "index", 1, &[0, 3]), Some(true));
        assert_eq!(v["index"], 3);
        assert_eq!(renumber(&mut json!({"index": 3}), "index", 0, &[3]), None);
        assert_eq!(renumber(&mut json!({}), "index", 5, &[]), Some(false));
    }
}
