//! Recall on a streamed answer. Each round's events go to the client as
//! they arrive until a delta names the recall tool; from there the round
//! is held. If the round ends with only recall calls, foldgate answers
//! them and streams the next round into the same response; if a client
//! tool call shows up too, what was held is released with the recall
//! calls removed, and the rest passes filtered. Each API reads its own
//! events ([`Round`], each API's own); the splitting and the rounds are
//! here.
//!
//! A round that breaks while held (cut, or still calling the tool after
//! the last round) falls back like a whole answer, the fallback streamed
//! on into the same response; one that breaks after showing part of its
//! answer, or whose fallback breaks, ends the stream with the API's error
//! event: what was shown cannot be taken back.

use super::Session;
use super::broken::Cause;
use crate::api::recall::calls::{Carry, RecallTurn};
use crate::api::recall::stream::Round;
use crate::body::BoxError;
use crate::sse::{Events, Framing};
use crate::usage::UsageScanner;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc::Sender;

type Tx = Sender<Result<Bytes, BoxError>>;

/// How one streamed round ended.
enum Ended {
    /// The client's response is complete, or the client went away.
    Done,
    /// The round held recall calls only: foldgate answers them.
    Turn(RecallTurn),
    /// The round broke while held: nothing of what broke was shown, so
    /// the fallback can continue from `Carry`.
    Broken(Cause, String, Carry),
    /// The round broke after showing part of itself.
    Failed(Cause, String),
}

/// Streams the rounds into `tx` until one ends without recall calls, the
/// client goes away, or a round breaks with no fallback left; `framing`:
/// how the first round's events are delimited (later rounds' must match).
pub(super) async fn run(mut session: Session, mut incoming: Incoming, framing: Framing, tx: Tx) {
    let mut carry = Carry::default();
    loop {
        let gap = carry.gap.next_round();
        let mut round = session.stream_round(std::mem::take(&mut carry));
        *round.gap() = gap;
        let mut next = match stream_round(&mut session, round, incoming, framing, &tx).await {
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
                Ok((head, body)) if Framing::of(&head.headers) == Some(framing) => break body,
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
    framing: Framing,
    tx: &Tx,
) -> Ended {
    let reader = session.api.usage();
    let mut scanner = (session.observe.is_some() || crate::telemetry::enabled())
        .then(|| UsageScanner::framed(Some(framing), reader));
    let mut events = Events::framed(framing);
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
        for raw in events.push(data) {
            if let Some(scanner) = &mut scanner {
                scanner.event(&raw);
            }
            for bytes in round.event(raw, &session.usage) {
                if tx.send(Ok(bytes)).await.is_err() {
                    return Ended::Done;
                }
            }
        }
    }
    // An event the stream did not end with a blank line is still read
    // (and held) like the others: it may be the one naming the tool.
    let rest = events.rest();
    if let Some(scanner) = &mut scanner {
        scanner.event(&rest);
    }
    let found = scanner.map(UsageScanner::finish);
    let found = found.filter(|found| !found.is_empty());
    // The first answer calibrates (and goes on the trace); a recall
    // round's answer goes on the trace only.
    match (found, session.observe.take()) {
        (Some(tokens), Some(observe)) => observe(tokens),
        (Some(tokens), None) => crate::telemetry::record_round_usage(tokens),
        _ => {}
    }
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
