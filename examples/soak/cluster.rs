//! The soak's Redis Cluster (`--cluster`): six `redis-server` on free
//! loopback ports joined by `redis-cli --cluster create` into three
//! masters with a replica each (one second node timeout). Where the
//! single server is killed and restarted, here a master is killed, its
//! replica takes over, and the killed node is started again from its own
//! `nodes.conf`, rejoining as a replica: the data stays in the cluster.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Cluster {
    pub ports: Vec<u16>,
    children: Vec<Option<Child>>,
    dir: tempfile::TempDir,
    /// Which master the next failover kills (turns through the nodes).
    next: usize,
}

fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

async fn wait_for(
    what: &str,
    within: Duration,
    mut ok: impl FnMut() -> bool,
) -> Result<(), String> {
    let started = Instant::now();
    while !ok() {
        if started.elapsed() > within {
            return Err(format!("Redis Cluster: {what} not within {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

impl Cluster {
    pub async fn start() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut cluster = Self {
            ports: Vec::new(),
            children: Vec::new(),
            dir,
            next: 0,
        };
        for i in 0..6 {
            // Its cluster bus port, 10000 above, must exist and be free too.
            let port = loop {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map_err(|e| e.to_string())?
                    .port();
                if port <= 55_535
                    && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
                {
                    break port;
                }
            };
            cluster.ports.push(port);
            cluster.children.push(None);
            cluster.spawn(i).await?;
        }
        let addrs: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .map_err(|e| format!("redis-cli ({e})"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        cluster.wait_healthy().await?;
        Ok(cluster)
    }

    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.ports[..3]
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}/", seeds.join(","))
    }

    async fn spawn(&mut self, i: usize) -> Result<(), String> {
        let port = self.ports[i];
        let dir = self.dir.path().join(port.to_string());
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"])
            .args([
                "--cluster-config-file",
                "nodes.conf",
                "--repl-diskless-sync-delay",
                "0",
            ])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server ({e}); install it: apt-get install redis-server"))?;
        self.children[i] = Some(child);
        wait_for("a node answers", Duration::from_secs(10), || {
            cli(port, &["PING"]).trim() == "PONG"
        })
        .await
    }

    fn live(&self) -> impl Iterator<Item = u16> + '_ {
        self.ports
            .iter()
            .zip(&self.children)
            .filter(|(_, c)| c.is_some())
            .map(|(p, _)| *p)
    }

    /// Live nodes that are masters now.
    pub fn masters(&self) -> Vec<u16> {
        self.live()
            .filter(|p| cli(*p, &["ROLE"]).starts_with("master"))
            .collect()
    }

    /// Every live node says ok, three masters serve, every replica synced.
    async fn wait_healthy(&self) -> Result<(), String> {
        wait_for(
            "cluster ok, three masters, replicas in sync",
            Duration::from_secs(30),
            || {
                self.masters().len() == 3
                    && self.live().all(|p| {
                        let info = cli(p, &["INFO", "replication"]);
                        cli(p, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                            && (info.contains("role:master")
                                || info.contains("master_link_status:up"))
                    })
            },
        )
        .await
    }

    /// Kills a master (SIGKILL), waits until its replica took over, waits
    /// `down`, starts the node again and waits until it has synced as a
    /// replica.
    pub async fn fail_over(&mut self, down: Duration) -> Result<(), String> {
        let masters = self.masters();
        let victim = masters[self.next % masters.len()];
        self.next += 1;
        let i = self
            .ports
            .iter()
            .position(|p| *p == victim)
            .ok_or("no such node")?;
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.wait_healthy().await?;
        tokio::time::sleep(down).await;
        self.spawn(i).await?;
        self.wait_healthy().await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().filter_map(Option::take) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
