//! The summarizer reads every text a codec accepts, on all five APIs:
//! random conversations carry texts in every place each API puts text
//! (`input_text`, `output_text`, `refusal`, tool results as strings and
//! as parts, plain-text documents, Gemini's `functionResponse` and code
//! parts, Ollama's messages); each is decoded by its codec and every text
//! must be in the summarizer's transcript of the engine's messages
//! (docs/folding.md, "What foldgate does not understand, it keeps").

use crate::props_support;
use crate::unknown_props::Api;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

/// A message of `api` carrying `text` in one of the places that API puts
/// text (`kind` picks the place).
fn with_text(api: Api, kind: usize, text: &str) -> Vec<Value> {
    match (api, kind % 5) {
        (Api::Chat, 0) => vec![json!({"role": "user", "content": text})],
        (Api::Chat, 1) => {
            vec![json!({"role": "user", "content": [{"type": "text", "text": text}]})]
        }
        (Api::Chat, 2) => {
            vec![json!({"role": "assistant", "content": [{"type": "refusal", "refusal": text}]})]
        }
        (Api::Chat, 3) => vec![
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": text}]}),
        ],
        (Api::Chat, _) => vec![json!({"role": "assistant", "content": text})],
        (Api::Responses, 0) => {
            vec![json!({"role": "user", "content": [{"type": "input_text", "text": text}]})]
        }
        (Api::Responses, 1) => vec![
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        ],
        (Api::Responses, 2) => vec![
            json!({"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": text}]}),
        ],
        (Api::Responses, 3) => vec![
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": text}]}),
        ],
        (Api::Responses, _) => vec![
            json!({"type": "custom_tool_call", "call_id": "d", "name": "apply_patch", "input": "x"}),
            json!({"type": "custom_tool_call_output", "call_id": "d", "output": text}),
        ],
        (Api::Anthropic, 0) => {
            vec![json!({"role": "user", "content": [{"type": "text", "text": text}]})]
        }
        (Api::Anthropic, 1) => vec![
            json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": text}]}),
        ],
        (Api::Anthropic, 2) => vec![
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": text}]}]}),
        ],
        (Api::Anthropic, 3) => vec![
            json!({"role": "user", "content": [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}]}),
        ],
        (Api::Anthropic, _) => vec![json!({"role": "user", "content": text})],
        (Api::Gemini, 0) => vec![json!({"role": "user", "parts": [{"text": text}]})],
        (Api::Gemini, 1) => vec![json!({"role": "model", "parts": [{"text": text}]})],
        (Api::Gemini, 2) => vec![
            json!({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"out": text}}}]}),
        ],
        (Api::Gemini, 3) => vec![
            json!({"role": "model", "parts": [{"executableCode": {"language": "PYTHON", "code": text}}]}),
        ],
        (Api::Gemini, _) => vec![
            json!({"role": "user", "parts": [{"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": text}}]}),
        ],
        (Api::Ollama, 0 | 1) => vec![json!({"role": "user", "content": text})],
        (Api::Ollama, 2) => vec![
            json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}),
            json!({"role": "tool", "tool_name": "f", "content": text}),
        ],
        (Api::Ollama, _) => vec![json!({"role": "assistant", "content": text})],
    }
}

fn read_codec_texts(api: Api, name: &str) {
    let foldgate_api = foldgate::api::named(name).unwrap();
    let texts = prop::collection::vec((0usize..5, "[a-z]{3,8}( [a-z0-9_.-]{1,10}){0,4}"), 1..12);
    let mut runner = TestRunner::new(props_support::config(64, 51_10));
    let result = runner.run(&texts, |texts| {
        let mut items = vec![api.user("Start.")];
        for (kind, text) in &texts {
            items.extend(with_text(api, *kind, text));
        }
        let body = api.body(&items).to_string();
        let read =
            foldgate::api::codec::ReadBody::read_at(foldgate_api, api.path(), body.as_bytes())
                .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let messages: Vec<&Value> = read.messages.iter().collect();
        let prompt = foldgate::summarize::prompt::transcript(&messages);
        for (_, text) in &texts {
            prop_assert!(
                prompt.contains(text.as_str()),
                "{text:?} is not in the prompt:\n{prompt}"
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{api:?}: {e}");
    }
}

#[test]
fn the_summarizer_reads_every_text_chat_accepts() {
    read_codec_texts(Api::Chat, "chat");
}

#[test]
fn the_summarizer_reads_every_text_responses_accepts() {
    read_codec_texts(Api::Responses, "responses");
}

#[test]
fn the_summarizer_reads_every_text_anthropic_accepts() {
    read_codec_texts(Api::Anthropic, "anthropic");
}

#[test]
fn the_summarizer_reads_every_text_gemini_accepts() {
    read_codec_texts(Api::Gemini, "gemini");
}

#[test]
fn the_summarizer_reads_every_text_ollama_accepts() {
    read_codec_texts(Api::Ollama, "ollama");
}
