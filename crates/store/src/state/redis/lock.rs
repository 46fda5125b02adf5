//! The cross-replica fold lock: `SET lock token NX PX lock_ttl`, renewed by
//! a background task while held, released by compare-and-delete, so a
//! replica never deletes a lock that expired and went to someone else.

use super::{Inner, Unavailable};
use crate::state::{ConvKey, FoldGuard};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// First and longest pause between attempts to take a held lock.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(100));

fn lock_key(key: &ConvKey) -> String {
    super::keys::tagged(super::keys::LOCK, key)
}

/// A token no other holder has: random per process, counted per lock.
pub(super) fn token() -> String {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    });
    format!("{seed:016x}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The conversation in this replica's `held` set, from its creation until
/// it is dropped: also when the wait for the Redis lock is cancelled (a
/// client that hangs up), which would otherwise leave the conversation
/// marked held, every load of it a Redis read, for the life of the process.
struct Held {
    store: Arc<Inner>,
    key: ConvKey,
}

impl Held {
    fn new(store: Arc<Inner>, key: &ConvKey) -> Self {
        if let Ok(mut held) = store.held.lock() {
            held.insert(key.clone());
        }
        Self {
            store,
            key: key.clone(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut held) = self.store.held.lock() {
            held.remove(&self.key);
        }
    }
}

/// Held while this replica folds the conversation.
struct Guard {
    held: Held,
    remote: Option<(String, JoinHandle<()>)>,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some((token, renewer)) = self.remote.take() else {
            return;
        };
        renewer.abort();
        let store = self.held.store.clone();
        let lock = lock_key(&self.held.key);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut conn = store.conn();
                let script = redis::Script::new(RELEASE);
                let mut call = script.key(lock);
                let call = call.arg(token);
                let _: Result<i64, _> = store.op("release", call.invoke_async(&mut conn)).await;
            });
        }
    }
}

/// Local lock first (one waiter per replica talks to Redis), then the
/// Redis lock, waiting up to `state.lock_wait` for another replica's fold.
pub(super) async fn acquire(store: Arc<Inner>, key: &ConvKey) -> FoldGuard {
    let local = store.flights.lock(key).await;
    let held = Held::new(store.clone(), key);
    let remote = take(&store, key).await;
    Box::new(Guard {
        held,
        remote,
        _local: local,
    })
}

async fn take(store: &Arc<Inner>, key: &ConvKey) -> Option<(String, JoinHandle<()>)> {
    let lock = lock_key(key);
    let token = token();
    let ttl_ms = u64::try_from(store.lock_ttl.as_millis()).unwrap_or(u64::MAX);
    let started = Instant::now();
    let mut pause = BACKOFF.0;
    loop {
        let mut conn = store.conn();
        let cmd = redis::cmd("SET")
            .arg(&lock)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .clone();
        match store
            .op("lock", cmd.query_async::<Option<String>>(&mut conn))
            .await
        {
            Ok(Some(_)) => {
                let renewer = tokio::spawn(renew(store.clone(), lock, token.clone(), ttl_ms));
                return Some((token, renewer));
            }
            Ok(None) if started.elapsed() < store.lock_wait => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(BACKOFF.1);
            }
            Ok(None) => {
                tracing::warn!(target: "foldgate::state", conversation = %key, waited = ?store.lock_wait,
                    "another replica's fold lock outlived state.lock_wait; folding without it");
                return None;
            }
            Err(Unavailable::Down | Unavailable::Failed) => return None,
        }
    }
}

/// Extends the lock every third of its expiry until aborted.
async fn renew(store: Arc<Inner>, lock: String, token: String, ttl_ms: u64) {
    let every = store.lock_ttl / 3;
    loop {
        tokio::time::sleep(every).await;
        let mut conn = store.conn();
        let script = redis::Script::new(RENEW);
        let mut call = script.key(&lock);
        let call = call.arg(&token).arg(ttl_ms);
        if let Ok(0) = store.op("renew", call.invoke_async::<i64>(&mut conn)).await {
            tracing::warn!(target: "foldgate::state", lock, "lost a fold lock while folding (it expired); another replica may fold too");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Secret, StateConfig};
    use crate::state::redis::RedisStore;

    // A Redis that takes connections and never answers keeps the wait for
    // the lock's `SET` pending until the test gives up on it, as a request
    // whose client hung up gives up.
    #[tokio::test]
    async fn a_cancelled_wait_for_the_lock_leaves_the_conversation_unheld() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", silent.local_addr().unwrap());
        let accept = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                open.push(socket);
            }
        });
        let config = StateConfig {
            url: Some(Secret::new(url)),
            timeout: Duration::from_secs(30),
            ..StateConfig::default()
        };
        let store = RedisStore::open(&config).unwrap();
        let key = ConvKey {
            tenant: "tenant".into(),
            conversation: "conversation".into(),
        };
        let wait = acquire(store.inner.clone(), &key);
        let gave_up = tokio::time::timeout(Duration::from_millis(200), wait).await;
        assert!(gave_up.is_err(), "the lock's SET had no answer to return");
        assert!(
            !store.inner.is_held(&key),
            "a cancelled wait left the conversation held"
        );
        accept.abort();
    }
}
