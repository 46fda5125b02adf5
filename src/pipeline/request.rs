//! One chat request and what has been computed about it: read from the raw
//! JSON first (model, provider, conversation key, estimate, fold chain),
//! upgraded to the parsed form — the body as values and the request's
//! [`FoldRequest`] — at most once, and only when a fold may apply.

use super::fast::{self, Look};
use super::key;
use super::prepared::Prepared;
use super::turn::FoldRequest;
use crate::api::Api;
use crate::api::codec::{Decoded, Wire};
use crate::app::App;
use crate::error::ApiError;
use crate::message::roles_of;
use crate::upstream::Provider;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Map, Value};
use std::sync::Arc;

/// A conversation request on its way through the pipeline.
pub(super) struct ConvRequest {
    /// The wire format.
    pub api: Api,
    /// The body as the client sent it.
    pub bytes: Bytes,
    /// The request's path (an API may name the model in it).
    path: String,
    /// Its route's tail, as the provider gets it.
    tail: Arc<str>,
    /// The `model` field.
    pub model: String,
    /// Where it goes.
    pub provider: Arc<Provider>,
    stage: Stage,
}

/// How far the request has been read.
enum Stage {
    /// From the raw JSON only (or decoded by the first look when the fast
    /// reader could not take it).
    Raw {
        look: Look,
        decoded: Option<Box<Decoded>>,
    },
    /// Decoded: the body's fields (the conversation field left as a
    /// placeholder the view fills), the original items behind the engine's
    /// messages, and the request's fold decision maker, which owns them.
    Parsed {
        fields: Map<String, Value>,
        wire: Option<Wire>,
        turn: FoldRequest,
        /// `fields` went to a recall session ([`ConvRequest::view_fields`]):
        /// decoded again should a retry need them.
        lent: bool,
    },
    /// Only while upgrading.
    Upgrading,
}

impl ConvRequest {
    /// The first look: what the request's raw JSON tells (bodies the
    /// API's shallow reader cannot take, and APIs without one, are
    /// decoded, which also reports what is wrong with a bad body).
    pub async fn read(
        app: &App,
        api: Api,
        headers: &HeaderMap,
        (path, tail): (String, Arc<str>),
        path_model: Option<String>,
        bytes: Bytes,
    ) -> Result<Self, ApiError> {
        if let Some(mut raw) = api.shallow(&bytes) {
            if raw.model.is_empty() {
                // The path names the model (Gemini, an Azure deployment).
                raw.model = path_model.clone().unwrap_or_default();
            }
            let provider = app.upstreams.route_api(api, &raw.model, &path)?;
            if let Some(look) = fast::route(app, api, headers, &raw, &provider.name).await {
                let model = raw.model;
                let stage = Stage::Raw {
                    look,
                    decoded: None,
                };
                return Ok(Self {
                    api,
                    bytes,
                    path,
                    tail,
                    model,
                    provider,
                    stage,
                });
            }
        }
        let decoded = api.decode_at(&path, &bytes)?;
        // The body's model, else the path's (an Azure deployment).
        let model = decoded
            .estimate_fields()
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or(path_model)
            .unwrap_or_default();
        let provider = app.upstreams.route_api(api, &model, &path)?;
        let look = decoded_look(app, api, headers, &decoded, &model, &provider.name).await;
        Ok(Self {
            api,
            bytes,
            path,
            tail,
            model,
            provider,
            stage: Stage::Raw {
                look,
                decoded: Some(Box::new(decoded)),
            },
        })
    }

    /// The conversation id the request is keyed by (its header's value or
    /// a fingerprint), as a response header value.
    pub fn conversation_header(&self) -> Option<http::HeaderValue> {
        self.key()
            .and_then(|k| http::HeaderValue::from_str(&k.conversation).ok())
    }

    /// What to forward: the body untouched when the first look decided so,
    /// else the parsed pipeline's decision (folding inline if it must).
    pub async fn prepare(
        &mut self,
        app: &Arc<App>,
        headers: &HeaderMap,
    ) -> Result<Prepared, ApiError> {
        self.prepare_for(app, headers, false).await
    }

    /// [`Self::prepare`] for a caller that sends the view on itself
    /// (`POST /foldgate/v1/compress`): no recall can be answered, so the
    /// view carries no recall hint ([`FoldRequest::without_recall`]).
    pub async fn prepare_without_recall(
        &mut self,
        app: &Arc<App>,
        headers: &HeaderMap,
    ) -> Result<Prepared, ApiError> {
        self.prepare_for(app, headers, true).await
    }

    async fn prepare_for(
        &mut self,
        app: &Arc<App>,
        headers: &HeaderMap,
        engine_only: bool,
    ) -> Result<Prepared, ApiError> {
        if let Stage::Raw { look, .. } = &mut self.stage {
            if let Some(prepared) = look.untouched.take() {
                return Ok(prepared);
            }
        }
        let chain = match &mut self.stage {
            Stage::Raw { look, .. } => look.chain.take(),
            _ => None,
        };
        let turn = self.upgrade(app, headers)?;
        if engine_only {
            turn.without_recall();
        }
        // The chain as the first look read it (`None`: nothing stored).
        turn.prepare(chain).await
    }

    /// After the upstream said the prompt is too long: plans again against
    /// a window no larger than `window` (`said`: the one the upstream
    /// named), which forces an emergency fold.
    pub async fn prepare_smaller(
        &mut self,
        app: &Arc<App>,
        headers: &HeaderMap,
        (window, said): (u32, Option<u32>),
    ) -> Result<Prepared, ApiError> {
        self.upgrade(app, headers)?;
        if let Stage::Parsed {
            fields,
            lent: lent @ true,
            ..
        } = &mut self.stage
        {
            *fields = self.api.decode_at(&self.path, &self.bytes)?.fields;
            *lent = false;
        }
        let turn = self.upgrade(app, headers)?;
        turn.shrink_window(window, said);
        let chain = turn.load().await;
        turn.prepare(chain).await
    }

    /// The body to send for `prepared`: the client's bytes when the view is
    /// the messages unchanged, else the decoded fields with the view in.
    pub fn body(&mut self, prepared: &mut Prepared) -> Result<Bytes, ApiError> {
        let (
            Some(view),
            Stage::Parsed {
                fields, wire, turn, ..
            },
        ) = (prepared.view.take(), &mut self.stage)
        else {
            return Ok(self.bytes.clone());
        };
        self.api
            .encode(fields, turn.messages().values, wire.as_ref(), view)
    }

    /// The request to forward for `prepared` as fields, when its view
    /// differs from the client's messages (`None`: forward the bytes). The
    /// decoded fields are handed over with the view filled in, not copied
    /// (the view's messages are not copied twice either); a retry after
    /// the upstream's context-length error decodes them again.
    pub fn view_fields(&mut self, prepared: &mut Prepared) -> Option<Map<String, Value>> {
        let (
            Some(view),
            Stage::Parsed {
                fields,
                wire,
                turn,
                lent,
            },
        ) = (prepared.view.take(), &mut self.stage)
        else {
            return None;
        };
        *lent = true;
        let mut out = std::mem::take(fields);
        self.api
            .fill(&mut out, turn.messages().values, wire.as_ref(), view);
        Some(out)
    }

    /// The decoded body's fields, once parsed.
    pub fn fields(&self) -> Option<&Map<String, Value>> {
        match &self.stage {
            Stage::Parsed { fields, .. } => Some(fields),
            _ => None,
        }
    }

    /// Whether the conversation's model may recall archived messages.
    pub fn recall(&self) -> bool {
        matches!(&self.stage, Stage::Parsed { turn, .. } if turn.recall())
    }

    /// The window and output reserve the request is planned against
    /// (once parsed).
    pub fn limits(&self) -> Option<(u32, u32)> {
        match &self.stage {
            Stage::Parsed { turn, .. } => {
                Some((turn.budget.context_window, turn.budget.output_reserve))
            }
            _ => None,
        }
    }

    /// The request's fold facts, once parsed.
    pub fn turn(&self) -> Option<&FoldRequest> {
        match &self.stage {
            Stage::Parsed { turn, .. } => Some(turn),
            _ => None,
        }
    }

    /// The body to send for `prepared` with `edit` applied to its fields
    /// (the view in them); the client's bytes when there is no view.
    pub fn body_with(
        &mut self,
        prepared: &mut Prepared,
        edit: impl FnOnce(&mut Map<String, Value>),
    ) -> Result<Bytes, ApiError> {
        let Some(mut fields) = self.view_fields(prepared) else {
            return Ok(self.bytes.clone());
        };
        edit(&mut fields);
        serde_json::to_vec(&fields)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(e.to_string()))
    }

    /// The conversation's key, when it has one.
    pub fn key(&self) -> Option<&crate::state::ConvKey> {
        match &self.stage {
            Stage::Raw { look, .. } => look.key.as_ref(),
            Stage::Parsed { turn, .. } => turn.data.key.as_ref(),
            Stage::Upgrading => None,
        }
    }

    /// The key, taken once the request is answered (for the turn's
    /// record): not cloned on the fast path.
    pub fn take_key(&mut self) -> Option<crate::state::ConvKey> {
        match &mut self.stage {
            Stage::Raw { look, .. } => look.key.take(),
            Stage::Parsed { turn, .. } => turn.data.key.clone(),
            Stage::Upgrading => None,
        }
    }

    /// The decoded form, built on first use.
    fn upgrade(
        &mut self,
        app: &Arc<App>,
        headers: &HeaderMap,
    ) -> Result<&mut FoldRequest, ApiError> {
        if let Stage::Raw { decoded, .. } = &mut self.stage {
            // Whether the first look was the fast path's.
            let fast = decoded.is_none();
            if fast {
                *decoded = Some(Box::new(self.api.decode_at(&self.path, &self.bytes)?));
            }
            let Stage::Raw {
                look,
                decoded: Some(decoded),
            } = std::mem::replace(&mut self.stage, Stage::Upgrading)
            else {
                return Err(ApiError::Internal(
                    "request stage changed while upgrading".into(),
                ));
            };
            let Decoded {
                fields,
                messages,
                wire,
                estimate_fields,
                ..
            } = *decoded;
            // The fast path reads the units, identities and roles the
            // decoder reads (tests/shallow_props.rs): the decision takes
            // them from the look, and the decoder's items are not hashed
            // again.
            let turn = FoldRequest::new(
                app.clone(),
                look,
                (&self.provider.name, &self.tail),
                headers,
                estimate_fields.as_ref().unwrap_or(&fields),
                messages,
                self.api,
            );
            self.stage = Stage::Parsed {
                fields,
                wire,
                turn,
                lent: false,
            };
        }
        match &mut self.stage {
            Stage::Parsed { turn, .. } => Ok(turn),
            _ => Err(ApiError::Internal("request not parsed".into())),
        }
    }
}

/// The first look at a decoded body: its estimate and ids, and unless it
/// is forwarded untouched (opaque, or the model's window not known yet),
/// its conversation key and fold chain.
async fn decoded_look(
    app: &App,
    api: Api,
    headers: &HeaderMap,
    decoded: &Decoded,
    model: &str,
    provider: &str,
) -> Look {
    let estimate =
        app.tokens
            .estimate_messages(model, &decoded.messages, decoded.estimate_fields());
    let ids = decoded.ids();
    if let Some(why) = decoded.opaque {
        tracing::debug!(api = api.name(), why, "forwarded untouched");
        return Look::opaque(estimate, ids, Vec::new());
    }
    let roles = roles_of(&decoded.messages);
    let fingerprint = || key::fingerprint(&roles, &ids);
    let key = key::conversation_key(headers, fingerprint, &app.config.conversation);
    if !estimate.window_known {
        // As on the fast path: untouched until the window is known.
        app.tokens.window_unknown(provider, model);
        return Look::unknown_window(key, estimate, ids, roles);
    }
    let chain = match &key {
        Some(k) => app.store.load(k).await,
        None => None,
    };
    Look {
        key,
        ids,
        roles,
        estimate,
        chain,
        untouched: None,
    }
}
