//! The `foldgate` command line.

use clap::{Parser, Subcommand};

/// mimalloc: the request path allocates and frees a JSON tree per chat
/// request, and glibc malloc showed up at ~10% of CPU under load.
#[cfg(not(feature = "heap-stats"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(feature = "heap-stats")]
#[global_allocator]
static ALLOC: foldgate::heap::Counting<mimalloc::MiMalloc> =
    foldgate::heap::Counting(mimalloc::MiMalloc);
use foldgate::config::{Config, LogConfig, LogFormat};
use foldgate::log_writer::LogWriter;
use foldgate::telemetry::Telemetry;
use std::path::PathBuf;
use std::process::ExitCode;

/// A transparent OpenAI-compatible proxy that folds long conversations into
/// a summary before they overflow the model's context window.
#[derive(Parser)]
#[command(name = "foldgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Serve {
        /// Configuration file (default: ./config.toml if present, else built-in defaults).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Load and validate the configuration, then print it with secrets masked.
    CheckConfig {
        /// Configuration file (default: ./config.toml if present).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Estimate a request's prompt tokens as the proxy counts them, and
    /// where a fold would trigger; reads the JSON body on stdin. Windows
    /// the proxy learned and kept in the configured state store count.
    Estimate {
        /// Model to count for (default: the body's `model`, or the path's
        /// for Gemini).
        #[arg(long, short, default_value = "")]
        model: String,
        /// The body's API, by name (an unknown name lists them; default:
        /// the path's, else judged by the body's shape).
        #[arg(long, value_parser = foldgate::estimate::parse_api)]
        api: Option<foldgate::api::Api>,
        /// The URL path the client posts the body to, e.g.
        /// `/v1beta/models/gemini-2.5-flash:generateContent` (names the API,
        /// and Gemini's model).
        #[arg(long)]
        path: Option<String>,
        /// Configuration file (default: ./config.toml if present).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Replay a recorded conversation through the fold policy, with a mock
    /// summarizer and no network: per turn, tokens in and out and where
    /// folds happen. FILE holds one chat request body per line (JSONL).
    Replay {
        /// The recording: one request body per line, as the client sent it.
        file: PathBuf,
        /// Model to plan for (default: each body's `model`).
        #[arg(long, short, default_value = "")]
        model: String,
        /// Configuration file (default: ./config.toml if present).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Delete stored fold states unused, and audit rows and archived messages made, longer ago than an age (SQLite).
    Prune {
        /// Age, e.g. `30d`, `12h`.
        #[arg(long, value_parser = humantime_serde::re::humantime::parse_duration)]
        older_than: std::time::Duration,
        /// Configuration file (default: ./config.toml if present).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let code = run(Cli::parse());
    flush_log();
    code
}

fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve { config } => serve(config),
        Command::Prune { older_than, config } => prune(config, older_than),
        Command::CheckConfig { config } => check_config(config),
        Command::Estimate {
            model,
            api,
            path,
            config,
        } => {
            let config = match load(config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let mut body = Vec::new();
            if let Err(e) = std::io::Read::read_to_end(&mut std::io::stdin(), &mut body) {
                return fail(&e);
            }
            let learned = learned_windows(&config);
            let given = foldgate::estimate::Given {
                api,
                model: &model,
                path: path.as_deref(),
                learned: &learned,
            };
            match foldgate::estimate::report(&config, &given, &body) {
                Ok(report) => out(&report.to_string()),
                Err(e) => fail(&e),
            }
        }
        Command::Replay {
            file,
            model,
            config,
        } => {
            let config = match load(config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match std::fs::read_to_string(&file) {
                Ok(text) => match foldgate::replay::run(&config, &model, &text) {
                    Ok(report) => out(&report.to_string()),
                    Err(e) => fail(&format!("{}: {e}", file.display())),
                },
                Err(e) => fail(&format!("{}: {e}", file.display())),
            }
        }
    }
}

/// Loads the configuration, then starts logging in its format.
fn load(path: Option<PathBuf>) -> Result<Config, ExitCode> {
    let config = Config::load(path.as_deref()).map_err(|e| fail(&e))?;
    init_logging(&config.log);
    Ok(config)
}

/// Loads the configuration, then starts logging and, when `[telemetry]`
/// names an endpoint, traces.
fn load_serving(path: Option<PathBuf>) -> Result<(Config, Option<Telemetry>), ExitCode> {
    let config = load(path)?;
    match foldgate::telemetry::start(&config.telemetry) {
        Ok(telemetry) => Ok((config, telemetry)),
        Err(e) => Err(fail(&e)),
    }
}

/// The windows the proxy learned and kept in the configured state store;
/// none (and a warning) when the store cannot be read: the estimate goes
/// on with the windows it knows otherwise.
fn learned_windows(config: &Config) -> Vec<(String, u32)> {
    let read = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt
            .block_on(foldgate::state::learned::windows(&config.state))
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    read.unwrap_or_else(|error| {
        tracing::warn!(
            error,
            "learned context windows not read from the state store"
        );
        Vec::new()
    })
}

fn serve(path: Option<PathBuf>) -> ExitCode {
    let (config, telemetry) = match load_serving(path) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let code = serve_with(config);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    code
}

fn serve_with(config: Config) -> ExitCode {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    // Unset (0), tokio's own default: `TOKIO_WORKER_THREADS`, else a worker per core.
    if config.server.worker_threads > 0 {
        builder.worker_threads(config.server.worker_threads);
    }
    if config.server.pin_workers {
        builder.on_thread_start(foldgate::affinity::pinning());
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    match runtime.block_on(foldgate::server::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Prints the effective configuration, defaults included, after a header
/// naming the file it came from and any warning. Only keys `config.toml`
/// documents exist.
fn check_config(path: Option<PathBuf>) -> ExitCode {
    let config = match load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let unknown = config
        .providers
        .iter()
        .find(|(_, p)| foldgate::api::for_provider(&p.api.0).is_none());
    if let Some((name, p)) = unknown {
        let known = foldgate::api::provider_names().join(", ");
        return fail(&format!(
            "providers.{name}.api = {:?} is not an API foldgate speaks (one of: {known})",
            p.api.0
        ));
    }
    match config.effective_toml() {
        Ok(text) => {
            let mut head = format!(
                "# configuration is valid\n# read from: {} (then FOLDGATE_* environment variables)\n\
                 # effective values, defaults included\n",
                config.source_name()
            );
            for warning in config.key_warnings() {
                head.push_str(&format!("# warning: {warning}\n"));
            }
            if let Some(line) = archive_eviction(&config) {
                head.push_str(&format!("# {line}\n"));
            }
            out(&format!("{head}{text}"))
        }
        Err(e) => fail(&e),
    }
}

/// Whether the archive's Redis may evict archive rows (a `warning: …`),
/// or could not be asked (a `note: …`); nothing without a Redis archive.
fn archive_eviction(config: &foldgate::config::Config) -> Option<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(foldgate::archive::check_redis_eviction(config))
}

fn prune(config: Option<PathBuf>, older_than: std::time::Duration) -> ExitCode {
    let config = match load(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let pruned = foldgate::state::prune(&config.state, older_than).and_then(|p| {
        let archived = foldgate::archive::prune(&config, older_than)?;
        Ok((p, archived))
    });
    match pruned {
        Ok((p, archived)) => out(&format!(
            "pruned {} conversation states and {} fold audit rows from {}\npruned {archived} archived messages",
            p.states,
            p.folds,
            config.state.path.display()
        )),
        Err(e) => fail(&e),
    }
}

/// Prints a command's result. A closed pipe (`foldgate check-config | head`)
/// is not an error worth a panic: the reader has what it wanted.
fn out(text: &str) -> ExitCode {
    use std::io::Write;
    match writeln!(std::io::stdout().lock(), "{text}") {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => fail(&e),
        _ => ExitCode::SUCCESS,
    }
}

fn fail(error: &dyn std::fmt::Display) -> ExitCode {
    flush_log();
    eprintln!("foldgate: {error}");
    ExitCode::FAILURE
}

/// The log, once started: flushed at exit and on a panic.
static LOG: std::sync::OnceLock<LogWriter> = std::sync::OnceLock::new();

/// Starts the log: the `FOLDGATE_LOG` filter (`info` when unset), the
/// writer in the configured format, and a panic hook that flushes it.
fn init_logging(config: &LogConfig) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FOLDGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let writer = LOG.get_or_init(|| LogWriter::stderr(config.flush_interval));
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |panic| {
        flush_log();
        previous(panic);
    }));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer.clone());
    // A second start (none in the binary) keeps the first subscriber.
    let _first = match config.format {
        // One object per line; the request span's fields (its id) included.
        LogFormat::Json => tracing::subscriber::set_global_default(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        ),
        // Colour codes only on a terminal, never in a file or a pipe.
        LogFormat::Text if std::io::IsTerminal::is_terminal(&std::io::stderr()) => {
            tracing::subscriber::set_global_default(builder.with_ansi(true).finish())
        }
        LogFormat::Text => tracing::subscriber::set_global_default(
            builder
                .with_ansi(false)
                .fmt_fields(foldgate::log_format::PlainFields)
                .event_format(foldgate::log_format::PlainText)
                .finish(),
        ),
    };
    if log::set_logger(&LogBridge).is_ok() {
        use tracing_log::AsLog;
        let max = tracing::level_filters::LevelFilter::current().as_log();
        log::set_max_level(max.max(log::LevelFilter::Warn));
    }
}

/// Dependencies' `log` records, as tracing events. The Redis client's
/// warnings and errors (`Failed to connect to node`, a score of them a
/// second while a cluster fails over) go to DEBUG: foldgate tells each
/// outage once itself, at WARN, when it starts and when it ends.
struct LogBridge;

impl log::Log for LogBridge {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let level = if record.target().starts_with("redis") && record.level() <= log::Level::Warn {
            log::Level::Debug
        } else {
            record.level()
        };
        let record = log::Record::builder()
            .args(*record.args())
            .level(level)
            .target(record.target())
            .module_path(record.module_path())
            .file(record.file())
            .line(record.line())
            .build();
        // An event no subscriber takes has nowhere to go.
        let _dropped = tracing_log::format_trace(&record);
    }

    fn flush(&self) {}
}

/// Writes out the log's buffered lines, if logging has started.
fn flush_log() {
    if let Some(log) = LOG.get() {
        // A log that cannot be written has nowhere to say so.
        let _unwritten = log.flush();
    }
}
