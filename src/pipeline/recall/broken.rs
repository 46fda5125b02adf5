//! Broken recall rounds, one outcome for all: an error status, no answer,
//! a body cut short, an answer that is not the API's JSON, or recall calls
//! after the last allowed round each make foldgate ask once more as the
//! first request without the tool; when that breaks too, the client gets a
//! clean error in its API's shape (a whole answer) or the API's error
//! event (a stream).

use super::Session;
use crate::error::ApiError;
use crate::metrics::RECALL_CAUSES;
use hyper::body::Incoming;

/// A response head with a success status, and its body.
pub type Answer = (http::response::Parts, Incoming);

/// What broke a round; its label is the metrics' `cause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The upstream answered with an error status.
    Status = 0,
    /// The request got no answer (connection refused, timeout).
    Unreachable = 1,
    /// The answer's body was cut short (or grew past the bound).
    Cut = 2,
    /// The answer is not the API's JSON (or not an event stream).
    Unparseable = 3,
    /// The answer still calls the recall tool after the last round.
    RecallAfterLast = 4,
}

impl Cause {
    pub fn label(self) -> &'static str {
        RECALL_CAUSES[self as usize]
    }
}

impl Session {
    /// Sends the current request; an error status or no answer breaks the
    /// round.
    pub(super) async fn ask(&mut self) -> Result<Answer, ApiError> {
        match self.send().await {
            Ok((head, incoming)) if head.status.is_success() => Ok((head, incoming)),
            Ok((head, _)) => {
                let detail = format!("upstream answered {}", head.status);
                self.fall_back(Cause::Status, &detail).await
            }
            Err(e) => self.fall_back(Cause::Unreachable, &e.to_string()).await,
        }
    }

    /// After `cause` broke the current round: the first request again,
    /// without the tool. A session falls back once; when the fallback
    /// breaks as well (here, or when its answer is read), the client gets
    /// the error this returns.
    pub(super) async fn fall_back(
        &mut self,
        cause: Cause,
        detail: &str,
    ) -> Result<Answer, ApiError> {
        if self.fell_back {
            return Err(self.failed(cause, detail));
        }
        tracing::warn!(conversation = %self.key.conversation, round = self.rounds,
            cause = cause.label(), detail,
            "a recall round broke; asking once more as the first request, without the tool");
        self.app.metrics.recall_fallbacks[cause as usize].inc();
        self.fell_back = true;
        if let Some(messages) = self.api.conversation(&mut self.fields) {
            messages.truncate(self.first_len);
        }
        self.api.remove_recall_tool(&mut self.fields);
        self.rounds = self.app.config.archive.recall_rounds;
        match self.send().await {
            Ok((head, incoming)) if head.status.is_success() => Ok((head, incoming)),
            Ok((head, _)) => {
                let detail = format!("the fallback: upstream answered {}", head.status);
                Err(self.failed(Cause::Status, &detail))
            }
            Err(e) => Err(self.failed(Cause::Unreachable, &format!("the fallback: {e}"))),
        }
    }

    /// The client's error for a round that broke with no fallback left:
    /// logged and counted here.
    pub(super) fn failed(&self, cause: Cause, detail: &str) -> ApiError {
        tracing::warn!(conversation = %self.key.conversation, round = self.rounds,
            cause = cause.label(), detail,
            "a recall round broke with no fallback left; the client gets an error");
        self.app.metrics.recall_failures[cause as usize].inc();
        ApiError::UpstreamBroken {
            provider: self.provider.name.clone(),
            detail: format!("{detail} ({})", cause.label()),
        }
    }
}
