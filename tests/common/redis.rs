//! A real `redis-server` (Debian's package) on a free loopback port, with no
//! persistence, killed on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Redis {
    pub port: u16,
    child: Option<Child>,
    /// More `redis-server` flags (`--maxmemory`, …), kept for restarts.
    extra: Vec<String>,
}

impl Redis {
    /// Starts redis-server on a free port; panics clearly when it is missing.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`Redis::start`] with more `redis-server` flags.
    pub fn start_with(extra: &[&str]) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut redis = Self {
            port,
            child: None,
            extra,
        };
        redis.restart();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server (its data is gone: no persistence).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-server ({e}); install it: apt-get install -y redis-server")
            });
        self.child = Some(child);
        let started = Instant::now();
        while !self.ping() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not answer on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server answers PING.
    pub fn ping(&self) -> bool {
        self.command(&["PING"])
            .is_some_and(|r| r.starts_with("+PONG"))
    }

    /// Sends one command in RESP and returns the raw reply.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(req.as_bytes()).ok()?;
        let mut buf = vec![0u8; 1 << 16];
        let n = stream.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free loopback port for a cluster node: its bus port (10000 above)
/// must exist and be free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Runs `redis-cli -p port args…` and returns what it printed.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}); install redis-server's tools"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `ok` every 50 ms until it holds; panics naming `what` after `within`.
fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ok() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One redis-server process (cluster node, Sentinel primary or replica, or
/// a sentinel) in its own directory, killed on drop.
pub struct Node {
    pub port: u16,
    child: Option<Child>,
    /// Its directory (a cluster node's `nodes.conf` is there).
    dir: std::path::PathBuf,
    args: Vec<String>,
}

impl Node {
    fn spawn(dir: &std::path::Path, port: u16, args: &[&str]) -> Self {
        let dir = dir.join(port.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let mut node = Self {
            port,
            child: None,
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        node.start();
        node
    }

    /// Starts the process on its port, in its directory, and waits until
    /// it answers.
    fn start(&mut self) {
        let port = self.port;
        let child = Command::new("redis-server")
            .args(&self.args)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-server ({e}); install it: apt-get install -y redis-server")
            });
        self.child = Some(child);
        wait_for("redis-server answers", Duration::from_secs(10), || {
            cli(port, &["PING"]).trim() == "PONG"
        });
    }

    /// Kills the process (SIGKILL: no goodbye to the cluster).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed node again with what its directory kept (a cluster
    /// node its `nodes.conf`, so it rejoins as what it was).
    pub fn restart(&mut self) {
        self.kill();
        self.start();
    }

    pub fn alive(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster on loopback: three masters, one replica each, a one
/// second node timeout so a killed master's replica takes over within
/// about two seconds.
pub struct Cluster {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<Node> = (0..6)
            .map(|_| {
                Node::spawn(
                    dir.path(),
                    free_cluster_port(),
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-node-timeout",
                        "1000",
                        "--cluster-config-file",
                        "nodes.conf",
                        // Replicas sync at once, not after Redis's default 5 s.
                        "--repl-diskless-sync-delay",
                        "0",
                    ],
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Self { nodes, _dir: dir };
        cluster.wait_healthy();
        // A replica that has not synced cannot take over its master.
        wait_for("every replica in sync", Duration::from_secs(20), || {
            cluster.nodes.iter().all(|n| {
                let info = cli(n.port, &["INFO", "replication"]);
                info.contains("role:master") || info.contains("master_link_status:up")
            })
        });
        cluster
    }

    /// `redis+cluster://` naming the three seed nodes given to create.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..3]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}/", seeds.join(","))
    }

    /// Waits until every live node says the cluster is ok and sees three
    /// masters each with a replica or, after a failover, at least three
    /// live masters.
    pub fn wait_healthy(&self) {
        wait_for("cluster state ok", Duration::from_secs(20), || {
            self.nodes.iter().filter(|n| n.alive()).all(|n| {
                cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && self.masters_seen_by(n.port) == 3
            })
        });
    }

    fn masters_seen_by(&self, port: u16) -> usize {
        cli(port, &["CLUSTER", "NODES"])
            .lines()
            .filter(|l| {
                let flags = l.split(' ').nth(2).unwrap_or("");
                flags.contains("master") && !flags.contains("fail")
            })
            .count()
    }

    fn any_live(&self) -> u16 {
        self.nodes.iter().find(|n| n.alive()).unwrap().port
    }

    /// Runs a command on the node that holds `key`'s slot.
    pub fn on_key(&self, key: &str, args: &[&str]) -> String {
        let port = self.master_of(key);
        cli(port, args)
    }

    /// The port of the master serving `key`'s slot (0 while none does).
    pub fn master_of(&self, key: &str) -> u16 {
        let slot: u16 = cli(self.any_live(), &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .unwrap();
        for line in cli(self.any_live(), &["CLUSTER", "NODES"]).lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            if !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                match (lo.parse::<u16>(), hi.parse::<u16>()) {
                    (Ok(lo), Ok(hi)) => (lo..=hi).contains(&slot),
                    _ => false,
                }
            });
            if serves {
                let port = fields[1]
                    .split('@')
                    .next()
                    .unwrap()
                    .rsplit_once(':')
                    .unwrap()
                    .1;
                return port.parse().unwrap();
            }
        }
        // None live yet (the dead master still listed as failed).
        0
    }

    /// Kills the master serving `key`'s slot and waits until its replica
    /// serves the slot and the cluster is ok again; returns the killed
    /// node's port.
    pub fn kill_master_of(&mut self, key: &str) -> u16 {
        let port = self.master_of(key);
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap()
            .kill();
        wait_for(
            "a replica takes over the slot",
            Duration::from_secs(30),
            || {
                let now = self.master_of(key);
                now != 0 && now != port
            },
        );
        self.wait_healthy();
        port
    }

    /// Starts the killed node on `port` again from its `nodes.conf`: a
    /// master that lost its slots in a failover comes back claiming them,
    /// learns it was replaced and turns into a replica of its successor.
    /// Returns once it is that replica, in sync, and the cluster is ok.
    pub fn restart(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap()
            .restart();
        wait_for(
            "the restarted node syncs as a replica",
            Duration::from_secs(30),
            || {
                let info = cli(port, &["INFO", "replication"]);
                info.contains("role:slave") && info.contains("master_link_status:up")
            },
        );
        self.wait_healthy();
    }

    /// Every key matching `pattern` on every live master.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut found = Vec::new();
        for n in self.nodes.iter().filter(|n| n.alive()) {
            if cli(n.port, &["ROLE"]).starts_with("master") {
                found.extend(
                    cli(n.port, &["--scan", "--pattern", pattern])
                        .lines()
                        .map(str::to_string),
                );
            }
        }
        found.sort();
        found.dedup();
        found
    }
}

/// A Sentinel set on loopback: a primary, its replica, and three sentinels
/// (quorum 2) that call a primary down after one second.
pub struct SentinelSet {
    pub primary: Node,
    pub replica: Node,
    pub sentinels: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// The service name the sentinels watch.
pub const SERVICE: &str = "foldgate-test";

impl SentinelSet {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let primary = Node::spawn(
            dir.path(),
            free_port(),
            &["--repl-diskless-sync-delay", "0"],
        );
        let replica_of = primary.port.to_string();
        let replica = Node::spawn(
            dir.path(),
            free_port(),
            &["--replicaof", "127.0.0.1", &replica_of],
        );
        let sentinels = (0..3)
            .map(|_| {
                let port = free_port();
                let conf = dir.path().join(format!("sentinel-{port}.conf"));
                std::fs::write(
                    &conf,
                    format!(
                        "sentinel monitor {SERVICE} 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds {SERVICE} 1000\n\
                         sentinel failover-timeout {SERVICE} 5000\n",
                        primary.port
                    ),
                )
                .unwrap();
                Node::spawn(dir.path(), port, &[conf.to_str().unwrap(), "--sentinel"])
            })
            .collect();
        let set = Self {
            primary,
            replica,
            sentinels,
            _dir: dir,
        };
        // Failover needs the replica known and the sentinels acquainted.
        wait_for(
            "sentinels see the replica and each other",
            Duration::from_secs(20),
            || {
                set.sentinels.iter().all(|s| {
                    let master = cli(s.port, &["SENTINEL", "MASTER", SERVICE]);
                    let field = |name: &str| {
                        let mut lines = master.lines();
                        lines.find(|l| *l == name);
                        lines.next().unwrap_or("").to_string()
                    };
                    field("num-slaves") == "1" && field("num-other-sentinels") == "2"
                })
            },
        );
        wait_for("replica in sync", Duration::from_secs(10), || {
            cli(set.replica.port, &["INFO", "replication"]).contains("master_link_status:up")
        });
        set
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// The port the sentinels name as the primary now.
    pub fn primary_port(&self) -> u16 {
        let out = cli(
            self.sentinels[0].port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE],
        );
        out.lines().nth(1).unwrap().trim().parse().unwrap()
    }

    /// Kills the primary and waits until the sentinels promoted the replica.
    pub fn fail_over(&mut self) {
        self.primary.kill();
        let replica = self.replica.port;
        wait_for(
            "sentinels promote the replica",
            Duration::from_secs(30),
            || self.primary_port() == replica && cli(replica, &["ROLE"]).starts_with("master"),
        );
    }
}
