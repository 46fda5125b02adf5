//! The wire formats foldgate folds, one folder each, behind one trait.
//!
//! A [`WireApi`] is everything one API means to the pipeline, in four
//! parts: its [`Endpoint`] (the route it serves), its [`Provider`] side
//! (keys, error shape and context-length error, usage, the summarizer's
//! call to a provider that speaks it), its [`Codec`] (how its body becomes
//! the fold engine's messages and a view goes back into it, where the
//! summary goes) and its [`Recall`] round. Every part's defaults are chat
//! completions', so a folder writes only what its wire does differently
//! (docs/architecture.md, "An API: the `WireApi` parts", has the table).
//! The pipeline ([`crate::pipeline`]) holds an [`Api`] and names none of
//! them; adding an API is a folder here and one line in [`APIS`].
//!
//! - [`chat`]: OpenAI chat completions; the messages are the engine's.
//! - [`anthropic`]: Anthropic Messages; `system` pinned, `tool_use` and
//!   its `tool_result`s one unit, the summary appended to `system`.
//! - [`responses`]: OpenAI Responses; `instructions` pinned, calls and
//!   outputs paired by `call_id`.
//! - [`gemini`]: Gemini `generateContent`; `systemInstruction` pinned,
//!   `functionCall` and `functionResponse` parts one unit, the model in
//!   the path.
//! - [`ollama`]: Ollama's native `/api/chat`; JSON-line streams, calls'
//!   arguments as objects, `options.num_ctx` the request's window.
//! - [`codec`] (with [`crate::shallow`]), [`recall`], [`context_error`], [`summary`]:
//!   what the APIs share.

pub mod anthropic;
pub mod chat;
pub mod codec;
pub mod context_error;
#[doc(hidden)]
pub mod fuzzing;
pub mod gemini;
pub mod ollama;
pub mod recall;
pub mod responses;
pub mod route;
pub mod summary;

pub use context_error::ContextError;

use crate::config::Placement;
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use crate::usage::UsageReader;
use bytes::Bytes;
use codec::{Decoded, RawRequest, Wire};
use http::header::{AUTHORIZATION, HeaderName};
use http::uri::PathAndQuery;
use http::{Method, Uri};
use recall::calls::{Call, Calls, Carry};
use recall::stream::Round;
use route::Claim;
use serde_json::{Map, Value};
use std::sync::LazyLock;
use summary::{SummaryAnswer, SummaryCall};

/// An API foldgate folds: one implementation of [`WireApi`], for the life
/// of the process.
pub type Api = &'static dyn WireApi;

/// Every API foldgate folds. A new API is one more line here (and its
/// folder).
static APIS: &[Api] = &[
    &chat::Chat,
    &anthropic::Anthropic,
    &responses::Responses,
    &gemini::Gemini,
    &ollama::Ollama,
];

/// The API a request speaks, when foldgate folds it: a `POST` whose path
/// has the shape of an API's endpoint ([`Endpoint::claim`]).
pub fn of(method: &Method, path: &str) -> Option<Api> {
    claim(method, path).map(|(api, _)| api)
}

/// The API claiming a `POST` to `path`, and its claim.
fn claim(method: &Method, path: &str) -> Option<(Api, Claim)> {
    if method != Method::POST {
        return None;
    }
    APIS.iter()
        .find_map(|&api| api.claim(path).map(|claim| (api, claim)))
}

/// A conversation request's route: the API that claims it, the part of
/// its path that goes after the provider's `base_url`, and the model the
/// path names.
#[derive(Debug)]
pub struct Route {
    /// The API.
    pub api: Api,
    /// What the client's SDK appended to its base URL, with the query:
    /// the provider's `base_url` takes it as it is.
    pub tail: PathAndQuery,
    /// The model the path names (a Gemini model, an Azure deployment).
    pub model: Option<String>,
}

/// The route of a conversation request, when an API claims it.
pub fn route(method: &Method, uri: &Uri) -> Option<Route> {
    let path = uri.path();
    let (api, claim) = claim(method, path)?;
    Some(Route {
        api,
        tail: tail_of(uri, claim.tail)?,
        model: claim.model.map(|range| path[range].to_string()),
    })
}

/// A request to one of an API's other endpoints, which foldgate does not
/// fold (Gemini's `:countTokens`, Anthropic's `/messages/count_tokens`):
/// forwarded untouched, but only to a provider of that API, with the
/// route's tail ([`Endpoint::owns`]).
pub fn sibling(uri: &Uri) -> Option<Route> {
    let path = uri.path();
    let (api, claim) = APIS
        .iter()
        .find_map(|&api| api.owns(path).map(|claim| (api, claim)))?;
    Some(Route {
        api,
        tail: tail_of(uri, claim.tail)?,
        model: claim.model.map(|range| path[range].to_string()),
    })
}

/// The path from `start` on, with the query.
fn tail_of(uri: &Uri, start: usize) -> Option<PathAndQuery> {
    let path = uri.path();
    let tail = match uri.query() {
        Some(query) => format!("{}?{query}", &path[start..]),
        None => path[start..].to_string(),
    };
    PathAndQuery::try_from(tail).ok()
}

/// How well a body fits an API's shape ([`Codec::fit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fit {
    /// Not its shape.
    No,
    /// It has the API's conversation field (which other APIs may share).
    Field,
    /// Something only this API writes.
    Only,
}

/// The API a body is written for, judged by its shape when its route is
/// not known: the best [`Codec::fit`], the first in registry order on a
/// tie (chat completions when nothing fits).
pub fn by_shape(body: &Map<String, Value>) -> Api {
    let mut best = APIS[0];
    let mut best_fit = best.fit(body);
    for &api in &APIS[1..] {
        let fit = api.fit(body);
        if fit > best_fit {
            (best, best_fit) = (api, fit);
        }
    }
    best
}

/// Every API's name ([`Endpoint::name`]), in registry order.
pub fn names() -> impl Iterator<Item = &'static str> {
    APIS.iter().map(|api| api.name())
}

/// Every API, in registry order.
pub fn all() -> &'static [Api] {
    APIS
}

/// The API of this name ([`Endpoint::name`]).
pub fn named(name: &str) -> Option<Api> {
    APIS.iter().copied().find(|api| api.name() == name)
}

/// The API providers set to `api = NAME` speak: the one their summarizer
/// calls are shaped for and whose header takes their key.
pub fn for_provider(name: &str) -> Option<Api> {
    APIS.iter().copied().find(|api| api.provider() == name)
}

/// The names providers may set `api` to, in registry order.
pub fn provider_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::with_capacity(APIS.len());
    for api in APIS {
        if !names.contains(&api.provider()) {
            names.push(api.provider());
        }
    }
    names
}

/// The headers a client's or provider's API key may come in, each once,
/// in the order of [`APIS`] (`Authorization` first).
pub fn key_headers() -> &'static [HeaderName] {
    static NAMES: LazyLock<Vec<HeaderName>> = LazyLock::new(|| {
        let mut names: Vec<HeaderName> = Vec::with_capacity(APIS.len());
        for api in APIS {
            let (name, _) = api.key_header("");
            let others = api.client_key_headers().iter().copied();
            for name in std::iter::once(name).chain(others.map(HeaderName::from_static)) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    });
    &NAMES
}

/// The shape of foldgate's own errors for a request: its API's, else
/// [`own_error_shape`].
pub fn error_shape(method: &Method, path: &str) -> ErrorShape {
    of(method, path).map_or_else(own_error_shape, |api| api.error_shape())
}

/// The shape of foldgate's errors on a route no API claims (its own
/// `/foldgate/*` routes, a handler that panicked): the first API's, chat
/// completions' (OpenAI's envelope).
pub fn own_error_shape() -> ErrorShape {
    APIS[0].error_shape()
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::RECALL_TOOL;
    use recall::input::MAX_QUERY_CHARS;
    use serde_json::json;
    use summary::Format;

    fn api(name: &str) -> Api {
        named(name).unwrap()
    }

    /// Every path shape the official SDKs produce on their defaults (and
    /// the mount prefixes users put in front of them): the API that claims
    /// it, the tail a provider's `base_url` takes, the model in the path.
    #[test]
    fn routes_by_path_shape() {
        /// The API's name, the tail, the model.
        type Claimed = Option<(&'static str, &'static str, Option<&'static str>)>;
        let table: &[(&str, Claimed)] = &[
            // openai, OpenAI(base_url=…/v1) and the mounts of other servers
            (
                "/v1/chat/completions",
                Some(("chat", "/chat/completions", None)),
            ),
            (
                "/chat/completions",
                Some(("chat", "/chat/completions", None)),
            ),
            (
                "/api/v1/chat/completions",
                Some(("chat", "/chat/completions", None)),
            ),
            (
                "/openai/v1/chat/completions",
                Some(("chat", "/chat/completions", None)),
            ),
            ("/v1/responses", Some(("responses", "/responses", None))),
            (
                "/openai/v1/responses",
                Some(("responses", "/responses", None)),
            ),
            // AzureOpenAI(azure_endpoint=…): base …/openai, the deployment in the path
            (
                "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21",
                Some((
                    "chat",
                    "/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21",
                    Some("gpt-4o-prod"),
                )),
            ),
            (
                "/openai/responses?api-version=preview",
                Some(("responses", "/responses?api-version=preview", None)),
            ),
            // anthropic: Anthropic(base_url=host) calls /v1/messages
            ("/v1/messages", Some(("anthropic", "/messages", None))),
            (
                "/anthropic/v1/messages",
                Some(("anthropic", "/messages", None)),
            ),
            (
                "/messages?beta=true",
                Some(("anthropic", "/messages?beta=true", None)),
            ),
            // google-genai: v1 (its default), v1beta, v1alpha, any mount
            (
                "/v1/models/gemini-2.5-flash:generateContent",
                Some((
                    "gemini",
                    "/v1/models/gemini-2.5-flash:generateContent",
                    Some("gemini-2.5-flash"),
                )),
            ),
            (
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                Some((
                    "gemini",
                    "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                    Some("gemini-2.5-flash"),
                )),
            ),
            (
                "/gemini/v1alpha/models/m:generateContent",
                Some(("gemini", "/v1alpha/models/m:generateContent", Some("m"))),
            ),
            (
                "/models/m:generateContent",
                Some(("gemini", "/models/m:generateContent", Some("m"))),
            ),
            // google-genai with vertexai=True: projects and locations, and express mode
            (
                "/v1beta1/projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
                Some((
                    "gemini",
                    "/v1beta1/projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
                    Some("gemini-2.5-pro"),
                )),
            ),
            (
                "/vertex/v1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
                Some((
                    "gemini",
                    "/v1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
                    Some("gemini-2.5-pro"),
                )),
            ),
            // not conversations
            ("/v1beta/models/gemini-2.5-pro:countTokens", None),
            ("/v1/models/gemini-2.5-pro:embedContent", None),
            ("/v1/messages/count_tokens", None),
            ("/v1/messages/batches", None),
            ("/v1/threads/thread_1/messages", None),
            ("/v1/responses/compact", None),
            ("/v1/responses/resp_1/cancel", None),
            ("/v1/embeddings", None),
            ("/v1/models", None),
        ];
        for (path, expected) in table {
            let uri: Uri = path.parse().unwrap();
            let got = route(&Method::POST, &uri);
            let got = got
                .as_ref()
                .map(|r| (r.api.name(), r.tail.as_str(), r.model.as_deref()));
            assert_eq!(got, *expected, "{path}");
        }
        let uri: Uri = "/v1/responses".parse().unwrap();
        assert!(route(&Method::GET, &uri).is_none());
    }

    #[test]
    fn calls_go_back_with_their_bounded_query_on_every_api() {
        let huge = json!({ "query": "x".repeat(1 << 20) }).to_string();
        let cut = json!({ "query": "x".repeat(MAX_QUERY_CHARS) });
        let mut chat = vec![json!({"role": "assistant", "tool_calls": [
            {"id": "a", "function": {"name": RECALL_TOOL, "arguments": huge}},
            {"id": "b", "function": {"name": "ls", "arguments": "{\"p\": 1}"}}]})];
        api("chat").bound_calls(&mut chat);
        assert_eq!(
            chat[0]["tool_calls"][0]["function"]["arguments"],
            cut.to_string()
        );
        assert_eq!(
            chat[0]["tool_calls"][1]["function"]["arguments"],
            "{\"p\": 1}"
        );
        let input: Value = serde_json::from_str(&huge).unwrap_or_default();
        let mut anthropic = vec![json!({"role": "assistant", "content": [
            {"type": "text", "text": "hm"},
            {"type": "tool_use", "id": "a", "name": RECALL_TOOL, "input": input}]})];
        api("anthropic").bound_calls(&mut anthropic);
        assert_eq!(anthropic[0]["content"][1]["input"], cut);
        let mut responses = vec![
            json!({"type": "function_call", "call_id": "a", "name": RECALL_TOOL, "arguments": "not json"}),
        ];
        api("responses").bound_calls(&mut responses);
        assert_eq!(responses[0]["arguments"], "{}");
    }

    #[test]
    fn recalled_excerpts_go_before_the_last_user_message_in_each_api() {
        let place = |name: &str, body: &mut Value, block: &str| {
            let api = api(name);
            let fields = body.as_object_mut().unwrap();
            api.place_recalled(api.conversation(fields).unwrap(), block);
        };
        let mut chat = json!({"messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"}, {"role": "user", "content": "q"}]});
        place("chat", &mut chat, "BLOCK");
        let m = &chat["messages"];
        assert_eq!(m[3], json!({"role": "user", "content": "BLOCK"}));
        assert_eq!(m[4]["content"], "q");

        let mut anthropic = json!({"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]});
        place("anthropic", &mut anthropic, "BLOCK");
        let m = &anthropic["messages"];
        assert_eq!(m.as_array().map(Vec::len), Some(3), "no message added");
        assert_eq!(m[0]["content"][0]["text"], "BLOCK");
        assert_eq!(m[0]["content"][1], json!({"type": "text", "text": "q"}));
        assert_eq!(m[2]["content"][0]["type"], "tool_result");

        let mut responses = json!({"input": [
            {"role": "user", "content": "q"},
            {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "x"}]});
        place("responses", &mut responses, "BLOCK");
        assert_eq!(responses["input"][0]["content"], "BLOCK");
        assert_eq!(responses["input"][1]["content"], "q");
    }

    #[test]
    fn summarizer_calls_take_each_providers_shape() {
        let call = |format, completion_param| SummaryCall {
            model: "m",
            system: "s",
            user: "u".into(),
            schema: || json!({}),
            format,
            max_tokens: 100,
            completion_param,
        };
        let chat = for_provider("openai").unwrap();
        let anthropic = for_provider("anthropic").unwrap();
        assert_eq!((chat.name(), anthropic.name()), ("chat", "anthropic"));
        let b = chat.summary_body(call(Format::JsonSchema, false)).unwrap();
        assert_eq!(b["response_format"]["type"], "json_schema");
        assert_eq!(b["max_tokens"], 100);
        let b = chat.summary_body(call(Format::Instructions, true)).unwrap();
        assert!(b.get("response_format").is_none());
        assert_eq!(b["max_completion_tokens"], 100);
        let b = anthropic
            .summary_body(call(Format::JsonSchema, true))
            .unwrap();
        assert_eq!((&b["system"], &b["max_tokens"]), (&json!("s"), &json!(100)));
        assert!(b.get("response_format").is_none());
        assert_eq!(Format::JsonSchema.downgrade(), Some(Format::JsonObject));
        assert_eq!(Format::Instructions.downgrade(), None);
    }

    /// One check of a conversation's roles, in each API's own words.
    #[test]
    fn malformed_conversations_are_refused_in_each_apis_words() {
        let said = |name: &str, body: &str| {
            let refused = api(name).decode(body.as_bytes()).err();
            refused.map(|e| (e.to_string(), e.code()))
        };
        let cases = [
            (
                r#"{"model":"m","messages":[{"role":"user"},{"content":"x"}]}"#,
                "messages[1] must be an object with a string `role`",
                "messages.1: must be an object with a string `role`",
            ),
            (
                r#"{"model":"m","messages":{}}"#,
                "`messages` must be an array",
                "messages: must be an array",
            ),
            (
                r#"{"model":"m"}"#,
                "you must provide a `messages` parameter",
                "messages: field required",
            ),
        ];
        for (body, chat, anthropic) in cases {
            let invalid = "invalid_request";
            assert_eq!(
                said("chat", body),
                Some((chat.to_string(), invalid)),
                "{body}"
            );
            assert_eq!(
                said("anthropic", body),
                Some((anthropic.to_string(), invalid)),
                "{body}"
            );
        }
        let fine = r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#;
        assert_eq!((said("chat", fine), said("anthropic", fine)), (None, None));
    }

    #[test]
    fn key_headers_are_each_apis_once() {
        let x_api_key = HeaderName::from_static("x-api-key");
        let x_goog_api_key = HeaderName::from_static("x-goog-api-key");
        let api_key = HeaderName::from_static("api-key");
        assert_eq!(
            key_headers(),
            [AUTHORIZATION, api_key, x_api_key.clone(), x_goog_api_key]
        );
        let anthropic = for_provider("anthropic").unwrap();
        assert_eq!(anthropic.key_header("k"), (x_api_key, "k".to_string()));
        let chat = for_provider("openai").unwrap();
        assert_eq!(
            chat.key_header("k"),
            (AUTHORIZATION, "Bearer k".to_string())
        );
    }
}
