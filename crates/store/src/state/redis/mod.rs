//! The Redis store: fold states shared by every replica, with a
//! cross-replica fold lock ([`lock`]). Each replica keeps the in-process
//! layer in front and serves from it without asking Redis while its
//! subscription to state changes ([`watch`]) says nothing changed (asking
//! again once a quarter of `state.ttl` to renew the state's expiry); while
//! that subscription is down, for at most `state.refresh`. It always asks
//! Redis while it holds the fold lock.
//!
//! Redis is never allowed to fail a request: every command is bounded by
//! `state.timeout`; a failure marks its slot down (all of Redis unless a
//! cluster: [`health`]; one warning for the outage, shared with the archive
//! on the same Redis: [`outage`]), after which the replica runs on its own
//! memory for those conversations until the slot answers again (a cluster
//! slot is tried again every 500 ms, a whole Redis by a probe), when
//! sharing resumes. A fold made or written meanwhile is provisional
//! ([`provisional`]): written once Redis answers, unless Redis holds
//! another replica's fold by then, which this replica adopts instead.

mod conn;
mod health;
pub(crate) mod keys;
mod lock;
pub(crate) mod outage;
mod provisional;
mod watch;

pub(crate) use conn::Conn;
pub(crate) use outage::Outage;

use super::hot::Hot;
use super::{BoxFuture, ConvKey, Flights, FoldGuard, ListQuery, Page, Store};
use crate::config::{RedisTarget, StateConfig};
use crate::fold::FoldChain;
use crate::state::StoreError;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Writes a state (`KEYS[1]`: JSON, expiry in ms) and publishes
/// `ARGV[4]` on the channel `ARGV[3]`. A publish the server refuses (an
/// ACL user without channel rights: Redis 7's default for new users) does
/// not fail the write; the replicas, unable to subscribe either, fall back
/// to `state.refresh`.
const PUBLISH: &str = "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) redis.pcall('publish', ARGV[3], ARGV[4]) return 1";

/// How often the probe pings a Redis marked down.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Fold chains in Redis, behind the in-process layer.
#[derive(Debug, Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    hot: Hot,
    flights: Flights,
    conn: Conn,
    /// Which slots (or the one Redis) answer.
    health: health::Health,
    /// This Redis' outages, told once (shared with the archive).
    outage: Arc<Outage>,
    /// Conversations whose fold lock this replica holds: their loads go to
    /// Redis, because another replica may have folded while we waited.
    /// `true` when the fold runs without the Redis lock because Redis did
    /// not answer (its state is then provisional).
    held: Mutex<HashMap<ConvKey, bool>>,
    /// Conversations whose newest fold this replica holds but Redis does
    /// not (made or written while Redis did not answer): written once
    /// Redis answers, unless Redis holds another fold by then
    /// ([`provisional`]).
    provisional: Mutex<HashSet<ConvKey>>,
    /// Fold locks released lately, sent again should a command fail soon
    /// after ([`lock::confirm`]).
    released: Mutex<Vec<lock::Released>>,
    /// Whether cached states are known current (pub/sub invalidation).
    watch: watch::Watch,
    ttl_ms: u64,
    refresh: Duration,
    /// How long a trusted cached state is served before it is read again,
    /// which renews its idle expiry in Redis: a quarter of `state.ttl`.
    renew: Duration,
    lock_ttl: Duration,
    lock_wait: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

/// Why a Redis command gave no answer.
#[derive(Debug)]
enum Unavailable {
    /// Marked down; not tried.
    Down,
    /// Tried and failed or timed out (now marked down).
    Failed,
}

fn state_key(key: &ConvKey) -> String {
    keys::tagged(keys::STATE, key)
}

impl RedisStore {
    /// Connects lazily to `state.url` (one server, a cluster or a Sentinel
    /// service, see [`Conn`]): a Redis that is down at start-up only means
    /// this replica starts on its own memory.
    pub fn open(config: &StateConfig) -> Result<Self, StoreError> {
        let url = config.url.as_ref().map(|u| u.expose()).unwrap_or_default();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::NoRuntime("state.backend = \"redis\""))?;
        let conn = Conn::open(url, config.timeout)?;
        // Conn::open has checked the URL.
        let target = RedisTarget::parse(url).ok();
        let health = health::Health::new(conn.is_cluster());
        let inner = Arc::new(Inner {
            hot: Hot::new(config),
            flights: Flights::default(),
            conn,
            health,
            outage: Outage::shared(url),
            held: Mutex::new(HashMap::new()),
            provisional: Mutex::new(HashSet::new()),
            released: Mutex::new(Vec::new()),
            watch: watch::Watch::new(lock::token()),
            ttl_ms: u64::try_from(config.ttl.as_millis()).unwrap_or(u64::MAX),
            refresh: config.refresh,
            renew: config.ttl / 4,
            lock_ttl: config.lock_ttl,
            lock_wait: config.lock_wait,
            timeout: config.timeout,
        });
        runtime.spawn(probe(Arc::downgrade(&inner)));
        runtime.spawn(provisional::reconcile(Arc::downgrade(&inner)));
        if let Some(target) = target {
            runtime.spawn(watch::listen(
                Arc::downgrade(&inner),
                target,
                config.timeout,
            ));
        }
        tracing::info!(target: "foldgate::state", "fold states in Redis, shared by replicas");
        Ok(Self { inner })
    }

    /// Whether Redis answered the last command sent to it.
    pub fn healthy(&self) -> bool {
        self.inner.health.healthy()
    }
}

impl Inner {
    /// Runs one Redis command on `key` (`None`: a command without one)
    /// under the timeout, unless its slot (or Redis) is marked down.
    async fn op<T>(
        &self,
        what: &str,
        key: Option<&str>,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Unavailable> {
        let slot = self.health.slot(key);
        if !self.health.should_try(slot) {
            self.outage.skipped();
            return Err(Unavailable::Down);
        }
        self.send(what, slot, f).await
    }

    /// [`Inner::op`] sent even to a slot marked down: a fold lock's
    /// renewal and release, which retry on their own pace.
    async fn op_always<T>(
        &self,
        what: &str,
        key: &str,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Unavailable> {
        self.send(what, self.health.slot(Some(key)), f).await
    }

    async fn send<T>(
        &self,
        what: &str,
        slot: redis::cluster_routing::Slot,
        f: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Unavailable> {
        let error = match tokio::time::timeout(self.timeout, f).await {
            Ok(Ok(v)) => {
                self.health.answered(slot);
                self.outage.answered();
                return Ok(v);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        self.health.failed(slot);
        self.outage.failed("state", what, &error);
        Err(Unavailable::Failed)
    }

    fn conn(&self) -> Conn {
        self.conn.clone()
    }

    fn is_held(&self, key: &ConvKey) -> bool {
        self.held.lock().is_ok_and(|held| held.contains_key(key))
    }

    /// Whether this replica folds `key` without the Redis lock because
    /// Redis did not answer.
    fn is_unlocked(&self, key: &ConvKey) -> bool {
        self.held
            .lock()
            .is_ok_and(|held| held.get(key).copied().unwrap_or(false))
    }

    fn is_provisional(&self, key: &ConvKey) -> bool {
        self.provisional.lock().is_ok_and(|p| p.contains(key))
    }

    /// Redis holds no fold of ours that it lacks.
    fn settled(&self, key: &ConvKey) {
        if let Ok(mut pending) = self.provisional.lock() {
            pending.remove(key);
        }
    }

    /// Our newest fold of `key` is not in Redis yet.
    fn unsettled(&self, key: &ConvKey) {
        if let Ok(mut pending) = self.provisional.lock() {
            pending.insert(key.clone());
        }
    }

    /// Reads the stored chain (renewing its idle expiry).
    async fn fetch(&self, key: &ConvKey) -> Result<Option<FoldChain>, Unavailable> {
        Ok(self.fetch_raw(key).await?.map(|(_, chain)| chain))
    }

    /// Reads the stored chain with the bytes Redis holds (for a write that
    /// must find them unchanged: [`provisional::write`]). A chain that does
    /// not decode is deleted and reads as none.
    async fn fetch_raw(&self, key: &ConvKey) -> Result<Option<(Vec<u8>, FoldChain)>, Unavailable> {
        let mut conn = self.conn();
        let state = state_key(key);
        let cmd = redis::cmd("GETEX")
            .arg(&state)
            .arg("PX")
            .arg(self.ttl_ms)
            .clone();
        let raw: Option<Vec<u8>> = self
            .op("GETEX", Some(&state), cmd.query_async(&mut conn))
            .await?;
        let Some(raw) = raw else { return Ok(None) };
        match serde_json::from_slice::<FoldChain>(&raw) {
            Ok(chain) => Ok(Some((raw, chain))),
            Err(e) => {
                tracing::warn!(target: "foldgate::state", conversation = %key, error = %e, "discarding a stored state that does not decode");
                let del = redis::cmd("DEL").arg(&state).clone();
                let _: Result<i64, _> = self
                    .op("DEL", Some(&state), del.query_async(&mut conn))
                    .await;
                Ok(None)
            }
        }
    }

    /// Writes the state and tells every replica it changed, in one script.
    async fn publish(&self, key: &ConvKey, chain: &FoldChain) -> Result<(), Unavailable> {
        let Ok(json) = serde_json::to_vec(chain) else {
            return Ok(());
        };
        let mut conn = self.conn();
        let state = state_key(key);
        let script = redis::Script::new(PUBLISH);
        let mut call = script.key(&state);
        let call = call
            .arg(json)
            .arg(self.ttl_ms)
            .arg(keys::FOLDED)
            .arg(watch::message(self.watch.origin(), &state));
        let _: i64 = self
            .op("save", Some(&state), call.invoke_async(&mut conn))
            .await?;
        Ok(())
    }

    /// Another replica changed `message`'s state: ours is stale.
    fn changed(&self, message: &[u8]) {
        let Ok(message) = std::str::from_utf8(message) else {
            return;
        };
        let Some((origin, state)) = message.split_once(' ') else {
            return;
        };
        if origin == self.watch.origin() {
            return;
        }
        if let Some(key) = keys::parse(keys::STATE, state) {
            self.watch.heard();
            // Kept as a fallback: should the next read find Redis cut off
            // from the conversation, an older state of it serves (and folds
            // again at worst) where none would fold the whole history.
            self.hot.stale(&key);
        }
    }

    /// Caches what a read started at `mark` returned; trusted only if no
    /// change was heard meanwhile (checked after caching, so a change heard
    /// between the read and the caching is never missed).
    fn remember(&self, key: &ConvKey, chain: Option<Arc<FoldChain>>, mark: watch::Mark) {
        self.hot.put_at(key, chain, mark.epoch());
        if self.watch.settle(mark) == watch::UNTRUSTED {
            self.hot.stale(key);
        }
    }

    async fn load(&self, key: &ConvKey) -> Option<Arc<FoldChain>> {
        let slot = self.hot.get(key);
        let held = self.is_held(key);
        let pending = self.is_provisional(key);
        if let Some(slot) = &slot {
            let bound = if self.watch.trusts(slot.epoch) {
                self.renew
            } else {
                self.refresh
            };
            let down = self.health.waiting(self.health.slot(Some(&state_key(key))));
            if down || (!held && !pending && slot.current && slot.synced.elapsed() < bound) {
                return slot.chain.clone();
            }
        }
        let local = slot.and_then(|s| s.chain);
        let mark = self.watch.mark();
        let read = self.fetch_raw(key).await;
        // A save of this replica landed while Redis was read: what was
        // read may be older than it, and the save (written, or left
        // provisional) is what this replica holds now.
        if let Some(saved) = self.saved_since(key, local.as_ref()) {
            return saved;
        }
        match read {
            // Redis holds an older state of ours (a write it lost in a
            // failover, or a fold made while it did not answer): ours is
            // written, never the older one served.
            Ok(Some((raw, theirs))) => match &local {
                Some(ours) if provisional::newer(ours, &theirs) => {
                    provisional::write(self, key, ours, Some(&raw)).await;
                    self.remember(key, local.clone(), mark);
                    local
                }
                _ => {
                    self.settled(key);
                    let theirs = Arc::new(theirs);
                    self.remember(key, Some(theirs.clone()), mark);
                    Some(theirs)
                }
            },
            // Redis lost it (restarted, or evicted under memory pressure)
            // while this replica still has it: share it again.
            Ok(None) => {
                match &local {
                    Some(chain) => provisional::write(self, key, chain, None).await,
                    // Nothing of ours to write: nothing to wait for either.
                    None => self.settled(key),
                }
                self.remember(key, local.clone(), mark);
                local
            }
            Err(_) => local,
        }
    }

    /// The chain the in-process layer holds for `key` if it is no longer
    /// `read` (by identity): a save (or another read) replaced it.
    fn saved_since(
        &self,
        key: &ConvKey,
        read: Option<&Arc<FoldChain>>,
    ) -> Option<Option<Arc<FoldChain>>> {
        let now = self.hot.get(key).and_then(|s| s.chain)?;
        match read {
            Some(read) if Arc::ptr_eq(&now, read) => None,
            _ => Some(Some(now)),
        }
    }

    /// Every state key whose `{tenant:conversation}` tag matches `tag` (a
    /// Redis glob), as conversation keys.
    async fn scan(&self, tag: &str) -> Result<Vec<ConvKey>, Unavailable> {
        let mut conn = self.conn();
        self.op("SCAN", None, scan_keys(&mut conn, keys::STATE, tag))
            .await
    }

    async fn find(
        &self,
        conversation: &str,
    ) -> Result<Vec<(ConvKey, Arc<FoldChain>)>, Unavailable> {
        let mut found = Vec::new();
        for key in self
            .scan(&format!("*:{}", glob_escape(conversation)))
            .await?
        {
            if key.conversation == conversation {
                if let Some(chain) = self.fetch(&key).await? {
                    found.push((key, Arc::new(chain)));
                }
            }
        }
        Ok(found)
    }

    /// A page of the shared states. Keys are scanned and sorted here (Redis
    /// keeps no order), then only the page's states are read, with one
    /// `MGET` that leaves their idle expiry alone (on a cluster the client
    /// splits it by slot).
    async fn list(&self, query: &ListQuery) -> Result<Page, Unavailable> {
        let pattern = match &query.tenant {
            Some(tenant) => format!("{}:*", glob_escape(tenant)),
            None => "*".to_string(),
        };
        let keys = self.scan(&pattern).await?.into_iter().map(|k| (k, ()));
        let (keys, next) = super::list::page_of(keys, query);
        let keys: Vec<ConvKey> = keys.into_iter().map(|(k, ())| k).collect();
        if keys.is_empty() {
            return Ok(Page {
                conversations: Vec::new(),
                next,
            });
        }
        let mut conn = self.conn();
        let cmd = redis::cmd("MGET")
            .arg(keys.iter().map(state_key).collect::<Vec<_>>())
            .clone();
        let raw: Vec<Option<Vec<u8>>> = self.op("MGET", None, cmd.query_async(&mut conn)).await?;
        let conversations = keys
            .into_iter()
            .zip(raw)
            .filter_map(|(key, raw)| {
                let chain = serde_json::from_slice::<FoldChain>(&raw?).ok()?;
                Some((key, Arc::new(chain)))
            })
            .collect();
        Ok(Page {
            conversations,
            next,
        })
    }
}

/// Every key `PREFIX{tenant:conversation}` whose tag matches `tag` (a Redis
/// glob), as conversation keys, from every master; shared by the state
/// store and the archive. Only the admin listings scan, never a request.
pub(crate) async fn scan_keys(
    conn: &mut Conn,
    prefix: &str,
    tag: &str,
) -> redis::RedisResult<Vec<ConvKey>> {
    let found = conn.scan(&keys::pattern(prefix, tag)).await?;
    Ok(found
        .iter()
        .filter_map(|k| keys::parse(prefix, k))
        .collect())
}

/// Escapes Redis glob metacharacters.
pub(crate) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Pings a Redis marked down until it answers; ends with the store.
async fn probe(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(store) = inner.upgrade() else { return };
        // A cluster's slots are tried again by the commands sent to them.
        if store.health.healthy() || store.health.is_cluster() {
            continue;
        }
        let mut conn = store.conn();
        let ping = tokio::time::timeout(
            store.timeout,
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await;
        if matches!(ping, Ok(Ok(_))) {
            store.health.clear();
            store.outage.answered();
            tracing::debug!(target: "foldgate::state", "Redis answers again; fold states are shared again");
        }
    }
}

impl Store for RedisStore {
    fn load<'a>(&'a self, key: &'a ConvKey) -> BoxFuture<'a, Option<Arc<FoldChain>>> {
        Box::pin(self.inner.load(key))
    }

    fn save<'a>(&'a self, key: &'a ConvKey, chain: Arc<FoldChain>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // A read of this conversation in flight may return the state
            // this replaces: it must not be cached as current.
            self.inner.watch.heard();
            let epoch = self.inner.watch.now();
            self.inner.hot.put_at(key, Some(chain.clone()), epoch);
            // Written through: the fold lock is released after this, and the
            // next holder must find the new state in Redis. A write Redis
            // did not take is provisional: written once Redis answers,
            // unless another replica's fold got there first.
            if self.inner.is_unlocked(key) {
                // Folded without the lock: written only if Redis still
                // holds the state it was folded from (read now).
                self.inner.unsettled(key);
                self.inner.load(key).await;
            } else if self.inner.publish(key, &chain).await.is_err() {
                self.inner.unsettled(key);
            }
        })
    }

    fn lock<'a>(&'a self, key: &'a ConvKey) -> BoxFuture<'a, FoldGuard> {
        Box::pin(lock::acquire(self.inner.clone(), key, None))
    }

    fn lock_awaiting<'a>(
        &'a self,
        key: &'a ConvKey,
        since: std::time::Instant,
        limit: Duration,
    ) -> BoxFuture<'a, FoldGuard> {
        Box::pin(lock::acquire(self.inner.clone(), key, Some((since, limit))))
    }

    fn fold_may_wait(&self, key: &ConvKey) -> bool {
        let inner = &self.inner;
        let slot = inner.health.slot(Some(&state_key(key)));
        inner.is_unlocked(key) && inner.health.down_for(slot) < inner.lock_wait
    }

    fn find<'a>(&'a self, conversation: &'a str) -> BoxFuture<'a, Vec<(ConvKey, Arc<FoldChain>)>> {
        Box::pin(async move {
            match self.inner.find(conversation).await {
                Ok(found) => found,
                Err(_) => self.inner.hot.find(conversation),
            }
        })
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Page> {
        Box::pin(async move {
            match self.inner.list(query).await {
                Ok(page) => page,
                Err(_) => self.inner.hot.list(query),
            }
        })
    }

    fn count(&self) -> u64 {
        self.inner.hot.len()
    }

    fn cached_bytes(&self) -> u64 {
        self.inner.hot.bytes()
    }

    fn save_window<'a>(&'a self, model: &'a str, window: u32) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut conn = self.inner.conn();
            let cmd = redis::cmd("HSET")
                .arg(keys::WINDOWS)
                .arg(model)
                .arg(window)
                .clone();
            let _: Result<i64, _> = self
                .inner
                .op("HSET", Some(keys::WINDOWS), cmd.query_async(&mut conn))
                .await;
        })
    }

    fn windows(&self) -> BoxFuture<'_, Vec<(String, u32)>> {
        Box::pin(async move {
            let mut conn = self.inner.conn();
            let cmd = redis::cmd("HGETALL").arg(keys::WINDOWS).clone();
            let found: Result<Vec<(String, u32)>, _> = self
                .inner
                .op("HGETALL", Some(keys::WINDOWS), cmd.query_async(&mut conn))
                .await;
            found.unwrap_or_default()
        })
    }
}
