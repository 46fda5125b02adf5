//! The cross-replica fold lock: `SET lock token NX PX lock_ttl`, renewed by
//! a background task while held, released by compare-and-delete, so a
//! replica never deletes a lock that expired and went to someone else.
//!
//! A lock cannot outlive its fold by more than the time Redis takes to
//! answer again. From the moment its `SET` is sent the token is a
//! [`Claim`], whose drop spawns the release: when the fold ends on any
//! path (success, error, a panic, a cancelled task), and also when the
//! `SET`'s answer was lost (a timeout, a master dying after it took the
//! key) or the wait for it was cancelled. The release and the renewal are
//! sent even to a slot marked down and retried until Redis answers (on a
//! cluster, the slot's new master) or the lock would have expired anyway.
//! An answered release is sent again when a command fails within
//! [`CONFIRM_WITHIN`] of it ([`confirm`]): the master that answered may
//! have died before its replica had the `DEL`, and the replica it promotes
//! holds the lock again. Before this, one failed command anywhere marked
//! all of Redis down and the release was never sent: a cluster failover
//! left locks to expire after `lock_ttl`, also on slots whose master never
//! failed (docs/architecture.md, "What a failover costs").

use super::outage::RETRY_EVERY;
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
            held.insert(key.clone(), false);
        }
        Self {
            store,
            key: key.clone(),
        }
    }

    /// Redis did not answer: this fold is made without its lock, and its
    /// state is provisional ([`super::provisional`]).
    fn unlocked(&self) {
        if let Ok(mut held) = self.store.held.lock() {
            held.insert(self.key.clone(), true);
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

/// A token that may be in Redis: released (in a task of its own) when
/// dropped armed.
struct Claim {
    store: Arc<Inner>,
    key: ConvKey,
    lock: String,
    token: String,
    armed: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, key, lock, token) = (
            self.store.clone(),
            self.key.clone(),
            std::mem::take(&mut self.lock),
            std::mem::take(&mut self.token),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(release(store, key, lock, token));
        }
    }
}

/// How long after a release Redis answered a failed command has it sent
/// again ([`confirm`]).
pub(super) const CONFIRM_WITHIN: Duration = Duration::from_secs(5);

/// A release Redis answered, watched for [`CONFIRM_WITHIN`]: a master
/// that acknowledged the `DEL` and died before its replica had it leaves
/// the lock to the replica it promotes, to count down from `lock_ttl`.
#[derive(Debug)]
pub(super) struct Released {
    lock: String,
    token: String,
    /// When the lock was first released.
    since: Instant,
    /// The outage tracker's failure count before the release was sent.
    failures: u64,
    /// How many times it was sent again.
    confirms: u32,
}

/// How many times a release is sent again, at most.
const CONFIRMS: u32 = 3;

/// Deletes the lock if it is still `token`'s, retrying (on a cluster the
/// client learns the slot's new master meanwhile) until Redis answers or
/// the lock would have expired by itself. A fold Redis did not take is
/// written first (or Redis' newer state adopted, [`super::provisional`]),
/// so the next holder finds it, as it finds every fold made under the lock.
async fn release(store: Arc<Inner>, key: ConvKey, lock: String, token: String) {
    let started = Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        if store.is_provisional(&key) {
            store.load(&key).await;
        }
        if !store.is_provisional(&key) || started.elapsed() + pause >= store.lock_ttl {
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_EVERY);
    }
    send_release(&store, lock, token, started, Instant::now(), 0).await;
}

/// Sends the compare-and-delete until Redis answers, or until the lock
/// would have expired by itself (`lock_ttl` after `started`), then watches
/// the release ([`Released`]).
async fn send_release(
    store: &Arc<Inner>,
    lock: String,
    token: String,
    started: Instant,
    since: Instant,
    confirms: u32,
) {
    let mut pause = Duration::from_millis(50);
    let mut tries = 0u32;
    loop {
        tries += 1;
        let failures = store.outage.failures();
        let mut conn = store.conn();
        let script = redis::Script::new(RELEASE);
        let mut call = script.key(&lock);
        let call = call.arg(&token);
        match store
            .op_always("release", &lock, call.invoke_async::<i64>(&mut conn))
            .await
        {
            Ok(deleted) => {
                if deleted > 0 && confirms > 0 {
                    tracing::debug!(target: "foldgate::state", lock, "released again a fold lock a failover had brought back");
                } else if tries > 1 {
                    tracing::debug!(target: "foldgate::state", lock, tries, "released a fold lock once Redis answered again");
                }
                if let Ok(mut released) = store.released.lock() {
                    released.push(Released {
                        lock,
                        token,
                        since,
                        failures,
                        confirms,
                    });
                }
                return;
            }
            Err(_) if started.elapsed() + pause < store.lock_ttl => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_EVERY);
            }
            Err(_) => {
                tracing::warn!(target: "foldgate::state", lock, tries, lock_ttl = ?store.lock_ttl,
                    "could not release a fold lock: Redis did not answer; it expires after state.lock_ttl");
                return;
            }
        }
    }
}

/// Sends again every release a failed command followed (run every
/// [`RETRY_EVERY`] by the store's reconciler): Redis replicates
/// asynchronously, so a master that took the `DEL` and died before its
/// replica had it hands the lock to the replica it promotes. The failure
/// that killed it is seen by some command soon after; the release sent
/// again reaches the new master (retried until it answers). A release
/// followed by no failure within [`CONFIRM_WITHIN`] is forgotten.
pub(super) fn confirm(store: &Arc<Inner>) {
    let failures = store.outage.failures();
    let due: Vec<Released> = match store.released.lock() {
        Ok(mut released) => {
            let (due, kept): (Vec<Released>, Vec<Released>) = std::mem::take(&mut *released)
                .into_iter()
                .partition(|r: &Released| r.failures < failures);
            *released = kept
                .into_iter()
                .filter(|r| r.since.elapsed() < CONFIRM_WITHIN && r.confirms < CONFIRMS)
                .collect();
            due
        }
        Err(_) => return,
    };
    for r in due {
        if r.since.elapsed() >= CONFIRM_WITHIN + RETRY_EVERY || r.confirms >= CONFIRMS {
            continue;
        }
        tokio::spawn(send_release_again(store.clone(), r));
    }
}

async fn send_release_again(store: Arc<Inner>, r: Released) {
    send_release(
        &store,
        r.lock,
        r.token,
        Instant::now(),
        r.since,
        r.confirms + 1,
    )
    .await;
}

/// Held while this replica folds the conversation.
struct Guard {
    _held: Held,
    /// The Redis lock and its renewal, when taken.
    remote: Option<(Claim, JoinHandle<()>)>,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // The claim, dropped after this, releases the lock.
        if let Some((_, renewer)) = &self.remote {
            renewer.abort();
        }
    }
}

/// What the wait for the Redis lock came to.
enum Taken {
    Held(Claim, JoinHandle<()>),
    /// Another replica's lock outlived `state.lock_wait`.
    Waited,
    /// Redis did not answer for the lock's slot.
    Unreachable,
}

/// Local lock first (one waiter per replica talks to Redis), then the
/// Redis lock, waiting up to `state.lock_wait` for another replica's fold.
/// With `patient` (when the request first asked, and how long it may wait
/// for Redis), a slot that does not answer is waited for too, as a lock
/// held elsewhere ([`take`]).
pub(super) async fn acquire(
    store: Arc<Inner>,
    key: &ConvKey,
    patient: Option<(Instant, Duration)>,
) -> FoldGuard {
    let local = store.flights.lock(key).await;
    let held = Held::new(store.clone(), key);
    let remote = match take(&store, key, patient).await {
        Taken::Held(claim, renewer) => Some((claim, renewer)),
        Taken::Waited => None,
        Taken::Unreachable => {
            held.unlocked();
            None
        }
    };
    Box::new(Guard {
        _held: held,
        remote,
        _local: local,
    })
}

/// `SET NX` until it takes the lock or `state.lock_wait` (from when the
/// request first asked) runs out. A slot that does not answer ends the
/// wait at once, unless `patient`: then it is waited for as another
/// replica's lock is, within the request's limit too, and not past
/// `lock_wait` of its silence (past that, each replica folds alone
/// anyway). Each `SET` carries a token of its own: one whose answer was
/// lost may have taken the key, and its release must not delete a later
/// `SET`'s lock.
async fn take(store: &Arc<Inner>, key: &ConvKey, patient: Option<(Instant, Duration)>) -> Taken {
    let lock = lock_key(key);
    let slot = store.health.slot(Some(&lock));
    let ttl_ms = u64::try_from(store.lock_ttl.as_millis()).unwrap_or(u64::MAX);
    let (started, limit) = patient.unwrap_or((Instant::now(), Duration::ZERO));
    let limit = limit.min(store.lock_wait);
    let mut pause = BACKOFF.0;
    loop {
        let token = token();
        let mut conn = store.conn();
        let cmd = redis::cmd("SET")
            .arg(&lock)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .clone();
        // Armed before the SET goes: a wait cancelled or an answer lost
        // may still have left the key in Redis.
        let mut claim = Claim {
            store: store.clone(),
            key: key.clone(),
            lock: lock.clone(),
            token: token.clone(),
            armed: true,
        };
        let answer = store
            .op(
                "lock",
                Some(&lock),
                cmd.query_async::<Option<String>>(&mut conn),
            )
            .await;
        claim.armed = matches!(answer, Ok(Some(_)) | Err(Unavailable::Failed));
        match answer {
            Ok(Some(_)) => {
                let renewer = tokio::spawn(renew(store.clone(), lock, token, ttl_ms));
                return Taken::Held(claim, renewer);
            }
            Ok(None) if started.elapsed() < store.lock_wait => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(BACKOFF.1);
            }
            Ok(None) => {
                tracing::warn!(target: "foldgate::state", conversation = %key, waited = ?store.lock_wait,
                    "another replica's fold lock outlived state.lock_wait; folding without it");
                return Taken::Waited;
            }
            Err(_)
                if started.elapsed() < limit && store.health.down_for(slot) < store.lock_wait =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(BACKOFF.1);
            }
            Err(Unavailable::Down | Unavailable::Failed) => return Taken::Unreachable,
        }
    }
}

/// Extends the lock every third of its expiry until aborted; after a
/// renewal Redis did not answer, tries again every [`RETRY_EVERY`] (the
/// slot's new master may hold the lock by then).
async fn renew(store: Arc<Inner>, lock: String, token: String, ttl_ms: u64) {
    let every = store.lock_ttl / 3;
    let mut wait = every;
    loop {
        tokio::time::sleep(wait).await;
        let mut conn = store.conn();
        let script = redis::Script::new(RENEW);
        let mut call = script.key(&lock);
        let call = call.arg(&token).arg(ttl_ms);
        match store
            .op_always("renew", &lock, call.invoke_async::<i64>(&mut conn))
            .await
        {
            Ok(0) => {
                tracing::warn!(target: "foldgate::state", lock, "lost a fold lock while folding (it expired); another replica may fold too");
                return;
            }
            Ok(_) => wait = every,
            Err(_) => wait = RETRY_EVERY.min(every),
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
        let wait = acquire(store.inner.clone(), &key, None);
        let gave_up = tokio::time::timeout(Duration::from_millis(200), wait).await;
        assert!(gave_up.is_err(), "the lock's SET had no answer to return");
        assert!(
            !store.inner.is_held(&key),
            "a cancelled wait left the conversation held"
        );
        accept.abort();
    }
}
