//! `/foldgate/*`: foldgate's own endpoints on the proxy's listener.
//!
//! - `GET /foldgate/health`: liveness, always open.
//! - `GET /foldgate/metrics`: Prometheus text.
//! - `GET /foldgate/windows`: every model window with where it came from,
//!   and the local models without one (with the config line to add).
//! - `GET /foldgate/unclaimed`: conversation-shaped `POST`s no API
//!   claimed (forwarded unfolded), by path, with their counts.
//! - `GET /foldgate/conversations`: a page of the conversations the
//!   request may read ([`conversations::list`]).
//! - `GET /foldgate/conversations/{id}`: a conversation's fold chain.
//! - `GET /foldgate/conversations/{id}/archive?q=`: a search of its archived
//!   messages ([`archive`]).
//! - `GET /foldgate/totals`: folds, failures and summarizer time summed
//!   over the conversations the request may read ([`totals`]), from the
//!   state store, so they survive a restart as the listing does.
//! - `POST /foldgate/v1/compress`: the fold engine for another gateway
//!   ([`compress`]): a conversation in, the view it would forward out.
//! - `GET /foldgate/ui`: the dashboard ([`crate::ui`]); its data comes
//!   from the routes above.
//!
//! Conversation reads (totals included) go through one guard, [`access::check`]: with
//! `server.admin_token` every tenant's; otherwise only the tenant whose
//! credential the request carries. Conversations of key-less clients are
//! readable without a credential only from loopback, and only when no
//! admin token is set.

pub mod access;
mod archive;
pub mod compress;
mod conversations;
pub mod totals;

pub use access::may_read_keyless;

use crate::app::App;
use crate::body::{self, Body};
use crate::error::ApiError;
use crate::metrics::Gauge;
use crate::pipeline::key;
use http::{HeaderValue, Method, Request, Response, header};
use hyper::body::Incoming;
use std::sync::Arc;

/// Routes an admin request.
pub async fn handle(app: &Arc<App>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    match (req.method(), path) {
        (&Method::POST, compress::PATH) => compress::handle(app, req).await,
        (&Method::GET | &Method::HEAD, "/foldgate/health") => {
            json(serde_json::json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") }))
        }
        (&Method::GET, "/foldgate/metrics") => metrics(app),
        (&Method::GET, "/foldgate/windows") => json(windows(app)),
        (&Method::GET, "/foldgate/unclaimed") => json(unclaimed(app)),
        (&Method::GET | &Method::HEAD, p) if crate::ui::is_ui(p) => crate::ui::serve(p),
        (&Method::GET, "/foldgate/conversations") => {
            let query = req.uri().query().unwrap_or("");
            guarded(app, &req, |access| async move {
                conversations::list(app, &access, query).await
            })
            .await
        }
        (&Method::GET, "/foldgate/totals") => {
            guarded(
                app,
                &req,
                |access| async move { totals::of(app, &access).await },
            )
            .await
        }
        (&Method::GET, p) if archive::id_of(p).is_some() => {
            let id = decode_segment(archive::id_of(p).unwrap_or_default());
            let query = req.uri().query().unwrap_or("");
            guarded(app, &req, |access| async move {
                archive::search(app, access.tenant(), &id, query_pairs(query)).await
            })
            .await
        }
        (&Method::GET, p) if p.starts_with("/foldgate/conversations/") => {
            let id = decode_segment(&p["/foldgate/conversations/".len()..]);
            guarded(app, &req, |access| async move {
                conversations::one(app, &access, &id).await
            })
            .await
        }
        (_, path) => {
            ApiError::NotFound(path.to_string()).into_response_as(crate::api::own_error_shape())
        }
    }
}

/// Answers `read` as JSON when the request's credential passes
/// [`access::check`]; the guard's 401 otherwise.
async fn guarded<F, Fut>(app: &App, req: &Request<Incoming>, read: F) -> Response<Body>
where
    F: FnOnce(access::Access) -> Fut,
    Fut: Future<Output = Result<serde_json::Value, ApiError>>,
{
    let peer = req.extensions().get::<key::PeerAddr>().copied();
    let result = match access::check(app, req.headers(), peer) {
        Ok(access) => read(access).await,
        Err(e) => Err(e),
    };
    result.map_or_else(|e| e.into_response_as(crate::api::own_error_shape()), json)
}

/// Conversation-shaped `POST`s no API claimed, by path, with their
/// counts (paths only, like the metrics).
fn unclaimed(app: &App) -> serde_json::Value {
    let paths: Vec<serde_json::Value> = app
        .metrics
        .unclaimed
        .list()
        .into_iter()
        .map(|(path, count)| serde_json::json!({"path": path, "count": count}))
        .collect();
    serde_json::json!({ "paths": paths })
}

/// Model windows: configured (by glob), read from providers or learned
/// (by model id), and the models foldgate knows no window for (local
/// providers' at start-up, any model a request named since), with
/// `tokens.default_context_window` (`null`: unset, those go upstream
/// unfolded). Open like the metrics: model names and windows, no
/// conversation.
fn windows(app: &App) -> serde_json::Value {
    let configured = app.config.models.iter().filter_map(|(glob, m)| {
        let window = m.context_window?;
        Some(serde_json::json!({ "model": glob, "context_window": window, "source": "config", "origin": "config" }))
    });
    let known = app.tokens.known_windows().into_iter().map(|k| {
        let origin = k.origin();
        let mut v = serde_json::json!(k);
        v["origin"] = origin.into();
        v
    });
    serde_json::json!({
        "models": configured.chain(known).collect::<Vec<_>>(),
        "missing": app.tokens.missing_windows(),
        "default_context_window": app.config.tokens.default_context_window,
    })
}

fn metrics(app: &App) -> Response<Body> {
    let stored = Gauge {
        name: "foldgate_conversations",
        help: "Conversations with a fold state in the hot cache.",
        samples: vec![(Vec::new(), app.store.count() as f64)],
    };
    let calibration = Gauge {
        name: "foldgate_token_calibration_factor",
        help: "Actual over estimated prompt tokens, per model, applied to estimates.",
        samples: app
            .tokens
            .calibration_factors()
            .into_iter()
            .map(|(model, factor)| (vec![("model", model)], factor))
            .collect(),
    };
    let (rows, bytes) = app.archive.spool_depth();
    let spool = Gauge {
        name: "foldgate_archive_spool_rows",
        help: "Archive rows waiting for the archive backend (Redis), in the spool.",
        samples: vec![(Vec::new(), rows as f64)],
    };
    let spool_bytes = Gauge {
        name: "foldgate_archive_spool_bytes",
        help: "Bytes of archive rows in the spool, against archive.spool_bytes.",
        samples: vec![(Vec::new(), bytes as f64)],
    };
    let caches = Gauge {
        name: "foldgate_cache_bytes",
        help: "Bytes each in-process cache charges against its bound (tokens.cache_bytes, state.cache_bytes, state.stubs_bytes, state.turns_bytes, archive.remembered_bytes).",
        samples: vec![
            (
                vec![("cache", "token_counts".into())],
                app.tokens.cache_bytes() as f64,
            ),
            (
                vec![("cache", "fold_states".into())],
                app.store.cached_bytes() as f64,
            ),
            (vec![("cache", "stubs".into())], app.stubs.bytes() as f64),
            (vec![("cache", "turns".into())], app.turns.bytes() as f64),
            (
                vec![("cache", "archived_stubs".into())],
                app.archive.remembered_bytes() as f64,
            ),
        ],
    };
    let remembered = Gauge {
        name: "foldgate_archive_remembered_stubs",
        help: "Compressed messages this process remembers having archived (bounded by archive.remembered_bytes).",
        samples: vec![(Vec::new(), app.archive.remembered() as f64)],
    };
    let gauges: Vec<Gauge> = [stored, calibration, spool, spool_bytes, caches, remembered]
        .into_iter()
        .chain(heap_gauges())
        .collect();
    let text = app.metrics.render(&gauges);
    let mut response = Response::new(body::full(text));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    response
}

/// The live heap's gauges, in a heap-stats build (none otherwise): its
/// bytes, and its bytes and allocations by size class.
fn heap_gauges() -> Vec<Gauge> {
    let heap = crate::heap::live_bytes().map(|bytes| Gauge {
        name: "foldgate_heap_live_bytes",
        help: "Bytes held by live heap allocations (a heap-stats build only).",
        samples: vec![(Vec::new(), bytes as f64)],
    });
    let by_size = crate::heap::live_by_size().map(|classes| {
        let label = |bound: Option<usize>| vec![("up_to", bound.map_or("+Inf".into(), |b| b.to_string()))];
        let gauge = |name, help, pick: fn(&(Option<usize>, u64, u64)) -> u64| Gauge {
            name,
            help,
            samples: classes.iter().map(|c| (label(c.0), pick(c) as f64)).collect(),
        };
        [
            gauge(
                "foldgate_heap_live_bytes_by_size",
                "Live heap bytes in allocations of at most up_to bytes and more than the class below (a heap-stats build only).",
                |c| c.1,
            ),
            gauge(
                "foldgate_heap_live_allocations_by_size",
                "Live heap allocations of at most up_to bytes and more than the class below (a heap-stats build only).",
                |c| c.2,
            ),
        ]
    });
    heap.into_iter()
        .chain(by_size.into_iter().flatten())
        .collect()
}

/// Decodes a path segment's `%XX` escapes (a `+` stays a plus). A
/// malformed escape is kept as written and invalid UTF-8 becomes U+FFFD,
/// so a bad id is simply not found.
fn decode_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

fn json(value: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(body::full(value.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The decoded `name=value` pairs of a query string (`+` is a space; a
/// malformed escape is kept as written, so a bad value fails the route's
/// own check with a 400).
fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pairs_decode_escapes_and_plus() {
        let pairs: Vec<_> = query_pairs("limit=2&after=t%3Aa+b%2Bc&&flag").collect();
        assert_eq!(
            pairs,
            [
                ("limit".into(), "2".into()),
                ("after".into(), "t:a b+c".into()),
                ("flag".into(), String::new())
            ]
        );
        assert_eq!(decode_segment("a+b%20c"), "a+b c");
    }

    #[test]
    fn malformed_escapes_are_kept_as_written() {
        let pairs: Vec<_> = query_pairs("limit=%zz&after=%4&q=100%&x=%E2%82&=v&k=a=b").collect();
        assert_eq!(
            pairs,
            [
                ("limit".into(), "%zz".into()),
                ("after".into(), "%4".into()),
                ("q".into(), "100%".into()),
                ("x".into(), "\u{fffd}".into()),
                (String::new(), "v".into()),
                ("k".into(), "a=b".into()),
            ]
        );
        assert_eq!(decode_segment("c%2F1%"), "c/1%");
        assert_eq!(decode_segment("%C3%A9%ff"), "\u{e9}\u{fffd}");
    }
}
