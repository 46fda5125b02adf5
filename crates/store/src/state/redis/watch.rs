//! How a replica learns, without asking, that another replica changed a
//! conversation's fold state, so a warm replica serves its cached state with
//! no round trip to Redis (docs/architecture.md, "Scaling out").
//!
//! Every save writes the state and publishes its key on [`keys::FOLDED`] in
//! one Lua script; every replica subscribes on a RESP3 connection of its own
//! and forgets what it cached for that key. Pub/sub delivers nothing while a
//! subscriber is disconnected, so a cached state is trusted without asking
//! Redis only while the subscription that was up when it was read is still
//! up: each subscription and each loss starts a new epoch, and what was read
//! in another epoch is read again (once) before it is trusted.

use super::Inner;
use super::keys;
use crate::config::RedisTarget;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind,
};
use std::sync::Weak;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// Pause before subscribing again after a failure.
const RETRY: Duration = Duration::from_millis(500);
/// How often an idle subscription is pinged, so a dead peer is noticed even
/// without a closed socket.
const PING_EVERY: Duration = Duration::from_secs(5);

/// Whether this replica's cached states can be trusted without asking.
#[derive(Debug)]
pub(super) struct Watch {
    /// Odd while subscribed; bumped on every subscription and every loss.
    epoch: AtomicU64,
    /// Changes heard (from other replicas, and this one's own saves): a
    /// read that overlapped one is not trusted.
    heard: AtomicU64,
    /// This store's id in what it publishes: its own saves are no news.
    origin: String,
}

/// The watch as a read started: see [`Watch::settle`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    epoch: u64,
    heard: u64,
}

impl Mark {
    /// The epoch the read started in.
    pub fn epoch(self) -> u64 {
        self.epoch
    }
}

/// The epoch of a slot never trusted.
pub(super) const UNTRUSTED: u64 = 0;

impl Watch {
    pub fn new(origin: String) -> Self {
        Self {
            epoch: AtomicU64::new(0),
            heard: AtomicU64::new(0),
            origin,
        }
    }

    /// This store's id, the first word of what it publishes.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Taken before a read from Redis.
    pub fn mark(&self) -> Mark {
        Mark {
            epoch: self.epoch.load(Ordering::SeqCst),
            heard: self.heard.load(Ordering::SeqCst),
        }
    }

    /// The epoch to record for what a read started at `mark` returned,
    /// checked after it is cached: [`UNTRUSTED`] when a change was heard
    /// meanwhile (the read may predate it).
    pub fn settle(&self, mark: Mark) -> u64 {
        if self.heard.load(Ordering::SeqCst) == mark.heard {
            mark.epoch
        } else {
            UNTRUSTED
        }
    }

    /// The epoch to record for a state this replica just wrote.
    pub fn now(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Whether a slot cached in `epoch` is still known current: subscribed
    /// then and without a break since.
    pub fn trusts(&self, epoch: u64) -> bool {
        epoch % 2 == 1 && epoch == self.epoch.load(Ordering::SeqCst)
    }

    /// Counts a change, so reads in flight are not trusted.
    pub fn heard(&self) {
        self.heard.fetch_add(1, Ordering::SeqCst);
    }

    fn subscribed(&self, up: bool) {
        let odd = self.epoch.load(Ordering::SeqCst) % 2 == 1;
        if odd != up {
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The message a save publishes: `origin state-key`.
pub(super) fn message(origin: &str, state_key: &str) -> String {
    format!("{origin} {state_key}")
}

/// Subscribes, forgets what other replicas change, and subscribes again
/// after any loss; ends with the store.
pub(super) async fn listen(inner: Weak<Inner>, target: RedisTarget, timeout: Duration) {
    let mut turn = 0usize;
    let mut failed = false;
    loop {
        if let Some((conn, pushes)) = subscribe(&target, &mut turn, timeout).await {
            let Some(store) = inner.upgrade() else { return };
            store.watch.subscribed(true);
            drop(store);
            failed = false;
            tracing::debug!(target: "foldgate::state", "listening for other replicas' state changes");
            let ended = follow(&inner, conn, pushes, timeout).await;
            if let Some(store) = inner.upgrade() {
                store.watch.subscribed(false);
            }
            if ended {
                return;
            }
        } else if !failed {
            failed = true;
            // Said once per outage: the store warns about Redis itself.
            tracing::info!(target: "foldgate::state", "cannot subscribe to other replicas' state changes (is SUBSCRIBE allowed?); cached states are read again after state.refresh until it can");
        }
        tokio::time::sleep(RETRY).await;
        if inner.strong_count() == 0 {
            return;
        }
    }
}

/// Applies what the subscription hears until it is lost (`false`) or the
/// store is gone (`true`).
async fn follow(
    inner: &Weak<Inner>,
    mut conn: MultiplexedConnection,
    mut pushes: UnboundedReceiver<PushInfo>,
    timeout: Duration,
) -> bool {
    loop {
        tokio::select! {
            push = pushes.recv() => {
                let Some(push) = push else { return false };
                let Some(store) = inner.upgrade() else { return true };
                match push.kind {
                    PushKind::Disconnection => return false,
                    PushKind::Message => {
                        if let Some(msg) = redis::Msg::from_push_info(push) {
                            store.changed(msg.get_payload_bytes());
                        }
                    }
                    _ => {}
                }
            }
            () = tokio::time::sleep(PING_EVERY) => {
                if inner.strong_count() == 0 {
                    return true;
                }
                let cmd = redis::cmd("PING");
                let ping = cmd.query_async::<redis::Value>(&mut conn);
                if !matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(_))) {
                    return false;
                }
            }
        }
    }
}

/// A RESP3 connection subscribed to [`keys::FOLDED`], on the one server,
/// the next cluster node in turn (a message published on any node reaches
/// every node), or the primary the sentinels name now.
async fn subscribe(
    target: &RedisTarget,
    turn: &mut usize,
    timeout: Duration,
) -> Option<(MultiplexedConnection, UnboundedReceiver<PushInfo>)> {
    let client = match target {
        RedisTarget::Single(url) => Client::open(url.as_str()).ok()?,
        RedisTarget::Cluster(seeds) => {
            *turn = turn.wrapping_add(1);
            let seed = seeds.get(*turn % seeds.len().max(1))?;
            Client::open(seed.as_str()).ok()?
        }
        RedisTarget::Sentinel {
            sentinels,
            service,
            node,
        } => {
            let node = node
                .as_str()
                .into_connection_info()
                .ok()?
                .redis_settings()
                .clone();
            let mut sentinel = SentinelClient::build(
                sentinels.clone(),
                service.clone(),
                Some(SentinelNodeConnectionInfo::default().set_redis_connection_info(node)),
                SentinelServerType::Master,
            )
            .ok()?;
            tokio::time::timeout(timeout, sentinel.async_get_client())
                .await
                .ok()?
                .ok()?
        }
    };
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = Client::open(info.set_redis_settings(settings)).ok()?;
    let (tx, rx) = unbounded_channel();
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_push_sender(tx);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .ok()?;
    tokio::time::timeout(timeout, conn.subscribe(keys::FOLDED))
        .await
        .ok()?
        .ok()?;
    Some((conn, rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusts_only_reads_of_the_live_subscription_that_heard_nothing_meanwhile() {
        let watch = Watch::new("me".into());
        let before = watch.mark();
        assert!(!watch.trusts(watch.settle(before)), "not subscribed yet");
        watch.subscribed(true);
        let read = watch.mark();
        assert!(watch.trusts(watch.settle(read)));
        let overlapped = watch.mark();
        watch.heard();
        assert_eq!(watch.settle(overlapped), UNTRUSTED);
        assert!(watch.trusts(read.epoch()), "what was cached before stays");
        watch.subscribed(false);
        assert!(!watch.trusts(read.epoch()), "messages may be lost");
        watch.subscribed(true);
        assert!(!watch.trusts(read.epoch()), "read again once");
        assert!(watch.trusts(watch.now()));
        assert!(!watch.trusts(UNTRUSTED));
    }
}
