//! foldgate: a transparent OpenAI-compatible proxy that folds long
//! conversations into a summary before they overflow the context window.
//!
//! - [`app`]: the shared application state every request uses.
//! - [`archive`]: every message a fold removed from the view, stored and searchable.
//! - [`background`]: background fold jobs, one per conversation, and backoff.
//! - [`config`]: figment configuration, validation, secrets.
//! - [`discover`]: context windows read from providers at start-up (`tokens.discover`), and the report of every model's window.
//! - [`server`]: listener, TLS, the tower stack, graceful shutdown.
//! - [`upstream`]: the pooled HTTPS client, provider routing, header hygiene.
//! - [`proxy`]: the request handler: admin routes, passthrough, the pipeline for API routes.
//! - [`pipeline`]: the conversation pipeline: key, estimate, plan, fold, forward, retry, recall rounds.
//! - [`api`]: the wire formats (chat completions, Anthropic, Responses), one folder each behind one trait.
//! - [`summarize`]: the summarizer calls: prompt, formats, retries, repair.
//! - [`state`]: fold-state storage and per-conversation single-flight.
//! - [`message`]: the message vocabulary: roles, pinned head, tool pairing.
//! - [`metrics`]: Prometheus counters and latency histograms.
//! - [`admin`]: `/foldgate/*` endpoints and the guard on conversation reads.
//! - [`ui`]: the dashboard's embedded files (`/foldgate/ui`).
//! - [`error`]: errors made by foldgate, rendered as OpenAI's error envelope.
//! - [`tokens`]: token estimation, model windows, calibration.
//! - [`fold`]: fold policy, cut planning and views (pure, no IO).
//! - [`estimate`]: `foldgate estimate`: one request body counted as the proxy counts it, and its trigger point.
//! - [`replay`]: `foldgate replay`: a recorded conversation through the fold engine, offline.
//! - [`glob`]: model-name patterns.
//! - [`body`]: the body type that crosses the stack.

pub mod admin;
pub mod api;
pub mod app;
pub mod archive;
pub mod background;
pub mod body;
pub mod config;
pub mod discover;
pub mod error;
pub mod estimate;
pub mod fold;
pub mod glob;
pub mod message;
pub mod metrics;
pub mod pipeline;
pub mod proxy;
pub mod replay;
pub mod server;
pub mod state;
pub mod summarize;
pub mod tokens;
pub mod ui;
pub mod upstream;
