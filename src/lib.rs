//! foldgate: a transparent OpenAI-compatible proxy that folds long
//! conversations into a summary before they overflow the context window.
//!
//! The modules in the order a request meets them (the diagram is in
//! `docs/architecture.md`). The server's are this package's; the rest live
//! in the workspace's lower layers and are re-exported here at the same
//! paths: `config`, `message`, `tokens`, `fold`, `glob` and `stem` in
//! `foldgate-core`; `api`, `shallow`, `sse`, `usage`, `upstream`, `body`,
//! `error`, `headers` and `telemetry` in `foldgate-wire`;
//! `state` and `archive` in `foldgate-store`; `summarize` in
//! `foldgate-summarize`.
//!
//! - [`config`]: figment configuration, validation, secrets.
//! - [`app`]: the shared application state every request uses.
//! - [`discover`]: context windows read from providers at start-up (`tokens.discover`), and the report of every model's window.
//! - [`server`]: listener, TLS, the tower stack, graceful shutdown; [`affinity`]: runtime threads pinned to cores (`server.pin_workers`).
//! - [`body`]: the body type that crosses the stack.
//! - [`proxy`]: the request handler: admin routes, passthrough, the pipeline for API routes.
//! - [`unclaimed`]: conversation-shaped `POST`s no API claims: counted, warned about once, listed.
//! - [`admin`]: `/foldgate/*` endpoints and the guard on conversation reads; [`ui`]: the dashboard's embedded files (`/foldgate/ui`).
//! - [`pipeline`]: the conversation pipeline: key, estimate, plan, fold, forward, retry, recall rounds; names no API.
//! - [`api`]: the wire formats (chat completions, Anthropic Messages, Responses, Gemini, Ollama), one folder each: a `const` [`api::ApiSpec`] of its data and a small codec ([`api::Codec`], [`api::Provider`], [`api::Recall`]): a folder holds only what its wire does differently.
//! - [`state`]: fold-state storage and per-conversation single-flight.
//! - [`tokens`]: token estimation, model windows, calibration.
//! - [`fold`]: fold policy, cut planning and views (pure, no IO).
//! - [`background`]: background fold jobs, one per conversation, and backoff.
//! - [`summarize`]: the summarizer calls: prompt, formats, retries, repair.
//! - [`archive`]: every message a fold removed from the view, stored and searchable.
//! - [`upstream`]: the pooled HTTPS client, provider routing, header hygiene.
//! - [`sse`]: server-sent events, split once for the usage tap and the recall rounds.
//! - [`shallow`]: the one-pass JSON reader: a request's wanted fields parsed, the conversation's items and an object's members delimited, not read (the fast path's and the usage tap's).
//! - [`metrics`]: Prometheus counters and latency histograms.
//! - [`telemetry`]: OpenTelemetry traces over OTLP (`[telemetry]`): the layer, the spans, `traceparent` in and out.
//! - [`error`]: errors made by foldgate, in the route's API's error envelope.
//! - [`headers`]: the response headers foldgate adds to a conversation request.
//! - [`message`]: the message vocabulary: roles, pinned head, tool pairing.
//! - [`estimate`]: `foldgate estimate`: one request body counted as the proxy counts it, and its trigger point.
//! - [`replay`]: `foldgate replay`: a recorded conversation through the fold engine, offline.
//! - [`glob`]: model-name patterns.
//! - [`heap`]: live heap bytes, counted in a `heap-stats` build (for soaks).
//! - [`log_format`]: the text log's line; [`log_writer`]: log lines to stderr without std's lock, whole.

pub mod admin;
pub mod affinity;
pub mod app;
pub mod background;
pub mod discover;
pub mod estimate;
pub mod heap;
pub mod log_format;
pub mod log_writer;
pub mod metrics;
pub mod pipeline;
pub mod proxy;
pub mod replay;
pub mod server;
pub mod ui;
pub mod unclaimed;

pub use foldgate_core::{config, fold, glob, message, stem, tokens};
pub use foldgate_store::{archive, state};
pub use foldgate_summarize as summarize;
pub use foldgate_wire::{api, body, error, headers, shallow, sse, telemetry, upstream, usage};
