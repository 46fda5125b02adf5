//! The four parts of a [`WireApi`] and their defaults (chat
//! completions').

use super::codec::{Decoded, RawRequest, Wire};
use super::recall::calls::{Call, Calls, Carry};
use super::recall::stream::Round;
use super::route::Claim;
use super::summary::{SummaryAnswer, SummaryCall};
use super::{ContextError, Fit, context_error};
use super::{chat, recall, route};
use crate::config::{Placement, ProviderConfig};
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use crate::usage::UsageReader;
use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderName};
use serde_json::{Map, Value};

/// One wire format, as the pipeline uses it: its [`Endpoint`], its
/// [`Provider`] side, its [`Codec`] and its [`Recall`] round. The fold
/// engine works on chat-completions messages (one per unit a cut may not
/// split); an API maps its body to them and a view of them back.
///
/// Every type with the four parts is a `WireApi`. The parts' defaults are
/// chat completions' (OpenAI's key header, error envelope and usage,
/// messages that are the engine's), so an API's folder writes only what
/// differs: [`Endpoint::name`] and [`Endpoint::path`], the recall round's
/// shapes ([`Recall`]'s required methods), and whatever else its wire
/// does its own way.
pub trait WireApi: Endpoint + Provider + Codec + Recall {}

impl<T: Endpoint + Provider + Codec + Recall> WireApi for T {}

/// Which requests an API serves.
pub trait Endpoint: Send + Sync + 'static {
    /// A short label for logs, metrics and the admin API.
    fn name(&self) -> &'static str;

    /// Its endpoint, as its SDKs append it to their base URL
    /// (`/chat/completions`).
    fn path(&self) -> &'static str;

    /// Whether a `POST` to `path` is this API's, and what its path says
    /// ([`route`]): by default, a path ending in [`Self::path`], under any
    /// mount prefix and version.
    fn claim(&self, path: &str) -> Option<Claim> {
        route::endpoint(path, self.path())
    }

    /// Whether `path` is another of its endpoints (any method), which is
    /// not folded but goes only to its providers ([`sibling`]).
    fn owns(&self, _path: &str) -> Option<Claim> {
        None
    }

    /// Whether its requests name their model in the path, not the body
    /// (the route's [`Route::model`] is then the request's model).
    fn model_in_path(&self) -> bool {
        false
    }
}

/// What an API means to the providers that speak it, and to foldgate's
/// own calls and errors: keys, errors, usage, the summarizer's call.
/// The defaults are OpenAI's.
pub trait Provider: Endpoint {
    /// The `api` setting of the providers its requests go to: never to a
    /// provider of another API, whose host would get the client's key. By
    /// default its [name](Endpoint::name).
    fn provider(&self) -> &'static str {
        self.name()
    }

    /// The shape of foldgate's own errors on this API's route: by default
    /// OpenAI's envelope ([`chat::error_envelope`]).
    fn error_shape(&self) -> ErrorShape {
        ErrorShape(chat::error_envelope)
    }

    /// Reads an upstream 400 body; `Some` when it says the prompt is too
    /// long for the model.
    fn context_error(&self, body: &[u8]) -> Option<ContextError> {
        context_error::detect(body)
    }

    /// The header a provider speaking this API reads its `key` from, and
    /// the header's value.
    fn key_header(&self, key: &str) -> (HeaderName, String) {
        (AUTHORIZATION, format!("Bearer {key}"))
    }

    /// The client's key when the request's `query` carries it (an API
    /// whose clients may send it there): the tenant and foldgate's own
    /// calls then read it as if it came in [`Self::key_header`].
    fn query_key<'q>(&self, _query: &'q str) -> Option<&'q str> {
        None
    }

    /// Headers other than [`Self::key_header`] its clients send their key
    /// in (Azure OpenAI's `api-key`): a credential like the others.
    fn client_key_headers(&self) -> &'static [&'static str] {
        &[]
    }

    /// The body of a summarizer call to a provider that speaks this API
    /// (`None`: this API carries none).
    fn summary_body(&self, _call: SummaryCall<'_>) -> Option<Value> {
        None
    }

    /// Whether a summarizer call's error body (lower-cased) says the
    /// provider rejects the output format asked for (the call is then
    /// asked again with a weaker one, down to a plain prompt).
    fn rejects_format(&self, error: &str) -> bool {
        error.contains("response_format") || error.contains("json_schema")
    }

    /// Where a summarizer call to `model` goes, after the provider's
    /// `base_url` (a route's tail, see [`route`]); `conversation` is the
    /// tail of the conversation being folded when the call goes to its
    /// own provider (an Azure deployment's path names the model).
    fn summary_path(&self, _model: &str, _conversation: Option<&str>) -> String {
        self.path().to_string()
    }

    /// What a successful answer to a summarizer call says: by default a
    /// chat completion's first choice.
    fn summary_answer(&self, answer: &Value) -> SummaryAnswer {
        SummaryAnswer::of_completion(answer)
    }

    /// How an answer on this API reports its prompt tokens (read as it
    /// streams by, for calibration): by default `usage.prompt_tokens`.
    fn usage(&self) -> UsageReader {
        chat::USAGE
    }

    /// The field of an answer that reports its usage (summed over recall
    /// rounds before the client sees it).
    fn usage_field(&self) -> &'static str {
        "usage"
    }

    /// What signs every request to a provider of this API once its body
    /// is final, made once at start-up from the provider's configuration
    /// (`Err`: why the provider cannot start). By default none: a
    /// provider's key goes in [`Self::key_header`].
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

/// How an API's body becomes the fold engine's messages and a view goes
/// back into it. The defaults are chat completions': the messages are the
/// engine's.
pub trait Codec: Endpoint {
    /// The request field holding the conversation.
    fn conversation_field(&self) -> &'static str {
        "messages"
    }

    /// How well a body whose route is not known (`foldgate estimate`
    /// without a path) fits this API's shape: by default [`Fit::Field`]
    /// when it has the [conversation field](Self::conversation_field).
    /// The best fit wins, the first in the registry on a tie.
    fn fit(&self, body: &Map<String, Value>) -> Fit {
        if body.contains_key(self.conversation_field()) {
            Fit::Field
        } else {
            Fit::No
        }
    }

    /// The body read shallowly, when the API has a reader for the fast
    /// path and the body is plain (`None`: the body is decoded, and the
    /// decoder says what is wrong with it, if anything).
    fn shallow<'a>(&self, _bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        None
    }

    /// The engine message a unit of wire items read by [`Self::shallow`]
    /// stands for, as [`Self::decode`] makes it: by default the one item
    /// itself (chat completions' messages are the engine's).
    fn unit_message(&self, unit: &[Value]) -> Value {
        unit.first().cloned().unwrap_or(Value::Null)
    }

    /// Whether a unit's engine message also depends on whether the unit
    /// before it makes tool calls: results answer calls by position, not
    /// by id (Gemini). The fast path then reads, and caches, each unit
    /// with that fact ([`Self::unit_message_after`]).
    fn answers_by_position(&self) -> bool {
        false
    }

    /// [`Self::unit_message`] of a unit that follows one making tool
    /// calls (`after_calls`), for an API that
    /// [answers by position](Self::answers_by_position).
    fn unit_message_after(&self, unit: &[Value], _after_calls: bool) -> Value {
        self.unit_message(unit)
    }

    /// Reads a body for the fold engine; `Err` is the client's 400. By
    /// default a chat body's messages ([`chat::codec::decode`]).
    fn decode(&self, bytes: &[u8]) -> Result<Decoded, ApiError> {
        chat::codec::decode(bytes)
    }

    /// Reads a body sent to `path` for the fold engine: [`Self::decode`],
    /// for an API whose body says everything (one that names the model in
    /// the path reads it from there).
    fn decode_at(&self, _path: &str, bytes: &[u8]) -> Result<Decoded, ApiError> {
        self.decode(bytes)
    }

    /// Fills `fields` with the view: `items` laid out by the fold engine
    /// over `messages` (the engine's); `wire` is what the decode kept of
    /// the original items, when it kept them ([`Self::fill_wire`]).
    fn fill(
        &self,
        fields: &mut Map<String, Value>,
        messages: &[Value],
        wire: Option<&Wire>,
        items: Vec<Item>,
    ) {
        match wire {
            Some(wire) => self.fill_wire(fields, messages, wire, items),
            None => chat::codec::fill(fields, messages, items),
        }
    }

    /// [`Self::fill`] with the wire items the decode kept: the view laid
    /// out over them. By default the engine's messages (an API whose
    /// decode keeps no wire never comes here).
    fn fill_wire(
        &self,
        fields: &mut Map<String, Value>,
        messages: &[Value],
        _wire: &Wire,
        items: Vec<Item>,
    ) {
        chat::codec::fill(fields, messages, items);
    }

    /// Where the summary goes, given the configured placement.
    fn placement(&self, configured: Placement) -> Placement {
        configured
    }

    /// Whether older assistant answers may be compressed to stubs (only
    /// where a stub keeps the wire pairing).
    fn compresses_answers(&self) -> bool {
        false
    }
}

/// The recall round in an API's shape: the tool, the calls of an answer,
/// the results, hiding the calls from the client, a streamed round.
pub trait Recall: Codec {
    /// The recall tool, in this API's shape.
    fn recall_tool(&self) -> Value;

    /// The name of one of a request's `tools` (`None`: none, or not one
    /// foldgate could have added).
    fn tool_name<'t>(&self, tool: &'t Value) -> Option<&'t str>;

    /// Whether the request lets the model pick its tools freely and asks
    /// for one answer: by default `tool_choice` unset or `"auto"`.
    fn free_to_call(&self, fields: &Map<String, Value>) -> bool {
        match fields.get("tool_choice") {
            None | Some(Value::Null) => true,
            Some(choice) => choice.as_str() == Some("auto"),
        }
    }

    /// Whether a request may get the recall tool: the model
    /// [free to pick](Self::free_to_call) its tools, and no tool of that
    /// name already.
    fn recall_offerable(&self, fields: &Map<String, Value>) -> bool {
        self.free_to_call(fields) && !recall::has_tool(fields, |t| self.tool_name(t))
    }

    /// Takes the recall tool out of the request's `tools`.
    fn remove_recall_tool(&self, fields: &mut Map<String, Value>) {
        recall::remove_tool(fields, |t| self.tool_name(t));
    }

    /// Whether the tool must stay defined after the last round (the
    /// history then holds calls of it).
    fn keeps_recall_tool(&self) -> bool {
        false
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

    /// The event that ends a stream foldgate cannot finish: by default an
    /// SSE `data:` event with OpenAI's error object.
    fn error_event(&self, message: &str) -> Bytes {
        recall::stream::data_event(
            &serde_json::json!({"error": {"message": message, "type": "server_error"}}),
        )
    }

    /// Places recalled excerpts (`block`) right before the last user turn
    /// of the conversation's `items`.
    fn place_recalled(&self, items: &mut Vec<Value>, block: &str) {
        recall::before_last_user(items, block);
    }
}

impl std::fmt::Debug for dyn WireApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl dyn WireApi {
    /// The body to forward: `fields` with the view in ([`Codec::fill`]),
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

    /// The request's conversation (its messages or items).
    pub fn conversation<'a>(
        &self,
        fields: &'a mut Map<String, Value>,
    ) -> Option<&'a mut Vec<Value>> {
        fields
            .get_mut(self.conversation_field())
            .and_then(Value::as_array_mut)
    }
}
