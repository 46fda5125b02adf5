//! Word lists the extractor consults. Entries are lower-case and matched
//! ASCII-case-insensitively unless a list says otherwise.

/// Whether `word` is in `list` (sorted, lower-case), ignoring ASCII case.
pub(super) fn is_in(list: &[&str], word: &str) -> bool {
    list.binary_search_by(|w| {
        let lower = word.bytes().map(|c| c.to_ascii_lowercase());
        w.bytes().cmp(lower)
    })
    .is_ok()
}

/// Commands that make a line a shell command line (matched case-sensitively:
/// a capitalised first word is prose).
#[rustfmt::skip]
pub(super) const COMMANDS: &[&str] = &[
    "apt", "apt-get", "awk", "aws", "az", "brew", "bun", "cargo", "cat", "cd", "chmod", "chown",
    "clang", "cmake", "cp", "curl", "deno", "df", "dig", "dnf", "docker", "docker-compose", "du",
    "echo", "env", "export", "find", "gcc", "gcloud", "git", "go", "gradle", "grep", "head", "helm",
    "javac", "journalctl", "jq", "kill", "killall", "kubectl", "less", "ln", "ls", "make", "mkdir",
    "mv", "mvn", "mysql", "nano", "nc", "node", "npm", "npx", "openssl", "ping", "pip", "pip3",
    "pkill", "pnpm", "podman", "poetry", "ps", "psql", "pytest", "python", "python3", "redis-cli",
    "rg", "rm", "rsync", "ruff", "rustc", "rustup", "scp", "sed", "source", "sqlite3", "ssh",
    "sudo", "systemctl", "tail", "tar", "tee", "terraform", "touch", "unzip", "uv", "vim", "wget",
    "xargs", "yarn", "yum",
];

/// Second words that make a line starting with a command word prose
/// ("make sure…", "git is…", "find out…").
#[rustfmt::skip]
pub(super) const PROSE_AFTER_COMMAND: &[&str] = &[
    "a", "again", "ahead", "all", "also", "an", "and", "any", "are", "as", "at", "away", "back",
    "base", "be", "because", "been", "but", "can", "could", "end", "for", "her", "him", "home",
    "how", "if", "in", "into", "is", "it", "its", "just", "less", "like", "may", "me", "might",
    "more", "must", "my", "no", "not", "of", "on", "only", "or", "our", "out", "over", "sense",
    "should", "so", "some", "sure", "than", "that", "the", "their", "them", "then", "these", "this",
    "those", "through", "to", "too", "us", "was", "were", "what", "when", "which", "while", "who",
    "why", "will", "with", "would", "yes", "you", "your",
];

/// File extensions that make a bare `name.ext` a file name (case-sensitive).
#[rustfmt::skip]
pub(super) const EXTENSIONS: &[&str] = &[
    "bash", "bat", "c", "cc", "cfg", "cjs", "conf", "cpp", "crt", "cs", "css", "csv", "db",
    "dockerfile", "env", "erl", "ex", "exs", "gif", "go", "gradle", "gz", "h", "hpp", "hs", "html",
    "ini", "ipynb", "java", "jpeg", "jpg", "js", "json", "jsonl", "jsx", "kt", "lock", "log", "lua",
    "md", "mjs", "mk", "ml", "nix", "parquet", "pdf", "pem", "php", "pl", "png", "proto", "ps1",
    "py", "pyi", "rb", "rs", "sass", "scala", "scss", "service", "sh", "sql", "sqlite", "svelte",
    "svg", "swift", "tar", "tf", "tfvars", "tgz", "toml", "ts", "tsx", "txt", "vue", "wasm", "xml",
    "yaml", "yml", "zig", "zip", "zsh",
];

/// File names without an extension that are still clearly files.
#[rustfmt::skip]
pub(super) const SPECIAL_FILES: &[&str] = &[
    "Dockerfile", "Gemfile", "Justfile", "Makefile", "Procfile", "Rakefile", "Vagrantfile",
];

/// Dotfiles worth naming (`.env.local` style names are accepted separately).
#[rustfmt::skip]
pub(super) const DOTFILES: &[&str] = &[
    ".bashrc", ".dockerignore", ".editorconfig", ".env", ".envrc", ".gitattributes", ".gitignore",
    ".gitmodules", ".npmrc", ".profile", ".zshrc",
];

/// `name.js` words that are frameworks, not files.
#[rustfmt::skip]
pub(super) const JS_FRAMEWORKS: &[&str] = &[
    "angular", "backbone", "chart", "d3", "ember", "express", "next", "node", "nuxt", "react",
    "socket", "three", "vue",
];

/// Last labels that make a dotted name a host.
#[rustfmt::skip]
pub(super) const TLDS: &[&str] = &[
    "ai", "app", "arpa", "au", "be", "biz", "blog", "br", "ca", "ch", "cloud", "cluster", "cn",
    "co", "com", "corp", "cz", "de", "dev", "dk", "edu", "es", "eu", "example", "fi", "fr", "gov",
    "hk", "home", "ie", "info", "internal", "invalid", "io", "jp", "kr", "lan", "local", "mil",
    "mx", "net", "nl", "nz", "online", "org", "page", "pl", "pt", "ru", "se", "sg", "site", "store",
    "svc", "tech", "test", "tr", "tw", "ua", "uk", "us", "xyz", "za",
];

/// Last labels that are also common member names (`self.app`, `req.test`):
/// a host ending in one needs three labels or a port.
#[rustfmt::skip]
pub(super) const AMBIGUOUS_TLDS: &[&str] = &[
    "app", "blog", "cloud", "cluster", "corp", "dev", "example", "home", "info", "internal", "lan",
    "local", "online", "page", "site", "store", "svc", "tech", "test",
];

/// Ports below 1000 that make `name:port` a host.
pub(super) const WELL_KNOWN_PORTS: &[u64] =
    &[21, 22, 25, 53, 80, 110, 143, 389, 443, 636, 993, 995];

/// Prefixes of `ABC-123` tokens that are standards, not tickets.
pub(super) const TICKET_EXCLUDE: &[&str] = &["aes", "covid", "md", "sha", "utf"];

/// Letters after a number that make it an ordinal or a clock time
/// (`21st`, `10am`), not an identifier.
pub(super) const NUMBER_SUFFIXES: &[&str] = &["am", "nd", "pm", "rd", "st", "th"];

/// Words of letters and digits that name a standard, a format or an
/// architecture rather than one thing of the conversation.
#[rustfmt::skip]
pub(super) const TECH_WORDS: &[&str] = &[
    "a11y", "aarch64", "amd64", "arm64", "base32", "base64", "bf16", "blake3", "crc32", "f16",
    "f32", "f64", "float16", "float32", "float64", "fp16", "fp32", "fp8", "h264", "h265", "http1",
    "http2", "http3", "i128", "i16", "i18n", "i32", "i386", "i64", "i686", "int16", "int32",
    "int64", "int8", "ipv4", "ipv6", "k8s", "l10n", "md5", "mp3", "mp4", "oauth2", "s390x",
    "sha1", "sha224", "sha256", "sha384", "sha512", "u128", "u16", "u32", "u64", "uint16",
    "uint32", "uint64", "uint8", "usize", "utf16", "utf32", "utf8", "win32", "win64", "x64",
    "x86", "x86_64",
];

/// Units written right after a number (`30s`, `512MB`); case-sensitive.
#[rustfmt::skip]
pub(super) const ATTACHED_UNITS: &[&str] = &[
    "B", "G", "GB", "GHz", "Gb", "GiB", "Hz", "K", "KB", "Kb", "KiB", "M", "MB", "MHz", "Mb", "MiB",
    "PB", "TB", "TiB", "d", "fps", "gb", "h", "hr", "hrs", "k", "kB", "kHz", "kb", "m", "mb", "min",
    "mins", "ms", "ns", "px", "qps", "rpm", "rps", "s", "sec", "secs", "us", "w", "x", "µs",
];

/// Words after a number that make it a quantity ("512 MB", "3 retries").
#[rustfmt::skip]
pub(super) const UNIT_WORDS: &[&str] = &[
    "attempt", "attempts", "byte", "bytes", "call", "calls", "char", "character", "characters",
    "chars", "commit", "commits", "connection", "connections", "core", "cores", "cpus", "day",
    "days", "dollars", "entries", "entry", "epoch", "epochs", "error", "errors", "eur", "failed",
    "file", "files", "fps", "gb", "gb/s", "ghz", "gib", "gpu", "gpus", "hour", "hours", "hr", "hrs",
    "hz", "instance", "instances", "item", "items", "iteration", "iterations", "job", "jobs", "kb",
    "key", "keys", "khz", "kib", "line", "lines", "mb", "mb/s", "message", "messages", "mhz", "mib",
    "min", "mins", "minute", "minutes", "month", "months", "ms", "node", "nodes", "ns", "ops/s",
    "partition", "partitions", "passed", "percent", "pod", "pods", "px", "qps", "queries", "query",
    "record", "records", "replica", "replicas", "req/s", "request", "requests", "retries", "retry",
    "row", "rows", "rpm", "rps", "sample", "samples", "sec", "second", "seconds", "secs", "shard",
    "shards", "step", "steps", "task", "tasks", "tb", "test", "tests", "thread", "threads", "tib",
    "tok/s", "token", "tokens", "tokens/s", "us", "usd", "user", "users", "vcpus", "warning",
    "warnings", "week", "weeks", "worker", "workers", "year", "years",
];

/// Words before a number that give even a small number or a year its
/// meaning ("line 7", "port 2049").
#[rustfmt::skip]
pub(super) const STRONG_NOUNS: &[&str] = &[
    "attempt", "batch", "case", "chapter", "code", "col", "column", "concurrency", "count", "day",
    "epoch", "errno", "error", "exit", "gid", "id", "index", "issue", "item", "level", "limit",
    "line", "max", "min", "no", "node", "num", "number", "option", "page", "phase", "pid", "port",
    "pr", "priority", "rank", "release", "replica", "replicas", "retries", "retry", "row",
    "section", "shard", "signal", "size", "sprint", "stage", "status", "step", "threads", "ticket",
    "tier", "timeout", "uid", "version", "week", "worker", "workers",
];

/// Words before a number that carry no meaning ("in 2024", "of 12").
#[rustfmt::skip]
pub(super) const STOP: &[&str] = &[
    "a", "about", "above", "across", "after", "again", "against", "all", "almost", "along", "also",
    "among", "an", "and", "another", "any", "approx", "approximately", "are", "around", "as", "at",
    "be", "been", "before", "behind", "below", "beside", "between", "beyond", "both", "but", "by",
    "can", "could", "did", "do", "does", "down", "during", "each", "either", "every", "few", "for",
    "from", "get", "got", "had", "has", "have", "he", "her", "here", "his", "how", "i", "if", "in",
    "inside", "into", "is", "it", "its", "just", "less", "like", "made", "make", "many", "may",
    "me", "might", "more", "most", "much", "must", "my", "near", "nearly", "no", "not", "now",
    "of", "off", "on", "once", "only", "onto", "or", "other", "our", "out", "outside", "over",
    "per", "same", "shall", "she", "should", "since", "so", "some", "such", "take", "takes",
    "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "through", "till", "to", "today", "too", "took", "toward", "towards", "under", "until", "up",
    "us", "very", "via", "vs", "was", "we", "were", "what", "when", "where", "which", "while",
    "who", "whom", "why", "will", "with", "within", "without", "would", "yet", "you", "your",
];

/// Lower-case words that name a product before its version ("python 3.11").
#[rustfmt::skip]
pub(super) const PRODUCTS: &[&str] = &[
    "alpine", "android", "angular", "bun", "cargo", "centos", "chrome", "clang", "debian", "deno",
    "django", "docker", "electron", "fastapi", "fedora", "firefox", "flask", "gcc", "go", "golang",
    "helm", "ios", "java", "jdk", "kafka", "kernel", "kubectl", "kubernetes", "linux", "llvm",
    "macos", "mariadb", "mongo", "mongodb", "mysql", "nginx", "node", "nodejs", "npm", "openjdk",
    "openssl", "perl", "php", "pip", "pnpm", "postgres", "postgresql", "psql", "python", "python3",
    "rails", "react", "redis", "release", "rhel", "ruby", "rust", "rustc", "safari", "sqlite",
    "terraform", "typescript", "ubuntu", "ver", "version", "vue", "windows", "yarn",
];

/// Capitalised words before a dotted number that are not products
/// ("Section 4.1", "Figure 2.3").
#[rustfmt::skip]
pub(super) const NOT_PRODUCT: &[&str] = &[
    "appendix", "article", "chapter", "clause", "eq", "equation", "fig", "figure", "item", "level",
    "line", "note", "page", "part", "phase", "rule", "section", "stage", "step", "table",
];

/// Capitalised words that start sentences rather than names; a run of
/// capitalised words loses these from its front ("The Orchid Project").
#[rustfmt::skip]
pub(super) const STARTERS: &[&str] = &[
    "a", "add", "after", "all", "also", "although", "an", "and", "are", "as", "at", "because",
    "before", "best", "both", "but", "by", "can", "check", "could", "create", "dear", "delete",
    "did", "do", "does", "each", "either", "every", "finally", "first", "fix", "for", "from", "get",
    "he", "hello", "her", "here", "hey", "hi", "his", "how", "however", "i", "if", "in", "instead",
    "is", "it", "its", "just", "last", "let", "lets", "make", "maybe", "move", "my", "neither",
    "never", "next", "no", "not", "note", "now", "of", "ok", "okay", "on", "once", "open", "or",
    "our", "please", "regards", "remove", "rename", "run", "second", "see", "set", "she", "should",
    "since", "so", "some", "start", "still", "stop", "sure", "thank", "thanks", "that", "the",
    "their", "then", "there", "these", "they", "third", "this", "those", "to", "today", "tomorrow",
    "try", "until", "update", "use", "was", "we", "well", "were", "what", "when", "where", "which",
    "while", "who", "why", "will", "with", "would", "yes", "yesterday", "yet", "you", "your",
];

/// Capitalised words that are never a name on their own.
#[rustfmt::skip]
pub(super) const NOT_NAME: &[&str] = &[
    "api", "april", "assistant", "august", "debug", "december", "english", "error", "false",
    "february", "friday", "http", "info", "january", "json", "july", "june", "march", "may",
    "monday", "nil", "none", "november", "null", "october", "saturday", "september", "summary",
    "sunday", "system", "thursday", "todo", "tool", "true", "tuesday", "url", "user", "warning",
    "wednesday",
];
