//! Amazon Bedrock's `InvokeModel` for Claude (`POST /model/{model-id}/invoke`
//! and `/invoke-with-response-stream`), as Claude Code's Bedrock mode and
//! the AWS SDKs send it. The body is an Anthropic Messages body without
//! `model` and `stream`, with `anthropic_version: "bedrock-2023-05-31"`:
//! Anthropic's codec reads and writes it ([`super::anthropic`]), with the
//! model taken from the path (URL-encoded as the client sent it,
//! `us.anthropic.claude-sonnet-4-5-20250929-v1%3A0`; the built-in windows'
//! `*claude-…*` patterns match it). A streamed answer is AWS event-stream
//! frames, each carrying one Anthropic event ([`eventstream`]); they pass
//! through untouched, and the usage tap reads them once the answer has
//! ended. Each forwarded request is signed with SigV4 by the provider's
//! own credentials ([`sign`]). The recall tool is not offered (its rounds
//! would read and write event-stream frames); injected excerpts are.

pub mod eventstream;
pub mod sign;

use super::anthropic::{self, Anthropic};
use super::codec::{Decoded, Fields, RawRequest, Wire, object};
use super::route::Claim;
use super::spec::{self, ApiSpec, Framing, RecallSpec, Telemetry};
use super::summary::{SummaryAnswer, SummaryCall};
use super::{Codec, Fit, Provider, Signer};
use crate::config::ProviderConfig;
use crate::error::{ApiError, ErrorShape};
use crate::fold::view::Item;
use crate::usage::{ReadTokens, Reported, UsageReader};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Amazon Bedrock's `InvokeModel`, for Anthropic's models.
pub struct Bedrock;

/// The `anthropic_version` Bedrock's Claude models take.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The methods of a model foldgate folds.
const INVOKE: [&str; 2] = ["invoke", "invoke-with-response-stream"];
/// A model's other methods: forwarded untouched, only to Bedrock.
const SIBLINGS: [&str; 3] = ["converse", "converse-stream", "count-tokens"];

/// Bedrock's `InvokeModel` as data: `…/model/{model}/invoke` or
/// `…/invoke-with-response-stream` (the tail starts at `/model`), its
/// siblings `converse`, `converse-stream` and `count-tokens`; otherwise
/// Anthropic's (its body, where the summary goes, its recall shapes), but
/// the recall tool is never offered (a round would have to read and write
/// event-stream frames).
pub const SPEC: ApiSpec = ApiSpec {
    name: "bedrock",
    provider: "bedrock",
    path: "/model/{model}/invoke",
    claim: |path| model_path(path, &INVOKE),
    owns: |path| model_path(path, &SIBLINGS),
    model_in_path: true,
    keys: spec::BEARER,
    usage: UsageReader {
        key: b"\"usage\"",
        read: ReadTokens::With(usage),
    },
    framing: Framing::EventStream,
    error_shape: ErrorShape(|error| json!({"message": error.to_string()})),
    error_event: |message| eventstream::exception("internalServerException", message),
    recall: RecallSpec {
        offered: false,
        ..anthropic::SPEC.recall
    },
    telemetry: Telemetry {
        operation: "chat",
        provider: "bedrock",
    },
    ..anthropic::SPEC
};

/// `…/model/{id}/{method}` for one of `methods`, the id one segment.
fn model_path(path: &str, methods: &[&str]) -> Option<Claim> {
    let slash = path.rfind('/')?;
    if !methods.contains(&&path[slash + 1..]) {
        return None;
    }
    let head = &path[..slash];
    let at = head.rfind("/model/")?;
    let id = at + "/model/".len()..slash;
    (!id.is_empty()).then_some(Claim {
        tail: at,
        model: Some(id),
    })
}

impl Provider for Bedrock {
    /// Anthropic's call, the model in the path.
    fn summary_body(&self, call: SummaryCall<'_>) -> Option<Value> {
        let mut body = Anthropic.summary_body(call)?;
        let fields = body.as_object_mut()?;
        fields.remove("model");
        fields.insert("anthropic_version".into(), ANTHROPIC_VERSION.into());
        Some(body)
    }

    /// The conversation's own model path, not streamed; another model's
    /// `/model/{model}/invoke`.
    fn summary_path(&self, model: &str, conversation: Option<&str>) -> String {
        if let Some(tail) = conversation.and_then(|t| model_path(t, &INVOKE).map(|c| (t, c))) {
            let (tail, claim) = tail;
            if let Some(id) = claim.model.map(|range| &tail[range]) {
                return format!("/model/{id}/invoke");
            }
        }
        let id: String = model
            .chars()
            .map(|c| match c {
                ':' => "%3A".to_string(),
                '/' => "%2F".to_string(),
                c => c.to_string(),
            })
            .collect();
        format!("/model/{id}/invoke")
    }

    fn summary_answer(&self, answer: &Value) -> SummaryAnswer {
        anthropic::summary_answer(answer)
    }

    /// SigV4 with the provider's `[aws]` credentials, when it has them.
    fn signer(&self, provider: &ProviderConfig) -> Result<Option<Arc<dyn Signer>>, String> {
        Ok(sign::SigV4::of(provider)?.map(|s| Arc::new(s) as Arc<dyn Signer>))
    }
}

/// Anthropic's `usage`, of a whole answer or, for a stream, of the events
/// its frames carry (read once the answer has ended: a frame's event is
/// base64 in its payload; the later of each count wins).
fn usage(data: &[u8]) -> Reported {
    let anthropic = |data: &[u8]| anthropic::USAGE.tokens(data);
    if data.first() == Some(&b'{') {
        return anthropic(data);
    }
    eventstream::events(data).fold(Reported::default(), |found, event| {
        anthropic(event.to_string().as_bytes()).or(found)
    })
}

impl Codec for Bedrock {
    fn spec(&self) -> &'static ApiSpec {
        &SPEC
    }

    /// Anthropic's decoder, given the path's model (taken out again when
    /// the view is filled in); a body without its path: its `model`, if
    /// it has one.
    fn decode(&self, path: Option<&str>, bytes: &[u8]) -> Result<Decoded, ApiError> {
        let mut fields = object(bytes)?;
        let claim = path.and_then(|p| model_path(p, &INVOKE).or_else(|| model_path(p, &SIBLINGS)));
        if let (Some(path), Some(range)) = (path, claim.and_then(|c| c.model)) {
            fields.insert("model".into(), Value::String(path[range].to_string()));
        }
        anthropic::codec::decode(fields)
    }

    fn fill_wire(&self, fields: &mut Fields, _: &[Value], wire: &Wire, items: Vec<Item>) {
        anthropic::codec::encode(fields, wire, items);
        fields.remove("model");
    }

    fn unit_message(&self, unit: &[Value], _after_calls: bool) -> Value {
        anthropic::codec::unit_message(unit)
    }

    /// Anthropic's reader; the model is the path's, so the read leaves it
    /// empty (a body naming one is the decoder's to judge).
    fn shallow<'a>(&self, bytes: &'a [u8]) -> Option<RawRequest<'a>> {
        let spec = &anthropic::codec::SHALLOW;
        let mut fields = crate::shallow::read(bytes, spec)?;
        if fields.parsed.contains_key("model") {
            return None;
        }
        fields
            .parsed
            .insert("model".into(), Value::String("-".into()));
        let mut raw = RawRequest::from_fields(fields, spec, Some(("input_schema", "max_tokens")))?;
        raw.model = String::new();
        raw.rest.remove("model");
        Some(raw)
    }

    /// `anthropic_version` is Bedrock's (an Anthropic body on another
    /// route fits Anthropic as well, which comes first).
    fn fit(&self, body: &Map<String, Value>) -> Fit {
        match body.get("anthropic_version") {
            Some(_) if body.contains_key("messages") => Fit::Only,
            _ => Fit::No,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invoke_paths_are_claimed_with_their_model() {
        let path =
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream";
        let claim = (SPEC.claim)(path).unwrap();
        assert_eq!(claim.tail, 0);
        assert_eq!(
            &path[claim.model.unwrap()],
            "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0"
        );
        let mounted = "/bedrock/model/m/invoke";
        assert_eq!((SPEC.claim)(mounted).unwrap().tail, "/bedrock".len());
        assert!((SPEC.claim)("/model//invoke").is_none());
        assert!((SPEC.claim)("/model/m/converse").is_none());
        assert!((SPEC.owns)("/model/m/converse").is_some());
        assert!((SPEC.claim)("/v1/messages").is_none());
    }

    #[test]
    fn the_summarizer_asks_the_conversations_model_unstreamed() {
        let tail = "/model/us.anthropic.claude-x-v1%3A0/invoke-with-response-stream";
        assert_eq!(
            Bedrock.summary_path("ignored", Some(tail)),
            "/model/us.anthropic.claude-x-v1%3A0/invoke"
        );
        assert_eq!(
            Bedrock.summary_path("anthropic.claude-haiku-4-5-20251001-v1:0", None),
            "/model/anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke"
        );
        let call = SummaryCall {
            model: "m",
            system: "s",
            user: "u".into(),
            schema: || json!({}),
            format: crate::api::summary::Format::Instructions,
            max_tokens: 10,
            completion_param: false,
        };
        let body = Bedrock.summary_body(call).unwrap();
        assert_eq!(body["anthropic_version"], ANTHROPIC_VERSION);
        assert!(body.get("model").is_none());
    }

    #[test]
    fn a_body_decodes_with_the_paths_model_and_encodes_without_it() {
        let body = json!({"anthropic_version": ANTHROPIC_VERSION, "max_tokens": 5,
            "system": "be brief", "messages": [{"role": "user", "content": "hi"}]});
        let bytes = body.to_string();
        let decoded = Bedrock
            .decode(
                Some("/model/anthropic.claude-x-v1%3A0/invoke"),
                bytes.as_bytes(),
            )
            .unwrap();
        assert_eq!(
            decoded.estimate_fields().get("model"),
            Some(&json!("anthropic.claude-x-v1%3A0"))
        );
        assert!(Bedrock.shallow(bytes.as_bytes()).is_some());
    }

    #[test]
    fn usage_is_read_from_json_and_from_frames() {
        let answer = json!({"usage": {"input_tokens": 7, "output_tokens": 2}});
        assert_eq!(usage(answer.to_string().as_bytes()).prompt, Some(7));
        let mut stream = eventstream::chunk(
            &json!({"type": "message_start", "message": {"usage": {"input_tokens": 11, "output_tokens": 1}}}),
        )
        .to_vec();
        stream.extend_from_slice(&eventstream::chunk(
            &json!({"type": "message_delta", "usage": {"output_tokens": 9}}),
        ));
        let found = usage(&stream);
        assert_eq!((found.prompt, found.output), (Some(11), Some(9)));
    }
}
