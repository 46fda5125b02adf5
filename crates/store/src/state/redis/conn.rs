//! One Redis connection for the state store and the archive, whichever way
//! Redis is deployed (docs/architecture.md, "Scaling out"):
//!
//! - `redis://…` (or `unix://…`): one server, through a reconnecting
//!   connection manager;
//! - `redis+cluster://[user:password@]h1:p1,h2:p2[/]`: a Redis Cluster found
//!   from any of its seed nodes, commands routed by key slot, slots
//!   refreshed after a failover;
//! - `redis+sentinel://[user:password@]h1:p1,h2:p2/service[/db]`: the
//!   primary of `service` as the sentinels name it, asked again after any
//!   connection failure, so a promoted replica is found after a failover.
//!   The credentials are the data nodes'; the sentinels are asked without.

use crate::config::RedisTarget as Target;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::Arc;
use std::time::Duration;

/// A connection to Redis as deployed: cheap to clone, reconnecting.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Sentinel),
}

impl Conn {
    /// Connects lazily: a Redis that is down at start-up is no error, only
    /// a first command that fails.
    pub(crate) fn open(url: &str, timeout: Duration) -> RedisResult<Self> {
        let target = Target::parse(url).map_err(|e| {
            RedisError::from((redis::ErrorKind::InvalidClientConfig, "state.url", e))
        })?;
        Ok(match target {
            Target::Single(url) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(1));
                let client = redis::Client::open(url)?;
                Self::Single(ConnectionManager::new_lazy_with_config(client, config)?)
            }
            Target::Cluster(seeds) => {
                let client = redis::cluster::ClusterClientBuilder::new(seeds)
                    .retries(2)
                    .min_retry_wait(50)
                    .max_retry_wait(500)
                    .build()?;
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                Self::Cluster(client.get_pending_async_connection_with_config(config))
            }
            Target::Sentinel {
                sentinels,
                service,
                node,
            } => {
                let node = node.into_connection_info()?.redis_settings().clone();
                let client = SentinelClient::build(
                    sentinels,
                    service,
                    Some(SentinelNodeConnectionInfo::default().set_redis_connection_info(node)),
                    SentinelServerType::Master,
                )?;
                Self::Sentinel(Sentinel {
                    client: Arc::new(tokio::sync::Mutex::new(client)),
                    primary: Arc::new(std::sync::Mutex::new(None)),
                    config: redis::AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout)),
                })
            }
        })
    }

    /// Every key matching the glob `pattern`, from every master (one node
    /// unless a cluster: SCAN walks one node's keys). Bounded: each node's
    /// scan ends after at most 10,000 rounds of 1,000 keys.
    pub(crate) async fn scan(&mut self, pattern: &str) -> RedisResult<Vec<String>> {
        let nodes = match self {
            Self::Cluster(cluster) => masters(cluster).await?.into_iter().map(Some).collect(),
            _ => vec![None],
        };
        let mut found = Vec::new();
        for node in nodes {
            let mut cursor = 0u64;
            for _ in 0..10_000 {
                let cmd = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .clone();
                let (next, keys): (u64, Vec<String>) = match (&node, &mut *self) {
                    (Some((host, port)), Self::Cluster(cluster)) => {
                        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port: *port,
                        });
                        redis::from_redis_value(cluster.route_command(cmd, routing).await?)?
                    }
                    _ => cmd.query_async(self).await?,
                };
                found.extend(keys);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(found)
    }

    /// `CONFIG GET param` of every master (one node unless a cluster):
    /// the values they report, one per node that answered with one.
    pub(crate) async fn config_get(&mut self, param: &str) -> RedisResult<Vec<String>> {
        let cmd = redis::cmd("CONFIG").arg("GET").arg(param).clone();
        let answers: Vec<Value> = match self {
            Self::Cluster(cluster) => {
                let mut answers = Vec::new();
                for (host, port) in masters(cluster).await? {
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                    answers.push(cluster.route_command(cmd.clone(), routing).await?);
                }
                answers
            }
            _ => vec![cmd.query_async(self).await?],
        };
        Ok(answers
            .into_iter()
            .filter_map(|v| {
                let found: std::collections::HashMap<String, String> =
                    redis::from_redis_value(v).ok()?;
                found.get(param).cloned()
            })
            .collect())
    }

    /// Whether a pipeline may hold keys of different slots (not on a cluster).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

/// The cluster's masters that are not marked failed, from `CLUSTER NODES`.
async fn masters(cluster: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(cluster)
        .await?;
    Ok(nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let addr = fields.nth(1)?;
            let flags = fields.next()?;
            let flags: Vec<&str> = flags.split(',').collect();
            if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail")) {
                return None;
            }
            // ip:port@cport[,hostname]
            let (host, port) = addr.split(['@', ',']).next()?.rsplit_once(':')?;
            Some((host.to_string(), port.parse().ok()?))
        })
        .collect())
}

/// The primary of a Sentinel service: resolved on first use and again
/// after any failure that may mean it moved.
#[derive(Clone)]
pub(crate) struct Sentinel {
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
    primary: Arc<std::sync::Mutex<Option<MultiplexedConnection>>>,
    config: redis::AsyncConnectionConfig,
}

impl Sentinel {
    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.primary.lock().ok().and_then(|p| p.clone()) {
            return Ok(conn);
        }
        let mut client = self.client.lock().await;
        // Another task may have resolved it while this one waited.
        if let Some(conn) = self.primary.lock().ok().and_then(|p| p.clone()) {
            return Ok(conn);
        }
        let conn = client
            .get_async_connection_with_config(&self.config)
            .await?;
        if let Ok(mut primary) = self.primary.lock() {
            *primary = Some(conn.clone());
        }
        Ok(conn)
    }

    /// Forgets the primary after an error that says it may have moved: a
    /// dropped connection, a timeout, or a demoted node refusing writes.
    fn settle<T>(&self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &result {
            let moved = e.is_io_error()
                || e.is_connection_dropped()
                || e.is_timeout()
                || e.is_unrecoverable_error()
                || e.code() == Some("READONLY");
            if moved {
                if let Ok(mut primary) = self.primary.lock() {
                    *primary = None;
                }
            }
        }
        result
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(s) => Box::pin(async move {
                let result = match s.connection().await {
                    Ok(mut c) => c.req_packed_command(cmd).await,
                    Err(e) => Err(e),
                };
                s.settle(result)
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Self::Sentinel(s) => Box::pin(async move {
                let result = match s.connection().await {
                    Ok(mut c) => c.req_packed_commands(cmd, offset, count).await,
                    Err(e) => Err(e),
                };
                s.settle(result)
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(_) => 0,
        }
    }
}
