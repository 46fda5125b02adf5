//! The code of an API beside its [`ApiSpec`]: its [`Codec`], its
//! [`Provider`] side (the summarizer's call) and its [`Recall`] round's
//! shapes, and the accessors through which the pipeline reads the spec
//! (docs/architecture.md, "An API: a spec and a small codec").

use super::codec::{self, Decoded, Fields, RawRequest, Wire};
use super::recall::calls::{Call, Calls, Carry};
use super::recall::stream::Round;
use super::route::Claim;
use super::spec::ApiSpec;
use super::summary::{SummaryAnswer, SummaryCall};
use super::{ContextError, Fit, recall};
use crate::config::{Placement, ProviderConfig};
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use crate::usage::UsageReader;
use bytes::Bytes;
use http::header::HeaderName;
use serde_json::{Map, Value};

/// One wire format, as the pipeline uses it: its [`ApiSpec`], its
/// [`Codec`] and its [`Provider`] side; its recall shapes are the spec's.
/// The fold engine works on chat-completions messages (one per unit a cut
/// may not split); an API maps its body to them and a view of them back.
pub trait WireApi: Codec + Provider {}

impl<T: Codec + Provider> WireApi for T {}

/// How an API's body becomes the fold engine's messages and a view goes
/// back into it.
pub trait Codec: Send + Sync + 'static {
    /// The API's data.
    fn spec(&self) -> &'static ApiSpec;

    /// Reads a body for the fold engine, posted to `path` when known (an
    /// API naming the model in the path reads it from there); `Err` is
    /// the client's 400.
    fn decode(&self, path: Option<&str>, bytes: &[u8]) -> Result<Decoded, ApiError>;

    /// Fills `fields` with the view: `items` laid out by the fold engine
    /// over the wire items the decode kept. By default the engine's
    /// `messages` go in the conversation field ([`codec::fill_messages`]).
    fn fill_wire(&self, fields: &mut Fields, messages: &[Value], _wire: &Wire, items: Vec<Item>) {
        codec::fill_messages(fields, self.spec().conversation_field, messages, items);
    }

    /// The engine message a unit of wire items read by [`Self::shallow`]
    /// stands for, as [`Self::decode`] makes it; `after_calls`: the unit
    /// before it makes tool calls (read only where the spec
    /// [answers by position](ApiSpec::answers_by_position)).
    fn unit_message(&self, unit: &[Value], after_calls: bool) -> Value;

    /// The body read shallowly, when the API has a reader for the fast
    /// path and the body is plain (`None`: the body is decoded, and the
    /// decoder says what is wrong with it, if anything).
    fn shallow<'a>(&self, _bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        None
    }

    /// How well a body whose route is not known (`foldgate estimate`
    /// without a path) fits this API's shape: by default [`Fit::Field`]
    /// when it has the spec's conversation field. The best fit wins, the
    /// first in the registry on a tie.
    fn fit(&self, body: &Map<String, Value>) -> Fit {
        match body.contains_key(self.spec().conversation_field) {
            true => Fit::Field,
            false => Fit::No,
        }
    }
}

/// The summarizer's call to a provider that speaks an API, and what signs
/// requests to it.
pub trait Provider: Codec {
    /// The body of a summarizer call (`None`: this API carries none).
    fn summary_body(&self, _call: SummaryCall<'_>) -> Option<Value> {
        None
    }

    /// What a successful answer to a summarizer call says.
    fn summary_answer(&self, answer: &Value) -> SummaryAnswer;

    /// Where a summarizer call to `model` goes, after the provider's
    /// `base_url` (a route's tail, see [`super::route`]); `conversation`
    /// is the tail of the conversation being folded when the call goes to
    /// its own provider. By default the spec's path.
    fn summary_path(&self, _model: &str, _conversation: Option<&str>) -> String {
        self.spec().path.to_string()
    }

    /// What signs every request to a provider of this API once its body
    /// is final, made once at start-up from the provider's configuration
    /// (`Err`: why the provider cannot start). By default none: a
    /// provider's key goes in the spec's key header.
    fn signer(
        &self,
        _provider: &ProviderConfig,
    ) -> Result<Option<std::sync::Arc<dyn Signer>>, String> {
        Ok(None)
    }
}

/// Signs a request whose head and body are final (AWS SigV4): what the
/// upstream checks against the bytes it receives, so it runs after every
/// change foldgate makes, on the upstream's URI and headers.
pub trait Signer: Send + Sync + std::fmt::Debug {
    /// Signs `head` for `body`: replaces any signature the client sent.
    fn sign(&self, head: &mut http::request::Parts, body: &[u8]) -> Result<(), String>;
}

/// The recall round in an API's shape: the tool, the calls of an answer,
/// the results, hiding the calls from the client, a streamed round.
pub trait Recall: Send + Sync {
    /// The recall tool, in this API's shape.
    fn recall_tool(&self) -> Value;

    /// The name of one of a request's `tools` (`None`: none, or not one
    /// foldgate could have added).
    fn tool_name<'t>(&self, tool: &'t Value) -> Option<&'t str>;

    /// Whether the request lets the model pick its tools freely and asks
    /// for one answer.
    fn free_to_call(&self, fields: &Map<String, Value>) -> bool;

    /// Whether a request may get the recall tool: the model
    /// [free to pick](Self::free_to_call) its tools, and no tool of that
    /// name already.
    fn recall_offerable(&self, fields: &Map<String, Value>) -> bool {
        self.free_to_call(fields) && !recall::has_tool(fields, |t| self.tool_name(t))
    }

    /// The tool calls of a whole answer.
    fn calls(&self, answer: &Value) -> Calls;

    /// What a whole answer whose calls are all recall calls adds to the
    /// conversation.
    fn answer_messages(&self, answer: &Value, calls: &[Call]) -> Vec<Value>;

    /// The messages answering `calls` with `texts`.
    fn results(&self, calls: &[Call], texts: Vec<String>) -> Vec<Value>;

    /// Removes recall calls from a whole answer for the client.
    fn hide(&self, answer: &mut Value);

    /// A reader for one streamed round's events: whether its request
    /// could not offer the tool again (`last`), whether rounds came before
    /// it (`later`), and what they showed (`carry`).
    fn stream_round(&self, last: bool, later: bool, carry: Carry) -> Box<dyn Round>;

    /// Rewrites the recall calls of a round's messages to carry their
    /// bounded query ([`recall::input::bounded`]).
    fn bound_calls(&self, messages: &mut [Value]);

    /// Places recalled excerpts (`block`) right before the last user turn
    /// of the conversation's `items`.
    fn place_recalled(&self, items: &mut Vec<Value>, block: &str) {
        recall::before_last_user(items, block);
    }
}

impl std::fmt::Debug for dyn WireApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.spec().name)
    }
}

/// The spec, as the pipeline reads it.
impl dyn WireApi {
    /// [`ApiSpec::name`].
    pub fn name(&self) -> &'static str {
        self.spec().name
    }

    /// [`ApiSpec::provider`].
    pub fn provider(&self) -> &'static str {
        self.spec().provider
    }

    /// [`ApiSpec::path`].
    pub fn path(&self) -> &'static str {
        self.spec().path
    }

    /// [`ApiSpec::claim`].
    pub fn claim(&self, path: &str) -> Option<Claim> {
        (self.spec().claim)(path)
    }

    /// [`ApiSpec::owns`].
    pub fn owns(&self, path: &str) -> Option<Claim> {
        (self.spec().owns)(path)
    }

    /// [`ApiSpec::model_in_path`].
    pub fn model_in_path(&self) -> bool {
        self.spec().model_in_path
    }

    /// [`ApiSpec::conversation_field`].
    pub fn conversation_field(&self) -> &'static str {
        self.spec().conversation_field
    }

    /// [`ApiSpec::usage`].
    pub fn usage(&self) -> UsageReader {
        self.spec().usage
    }

    /// [`ApiSpec::usage_field`].
    pub fn usage_field(&self) -> &'static str {
        self.spec().usage_field
    }

    /// [`ApiSpec::error_shape`].
    pub fn error_shape(&self) -> ErrorShape {
        self.spec().error_shape
    }

    /// [`ApiSpec::context_error`].
    pub fn context_error(&self, body: &[u8]) -> Option<ContextError> {
        (self.spec().context_error)(body)
    }

    /// Whether a summarizer call's error body (lower-cased) names one of
    /// the spec's [format errors](ApiSpec::format_errors).
    pub fn rejects_format(&self, error: &str) -> bool {
        self.spec().format_errors.iter().any(|w| error.contains(w))
    }

    /// The header a provider reads its `key` from, and its value
    /// ([`ApiSpec::keys`]).
    pub fn key_header(&self, key: &str) -> (HeaderName, String) {
        let keys = &self.spec().keys;
        let value = match keys.bearer {
            true => format!("Bearer {key}"),
            false => key.to_string(),
        };
        (HeaderName::from_static(keys.header), value)
    }

    /// The client's key when the request's `query` carries it in the
    /// spec's parameter (Google's keys need no percent-decoding).
    pub fn query_key<'q>(&self, query: &'q str) -> Option<&'q str> {
        let name = self.spec().keys.query?;
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .filter(|k| !k.is_empty())
    }

    /// Where the summary goes, given the configured placement.
    pub fn placement(&self, configured: Placement) -> Placement {
        self.spec().summary.of(configured)
    }

    /// [`ApiSpec::compresses_answers`].
    pub fn compresses_answers(&self) -> bool {
        self.spec().compresses_answers
    }

    /// [`ApiSpec::answers_by_position`].
    pub fn answers_by_position(&self) -> bool {
        self.spec().answers_by_position
    }
}

/// The codec and the recall round, as the pipeline uses them.
impl dyn WireApi {
    /// The body to forward: `fields` with the view in ([`Self::fill`]),
    /// serialized.
    pub fn encode(
        &self,
        fields: &mut Map<String, Value>,
        messages: &[Value],
        wire: Option<&Wire>,
        items: Vec<Item>,
    ) -> Result<Bytes, ApiError> {
        self.fill(fields, messages, wire, items);
        serde_json::to_vec(fields)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(e.to_string()))
    }

    /// Fills `fields` with the view: over the wire items the decode kept
    /// ([`Codec::fill_wire`]), else the engine's `messages` themselves.
    pub fn fill(
        &self,
        fields: &mut Map<String, Value>,
        messages: &[Value],
        wire: Option<&Wire>,
        items: Vec<Item>,
    ) {
        match wire {
            Some(wire) => self.fill_wire(fields, messages, wire, items),
            None => codec::fill_messages(fields, self.conversation_field(), messages, items),
        }
    }

    /// [`Codec::decode`] of a body posted to `path`.
    pub fn decode_at(&self, path: &str, bytes: &[u8]) -> Result<Decoded, ApiError> {
        self.decode(Some(path), bytes)
    }

    /// The request's conversation (its messages or items).
    pub fn conversation<'a>(
        &self,
        fields: &'a mut Map<String, Value>,
    ) -> Option<&'a mut Vec<Value>> {
        fields
            .get_mut(self.conversation_field())
            .and_then(Value::as_array_mut)
    }

    /// The recall round's shapes ([`super::spec::RecallSpec::shapes`]).
    pub fn recall(&self) -> &'static dyn Recall {
        self.spec().recall.shapes
    }

    /// Whether a request may get the recall tool: the spec offers it and
    /// the shapes allow it ([`Recall::recall_offerable`]).
    pub fn recall_offerable(&self, fields: &Map<String, Value>) -> bool {
        self.spec().recall.offered && self.recall().recall_offerable(fields)
    }

    /// Whether the tool must stay defined after the last round.
    pub fn keeps_recall_tool(&self) -> bool {
        self.spec().recall.keeps_tool
    }

    /// Takes the recall tool out of the request's `tools`.
    pub fn remove_recall_tool(&self, fields: &mut Map<String, Value>) {
        recall::remove_tool(fields, |t| self.recall().tool_name(t));
    }

    /// The event that ends a stream foldgate cannot finish.
    pub fn error_event(&self, message: &str) -> Bytes {
        (self.spec().error_event)(message)
    }
}
