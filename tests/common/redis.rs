//! A real `redis-server` (Debian's package) on a free loopback port, with no
//! persistence, killed on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Redis {
    pub port: u16,
    child: Option<Child>,
}

impl Redis {
    /// Starts redis-server on a free port; panics clearly when it is missing.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut redis = Self { port, child: None };
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
