//! Fold state storage. The state is a cache: the client resends its whole
//! history every turn, so losing a state costs a re-summarization, never a
//! message. States are keyed by tenant and conversation.
//!
//! - `memory`: this process only (moka), lost on restart.
//! - `sqlite`: embedded file, durable across restarts, fold audit trail.
//! - `redis`: shared by replicas, with a cross-replica fold lock.
//! - `hot`: the in-process layer the durable backends keep in front.
//!
//! [`open`] picks the backend from `[state]`; [`prune`] serves
//! `foldgate prune`; [`learned::windows`] reads the learned context
//! windows for `foldgate estimate`.

mod error;
mod hot;
pub mod learned;
pub mod list;
mod memory;
pub mod redis;
pub mod sqlite;
pub mod turns;

pub use error::StoreError;
pub use list::{ListQuery, MAX_LIMIT};
pub use memory::MemoryStore;
pub use redis::RedisStore;
pub use sqlite::SqliteStore;
pub use sqlite::db::Pruned;
pub use turns::{TurnFold, Turns};

use crate::config::{StateBackend, StateConfig};
use std::time::Duration;

use crate::fold::FoldChain;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future, for object-safe async store methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which conversation, of which tenant. The tenant is a hash of the
/// credential, never the credential itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConvKey {
    /// Hex hash of the request's credential (`anonymous` without one).
    pub tenant: String,
    /// The conversation header's value, or a fingerprint.
    pub conversation: String,
}

impl fmt::Display for ConvKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.conversation)
    }
}

/// Where fold chains live. Implementations must be cheap to call on every
/// request and must never fail a request on their own: a backend error is
/// logged and reads as "no state".
pub trait Store: Send + Sync + fmt::Debug {
    /// The conversation's fold chain, if any.
    fn load<'a>(&'a self, key: &'a ConvKey) -> BoxFuture<'a, Option<Arc<FoldChain>>>;
    /// Replaces the conversation's fold chain.
    fn save<'a>(&'a self, key: &'a ConvKey, chain: Arc<FoldChain>) -> BoxFuture<'a, ()>;
    /// Waits for, then holds, the conversation's fold lock: while the
    /// returned guard lives, no other fold of this conversation runs (in
    /// this process, and across replicas for shared backends). Callers
    /// `load` again after acquiring it.
    fn lock<'a>(&'a self, key: &'a ConvKey) -> BoxFuture<'a, FoldGuard>;
    /// Whether a fold the request can do without should wait a turn,
    /// asked under the guard [`Store::lock`] returned: true while a shared
    /// backend has not answered for the conversation, for less than
    /// `state.lock_wait` (a fold made now would be this replica's alone,
    /// and another replica cut off too may make the same one; see
    /// docs/architecture.md, "What a failover costs").
    fn fold_may_wait(&self, _key: &ConvKey) -> bool {
        false
    }
    /// [`Store::lock`] for a fold the request cannot go on without, when
    /// [`Store::fold_may_wait`] said the shared backend does not answer
    /// for the conversation: waits for it as for another replica's lock,
    /// from `since` (when the request first asked for the lock) for at
    /// most `limit` and `state.lock_wait`, and no longer than `lock_wait`
    /// of its silence, so replicas cut off together fold once, after it
    /// answers, from what it holds then (docs/architecture.md, "What a
    /// failover costs"). Callers `load` again after acquiring it.
    fn lock_awaiting<'a>(
        &'a self,
        key: &'a ConvKey,
        _since: std::time::Instant,
        _limit: std::time::Duration,
    ) -> BoxFuture<'a, FoldGuard> {
        self.lock(key)
    }
    /// Every tenant's chain for a conversation id (admin only).
    fn find<'a>(&'a self, conversation: &'a str) -> BoxFuture<'a, Vec<(ConvKey, Arc<FoldChain>)>>;
    /// A page of stored conversations with their chains, in listing order
    /// ([`list::page_of`]). Never renews a state's idle expiry.
    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Page>;
    /// Number of conversations stored (approximate; for metrics).
    fn count(&self) -> u64;
    /// Bytes the in-process cache charges against `state.cache_bytes`
    /// (approximate; for metrics).
    fn cached_bytes(&self) -> u64;
    /// Keeps a model's context window learned from an upstream's
    /// context-length error, so a restart knows it (by model id; the
    /// memory backend keeps nothing across restarts).
    fn save_window<'a>(&'a self, _model: &'a str, _window: u32) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
    /// Every window kept by [`Store::save_window`], `(model, window)`.
    fn windows(&self) -> BoxFuture<'_, Vec<(String, u32)>> {
        Box::pin(async { Vec::new() })
    }
}

/// One page of a listing.
#[derive(Debug, Default)]
pub struct Page {
    /// Conversations and their chains, in listing order.
    pub conversations: Vec<(ConvKey, Arc<FoldChain>)>,
    /// Where the next page starts, when there is one.
    pub next: Option<ConvKey>,
}

impl Page {
    /// The page of `entries` that `query` asks for ([`list::page_of`]).
    pub fn of(
        entries: impl IntoIterator<Item = (ConvKey, Arc<FoldChain>)>,
        query: &ListQuery,
    ) -> Self {
        let (conversations, next) = list::page_of(entries, query);
        Self {
            conversations,
            next,
        }
    }
}

/// Held while a fold runs; dropping it releases the conversation.
pub type FoldGuard = Box<dyn Send + Sync>;

/// Bytes of the per-conversation fold locks ([`Flights`]).
const FLIGHT_LOCKS_BYTES: u64 = 8 * 1024 * 1024;

/// Single-flight: one lock per conversation, so concurrent requests of one
/// conversation wait for the fold in flight instead of starting their own.
#[derive(Debug)]
pub struct Flights {
    locks: moka::sync::Cache<ConvKey, Arc<tokio::sync::Mutex<()>>>,
}

impl Default for Flights {
    fn default() -> Self {
        Self {
            // Idle locks are dropped; a held lock is in use, so it is not idle
            // for longer than a fold takes (bounded by the summarizer's
            // timeouts). Weighed in bytes: the key's text, the lock and its
            // `Arc` (56 bytes) and moka's entry (about 200): at most
            // FLIGHT_LOCKS_BYTES, some 30,000 conversations used within
            // the 10 minutes. A lock dropped while held costs at most one
            // duplicate fold.
            locks: moka::sync::Cache::builder()
                .max_capacity(FLIGHT_LOCKS_BYTES)
                .weigher(|key: &ConvKey, _| {
                    let bytes = 256 + key.tenant.len() + key.conversation.len();
                    u32::try_from(bytes).unwrap_or(u32::MAX)
                })
                .time_to_idle(std::time::Duration::from_secs(600))
                .build(),
        }
    }
}

impl Flights {
    /// Waits for, then holds, the conversation's fold lock.
    pub async fn lock(&self, key: &ConvKey) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .locks
            .get_with_by_ref(key, || Arc::new(tokio::sync::Mutex::new(())));
        lock.lock_owned().await
    }
}

/// Opens the configured backend. Redis must be opened inside the Tokio
/// runtime; a Redis that is down is not an error (see [`RedisStore`]).
pub fn open(config: &StateConfig) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match config.backend {
        StateBackend::Memory => Arc::new(MemoryStore::new(config)),
        StateBackend::Sqlite => Arc::new(SqliteStore::open(config)?),
        StateBackend::Redis => Arc::new(RedisStore::open(config)?),
    })
}

/// Deletes states unused for `older_than` and audit rows made before then.
/// Only SQLite keeps anything to prune: Redis and memory states expire
/// after `state.ttl` on their own.
pub fn prune(config: &StateConfig, older_than: Duration) -> Result<Pruned, StoreError> {
    if config.backend != StateBackend::Sqlite {
        return Err(StoreError::NothingToPrune(config.backend));
    }
    let mut conn = sqlite::db::open(&config.path)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let cutoff = i64::try_from(now.saturating_sub(older_than.as_secs())).unwrap_or(i64::MAX);
    sqlite::db::prune(&mut conn, cutoff)
        .map_err(|e| StoreError::from(e).at("state.path", &config.path))
}
