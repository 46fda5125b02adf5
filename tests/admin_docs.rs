//! docs/admin.md's admin table, called as written: every row's request,
//! with each credential the table names (none on an open foldgate; none,
//! one of `server.api_keys` and the admin token on one with keys), must
//! answer the table's status, and a 200 the table's shape (every field it
//! lists, arrays by their first item). And examples/sentinel.toml is a
//! configuration foldgate takes.

use crate::common;

use common::convo::{Convo, config, label};
use common::llm::Llm;
use common::{Foldgate, Reply, post_json, send};
use http::Method;
use serde_json::Value;

const KEY: &str = "sk-docs-key";
const ADMIN: &str = "adm-docs-token";
const ID: &str = "docs-conv";

/// One row of the table.
#[derive(Debug)]
struct Row {
    method: Method,
    path: String,
    /// Open, keys without a credential, a key, the admin token.
    statuses: [u16; 4],
    answer: String,
}

fn rows() -> Vec<Row> {
    let doc = std::fs::read_to_string("docs/admin.md").unwrap();
    let rows: Vec<Row> = doc
        .lines()
        .filter(|l| l.starts_with("| `GET /foldgate") || l.starts_with("| `POST /foldgate"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 6, "{l}");
            let (method, path) = cells[0].trim_matches('`').split_once(' ').unwrap();
            let status = |i: usize| cells[i].parse::<u16>().unwrap();
            Row {
                method: method.parse().unwrap(),
                path: path.replace("{id}", ID),
                statuses: [status(1), status(2), status(3), status(4)],
                answer: cells[5].trim_matches('`').to_string(),
            }
        })
        .collect();
    assert!(rows.len() >= 10, "the admin table lost rows: {rows:?}");
    rows
}

/// Every field of `doc` is in `got`, nested objects and first array items
/// alike (a `null` on either side is not looked into).
fn assert_shape(doc: &Value, got: &Value, at: &str) {
    match (doc, got) {
        (Value::Object(doc), Value::Object(got)) => {
            for (k, v) in doc {
                let inner = got
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}: no field `{k}` in {got:?}"));
                assert_shape(v, inner, &format!("{at}.{k}"));
            }
        }
        (Value::Array(doc), Value::Array(got)) => {
            if let (Some(d), Some(g)) = (doc.first(), got.first()) {
                assert_shape(d, g, &format!("{at}[0]"));
            }
        }
        (Value::Object(_) | Value::Array(_), Value::Null) | (Value::Null, _) => {}
        (Value::Object(_) | Value::Array(_), other) => {
            panic!("{at}: the docs say {doc}, the answer holds {other}")
        }
        _ => {}
    }
}

fn check(row: &Row, reply: &Reply, column: usize) {
    let want = row.statuses[column];
    assert_eq!(
        reply.status.as_u16(),
        want,
        "{} {} (column {column}): {}",
        row.method,
        row.path,
        reply.text()
    );
    if want != 200 {
        return;
    }
    let content_type = reply.header("content-type");
    match row.answer.as_str() {
        "OpenMetrics text" => {
            assert!(content_type.contains("openmetrics"), "{content_type}");
            assert!(reply.text().contains("foldgate_requests_total"));
        }
        "HTML" => assert!(content_type.starts_with("text/html"), "{content_type}"),
        shape => {
            let doc: Value = serde_json::from_str(shape).unwrap_or_else(|e| {
                panic!("the docs' shape of {} is no JSON ({e}): {shape}", row.path)
            });
            assert_shape(&doc, &reply.json(), &row.path);
        }
    }
}

/// A compress call's body, as docs/embedding.md writes one.
fn compress_body() -> String {
    let mut body = Convo::with_turns(3).body();
    body["conversation"] = "docs-compress".into();
    body.to_string()
}

async fn call(fg: &Foldgate, row: &Row, credential: Option<&str>) -> Reply {
    let auth = credential.map(|c| format!("Bearer {c}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth));
    }
    let body = if row.method == Method::POST {
        compress_body()
    } else {
        String::new()
    };
    send(
        row.method.clone(),
        &format!("{}{}", fg.url, row.path),
        &headers,
        body,
    )
    .await
}

/// A foldgate with `server` settings, where `credential` folded [`ID`].
async fn folded(llm: &Llm, server: &str, credential: Option<&str>) -> Foldgate {
    let toml = config(llm, "[state]\nbackend = \"memory\"\n")
        .replace("[providers.mock]", &format!("{server}[providers.mock]"));
    let fg = Foldgate::start(&toml).await;
    let auth = credential.map(|c| format!("Bearer {c}"));
    let mut headers = vec![("x-conversation-id", ID)];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth));
    }
    let reply = post_json(
        &format!("{}/v1/chat/completions", fg.url),
        &headers,
        &Convo::with_turns(55).body(),
    )
    .await;
    reply.assert_ok();
    assert_eq!(label(&reply), "new");
    fg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_endpoint_answers_as_the_docs_table_says() {
    let rows = rows();
    let llm = Llm::start().await;
    let open = folded(&llm, "", None).await;
    let keyed = folded(
        &llm,
        &format!("[server]\napi_keys = [\"{KEY}\"]\nadmin_token = \"{ADMIN}\"\n"),
        Some(KEY),
    )
    .await;
    for row in &rows {
        check(row, &call(&open, row, None).await, 0);
        check(row, &call(&keyed, row, None).await, 1);
        check(row, &call(&keyed, row, Some(KEY)).await, 2);
        check(row, &call(&keyed, row, Some(ADMIN)).await, 3);
    }
}

#[test]
fn the_sentinel_example_is_a_config_foldgate_takes() {
    let text = std::fs::read_to_string("examples/sentinel.toml").unwrap();
    let config = foldgate::config::Config::from_toml(&text).unwrap();
    for url in [config.state.url.as_ref(), config.archive.url.as_ref()] {
        let target = foldgate::config::RedisTarget::parse(url.unwrap().expose()).unwrap();
        assert!(
            matches!(target, foldgate::config::RedisTarget::Sentinel { .. }),
            "{target:?}"
        );
    }
}
