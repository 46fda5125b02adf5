//! examples/compose.yaml without Docker: the same processes started
//! directly — a Redis Cluster (six redis-server, `redis-cli --cluster
//! create`), the archive's own redis-server (`noeviction`), three foldgate
//! replicas on them, and nginx running
//! examples/nginx.conf with the replicas' addresses and its listen port
//! rewritten to loopback ones — so the example stays true. Conversations
//! sent through nginx reach every replica and fold once each.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::Llm;
use common::redis::{Cluster, Redis};
use common::{Foldgate, free_port, metric, post_json};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// nginx on `port` in front of `replicas`, from the example's own file.
struct Nginx {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(port: u16, replicas: &[&Foldgate]) -> Self {
        let example = std::fs::read_to_string("examples/nginx.conf").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut conf = example
            .replace("listen 8080;", &format!("listen 127.0.0.1:{port};"))
            .replace(
                "pid /tmp/foldgate-nginx.pid;",
                &format!("pid {}/nginx.pid;", dir.path().display()),
            );
        for (name, fg) in ["foldgate-a", "foldgate-b", "foldgate-c"]
            .iter()
            .zip(replicas)
        {
            let line = format!("server {name}:8080;");
            assert!(conf.contains(&line), "examples/nginx.conf lost {line}");
            conf = conf.replace(&line, &format!("server {};", fg.addr));
        }
        // nginx's temporary files, in the test's own directory.
        let temp = dir.path().display();
        conf = conf.replace(
            "http {",
            &format!(
                "http {{\n  client_body_temp_path {temp}/body;\n  proxy_temp_path {temp}/proxy;\n  \
                 fastcgi_temp_path {temp}/fastcgi;\n  uwsgi_temp_path {temp}/uwsgi;\n  scgi_temp_path {temp}/scgi;"
            ),
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new("nginx")
            .args(["-p", &dir.path().display().to_string(), "-c"])
            .arg(&path)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run nginx ({e}); install it: apt-get install -y nginx")
            });
        Self { child, _dir: dir }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_compose_example_names_a_cluster_foldgate_accepts() {
    let compose = std::fs::read_to_string("examples/compose.yaml").unwrap();
    let url = compose
        .lines()
        .find_map(|l| l.trim().strip_prefix("FOLDGATE_STATE__URL: "))
        .unwrap();
    let target = foldgate::config::RedisTarget::parse(url).unwrap();
    assert!(
        matches!(target, foldgate::config::RedisTarget::Cluster(ref seeds) if seeds.len() == 3),
        "{target:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_through_nginx_reach_every_replica_and_fold_once() {
    let cluster = Cluster::start();
    // The example's archive Redis: one server that never evicts.
    let archive = Redis::start_with(&["--maxmemory-policy", "noeviction"]);
    let llm = Llm::start().await;
    llm.state.summarizer_delay_ms.store(300, Ordering::Relaxed);
    let state = format!(
        "[state]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"200ms\"\ntimeout = \"500ms\"\nlock_wait = \"10s\"\n\
         [archive]\nurl = \"{}\"\n",
        cluster.url(),
        archive.url()
    );
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Foldgate::start(&config(&llm, &state)).await);
    }
    let port = free_port();
    let _nginx = Nginx::start(port, &replicas.iter().collect::<Vec<_>>());
    common::wait_listening(port).await;
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let send = |conversation: String, convo: &Convo| {
        let body = convo.body();
        let url = url.clone();
        async move {
            post_json(
                &url,
                &[
                    ("x-conversation-id", &conversation),
                    ("authorization", "Bearer sk-tenant-a"),
                ],
                &body,
            )
            .await
        }
    };
    for i in 0..4 {
        let convo = Convo::with_turns(55);
        let id = format!("via-nginx-{i}");
        let replies = tokio::time::timeout(
            Duration::from_secs(30),
            futures_join3(
                send(id.clone(), &convo),
                send(id.clone(), &convo),
                send(id, &convo),
            ),
        )
        .await
        .unwrap();
        let mut labels: Vec<&str> = replies
            .iter()
            .map(|r| {
                r.assert_ok();
                label(r)
            })
            .collect();
        labels.sort();
        assert_eq!(
            labels,
            ["new", "reused", "reused"],
            "conversation {i} folds once"
        );
    }
    assert_eq!(
        llm.summarizer_calls(),
        4,
        "one summarizer call per conversation"
    );
    for fg in &replicas {
        let served = metric(&fg.metrics().await, "foldgate_requests_total{api=\"chat\"}");
        assert!(
            served > 0.0,
            "nginx spread the requests: a replica served none"
        );
    }
    assert_eq!(cluster.keys("foldgate:state:*").len(), 4);
    // The archive in its own Redis, none in the states' cluster.
    let started = std::time::Instant::now();
    while archive
        .command(&["KEYS", "foldgate:archive:*"])
        .is_none_or(|r| r.starts_with("*0"))
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nothing archived"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cluster.keys("foldgate:archive:*").is_empty());
}

async fn futures_join3<T>(
    a: impl std::future::Future<Output = T>,
    b: impl std::future::Future<Output = T>,
    c: impl std::future::Future<Output = T>,
) -> [T; 3] {
    let (a, b, c) = tokio::join!(a, b, c);
    [a, b, c]
}
