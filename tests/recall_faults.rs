//! Broken recall rounds on every API, whole and streamed, through the real
//! server against a scripted model that breaks on cue: a garbage 200, a
//! cut body and a 5xx each get the fallback (the first request without
//! the tool); a fallback that breaks too gives a clean error in the API's
//! shape; a stream cut after showing part of a round ends with the API's
//! error event; a recall call after the last round never reaches the
//! client; and a 1 MB recall argument does not ride along in the next
//! request.

use crate::common;

use crate::recall_echo::{model, script};

use common::mock::json as json_response;
use common::{Foldgate, Reply, metric};
use http::{Response, StatusCode};
use model::{Act, Args, Model};
use script::{ANSWER, APIS, Api, BLIND, LOOKING, events, mentions_recall, shown_text};
use serde_json::{Value, json};
use std::sync::Arc;

/// Asks the conversation's question on `api`.
async fn ask(fg: &Foldgate, api: Api, stream: bool) -> Reply {
    script::ask_as(fg, "faults", api, stream, None).await
}

/// A model that does what `act` picks for its `n`th request, and
/// foldgate in front of it (`extra` appended to the config).
async fn start(
    args: Args,
    extra: &str,
    act: impl Fn(usize) -> Act + Send + Sync + 'static,
) -> (Model, Foldgate) {
    let model = Model::acting(args, Arc::new(move |n, _: &Value| act(n))).await;
    let fg = Foldgate::start(&format!("{}{extra}", model.config())).await;
    (model, fg)
}

fn question() -> Args {
    Args::query("favourite colour")
}

fn garbage() -> Act {
    let body = foldgate::body::full("GARBAGE-BODY {\"choices\": [");
    let response = Response::builder()
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    Act::Respond(response)
}

fn server_error() -> Act {
    let error = json!({"error": {"message": "boom", "type": "server_error"}});
    Act::Respond(json_response(StatusCode::INTERNAL_SERVER_ERROR, &error))
}

/// What the client sees after a broken round's fallback: the fallback's
/// answer (the model without the archive), after what a stream showed.
fn fallback_text(stream: bool) -> String {
    if stream {
        format!("{LOOKING}\n\n{BLIND}")
    } else {
        BLIND.to_string()
    }
}

fn has_tool(request: &Value) -> bool {
    request
        .get("tools")
        .is_some_and(|t| t.to_string().contains("foldgate_recall"))
}

fn conversation_len(api: Api, request: &Value) -> usize {
    let field = if api == Api::Responses {
        "input"
    } else {
        "messages"
    };
    request[field].as_array().unwrap().len()
}

async fn counted(fg: &Foldgate, counter: &str, cause: &str) -> f64 {
    let name = format!("foldgate_recall_{counter}_total{{cause=\"{cause}\"}}");
    metric(&fg.metrics().await, &name)
}

/// Asserts the reply is foldgate's error for a broken fallback, in the
/// API's shape: the OpenAI envelope, or Anthropic's error object; as the
/// last event when streamed.
fn assert_api_error(api: Api, stream: bool, reply: &Reply) {
    let error = if stream {
        reply.assert_ok();
        events(reply).last().cloned().unwrap()
    } else {
        assert_eq!(
            reply.status,
            502,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()
    };
    let message = match api {
        Api::Anthropic => {
            assert_eq!(error["type"], "error", "{error}");
            assert_eq!(error["error"]["type"], "api_error", "{error}");
            &error["error"]["message"]
        }
        Api::Responses if stream => {
            assert_eq!(error["type"], "error", "{error}");
            &error["message"]
        }
        Api::Chat | Api::Responses => {
            if !stream {
                assert_eq!(error["error"]["code"], "upstream_broken", "{error}");
            }
            assert_eq!(error["error"]["type"], "server_error", "{error}");
            &error["error"]["message"]
        }
    };
    assert!(message.as_str().is_some_and(|m| !m.is_empty()), "{error}");
}

#[tokio::test]
async fn a_garbage_answer_on_a_round_gets_the_fallback() {
    for api in APIS {
        // The first round (with the tool) or the recall round after it.
        for broken in [0, 1] {
            let (model, fg) = start(question(), "", move |n| {
                if n == broken { garbage() } else { Act::Script }
            })
            .await;
            let reply = ask(&fg, api, false).await;
            reply.assert_ok();
            assert_eq!(
                shown_text(api, false, &reply),
                BLIND,
                "{api:?} round {broken}"
            );
            assert!(!String::from_utf8_lossy(&reply.body).contains("GARBAGE"));
            assert!(!mentions_recall(&reply));
            let seen = model.seen();
            assert_eq!(seen.len(), broken + 2, "{api:?}");
            let fallback = seen.last().unwrap();
            assert!(!has_tool(fallback), "the fallback goes without the tool");
            assert_eq!(
                conversation_len(api, fallback),
                conversation_len(api, &seen[0])
            );
            assert_eq!(counted(&fg, "fallbacks", "unparseable").await, 1.0);
        }
    }
}

#[tokio::test]
async fn a_cut_body_on_a_recall_round_gets_the_fallback() {
    for api in APIS {
        let (model, fg) = start(question(), "", |n| {
            if n == 1 {
                Act::Cut("teal")
            } else {
                Act::Script
            }
        })
        .await;
        let reply = ask(&fg, api, false).await;
        reply.assert_ok();
        assert_eq!(shown_text(api, false, &reply), BLIND, "{api:?}");
        assert_eq!(model.seen().len(), 3);
        assert!(!has_tool(&model.seen()[2]));
        assert_eq!(counted(&fg, "fallbacks", "cut").await, 1.0);
    }
}

#[tokio::test]
async fn an_error_status_on_a_recall_round_gets_the_fallback() {
    for api in APIS {
        for stream in [false, true] {
            let (model, fg) = start(question(), "", |n| {
                if n == 1 { server_error() } else { Act::Script }
            })
            .await;
            let reply = ask(&fg, api, stream).await;
            reply.assert_ok();
            assert_eq!(
                shown_text(api, stream, &reply),
                fallback_text(stream),
                "{api:?}"
            );
            assert!(!mentions_recall(&reply));
            assert_eq!(model.seen().len(), 3);
            assert_eq!(counted(&fg, "fallbacks", "status").await, 1.0);
        }
    }
}

#[tokio::test]
async fn a_failing_fallback_gives_a_clean_error_in_the_apis_shape() {
    for api in APIS {
        for stream in [false, true] {
            let (model, fg) = start(question(), "", |n| match n {
                1 => server_error(),
                2 => garbage(),
                _ => Act::Script,
            })
            .await;
            let reply = ask(&fg, api, stream).await;
            assert_api_error(api, stream, &reply);
            assert!(!String::from_utf8_lossy(&reply.body).contains("GARBAGE"));
            assert!(!mentions_recall(&reply));
            assert_eq!(model.seen().len(), 3, "one fallback, no more");
            assert_eq!(counted(&fg, "fallbacks", "status").await, 1.0);
            let failures = counted(&fg, "failures", "unparseable").await;
            assert_eq!(failures, 1.0, "{api:?} {stream}");
        }
    }
}

#[tokio::test]
async fn a_stream_cut_while_held_gets_the_fallback() {
    for api in APIS {
        // Cut inside the recall call's arguments: the round is held.
        let (model, fg) = start(question(), "", |n| {
            if n == 0 {
                Act::Cut("favourite colour")
            } else {
                Act::Script
            }
        })
        .await;
        let reply = ask(&fg, api, true).await;
        reply.assert_ok();
        assert_eq!(
            shown_text(api, true, &reply),
            fallback_text(true),
            "{api:?}"
        );
        assert!(!mentions_recall(&reply));
        let seen = model.seen();
        assert_eq!(seen.len(), 2);
        assert!(!has_tool(&seen[1]));
        assert_eq!(counted(&fg, "fallbacks", "cut").await, 1.0);
        let last = events(&reply).last().cloned().unwrap();
        match api {
            Api::Chat => assert!(reply.body.ends_with(b"data: [DONE]\n\n")),
            Api::Anthropic => assert_eq!(last["type"], "message_stop"),
            Api::Responses => assert_eq!(last["type"], "response.completed"),
        }
    }
}

#[tokio::test]
async fn a_stream_cut_after_showing_part_of_a_round_ends_with_the_apis_error_event() {
    for api in APIS {
        let (model, fg) = start(question(), "", |n| {
            if n == 1 {
                Act::Cut("teal")
            } else {
                Act::Script
            }
        })
        .await;
        let reply = ask(&fg, api, true).await;
        let text = shown_text(api, true, &reply);
        assert_eq!(
            text,
            format!("{LOOKING}\n\nThe favourite colour is "),
            "{api:?}"
        );
        assert_api_error(api, true, &reply);
        assert_eq!(model.seen().len(), 2, "what was shown cannot be taken back");
        assert_eq!(counted(&fg, "failures", "cut").await, 1.0);
        assert_eq!(counted(&fg, "fallbacks", "cut").await, 0.0);
    }
}

#[tokio::test]
async fn a_recall_call_after_the_last_round_never_reaches_the_client() {
    // Keys of the config's `[archive]` table, which ends it.
    let one_round = "recall_rounds = 1\n";
    for api in APIS {
        for stream in [false, true] {
            // The last answer still calls the tool: the fallback answers.
            let (model, fg) = start(question(), one_round, |n| {
                if n <= 1 { Act::Recall } else { Act::Script }
            })
            .await;
            let reply = ask(&fg, api, stream).await;
            reply.assert_ok();
            assert!(!mentions_recall(&reply), "{api:?} {stream}");
            // A stream showed the last round's text before its call.
            let shown = if stream {
                format!("{LOOKING}\n\n{}", fallback_text(true))
            } else {
                BLIND.to_string()
            };
            assert_eq!(shown_text(api, stream, &reply), shown);
            assert_eq!(model.seen().len(), 3);
            assert_eq!(counted(&fg, "fallbacks", "recall_after_last").await, 1.0);

            // The fallback calls it too, without the tool: an error.
            let (model, fg) = start(question(), one_round, |_| Act::Recall).await;
            let reply = ask(&fg, api, stream).await;
            assert!(!mentions_recall(&reply), "{api:?} {stream}");
            assert_api_error(api, stream, &reply);
            assert_eq!(model.seen().len(), 3);
            assert_eq!(counted(&fg, "failures", "recall_after_last").await, 1.0);
        }
    }
}

#[tokio::test]
async fn a_megabyte_recall_argument_does_not_ride_along_in_the_next_request() {
    let huge = "favourite colour ".repeat(64 << 10);
    assert!(huge.len() > 1 << 20);
    for api in APIS {
        for stream in [false, true] {
            let model = Model::start(Args::query(&huge)).await;
            let fg = Foldgate::start(&model.config()).await;
            let reply = ask(&fg, api, stream).await;
            reply.assert_ok();
            assert!(!mentions_recall(&reply));
            let raw = model.raw();
            assert_eq!(raw.len(), 2, "{api:?} {stream}");
            assert!(
                raw[1].len() < 64 << 10,
                "{api:?} stream {stream}: the next request is {} bytes",
                raw[1].len()
            );
            // The call went back with its query cut, not without it.
            let next = String::from_utf8_lossy(&raw[1]).to_string();
            assert!(
                next.contains("favourite colour favourite colour"),
                "{api:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_recall_call_in_a_streams_unterminated_last_event_is_still_held() {
    let (model, fg) = start(question(), "", |n| {
        if n > 0 {
            return Act::Script;
        }
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "c", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let call = json!({"index": 0, "id": "call_r", "type": "function",
            "function": {"name": "foldgate_recall", "arguments": "{\"query\":\"favourite colour\"}"}});
        // No blank line after the last event, and no [DONE].
        let body = format!(
            "data: {}\n\ndata: {}",
            chunk(json!({"content": LOOKING}), Value::Null),
            chunk(json!({"tool_calls": [call]}), json!("tool_calls"))
        );
        let response = Response::builder()
            .header("content-type", "text/event-stream")
            .body(foldgate::body::full(body))
            .unwrap();
        Act::Respond(response)
    })
    .await;
    let reply = ask(&fg, Api::Chat, true).await;
    reply.assert_ok();
    assert!(!mentions_recall(&reply));
    assert_eq!(
        shown_text(Api::Chat, true, &reply),
        format!("{LOOKING}\n\n{ANSWER}")
    );
    assert_eq!(model.seen().len(), 2, "the call was answered");
}
