//! The soak's Redis: a real `redis-server` on a free loopback port with no
//! persistence (`--save "" --appendonly no`), killed and restarted during
//! the run. A kill loses what Redis held, so before each kill the archive
//! rows it holds are read (with writes paused, so none lands between the
//! reading and the kill) and kept as hashes: the rows Redis stored over
//! the whole run are the union of those readings and the last one.

use super::cluster::Cluster;
use redis::AsyncCommands;
use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Keys of foldgate's archive lists.
const ARCHIVE_KEYS: &str = "foldgate:archive:*";
/// How long writes are held while the archive rows are read before a kill.
const PAUSE: Duration = Duration::from_secs(300);

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// Restarts made.
    pub restarts: u64,
    /// Every archive row read so far: XXH3 of its list key and JSON text
    /// (a batch written twice is the same row), and of its list key,
    /// position and digest (the same message archived twice).
    rows: HashSet<u128>,
    messages: HashSet<u128>,
    /// Every list entry read so far, copies included.
    entries: u64,
    /// With `--cluster`: a Redis Cluster instead of the one server, and
    /// failovers instead of restarts.
    cluster: Option<Cluster>,
}

/// What Redis held over the run.
pub struct Archived {
    /// Distinct archive rows.
    pub rows: u64,
    /// Distinct messages (conversation, position, digest) among them.
    pub messages: u64,
    /// List entries, copies included: each row handed is at least one
    /// entry unless it was lost (a replay of a write Redis had taken adds
    /// a copy; so does a row handed twice).
    pub entries: u64,
    /// Conversations with an archive list at the last reading.
    pub lists: u64,
}

impl RedisServer {
    /// Starts `redis-server` on a free port and waits until it answers;
    /// with `cluster`, a Redis Cluster (see [`Cluster`]) instead.
    pub async fn start(cluster: bool) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let mut server = Self {
            port,
            child: None,
            restarts: 0,
            rows: HashSet::new(),
            messages: HashSet::new(),
            entries: 0,
            cluster: None,
        };
        if cluster {
            server.cluster = Some(Cluster::start().await?);
        } else {
            server.spawn().await?;
        }
        Ok(server)
    }

    pub fn url(&self) -> String {
        match &self.cluster {
            Some(cluster) => cluster.url(),
            None => format!("redis://127.0.0.1:{}/0", self.port),
        }
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server ({e}); install it: apt-get install redis-server"))?;
        self.child = Some(child);
        let started = Instant::now();
        while Self::connection(self.port).await.is_err() {
            if started.elapsed() > Duration::from_secs(10) {
                return Err(format!("redis-server did not answer on port {}", self.port));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn connection(port: u16) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))?;
        // The harness reads whole archive lists just before each kill: on
        // a loaded machine that takes longer than the client's default
        // 500 ms a response (an hour's run stopped on it at 451 s).
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(30)));
        let conn = tokio::time::timeout(
            Duration::from_secs(2),
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connect timeout")))??;
        let mut check = conn.clone();
        redis::cmd("PING").query_async::<String>(&mut check).await?;
        Ok(conn)
    }

    /// Pauses writes, reads the archive rows, kills the server (its data
    /// goes with it), waits `down`, and starts it again on the same port.
    pub async fn restart(&mut self, down: Duration) -> Result<(), String> {
        // A failover keeps the data: no reading before it.
        if let Some(cluster) = &mut self.cluster {
            cluster.fail_over(down).await?;
            self.restarts += 1;
            return Ok(());
        }
        let mut conn = Self::connection(self.port)
            .await
            .map_err(|e| e.to_string())?;
        // The kill ends the pause; it only has to outlast the reading, which
        // on a loaded machine may take many seconds. A write that lands
        // between the reading and the kill is counted nowhere.
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(PAUSE.as_millis() as u64)
            .arg("WRITE")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let paused = Instant::now();
        // A transaction already sent is answered before the pause holds it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.read().await?;
        if paused.elapsed() >= PAUSE {
            return Err(format!(
                "reading the archive outlasted the {PAUSE:?} write pause"
            ));
        }
        self.kill();
        tokio::time::sleep(down).await;
        self.spawn().await?;
        self.restarts += 1;
        Ok(())
    }

    /// Reads every archive row Redis holds now into the run's sets;
    /// returns how many lists there are.
    async fn read(&mut self) -> Result<u64, String> {
        let ports = match &self.cluster {
            Some(cluster) => cluster.masters(),
            None => vec![self.port],
        };
        let mut lists = 0;
        for port in ports {
            lists += self.read_node(port).await?;
        }
        Ok(lists)
    }

    /// [`Self::read`] on one server (a cluster master holds its slots' keys).
    async fn read_node(&mut self, port: u16) -> Result<u64, String> {
        let mut conn = Self::connection(port).await.map_err(|e| e.to_string())?;
        let mut keys: Vec<String> = Vec::new();
        {
            let mut iter = conn
                .scan_match::<_, String>(ARCHIVE_KEYS)
                .await
                .map_err(|e| e.to_string())?;
            while let Some(k) = iter.next_item().await {
                keys.push(k.map_err(|e| e.to_string())?);
            }
        }
        for key in &keys {
            let rows: Vec<String> = conn.lrange(key, 0, -1).await.map_err(|e| e.to_string())?;
            self.entries += rows.len() as u64;
            for row in rows {
                self.rows.insert(hash(&[key, &row]));
                let v: serde_json::Value = serde_json::from_str(&row).unwrap_or_default();
                let position = v["position"].to_string();
                let digest = v["digest"].as_str().unwrap_or_default();
                self.messages.insert(hash(&[key, &position, digest]));
            }
        }
        Ok(keys.len() as u64)
    }

    /// The rows Redis stored over the run, the last reading made now.
    pub async fn archived(&mut self) -> Result<Archived, String> {
        let lists = self.read().await?;
        Ok(Archived {
            rows: self.rows.len() as u64,
            messages: self.messages.len() as u64,
            entries: self.entries,
            lists,
        })
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn hash(parts: &[&str]) -> u128 {
    let mut h = twox_hash::XxHash3_128::new();
    for p in parts {
        h.write(p.as_bytes());
        h.write(b"\0");
    }
    h.finish_128()
}
