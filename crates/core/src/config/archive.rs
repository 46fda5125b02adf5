//! `[archive]`: where the messages a fold removes from the view are kept,
//! verbatim and searchable, and for how long.

use super::{Secret, StateBackend, StateConfig};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// `[archive]`: every message a fold removes from the view is stored
/// verbatim, per tenant and conversation, in the state backend's store
/// (SQLite file, Redis or memory).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiveConfig {
    /// Store folded messages (user content, on disk with SQLite). Off: no
    /// message is stored and the archive search answers 404.
    pub enabled: bool,
    /// How long an archived message is kept: SQLite deletes rows this long
    /// after they were archived; Redis and memory drop a conversation's
    /// whole archive this long after its last fold. At least `state.ttl`,
    /// so a summary never outlives the messages it replaced.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Messages kept per conversation; beyond it the oldest archived
    /// messages are dropped.
    pub max_messages: usize,
    /// SQLite file of the archive (`state.backend = "sqlite"`); unset:
    /// beside `state.path`, with the extension `.archive.db`
    /// (`./foldgate.archive.db`). A file of its own, so archive writes
    /// never hold the state database's write lock.
    pub path: Option<PathBuf>,
    /// Redis URL of the archive (`state.backend = "redis"`), in any of
    /// `state.url`'s forms; unset: the archive lives in `state.url`'s
    /// Redis. The archive is the only verbatim copy of folded messages
    /// and its keys carry an expiry (`ttl`), so any eviction policy but
    /// `noeviction` can drop them under memory pressure: point this at a
    /// Redis with `maxmemory-policy noeviction` when the states' Redis
    /// evicts (a full archive Redis refuses writes, which wait in the
    /// spool; nothing is dropped). Printed with its password masked.
    #[serde(serialize_with = "super::secret::serialize_masked_url")]
    pub url: Option<Secret>,
    /// How a conversation whose view hides archived messages gets them
    /// back. `tool`: the model is offered the `foldgate_recall` tool and
    /// foldgate answers its calls itself; `inject`: foldgate searches the
    /// archive with the last user message and places the best excerpts,
    /// marked, right before it; `auto` (default): `tool`, and `inject` for
    /// models configured with `tools = false` (a request that carries no
    /// tools of its own gets the injection beside the tool); `off`:
    /// neither.
    pub recall: RecallMode,
    /// Inject recalled excerpts for models offered the recall tool too
    /// (when the window has room), on every request, agent loops included;
    /// `recall = "auto"` does so anyway for requests without tools of
    /// their own. Chosen by measurement, see
    /// docs/folding.md#injected-recall.
    pub inject_with_tool: bool,
    /// Recall rounds per request: after this many, the upstream is asked
    /// once more without the tool.
    pub recall_rounds: u32,
    /// Tokens of archived excerpts one recall call returns, at most (less
    /// when the window has less room left).
    pub recall_tokens: u32,
    /// Tokens of archived excerpts injected before the last user message,
    /// at most (less when the window has less room left).
    pub inject_tokens: u32,
    /// Redis: bytes of archive writes held in this replica's memory while
    /// Redis does not take them (an outage), replayed in order when it
    /// answers again. Full, a fold that would remove messages from the
    /// view is not made (the request goes on as `summarizer.on_failure`
    /// says, with `x-foldgate-warning`): no archived message is dropped.
    pub spool_bytes: u64,
    /// Redis: a SQLite file where archive writes Redis refused are kept
    /// too, so a replica restarted during an outage replays them; writes
    /// Redis takes never touch it. Unset (default): the spool is in memory
    /// only. A path that cannot be opened stops start-up.
    pub spool_path: Option<PathBuf>,
    /// Memory of the set of compression stubs this process archived
    /// already, so a conversation's stubs are stored once rather than on
    /// every request showing them; allocated at start. A stub it forgot
    /// is stored again (kept once by the backend).
    pub remembered_bytes: u64,
}

/// `archive.recall`: what is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecallMode {
    /// The tool, or injection for models with `tools = false`.
    Auto,
    /// The tool only.
    Tool,
    /// Injection only.
    Inject,
    /// Neither.
    Off,
}

/// How one model's conversations recall archived messages: what
/// `archive.recall` means for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recall {
    /// Nothing is recalled.
    Off,
    /// The `foldgate_recall` tool is offered.
    Tool,
    /// foldgate injects excerpts before the last user message.
    Inject,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl: Duration::from_secs(7 * 24 * 3600),
            max_messages: 10_000,
            path: None,
            url: None,
            recall: RecallMode::Auto,
            inject_with_tool: false,
            recall_rounds: 3,
            recall_tokens: 2000,
            inject_tokens: 600,
            spool_bytes: 64 * 1024 * 1024,
            spool_path: None,
            remembered_bytes: 4608 * 1024,
        }
    }
}

impl ArchiveConfig {
    /// The archive's SQLite file: `path`, else beside `state.path`.
    pub fn path_for(&self, state: &StateConfig) -> PathBuf {
        self.path
            .clone()
            .unwrap_or_else(|| state.path.with_extension("archive.db"))
    }

    /// How a model's conversations recall, the one rule: nothing without
    /// an archive; the tool needs rounds; `auto` injects for a model that
    /// does not call tools (`calls_tools`: its `tools` key, default true).
    pub fn recall_for(&self, calls_tools: bool) -> Recall {
        let tool = if self.recall_rounds > 0 {
            Recall::Tool
        } else {
            Recall::Off
        };
        match self.recall {
            _ if !self.enabled => Recall::Off,
            RecallMode::Off => Recall::Off,
            RecallMode::Tool => tool,
            RecallMode::Inject => Recall::Inject,
            RecallMode::Auto if calls_tools => tool,
            RecallMode::Auto => Recall::Inject,
        }
    }

    /// The Redis URL the archive uses (`state.backend = "redis"`):
    /// `archive.url`, else `state.url`.
    pub fn redis_url<'a>(&'a self, state: &'a StateConfig) -> &'a str {
        self.url
            .as_ref()
            .or(state.url.as_ref())
            .map(Secret::expose)
            .unwrap_or_default()
    }

    /// Checks `url` against the state backend: only Redis has one, and it
    /// must parse as `state.url` does.
    pub fn validate_url(&self, state: &StateConfig) -> Result<(), String> {
        let Some(url) = &self.url else {
            return Ok(());
        };
        if state.backend != StateBackend::Redis {
            return Err(
                "archive.url is only used with state.backend = \"redis\" (the archive follows the state backend)"
                    .into(),
            );
        }
        super::RedisTarget::parse(url.expose())
            .map(|_| ())
            .map_err(|e| format!("archive.url {e}"))
    }

    /// Checks the section against the state's expiry; errors name the key.
    pub fn validate(&self, state_ttl: Duration) -> Result<(), String> {
        if self.max_messages == 0 {
            return Err("archive.max_messages must be above 0".into());
        }
        if self.recall_tokens < 100 {
            return Err("archive.recall_tokens must be at least 100".into());
        }
        if self.inject_tokens < 50 {
            return Err("archive.inject_tokens must be at least 50".into());
        }
        if self.enabled && self.ttl < state_ttl {
            return Err(format!(
                "archive.ttl ({}) must be at least state.ttl ({}): a summary must not outlive the messages it replaced",
                humantime_serde::re::humantime::format_duration(self.ttl),
                humantime_serde::re::humantime::format_duration(state_ttl),
            ));
        }
        Ok(())
    }
}
