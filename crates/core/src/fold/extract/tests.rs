//! Extraction on real-looking messages: which specifics come out, and which
//! look-alikes must not.

use super::*;
use serde_json::json;

/// (name, text, values that must come out, values that must not).
const CASES: &[(&str, &str, &[&str], &[&str])] = &[
    (
        "shell session",
        "$ cargo test --lib\n   Compiling foldgate v0.1.0 (/work/main)\n    Finished `test` profile \
         [unoptimized + debuginfo] target(s) in 3.21s\n     Running unittests src/lib.rs \
         (target/debug/deps/foldgate-1a2b3c4d5e6f7a8b)\nrunning 42 tests\ntest \
         fold::cut::tests::valid_cut ... ok\ntest result: ok. 42 passed; 0 failed; 0 ignored; \
         finished in 0.07s",
        &[
            "cargo test --lib",
            "v0.1.0",
            "/work/main",
            "3.21s",
            "src/lib.rs",
            "target/debug/deps/foldgate-1a2b3c4d5e6f7a8b",
            "42 tests",
            "fold::cut::tests::valid_cut",
            "42 passed",
            "0.07s",
        ],
        &[
            "--lib",
            "Compiling",
            "Running",
            "running",
            "ok",
            "0 ignored",
        ],
    ),
    (
        "python stack trace",
        "Traceback (most recent call last):\n  File \"/app/x.py\", line 42, in handle\n    \
         result = process(payload)\n  File \"/app/lib/db.py\", line 7, in connect\n    raise \
         ConnectionError(f\"cannot reach {host}:{port}\")\nConnectionError: cannot reach \
         db-03.internal.example:5433",
        &[
            "/app/x.py",
            "line 42",
            "/app/lib/db.py",
            "line 7",
            "ConnectionError",
            "db-03.internal.example:5433",
        ],
        &["Traceback", "File", "handle", "result"],
    ),
    (
        "unified diff",
        "diff --git a/src/lib.rs b/src/lib.rs\nindex 3f2a1b9..8c4d5e6 100644\n--- a/src/lib.rs\n\
         +++ b/src/lib.rs\n@@ -10,7 +10,8 @@ pub fn fold(state: &FoldState) -> Result<()> {\n-    \
         let budget = compute_budget(&state);\n+    let budget = compute_budget_v2(&state, MAX_TOKENS);",
        &[
            "src/lib.rs",
            "3f2a1b9",
            "8c4d5e6",
            "FoldState",
            "compute_budget",
            "compute_budget_v2",
            "MAX_TOKENS",
        ],
        &[
            "a/src/lib.rs",
            "b/src/lib.rs",
            "--git",
            "10,7",
            "Result",
            "100644",
        ],
    ),
    (
        "json tool output",
        r#"{"id": "9f1c2e7a-4b3d-4e8f-9a6b-1c2d3e4f5a6b", "port": 5433, "host": "db-03.internal.example", "status": "Active", "url": "https://api.example.com/v1/items?limit=50&page=2"}"#,
        &[
            "9f1c2e7a-4b3d-4e8f-9a6b-1c2d3e4f5a6b",
            "\"port\": 5433",
            "db-03.internal.example",
            "https://api.example.com/v1/items?limit=50&page=2",
        ],
        &["Active", "api.example.com", "5433"],
    ),
    (
        "prose with planted facts",
        "The project is called ORCHID-7. The database runs PostgreSQL 15.4 on db-03.internal.example \
         port 5433; Dana Whitfield owns it; we ship v2.14.1.",
        &[
            "ORCHID-7",
            "PostgreSQL 15.4",
            "db-03.internal.example",
            "port 5433",
            "Dana Whitfield",
            "v2.14.1",
        ],
        &[
            "The",
            "the",
            "project",
            "15.4",
            "PostgreSQL",
            "5433",
            "v2.14.1.",
        ],
    ),
    (
        "paths and look-alikes",
        "Use 1/2 of the pool and/or the cache; see /etc/nginx/nginx.conf and \
         ~/.config/foldgate/config.toml, mail dana@example.com or read https://example.com/docs). \
         Cargo.toml and main.py too, but not Node.js or e.g. this.",
        &[
            "/etc/nginx/nginx.conf",
            "~/.config/foldgate/config.toml",
            "dana@example.com",
            "https://example.com/docs",
            "Cargo.toml",
            "main.py",
        ],
        &[
            "1/2",
            "and/or",
            "Use",
            "Node.js",
            "e.g",
            "example.com",
            "https://example.com/docs)",
        ],
    ),
    (
        "markdown with inline code and a fence",
        "Run `cargo test --lib` then check `FoldState` in `src/fold/state.rs`.\n\n```bash\ngit \
         checkout -b fix/ledger\nexport DATABASE_URL=postgres://app:secret@db-03.internal.example:5432/orders\n```",
        &[
            "cargo test --lib",
            "FoldState",
            "src/fold/state.rs",
            "git checkout -b fix/ledger",
            "export DATABASE_URL=postgres://app:secret@db-03.internal.example:5432/orders",
        ],
        &["Run", "--lib", "DATABASE_URL", "`FoldState`"],
    ),
    (
        "numbers and units",
        "The cache holds 512 MB, times out after 30s (250ms p99), gave up after 3 retries and \
         costs $1,200 a month at 42% load since 2024; it listed 2 of 5 items in section 1.",
        &[
            "512 MB",
            "30s",
            "250ms",
            "3 retries",
            "$1,200",
            "42%",
            "5 items",
            "2024",
        ],
        &["since 2024", "2", "of 5", "512"],
    ),
    (
        "ids and hosts",
        "Deploy X9K2P to 10.0.0.12 and localhost:8080 (JIRA-4521, CVE-2024-1234); commit a1b2c3d \
         fixed snake_case_with_digits_2 on api.example.com with `--dry-run` and obj.method() too.",
        &[
            "X9K2P",
            "10.0.0.12",
            "localhost:8080",
            "JIRA-4521",
            "CVE-2024-1234",
            "a1b2c3d",
            "snake_case_with_digits_2",
            "api.example.com",
            "--dry-run",
            "obj.method()",
        ],
        &["Deploy", "UTF-8"],
    ),
    (
        "windows paths and urls",
        "Open C:\\Users\\dana\\app.log, then clone git@github.com:org/repo.git and ssh \
         deploy@10.0.0.12 before redis://cache:6379/0 is up.",
        &[
            "C:\\Users\\dana\\app.log",
            "git@github.com:org/repo.git",
            "deploy@10.0.0.12",
            "redis://cache:6379/0",
        ],
        &["Open", "github.com", "10.0.0.12"],
    ),
    (
        "names",
        "Yesterday I met Dana Whitfield and Raj from Project Orchid on Monday. I said OK.",
        &["Dana Whitfield", "Raj", "Project Orchid"],
        &["Yesterday", "I", "Monday", "OK", "Project"],
    ),
];

#[test]
fn real_looking_messages() {
    for (name, text, want, not) in CASES {
        let values: Vec<String> = extract(text).into_iter().map(|a| a.value).collect();
        for w in *want {
            assert!(
                values.iter().any(|v| v == w),
                "{name}: missing {w:?} in {values:?}"
            );
        }
        for n in *not {
            assert!(
                !values.iter().any(|v| v == n),
                "{name}: unexpected {n:?} in {values:?}"
            );
        }
    }
}

#[test]
fn kinds() {
    let kind = |text: &str, value: &str| {
        extract(text)
            .into_iter()
            .find(|a| a.value == value)
            .map(|a| a.kind)
    };
    assert_eq!(
        kind("see src/fold/cut.rs now", "src/fold/cut.rs"),
        Some(Kind::Path)
    );
    assert_eq!(kind("edit main.rs now", "main.rs"), Some(Kind::Path));
    assert_eq!(
        kind("on api.example.com now", "api.example.com"),
        Some(Kind::Host)
    );
    assert_eq!(
        kind("mail dana@example.com now", "dana@example.com"),
        Some(Kind::Email)
    );
    assert_eq!(kind("we ship v2.14.1 now", "v2.14.1"), Some(Kind::Version));
    assert_eq!(
        kind("it is 1.0.0-beta.2 now", "1.0.0-beta.2"),
        Some(Kind::Version)
    );
    assert_eq!(
        kind("needs Python 3.11 now", "Python 3.11"),
        Some(Kind::Version)
    );
    assert_eq!(kind("fixes ABC-123 now", "ABC-123"), Some(Kind::Id));
    assert_eq!(kind("run `ls -la` now", "ls -la"), Some(Kind::Code));
    assert_eq!(
        kind("calls fold_state now", "fold_state"),
        Some(Kind::Symbol)
    );
    assert_eq!(kind("uses HashMap now", "HashMap"), Some(Kind::Symbol));
    assert_eq!(kind("set RUST_LOG now", "RUST_LOG"), Some(Kind::Symbol));
    assert_eq!(kind("call fn_name() now", "fn_name()"), Some(Kind::Symbol));
    assert_eq!(
        kind("uses std::io::Read now", "std::io::Read"),
        Some(Kind::Symbol)
    );
    assert_eq!(kind("the port 5433 now", "port 5433"), Some(Kind::Number));
    assert_eq!(
        kind("ask Dana Whitfield now", "Dana Whitfield"),
        Some(Kind::Name)
    );
    assert_eq!(
        kind("https://x.example.com/a?b=1", "https://x.example.com/a?b=1"),
        Some(Kind::Url)
    );
}

#[test]
fn each_value_once_in_order() {
    let found = extract("a /tmp/x.log b JIRA-1 c /tmp/x.log d JIRA-1 e Cargo.toml");
    let values: Vec<&str> = found.iter().map(|a| a.value.as_str()).collect();
    assert_eq!(values, ["/tmp/x.log", "JIRA-1", "Cargo.toml"]);
}

#[test]
fn context_is_short_and_one_line() {
    let long = format!(
        "{} the config lives at /etc/foldgate/config.toml and is reloaded on SIGHUP. {}",
        "word ".repeat(40),
        "more ".repeat(40)
    );
    let text = format!("first line\r\n{long}\n\tsecond\u{2028}line src/a.rs");
    for a in extract(&text) {
        assert!(a.context.chars().count() <= CONTEXT_CHARS + 2, "{a:?}");
        assert!(!a.context.contains(['\n', '\r', '\t', '\u{2028}']), "{a:?}");
    }
    let config = extract(&long)
        .into_iter()
        .find(|a| a.value == "/etc/foldgate/config.toml");
    let context = config.map(|a| a.context).unwrap_or_default();
    assert!(context.starts_with('…'), "{context}");
    assert!(
        context.contains("config lives at /etc/foldgate/config.toml"),
        "{context}"
    );
    assert!(context.ends_with("SIGHUP."), "{context}");
}

#[test]
fn context_that_repeats_the_value_is_dropped() {
    let found = extract("$ cargo build --release\nsrc/lib.rs\nsee src/main.rs for the entry point");
    let contexts: Vec<&str> = found.iter().map(|a| a.context.as_str()).collect();
    assert_eq!(contexts, ["", "", "see src/main.rs for the entry point"]);
}

#[test]
fn message_text_reads_content_and_calls() {
    let m = json!({
        "role": "assistant",
        "content": [{"type": "text", "text": "part one"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "part two"}],
        "tool_calls": [{"id": "call_abc123", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"/etc/hosts\"}"}}],
        "function_call": {"name": "legacy_fn", "arguments": {"q": 1}}
    });
    assert_eq!(
        message_text(&m),
        "part one\npart two\nread_file\n/etc/hosts\nlegacy_fn\nq 1"
    );
    // A command argument is a line of its own, so it is kept whole.
    let shell = json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "shell", "arguments": "{\"cmd\":\"cargo test -p crate_7\",\"timeout\":30}"}}]});
    let values: Vec<String> = extract(&message_text(&shell))
        .into_iter()
        .map(|a| a.value)
        .collect();
    assert!(
        values.contains(&"cargo test -p crate_7".to_owned()),
        "{values:?}"
    );
    // Arguments that are not JSON stay as they are.
    let raw = json!({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "ls -la /tmp"}}]});
    assert_eq!(message_text(&raw), "f\nls -la /tmp");
    let values: Vec<String> = extract(&message_text(&m))
        .into_iter()
        .map(|a| a.value)
        .collect();
    assert!(values.contains(&"/etc/hosts".to_owned()), "{values:?}");
    assert!(!values.iter().any(|v| v.contains("call_")), "{values:?}");
    assert_eq!(
        message_text(&json!({"role": "user", "content": "hi"})),
        "hi"
    );
    assert_eq!(message_text(&json!({"role": "user", "content": null})), "");
}

#[test]
fn identifiers_leave_out_names_and_small_numbers() {
    let ids: Vec<String> =
        extract("Dana Whitfield set port 5433 and 3 retries on db.example.com at 1.5s")
            .into_iter()
            .filter(is_identifier)
            .map(|a| a.value)
            .collect();
    assert_eq!(ids, ["port 5433", "db.example.com", "1.5s"]);
}

#[test]
fn odd_input_never_panics() {
    let inputs = [
        "",
        "`",
        "```",
        "`` ` ``` `",
        "$ ",
        "# ",
        "é",
        "🦀 src/🦀.rs",
        "a\u{2028}b",
        "::",
        "://",
        "a://",
        "@",
        "@@",
        "C:\\",
        "\\\\",
        "#",
        "$",
        "--",
        "-",
        "+",
        "v",
        "v.",
        "1.",
        "1,",
        "#1,000",
        "$.5",
        "x()",
        "()",
        "(",
        ")",
        "\"port\": \"",
        "a/",
        "/",
        "~/",
        "..",
        "../..",
        "日本語のテキスト /パス/ファイル.txt",
        "\u{0}\u{1}",
        "Ünïcödé Ñame Here",
        "ß://ü",
        "http://",
        "https://é.example/ü?q=ö).",
        "a@b@c",
        "x:99999",
        "[](){}<>",
    ];
    for input in inputs {
        let _ = extract(input);
        for cut in 0..input.len() {
            if let (Some(a), Some(b)) = (input.get(..cut), input.get(cut..)) {
                let _ = extract(&format!("{b} {a}\n{a}`{b}"));
            }
        }
    }
    let _ = extract(&"x".repeat(100_000));
    let _ = extract(&"`".repeat(10_000));
    let _ = extract(&"ab`` ".repeat(5_000));
}

#[test]
fn word_lists_are_sorted_lower_case() {
    use super::words::*;
    let lists = [
        AMBIGUOUS_TLDS,
        DOTFILES,
        JS_FRAMEWORKS,
        NOT_NAME,
        NOT_PRODUCT,
        NUMBER_SUFFIXES,
        PRODUCTS,
        PROSE_AFTER_COMMAND,
        STARTERS,
        STOP,
        STRONG_NOUNS,
        TECH_WORDS,
        TICKET_EXCLUDE,
        TLDS,
        UNIT_WORDS,
    ];
    for list in lists {
        assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        assert!(list.iter().all(|w| *w == w.to_lowercase()), "{list:?}");
        assert!(
            list.iter()
                .all(|w| is_in(list, w) && is_in(list, &w.to_uppercase()))
        );
    }
    assert!(!is_in(STOP, "zzz") && !is_in(STOP, ""));
    // Searched case-sensitively with `binary_search`.
    for list in [COMMANDS, EXTENSIONS, SPECIAL_FILES, ATTACHED_UNITS] {
        assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
    }
}
