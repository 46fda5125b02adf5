//! The soak run: the foldgate process, the upstream, the workers, the
//! readings and the checks (see `main.rs`). Also run, shortened, by
//! `tests/soak_short.rs`.

use super::redis::RedisServer;
use super::{tiers, traffic, upstream};
use clap::Parser;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// RSS may grow at most this much between warm-up and the end. The soak's
/// caches are small (8 MiB of token counts, 4 MiB of fold states) so they
/// fill during warm-up and what grows after is what nothing bounds.
const RSS_GROWTH_BOUND_KB: u64 = 64 * 1024;
/// Open file descriptors may grow at most this much between warm-up and
/// the end (idle pooled upstream connections come and go).
const FD_GROWTH_BOUND: u64 = 32;
/// Largest share of requests that may time out or fail to reach foldgate.
const MAX_UNREACHABLE_SHARE: f64 = 0.005;
/// Redis is killed and restarted this often in a run of at least twice
/// as long (a shorter run restarts it once, in the middle).
const REDIS_RESTART_EVERY: Duration = Duration::from_secs(150);

/// The soak's command line.
#[derive(Parser)]
pub struct Args {
    /// The foldgate binary to soak.
    #[arg(long)]
    pub foldgate: PathBuf,
    /// How long traffic runs.
    #[arg(long, default_value_t = 600)]
    pub seconds: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Seed of traffic and faults.
    #[arg(long, default_value_t = 0x50a4)]
    pub seed: u64,
    /// Directory for foldgate's config, log and database (default: a new
    /// temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Items (messages or input items) past which a client's conversation
    /// starts over as a new one: smaller means more distinct conversations.
    #[arg(long, default_value_t = super::convo::MAX_ITEMS)]
    pub conversation_items: usize,
    /// Conversations of each API each client keeps live at once, turns
    /// spread over them at random: 10 gives 10 times the live
    /// conversations at the same request rate.
    #[arg(long, default_value_t = 1)]
    pub conversations: usize,
    /// `tokens.cache_bytes` of foldgate (the fold-state cache gets half).
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub cache_bytes: u64,
    /// Redis Cluster (three masters, a replica each) instead of one
    /// server, with master failovers instead of restarts.
    #[arg(long)]
    pub cluster: bool,
    /// Seconds a killed Redis (with `--cluster`, a killed master once its
    /// replica took over) stays down before it is started again (default:
    /// a sixtieth of the run, 2 to 10). 0 starts a killed master again at
    /// once, while foldgate's cluster client may still map its old slots
    /// to its address.
    #[arg(long)]
    pub down: Option<u64>,
}

/// RSS (KiB) and open file descriptors of a process.
#[derive(Clone, Copy, Debug)]
struct Usage {
    rss_kb: u64,
    fds: u64,
}

fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Usage { rss_kb, fds })
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Kills the child if the soak stops early.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the soak and prints its report: `Ok(true)` when every check
/// passed.
pub async fn run(args: Args) -> Result<bool, String> {
    let temp = match &args.dir {
        Some(_) => None,
        None => Some(tempfile::tempdir().map_err(|e| e.to_string())?),
    };
    let dir = args
        .dir
        .clone()
        .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
        .ok_or("no directory")?;
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let injected = Arc::new(upstream::Injected::default());
    let upstream_url = upstream::start(injected.clone(), args.seed)
        .await
        .map_err(|e| format!("upstream: {e}"))?;
    let mut redis = RedisServer::start(args.cluster).await?;
    let mut foldgate = Foldgate::start(&args, &dir, &upstream_url, &redis.url()).await?;
    let at_start = usage(foldgate.pid).ok_or("cannot read /proc for foldgate")?;
    println!(
        "soak: foldgate pid {} on {}, upstream {upstream_url}, redis {}, {} s, {} workers, seed {:#x}, log {}",
        foldgate.pid,
        foldgate.base,
        redis.url(),
        args.seconds,
        args.workers,
        args.seed,
        foldgate.log.display()
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let workers: Vec<_> = (0..args.workers)
        .map(|i| {
            let seed = args.seed.wrapping_mul(31).wrapping_add(i as u64 + 1);
            let shape = (args.conversation_items, args.conversations);
            let base = foldgate.base.clone();
            tokio::spawn(traffic::worker(base, i, seed, deadline, shape))
        })
        .collect();
    let watched = watch(&args, &mut foldgate, &mut redis, started, at_start).await?;
    let (outcomes, conversations) = join(workers).await;
    let end = foldgate.finish(watched.alive).await;
    let (total, unreachable) = print_outcomes(&outcomes, started, args.seconds);
    print_upstream(&injected);
    let leaked = outcomes.get("recall_leaked").copied().unwrap_or(0);
    let tier_checks = tiers::report(end.settled.as_deref(), &mut redis, &injected, leaked).await;
    let warm = watched.warm.unwrap_or(at_start);
    print_usage(&watched, at_start, end.usage);
    if let Some(at_end) = end.usage {
        let grown = at_end.rss_kb.saturating_sub(warm.rss_kb) as f64 / 1024.0;
        println!(
            "conversations: {conversations} distinct ({} live at once, each restarted past {} items); RSS growth after warm-up per 1,000 conversations: {:.1} MiB",
            3 * args.workers * args.conversations.max(1),
            args.conversation_items,
            grown * 1000.0 / conversations.max(1) as f64
        );
    }
    let mut checks = end.checks();
    checks.push((
        outcomes.get("ok").copied().unwrap_or(0) > 0,
        "some requests succeeded".into(),
    ));
    checks.push((
        (unreachable as f64) <= MAX_UNREACHABLE_SHARE * total as f64,
        format!(
            "timeouts and unreachable: {unreachable} of {total} (bound {:.1}%)",
            MAX_UNREACHABLE_SHARE * 100.0
        ),
    ));
    checks.extend(tier_checks);
    checks.extend(growth_checks(warm, end.usage));
    println!();
    let mut pass = true;
    for (ok, what) in checks {
        println!("{} {what}", if ok { "ok  " } else { "FAIL" });
        pass &= ok;
    }
    Ok(pass)
}

/// The workers' outcomes, summed, and the conversations they started.
async fn join(
    workers: Vec<tokio::task::JoinHandle<(traffic::Outcomes, u64)>>,
) -> (BTreeMap<String, u64>, u64) {
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut conversations = 0;
    for w in workers {
        if let Ok((o, started)) = w.await {
            conversations += started;
            for (k, v) in o {
                *outcomes.entry(k).or_default() += v;
            }
        }
    }
    (outcomes, conversations)
}

/// The foldgate process under soak.
struct Foldgate {
    guard: Guard,
    pid: u32,
    base: String,
    log: PathBuf,
}

impl Foldgate {
    /// Writes the soak's config into `dir` and starts `args.foldgate` on
    /// it, logging to `dir/foldgate.log`, once it answers its health check.
    async fn start(
        args: &Args,
        dir: &std::path::Path,
        upstream_url: &str,
        redis_url: &str,
    ) -> Result<Self, String> {
        let port = free_port().map_err(|e| e.to_string())?;
        let base = format!("http://127.0.0.1:{port}");
        let config = dir.join("soak.toml");
        let log = dir.join("foldgate.log");
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\nupstream_timeout = \"10s\"\nshutdown_timeout = \"10s\"\n\n\
                 [providers.mock]\nbase_url = \"{upstream_url}/v1\"\nmodels = [\"*\"]\n\n\
                 [providers.mock-anthropic]\nbase_url = \"{upstream_url}/v1\"\napi = \"anthropic\"\nmodels = [\"*\"]\n\n\
                 [models.\"soak-*\"]\ncontext_window = 8192\n\n\
                 [tokens]\ncache_bytes = {}\n\n\
                 [state]\nbackend = \"redis\"\nurl = \"{redis_url}\"\ntimeout = \"500ms\"\ncache_bytes = {}\n",
                args.cache_bytes,
                args.cache_bytes / 2
            ),
        )
        .map_err(|e| e.to_string())?;
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut command = Command::new(&args.foldgate);
        // Only the soak's own config: `FOLDGATE_*` variables of the caller
        // (`FOLDGATE_BIN` of scripts/soak, say) would be read as config keys.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("FOLDGATE_") {
                command.env_remove(name);
            }
        }
        let child = command
            .args(["serve", "--config"])
            .arg(&config)
            .env("FOLDGATE_LOG", "warn")
            .stdout(Stdio::from(
                log_file.try_clone().map_err(|e| e.to_string())?,
            ))
            .stderr(Stdio::from(log_file))
            .spawn()
            .map_err(|e| format!("{}: {e}", args.foldgate.display()))?;
        let guard = Guard(child);
        let pid = guard.0.id();
        if !healthy(&base, Duration::from_secs(30)).await {
            return Err(format!(
                "foldgate did not become healthy; log: {}",
                log.display()
            ));
        }
        Ok(Self {
            guard,
            pid,
            base,
            log,
        })
    }

    /// After the traffic: lets the spool drain, the last folds end and the
    /// clients' connections close, takes the last readings and stops the
    /// process with SIGTERM.
    async fn finish(&mut self, alive: bool) -> End {
        let settled = tiers::settle(&self.base).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let alive = alive && matches!(self.guard.0.try_wait(), Ok(None));
        let usage = usage(self.pid);
        let healthy = alive && healthy(&self.base, Duration::from_secs(5)).await;
        let shutdown = if alive {
            stop(&mut self.guard.0, Duration::from_secs(15)).await
        } else {
            None
        };
        let log_text = std::fs::read_to_string(&self.log).unwrap_or_default();
        End {
            settled,
            alive,
            usage,
            healthy,
            shutdown,
            panics: log_text.matches("panicked").count(),
        }
    }
}

/// What the watch over the run saw.
struct Watched {
    /// Usage once warm-up was over.
    warm: Option<Usage>,
    /// The largest RSS and fd count seen.
    peak: Usage,
    /// RSS at each tenth of the run, to tell a plateau from a steady climb.
    timeline: Vec<u64>,
    /// Whether foldgate was still running at the deadline.
    alive: bool,
}

/// Reads foldgate's usage every second until the run's end, restarting
/// Redis (with `--cluster`, failing a master over) on its schedule.
async fn watch(
    args: &Args,
    foldgate: &mut Foldgate,
    redis: &mut RedisServer,
    started: Instant,
    at_start: Usage,
) -> Result<Watched, String> {
    let deadline = started + Duration::from_secs(args.seconds);
    let warm_up = Duration::from_secs((args.seconds / 10).clamp(2, 60));
    let mut watched = Watched {
        warm: None,
        peak: at_start,
        timeline: Vec::new(),
        alive: true,
    };
    let restart_every = if args.seconds >= 2 * REDIS_RESTART_EVERY.as_secs() {
        REDIS_RESTART_EVERY
    } else {
        Duration::from_secs((args.seconds / 2).max(1))
    };
    let redis_down = Duration::from_secs(args.down.unwrap_or((args.seconds / 60).clamp(2, 10)));
    let mut next_restart = started + restart_every;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if Instant::now() >= next_restart
            && Instant::now() + redis_down + Duration::from_secs(5) < deadline
        {
            println!(
                "soak: {:.0} s: killing {} for {} s",
                started.elapsed().as_secs_f64(),
                if args.cluster {
                    "a Redis master (its replica takes over)"
                } else {
                    "Redis"
                },
                redis_down.as_secs()
            );
            redis.restart(redis_down).await?;
            next_restart += restart_every;
        }
        if let Ok(Some(_)) = foldgate.guard.0.try_wait() {
            watched.alive = false;
            break;
        }
        let Some(u) = usage(foldgate.pid) else {
            continue;
        };
        watched.peak.rss_kb = watched.peak.rss_kb.max(u.rss_kb);
        watched.peak.fds = watched.peak.fds.max(u.fds);
        if watched.warm.is_none() && started.elapsed() >= warm_up {
            watched.warm = Some(u);
        }
        let tenth = Duration::from_secs(args.seconds).as_secs_f64() / 10.0;
        if started.elapsed().as_secs_f64() >= tenth * (watched.timeline.len() + 1) as f64 {
            watched.timeline.push(u.rss_kb);
            memory_line(&foldgate.base, started.elapsed(), u.rss_kb).await;
        }
    }
    Ok(watched)
}

/// The readings after the traffic.
struct End {
    /// The tiers' figures once settled (`None`: they never settled).
    settled: Option<String>,
    alive: bool,
    usage: Option<Usage>,
    healthy: bool,
    /// SIGTERM's outcome: (exited with status 0, time taken).
    shutdown: Option<(bool, Duration)>,
    /// `panicked` lines in foldgate's log.
    panics: usize,
}

impl End {
    /// The process' own checks: up, no panic, healthy, a clean shutdown.
    fn checks(&self) -> Vec<(bool, String)> {
        let panics = self.panics;
        vec![
            (self.alive, "foldgate stayed up".into()),
            (
                panics == 0,
                format!("no panic in foldgate's log ({panics} found)"),
            ),
            (self.healthy, "healthy at the end".into()),
            (
                self.shutdown.is_some_and(|s| s.0),
                format!(
                    "clean shutdown on SIGTERM ({})",
                    self.shutdown.map_or("not reached".into(), |s| format!(
                        "{:.1} s",
                        s.1.as_secs_f64()
                    ))
                ),
            ),
        ]
    }
}

/// Prints the outcomes' table: (requests, those that timed out or never
/// reached foldgate).
fn print_outcomes(outcomes: &BTreeMap<String, u64>, started: Instant, seconds: u64) -> (u64, u64) {
    let total: u64 = outcomes.values().sum();
    let unreachable: u64 = outcomes
        .iter()
        .filter(|(k, _)| k.starts_with("client_timeout") || k.starts_with("transport_error"))
        .map(|(_, v)| v)
        .sum();
    println!(
        "\nrequests: {total} in {:.0} s ({:.1}/s)",
        started.elapsed().as_secs_f64(),
        total as f64 / seconds.max(1) as f64
    );
    println!("| outcome | count | share |\n|---|---:|---:|");
    for (kind, n) in outcomes {
        println!(
            "| {kind} | {n} | {:.2}% |",
            100.0 * *n as f64 / total.max(1) as f64
        );
    }
    (total, unreachable)
}

/// Prints what the upstream saw and the faults it injected.
fn print_upstream(i: &upstream::Injected) {
    println!(
        "\nupstream: {} requests; injected: {} connection resets, {} 500s, {} aborted bodies, {} slow bodies; summaries: {} ({} not JSON)",
        i.requests.load(Ordering::Relaxed),
        i.resets.load(Ordering::Relaxed),
        i.errors_500.load(Ordering::Relaxed),
        i.aborted_bodies.load(Ordering::Relaxed),
        i.slow_bodies.load(Ordering::Relaxed),
        i.summaries.load(Ordering::Relaxed),
        i.bad_summaries.load(Ordering::Relaxed),
    );
}

/// Prints foldgate's RSS and fds at start, after warm-up, at the peak and
/// at the end, and RSS at each tenth of the run.
fn print_usage(watched: &Watched, at_start: Usage, at_end: Option<Usage>) {
    println!("\n| foldgate | RSS MiB | open fds |\n|---|---:|---:|");
    for (name, u) in [
        ("start", Some(at_start)),
        ("after warm-up", Some(watched.warm.unwrap_or(at_start))),
        ("peak", Some(watched.peak)),
        ("end", at_end),
    ] {
        match u {
            Some(u) => println!("| {name} | {:.1} | {} |", u.rss_kb as f64 / 1024.0, u.fds),
            None => println!("| {name} | gone | gone |"),
        }
    }
    let steps: Vec<String> = watched
        .timeline
        .iter()
        .map(|kb| format!("{:.0}", *kb as f64 / 1024.0))
        .collect();
    println!("\nRSS MiB at each tenth of the run: {}", steps.join(", "));
}

/// RSS and fd growth after warm-up, each within its bound.
fn growth_checks(warm: Usage, at_end: Option<Usage>) -> Vec<(bool, String)> {
    let show = |u: Usage| format!("{:.1} MiB RSS, {} fds", u.rss_kb as f64 / 1024.0, u.fds);
    let Some(end) = at_end else {
        return vec![(false, "foldgate's usage readable at the end".into())];
    };
    vec![
        (
            end.rss_kb <= warm.rss_kb + RSS_GROWTH_BOUND_KB,
            format!(
                "RSS growth after warm-up {:+.1} MiB (bound {} MiB): {} -> {}",
                (end.rss_kb as f64 - warm.rss_kb as f64) / 1024.0,
                RSS_GROWTH_BOUND_KB / 1024,
                show(warm),
                show(end)
            ),
        ),
        (
            end.fds <= warm.fds + FD_GROWTH_BOUND,
            format!(
                "fd growth after warm-up {:+} (bound {FD_GROWTH_BOUND})",
                end.fds as i64 - warm.fds as i64
            ),
        ),
    ]
}

/// Polls `/foldgate/health` until it answers 200 or `within` passes.
async fn healthy(base: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Ok(mut stream)) = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(base.trim_start_matches("http://")),
        )
        .await
        {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let req = b"GET /foldgate/health HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n\r\n";
            let mut head = [0u8; 12];
            if stream.write_all(req).await.is_ok()
                && tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut head))
                    .await
                    .is_ok_and(|r| r.is_ok())
                && head.ends_with(b"200")
            {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// SIGTERM, then waits up to `within`: (exited with status 0, time taken).
async fn stop(child: &mut Child, within: Duration) -> Option<(bool, Duration)> {
    let started = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .ok()?;
    while started.elapsed() < within {
        if let Ok(Some(status)) = child.try_wait() {
            return Some((status.success(), started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some((false, started.elapsed()))
}

/// One line of where memory is at a tenth of the run: RSS, the caches'
/// charged bytes and, from a `heap-stats` build, the live heap bytes.
async fn memory_line(base: &str, at: Duration, rss_kb: u64) {
    let text = tiers::metrics(base).await.unwrap_or_default();
    let mib = |name: &str| tiers::value(&text, name) as f64 / (1024.0 * 1024.0);
    let heap = if text.contains("foldgate_heap_live_bytes") {
        format!(", live heap {:.1}", mib("foldgate_heap_live_bytes"))
    } else {
        String::new()
    };
    println!(
        "soak: {:.0} s: RSS {:.1} MiB, token-count cache {:.1}, fold-state cache {:.1}, stub cache {:.1}, turn recorder {:.1}, archived stubs remembered {}{heap}",
        at.as_secs_f64(),
        rss_kb as f64 / 1024.0,
        mib("foldgate_cache_bytes{cache=\"token_counts\"}"),
        mib("foldgate_cache_bytes{cache=\"fold_states\"}"),
        mib("foldgate_cache_bytes{cache=\"stubs\"}"),
        mib("foldgate_cache_bytes{cache=\"turns\"}"),
        tiers::value(&text, "foldgate_archive_remembered_stubs"),
    );
}
