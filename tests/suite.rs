//! The integration tests, one binary: each file beside this one is a
//! module of it (one link instead of one per file; the shared harness,
//! `common`, compiled once). cargo-nextest still runs every test in its own
//! process. Run one file's tests with `scripts/test -E 'test(/^proxy::/)'`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly; the no-panic rule is for the request path"
)]

mod common;
mod fold_support;
mod props_support;

mod admin;
mod admin_docs;
mod apis;
mod archive;
mod archive_eviction;
mod archive_failover;
mod archive_outage;
mod audit;
mod background;
mod bedrock;
mod chat;
mod chat_malformed;
mod claude_code;
mod clause_props;
mod cli;
mod codex_cli;
mod compose_example;
mod compress;
mod compress_pays;
mod compress_route;
mod dashboard;
mod decide_props;
mod doors;
mod e2e;
mod extract_props;
mod fast_path;
mod fidelity;
mod first_overflow;
mod fold_cases;
mod fold_economy;
mod fold_fill;
mod fold_history;
mod fold_props;
mod found_windows;
mod gemini;
mod gemini_cli;
mod headroom;
mod layers;
mod ledger_props;
mod llama_cpp_python;
mod local_servers;
mod logs;
mod observability;
mod ollama;
mod opencode;
mod pins;
mod plan_props;
mod plans;
mod prompt_texts;
mod proxy;
mod recall;
mod recall_echo;
mod recall_faults;
mod recall_inject;
mod recall_meaning;
mod recall_room;
mod redis_failover;
mod redis_quiet;
mod redis_round_trips;
mod responses_websocket;
mod runtime;
mod shallow_props;
mod soak_short;
mod state_redis;
mod state_sqlite;
mod telemetry;
mod tls;
mod tokens;
mod totals;
mod unknown_props;
mod upstream_retry;
