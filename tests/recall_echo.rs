//! What the client sees of recall, beyond the answer: a Responses answer
//! echoes the request's `tools` without `foldgate_recall`; the texts of
//! two streamed rounds are set apart; and the model's recall input is
//! bounded and checked (a 1 MB query is cut, arguments that are not
//! `{"query": "…"}` or hold a lone surrogate escape get a one-line error
//! result, and the call never reaches the client). Through the real
//! server, against a scripted model that writes its answers as raw JSON.

use crate::common;

pub(crate) mod model;
pub(crate) mod script;

use common::{Foldgate, Reply};
use model::{Args, Model};
use script::{
    ANSWER, APIS, Api, BLIND, FACT, LOOKING, events, mentions_recall, output_texts, shown_text,
};
use serde_json::{Value, json};

/// Asks the conversation's question on `api`, with the client's `tools`.
async fn ask(fg: &Foldgate, api: Api, stream: bool, tools: Option<Value>) -> Reply {
    script::ask_as(fg, "echo", api, stream, tools).await
}

/// The recall result foldgate sent the model in its second round.
fn recall_result(api: Api, second: &Value) -> String {
    let last = match api {
        Api::Responses => second["input"].as_array().unwrap().last().unwrap().clone(),
        Api::Chat | Api::Anthropic => second["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone(),
    };
    let text = match api {
        Api::Chat => &last["content"],
        Api::Anthropic => &last["content"][0]["content"],
        Api::Responses => &last["output"],
    };
    text.as_str()
        .unwrap_or_else(|| panic!("no recall result: {last}"))
        .to_string()
}

#[tokio::test]
async fn responses_answers_echo_only_the_clients_tools() {
    let read_file = json!({"type": "function", "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}});
    for stream in [false, true] {
        for tools in [None, Some(json!([read_file]))] {
            let model = Model::start(Args::query("favourite colour")).await;
            let fg = Foldgate::start(&model.config()).await;
            let reply = ask(&fg, Api::Responses, stream, tools.clone()).await;
            reply.assert_ok();
            let seen = model.seen();
            assert_eq!(seen.len(), 2, "one recall round");
            assert!(seen[0]["tools"].to_string().contains("foldgate_recall"));
            assert!(!mentions_recall(&reply), "stream {stream}, tools {tools:?}");
            let responses: Vec<Value> = if stream {
                events(&reply)
                    .into_iter()
                    .filter_map(|e| e.get("response").cloned())
                    .collect()
            } else {
                vec![reply.json()]
            };
            assert_eq!(responses.len(), if stream { 3 } else { 1 });
            for response in &responses {
                assert_eq!(response["tools"], tools.clone().unwrap_or(json!([])));
                assert_eq!(response["tool_choice"], "auto");
            }
            assert_eq!(
                shown_text(Api::Responses, false, &reply_of(&responses)),
                if stream {
                    format!("{LOOKING}\n\n{ANSWER}")
                } else {
                    ANSWER.to_string()
                }
            );
        }
    }
}

/// The last response object as a whole reply, to read its text.
fn reply_of(responses: &[Value]) -> Reply {
    Reply {
        status: http::StatusCode::OK,
        headers: http::HeaderMap::new(),
        body: responses.last().unwrap().to_string().into(),
    }
}

#[tokio::test]
async fn two_rounds_texts_are_set_apart_in_every_apis_stream() {
    for api in APIS {
        for stream in [false, true] {
            let model = Model::start(Args::query("favourite colour")).await;
            let fg = Foldgate::start(&model.config()).await;
            let reply = ask(&fg, api, stream, None).await;
            reply.assert_ok();
            assert_eq!(model.seen().len(), 2, "{api:?}: one recall round");
            assert!(!mentions_recall(&reply), "{api:?}");
            // A whole answer is the last round's alone: nothing to set apart.
            let expected = if stream {
                format!("{LOOKING}\n\n{ANSWER}")
            } else {
                ANSWER.to_string()
            };
            assert_eq!(
                shown_text(api, stream, &reply),
                expected,
                "{api:?} stream {stream}"
            );
        }
    }
    // On Responses the events that repeat a part's whole text agree with
    // its deltas.
    let model = Model::start(Args::query("favourite colour")).await;
    let fg = Foldgate::start(&model.config()).await;
    let events = events(&ask(&fg, Api::Responses, true, None).await);
    let text_of = |kind: &str, pointer: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["type"] == kind)
            .filter_map(|e| {
                e.pointer(pointer)
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect()
    };
    let separated = [LOOKING.to_string(), format!("\n\n{ANSWER}")];
    assert_eq!(text_of("response.output_text.done", "/text"), separated);
    assert_eq!(
        text_of("response.content_part.done", "/part/text"),
        separated
    );
    assert_eq!(
        text_of("response.output_item.done", "/item/content/0/text"),
        separated
    );
    let completed = events.last().unwrap();
    assert_eq!(output_texts(&completed["response"]), separated);
}

/// The first line of a recall result: what it says about the query.
fn echoed(result: &str) -> &str {
    result.lines().next().unwrap_or_default()
}

#[tokio::test]
async fn a_huge_recall_query_is_cut_before_it_is_searched_and_echoed() {
    // 1 MB: the result echoes a few hundred characters of it, not all.
    let huge = "favourite colour ".repeat(64 << 10);
    assert!(huge.len() > 1 << 20);
    let model = Model::start(Args::query(&huge)).await;
    let fg = Foldgate::start(&model.config()).await;
    let reply = ask(&fg, Api::Chat, false, None).await;
    reply.assert_ok();
    let seen = model.seen();
    assert_eq!(seen.len(), 2);
    let result = recall_result(Api::Chat, &seen[1]);
    assert!(
        echoed(&result).contains("\"favourite colour favourite"),
        "{result}"
    );
    // The call goes back bounded too, so the window keeps room for
    // excerpts; the echo is the cut query, not the megabyte.
    assert!(echoed(&result).chars().count() < 400, "{result}");
    assert!(result.len() < 20_000, "{} bytes", result.len());

    // 3 KB, small enough to leave room for excerpts: the cut query is
    // the one searched, and it finds the fact.
    let long = "favourite colour ".repeat(200);
    let model = Model::start(Args::query(&long)).await;
    let fg = Foldgate::start(&model.config()).await;
    let reply = ask(&fg, Api::Chat, false, None).await;
    reply.assert_ok();
    assert_eq!(shown_text(Api::Chat, false, &reply), ANSWER);
    let result = recall_result(Api::Chat, &model.seen()[1]);
    assert!(result.contains(FACT), "{result}");
    let quoted = echoed(&result).split('"').nth(1).unwrap_or_default();
    assert!(
        long.starts_with(quoted) && quoted.len() <= 300,
        "{quoted:?}"
    );
}

#[tokio::test]
async fn recall_arguments_foldgate_cannot_use_get_one_line_and_never_reach_the_client() {
    let cases = [
        ("a lone surrogate", Args::lone_surrogate()),
        (
            "not JSON",
            Args {
                literal: "\"not json\"".into(),
                object: "{\"q\": 1}".into(),
            },
        ),
        (
            "not a string",
            Args {
                literal: serde_json::to_string("{\"query\": 5}").unwrap(),
                object: "{\"query\": 5}".into(),
            },
        ),
    ];
    for (case, args) in cases {
        for api in APIS {
            for stream in [false, true] {
                let what = format!("{case}, {api:?}, stream {stream}");
                let model = Model::start(args.clone()).await;
                let fg = Foldgate::start(&model.config()).await;
                let reply = ask(&fg, api, stream, None).await;
                reply.assert_ok();
                assert!(
                    !mentions_recall(&reply),
                    "{what}: {}",
                    String::from_utf8_lossy(&reply.body)
                );
                let seen = model.seen();
                assert_eq!(seen.len(), 2, "{what}: the call is answered by foldgate");
                let result = recall_result(api, &seen[1]);
                assert!(!result.contains('\n'), "{what}: {result}");
                assert!(result.contains("{\"query\""), "{what}: {result}");
                if case == "a lone surrogate" {
                    assert!(result.contains("surrogate"), "{what}: {result}");
                }
                let expected = if stream {
                    format!("{LOOKING}\n\n{BLIND}")
                } else {
                    BLIND.to_string()
                };
                assert_eq!(shown_text(api, stream, &reply), expected, "{what}");
            }
        }
    }
}
