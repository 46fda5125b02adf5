//! A streamed recall round, as each API reads it: the [`Round`] an API
//! implements over its events, what a round holds back ([`Hold`]), and the
//! SSE helpers the APIs share. The rounds themselves run in the pipeline.

use super::calls::{Calls, Carry, Gap, RecallTurn, summed};
use bytes::Bytes;
use serde_json::Value;

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

/// What every API's round keeps alike: whether its request could not
/// offer recall again (any recall call is then a stray, removed), what it
/// holds back, its calls so far, and whether text was shown.
#[derive(Debug, Default)]
pub struct RoundState {
    pub last: bool,
    pub hold: Hold,
    pub calls: Calls,
    pub gap: Gap,
}

impl RoundState {
    /// A round's state; `last` when its request could not offer recall
    /// again, `gap` what the rounds before showed.
    pub fn new(last: bool, gap: Gap) -> Self {
        Self {
            last,
            gap,
            ..Self::default()
        }
    }
}

/// Adds the earlier rounds' usage (`prior`) to the usage object under
/// `field` of a later round's event; returns whether it changed.
pub fn add_prior_usage(event: &mut Value, field: &str, prior: &Value) -> bool {
    match event
        .get_mut(field)
        .filter(|u| u.is_object() && !prior.is_null())
    {
        Some(usage) => {
            *usage = summed(prior, usage);
            true
        }
        None => false,
    }
}

/// What an outgoing event meets: the indices of the round's recall calls,
/// and the earlier rounds' usage, summed (`Null`: none).
#[derive(Clone, Copy)]
pub struct Seen<'a> {
    pub recall: &'a [u64],
    pub prior: &'a Value,
}

impl<'a> Seen<'a> {
    /// The recall calls to hide: all of them once the answer is mixed.
    pub fn hidden(self, state: &RoundState) -> &'a [u64] {
        match state.hold.mixed {
            true => self.recall,
            false => &[],
        }
    }
}

/// What of an outgoing event the client gets.
pub enum Outgoing {
    /// Nothing: the event is foldgate's.
    Drop,
    /// The event as it came.
    Same,
    /// The event rewritten.
    New(Bytes),
}

impl Outgoing {
    /// The event rewritten by `encode` when it `changed`, else as it came.
    pub fn of(changed: bool, encode: impl FnOnce() -> Bytes) -> Self {
        match changed {
            true => Self::New(encode()),
            false => Self::Same,
        }
    }
}

/// One API's reading of a streamed round's events: what it gathers from
/// an event, what of the event the client gets, and the turn foldgate
/// answers. The state every API's round keeps alike is [`Stream`]'s,
/// handed in.
pub trait Reader: Send + 'static {
    /// Gathers what the event tells: text, calls, usage.
    fn read(&mut self, state: &mut RoundState, event: &Value);
    /// The event as the client gets it, if at all: recall calls removed
    /// once the answer is mixed, numbering and usage carried over from
    /// earlier rounds ([`Seen`]).
    fn outgoing(&mut self, state: &mut RoundState, event: Value, seen: Seen<'_>) -> Outgoing;
    /// The turn foldgate answers, at the end of a round that held recall
    /// calls only.
    fn end(self, state: RoundState) -> Option<RecallTurn>;
}

/// A streamed round: an API's [`Reader`] and the state every API's round
/// keeps alike.
#[derive(Debug, Default)]
pub struct Stream<R> {
    state: RoundState,
    reader: R,
}

impl<R: Reader> Stream<R> {
    /// A round read by `reader`, from `state`.
    pub fn new(state: RoundState, reader: R) -> Self {
        Self { state, reader }
    }
}

impl<R: Reader + Default> Stream<R> {
    /// A round whose reader starts empty; `last`: its request could not
    /// offer recall again, `carry`: what the rounds before showed.
    pub fn fresh(last: bool, carry: Carry) -> Self {
        Self::new(RoundState::new(last, carry.gap), R::default())
    }
}

/// A streamed round, as the pipeline drives it (a [`Stream`]).
pub trait Round: Send {
    /// The round's calls so far.
    fn calls(&self) -> &Calls;
    /// Whether the round's request could not offer recall again.
    fn last(&self) -> bool;
    /// What the round holds back.
    fn hold(&mut self) -> &mut Hold;
    /// Whether text was shown, in this round or before it.
    fn gap(&mut self) -> &mut Gap;
    /// Takes one whole event; returns what goes to the client now. Events
    /// pass until one shows a recall call; from there they are held, until
    /// a client call releases them filtered. A round that could not offer
    /// the tool holds too: its recall call breaks it.
    fn event(&mut self, raw: Bytes, prior: &Value) -> Vec<Bytes>;
    /// At the end of the round's stream: the turn foldgate answers, when
    /// the round held recall calls only.
    fn end(self: Box<Self>) -> Option<RecallTurn>;
}

impl<R: Reader> Round for Stream<R> {
    fn calls(&self) -> &Calls {
        &self.state.calls
    }

    fn last(&self) -> bool {
        self.state.last
    }

    fn hold(&mut self) -> &mut Hold {
        &mut self.state.hold
    }

    fn gap(&mut self) -> &mut Gap {
        &mut self.state.gap
    }

    fn event(&mut self, raw: Bytes, prior: &Value) -> Vec<Bytes> {
        let event = chunk_of(&raw);
        if let Some(event) = &event {
            self.reader.read(&mut self.state, event);
        }
        let recall = self.state.calls.recall_indices();
        let seen = Seen {
            recall: &recall,
            prior,
        };
        let mut out = Vec::new();
        let state = &mut self.state;
        if !recall.is_empty() && !state.hold.mixed {
            if state.calls.any_client() {
                state.hold.mixed = true;
                for (raw, event) in state.hold.held.take().unwrap_or_default() {
                    out.extend(outgoing(&mut self.reader, state, raw, event, seen));
                }
            } else if state.hold.held.is_none() {
                state.hold.held = Some(Vec::new());
            }
        }
        match &mut state.hold.held {
            Some(held) => held.push((raw, event)),
            None => out.extend(outgoing(&mut self.reader, state, raw, event, seen)),
        }
        out
    }

    fn end(self: Box<Self>) -> Option<RecallTurn> {
        if !self.state.hold.holding() {
            return None;
        }
        self.reader.end(self.state)
    }
}

/// What the client gets of an event that came as `raw`: itself when it
/// carries no JSON, else what `reader` makes of it.
fn outgoing<R: Reader>(
    reader: &mut R,
    state: &mut RoundState,
    raw: Bytes,
    event: Option<Value>,
    seen: Seen<'_>,
) -> Option<Bytes> {
    let Some(event) = event else {
        return Some(raw);
    };
    match reader.outgoing(state, event, seen) {
        Outgoing::Drop => None,
        Outgoing::Same => Some(raw),
        Outgoing::New(bytes) => Some(bytes),
    }
}

/// The JSON data of what a round lets through of `events` (a test's
/// view of a streamed round).
#[cfg(test)]
pub fn feed<R: Reader>(round: &mut Stream<R>, events: Vec<Bytes>, prior: &Value) -> Vec<Value> {
    events
        .into_iter()
        .flat_map(|e| round.event(e, prior))
        .filter_map(|b| chunk_of(&b))
        .collect()
}

/// The JSON object of a `data:` event or a JSON line (`None`: `[DONE]`,
/// comments, pings without data), lone surrogate escapes read as U+FFFD.
pub fn chunk_of(raw: &[u8]) -> Option<Value> {
    let data = crate::sse::payload(raw);
    super::input::parse(data.trim_ascii()).filter(Value::is_object)
}

/// An SSE event carrying `value` as its data.
pub fn data_event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// The `type` of an event's data (Anthropic's and Responses' events
/// name themselves; empty when it has none).
pub fn kind(event: &Value) -> &str {
    event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// An SSE event named by its data's [`kind`], carrying it.
pub fn typed_event(value: &Value) -> Bytes {
    named_event(kind(value), value)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
