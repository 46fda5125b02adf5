//! One request's facts for folding ([`FoldRequest`]) and the views it can
//! forward: the plan, the untouched messages, a reused fold, a postponed
//! fold, a refusal. Deciding when to fold, and folding, is in `fold_run`.

use super::fast::{Look, compress_settings};
use super::prepared::{Prepared, now_unix};
use crate::api::Api;
use crate::app::App;
use crate::archive::Row;
use crate::config::{Placement, Policy, Recall};
use crate::error::ApiError;
use crate::fold::compress::{ARCHIVE_FOLD, Room};
use crate::fold::view::Item;
use crate::fold::{
    self, Budget, CannotFit, Compression, Decision, FoldChain, FoldState, MessageId, Messages,
    ViewInfo,
};
use crate::message::{Role, roles_of};
use crate::state::{ConvKey, TurnFold};
use crate::summarize::Credentials;
use crate::tokens::Estimate;
use http::HeaderMap;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Everything about one request that a fold needs. Cheap to clone, owned,
/// so a fold can outlive the request in a background task.
#[derive(Clone)]
pub struct FoldRequest {
    pub(super) app: Arc<App>,
    pub(super) data: Arc<FoldRequestData>,
    pub(super) budget: Budget,
    /// The window an upstream's context-length error named, when one did
    /// (the budget plans with it in foldgate's own estimate).
    said_window: Option<u32>,
    /// What is left of the request's `policy.fold_deadline`.
    pub(super) fold_time: Arc<FoldTime>,
}

/// What is left of a request's `policy.fold_deadline`: every fold the
/// request waits for (an inline or emergency fold, then the reactive one)
/// draws on the same allowance; time spent elsewhere (the upstream's
/// answers) does not.
#[derive(Debug)]
pub(super) struct FoldTime(AtomicU64);

impl FoldTime {
    fn new(allowance: std::time::Duration) -> Self {
        Self(AtomicU64::new(nanos(allowance)))
    }

    /// The time left.
    pub(super) fn left(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    /// Takes `spent` off the time left.
    pub(super) fn spend(&self, spent: std::time::Duration) {
        let spent = nanos(spent);
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left.saturating_sub(spent))
            });
    }
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The request's fixed facts.
pub(super) struct FoldRequestData {
    pub model: String,
    pub provider: String,
    pub key: Option<ConvKey>,
    pub messages: Vec<Value>,
    /// Each message's role, as the first look read it.
    pub roles: Vec<Role>,
    /// Each message's identity, as the first look hashed it.
    pub ids: Vec<MessageId>,
    /// Each message's calibrated tokens, from the estimate; a compressed
    /// message's are its stub's (planning sees the compressed view).
    pub counts: Vec<u32>,
    /// Each message's calibrated tokens as a stub a fold may add, else its
    /// count (empty: a fold adds no stubs).
    pub stubbed: Vec<u32>,
    /// The messages the view shows as stubs (older-turn compression).
    pub compression: Compression,
    pub policy: Policy,
    pub estimate: Estimate,
    pub credentials: Credentials,
    /// The wire format.
    pub api: Api,
    /// The request's route tail (see [`crate::api::Route`]).
    pub tail: Arc<str>,
    /// Where the summary goes, as the wire format allows.
    pub placement: Placement,
    /// No model round trip follows (`POST /foldgate/v1/compress`): no
    /// recall is offered or injected, and stubs, new folds and reused
    /// summaries carry no recall hint.
    pub engine_only: bool,
}

impl FoldRequest {
    /// Gathers what the decision needs from the first look (key, message
    /// identities, estimate) and the request's top-level `fields`; takes
    /// the engine's `messages` (aligned with the look's identities and
    /// counts).
    pub fn new(
        app: Arc<App>,
        look: Look,
        (provider, tail): (&str, &Arc<str>),
        headers: &HeaderMap,
        request: &Map<String, Value>,
        messages: Vec<Value>,
        api: Api,
    ) -> Self {
        let Look {
            key,
            ids,
            roles,
            estimate,
            ..
        } = look;
        // An opaque body's look read no roles (it is planned only after
        // an upstream's context-length error).
        let roles = if roles.len() == messages.len() {
            roles
        } else {
            roles_of(&messages)
        };
        let config = &app.config;
        let model = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut auth = HeaderMap::new();
        for name in crate::api::key_headers() {
            if let Some(v) = headers.get(name) {
                auth.insert(name.clone(), v.clone());
            }
        }
        let policy = config.policy_for(provider, &model);
        let mut data = FoldRequestData {
            counts: Vec::new(),
            stubbed: Vec::new(),
            compression: Compression::default(),
            policy,
            model,
            provider: provider.to_string(),
            key,
            credentials: Credentials {
                headers: auth,
                drop_client_auth: !config.server.api_keys.is_empty(),
            },
            messages,
            roles,
            ids,
            estimate,
            api,
            tail: tail.clone(),
            placement: api.placement(config.summary.placement),
            engine_only: false,
        };
        data.compress(&app);
        let budget = Budget::for_request(config, &data.policy, &data.estimate, now_unix());
        let fold_time = Arc::new(FoldTime::new(data.policy.fold_deadline));
        Self {
            app: app.clone(),
            data: Arc::new(data),
            budget,
            said_window: None,
            fold_time,
        }
    }

    /// Whether this conversation's model is offered the recall tool: the
    /// tool is its recall mode and the conversation is keyed.
    pub fn recall(&self) -> bool {
        self.data.recall(&self.app) == Recall::Tool
    }

    /// Whether foldgate injects recalled excerpts for this conversation.
    pub fn inject(&self) -> bool {
        self.data.recall(&self.app) == Recall::Inject
    }

    /// For a caller that makes no model round trip after the view
    /// (`POST /foldgate/v1/compress`): nothing can answer a recall call,
    /// so none is offered and no stub, summary or ledger mentions one.
    pub fn without_recall(&mut self) {
        match Arc::get_mut(&mut self.data) {
            Some(data) => {
                data.engine_only = true;
                data.compress(&self.app);
            }
            // Only a request just upgraded is asked, before anything
            // shares its facts.
            None => tracing::warn!("request facts already shared; recall left as configured"),
        }
    }

    /// After the upstream said the prompt is too long: plan again against
    /// a window no larger than `window` (in foldgate's estimate; `said`:
    /// the one the upstream named), every budget derived from it, which
    /// forces an emergency fold.
    pub fn shrink_window(&mut self, window: u32, said: Option<u32>) {
        self.budget = self
            .budget
            .shrunk(&self.app.config, &self.data.policy, window);
        self.said_window = said;
    }

    /// Whether the conversation's last fold failed too recently to try again.
    pub(super) fn backing_off(&self) -> bool {
        let background = &self.app.background;
        self.data
            .key
            .as_ref()
            .is_some_and(|k| background.backing_off(k))
    }

    /// Stores the messages `prepared`'s view shows as stubs in the archive
    /// (each once per process; the backends keep a message stored at its
    /// position once anyway) and counts them. When the archive spool is
    /// full, the view sends those messages whole instead, with a warning:
    /// a stub whose message is not archived would point recall at nothing.
    pub(super) fn archive_compressed(&self, prepared: &mut Prepared) {
        let (Some(items), Some(key)) = (&mut prepared.view, &self.data.key) else {
            return;
        };
        if prepared.compressed == 0 {
            return;
        }
        let data = &self.data;
        let stubbed: Vec<usize> = items
            .iter()
            .filter_map(|item| match item {
                Item::Stub(i, _) => Some(*i),
                _ => None,
            })
            .collect();
        let saved: u64 = stubbed
            .iter()
            .filter_map(|&i| {
                let full = data.estimate.messages.get(i)?;
                let stub = data.compression.tokens_of(i)?;
                Some(u64::from(full.saturating_sub(stub)))
            })
            .sum();
        let now = i64::try_from(now_unix()).unwrap_or(i64::MAX);
        let positions = stubbed.iter().filter_map(|&i| Some((i, *data.ids.get(i)?)));
        let stored = self.app.archive.store_compressed(key, positions, |i| {
            let (message, id) = (data.messages.get(i)?, *data.ids.get(i)?);
            Some(Row::of(i, message, id, ARCHIVE_FOLD, data.api.name(), now))
        });
        if let Err(full) = stored {
            tracing::warn!(target: "foldgate::archive", conversation = %key, error = %full, "compression not applied");
            for item in items.iter_mut() {
                if let Item::Stub(i, _) = item {
                    *item = Item::Original(*i);
                }
            }
            let raw = u64::from(prepared.raw_tokens_out) + saved;
            prepared.raw_tokens_out = u32::try_from(raw).unwrap_or(u32::MAX);
            prepared.tokens_out = data.estimate.calibrated(raw);
            prepared.compressed = 0;
            prepared.warning.get_or_insert_with(|| {
                "the archive spool is full; forwarded without compression".into()
            });
            return;
        }
        let m = &self.app.metrics;
        m.compressed_messages.inc_by(stubbed.len() as u64);
        m.compressed_tokens_saved
            .inc_by(data.estimate.calibrated(saved).into());
    }

    /// Forwards the current view without the fold the triggers asked for:
    /// the summarizer failed recently (the view still fits the window).
    pub(super) fn postpone(&self, base: Option<&FoldState>) -> Result<Prepared, ApiError> {
        self.app.metrics.folds_postponed.inc();
        self.reuse(base, Some("fold postponed: the summarizer failed recently"))
    }

    /// The policy a background fold plans with: triggers at the prefold
    /// ratio, risen toward the trigger as far as the conversation's steps
    /// are large against the prefold band
    /// ([`fold::trigger::prefold_ratio`]), and cuts as far below it as a
    /// normal fold cuts below the trigger.
    fn prefold_policy(&self) -> Policy {
        let p = &self.data.policy;
        let budget = &self.budget;
        let room = budget.context_window.saturating_sub(budget.output_reserve);
        let ratio = fold::trigger::prefold_ratio(
            p,
            budget.context_window,
            u64::from(room),
            self.step_tokens(),
        );
        let shift = p.trigger_ratio - ratio;
        Policy {
            trigger_ratio: ratio,
            reset_ratio: (p.reset_ratio - shift).max(0.05),
            ..p.clone()
        }
    }

    /// Tokens the conversation grows by between requests: the mean of its
    /// newest steps ([`fold::trigger::step_tokens`]), each message counted
    /// whole as it arrived (calibrated), not as a stub it may show as now.
    fn step_tokens(&self) -> Option<u64> {
        let estimate = &self.data.estimate;
        let whole: Vec<u32> = estimate
            .messages
            .iter()
            .map(|&c| estimate.calibrated(u64::from(c)))
            .collect();
        fold::trigger::step_tokens(&self.data.messages, &whole, fold::trigger::RECENT_STEPS)
    }

    pub(super) async fn load(&self) -> Option<Arc<FoldChain>> {
        match &self.data.key {
            Some(key) => self.app.store.load(key).await,
            None => None,
        }
    }

    /// The decision for this request's own view under `policy`.
    pub(super) fn decide(&self, chain: Option<&FoldChain>, policy: &Policy) -> Decision {
        self.decide_within(chain, policy, &self.budget)
    }

    /// The decision a background fold carries out: under the prefold
    /// policy ([`Self::prefold_policy`]), for the later request it lands
    /// on ([`Budget::lands_later`]).
    pub(super) fn decide_background(&self, chain: Option<&FoldChain>) -> Decision {
        let budget = Budget {
            lands_later: true,
            ..self.budget
        };
        self.decide_within(chain, &self.prefold_policy(), &budget)
    }

    fn decide_within(
        &self,
        chain: Option<&FoldChain>,
        policy: &Policy,
        budget: &Budget,
    ) -> Decision {
        // Only the messages foldgate adds are counted here.
        let counter = |m: &Value| {
            let raw = self.app.tokens.message_tokens(&self.data.model, m);
            self.data.estimate.calibrated(u64::from(raw))
        };
        let placement = self.data.placement;
        fold::plan(self.messages(), chain, policy, budget, &counter, placement)
    }

    /// The request's messages with their identities and counts.
    pub(super) fn messages(&self) -> Messages<'_> {
        Messages {
            values: &self.data.messages,
            roles: &self.data.roles,
            ids: &self.data.ids,
            counts: &self.data.counts,
            stubbed: &self.data.stubbed,
        }
    }

    /// Forwards the view of `base` (or the messages unchanged).
    pub(super) fn reuse(
        &self,
        base: Option<&FoldState>,
        warning: Option<&str>,
    ) -> Result<Prepared, ApiError> {
        match base {
            None => Ok(self.prepared(None, TurnFold::None, warning)),
            Some(state) => {
                self.app.metrics.folds_reused.inc();
                Ok(self.prepared(Some(state), TurnFold::Reused, warning))
            }
        }
    }

    /// Even the smallest valid view overflows the window: refuse clearly
    /// rather than drop a message the summary does not hold.
    pub(super) fn cannot_fit(&self, c: &CannotFit) -> Result<Prepared, ApiError> {
        self.app.metrics.cannot_fit.inc();
        let planned = self.budget.context_window;
        let window = match self.said_window {
            Some(said) if said != planned => {
                format!("{said} tokens (the upstream's; about {planned} as foldgate counts)")
            }
            _ => format!("{planned} tokens"),
        };
        Err(ApiError::ContextLength(format!(
            "the conversation cannot fit {}'s context window of {window}: the smallest view foldgate can make \
             (pinned messages, up to {} tokens of summary, the last user message and the most recent messages) \
             needs about {} tokens, plus {} for the output",
            self.data.model,
            self.budget.summary_reserve,
            c.smallest.unwrap_or(c.view.tokens),
            self.budget.output_reserve,
        )))
    }

    /// No trigger fired, or one fired without a valid cut (the view fits).
    pub(super) fn no_fold(&self, info: &ViewInfo) -> Result<Prepared, ApiError> {
        let warning = info.skipped.map(|reason| {
            tracing::debug!(model = %self.data.model, reason = reason.as_str(), "fold trigger fired but no valid cut exists");
            "fold trigger fired but no valid cut exists"
        });
        self.reuse(info.base.as_ref(), warning)
    }

    /// What to forward for `state`, a state [`fold::plan`] matched or made
    /// for these very messages (`None`: the messages unchanged). The view
    /// is laid out once, its tokens summed from the counts the estimate
    /// already has (only foldgate's own messages are counted here), and the
    /// covered prefix is not hashed again (debug builds re-check it).
    pub(super) fn prepared(
        &self,
        state: Option<&FoldState>,
        fold: TurnFold,
        warning: Option<&str>,
    ) -> Prepared {
        let estimate = &self.data.estimate;
        let compression = &self.data.compression;
        let placement = self.data.placement;
        let items = match state {
            None if compression.is_empty() => None,
            None => Some(fold::view::layout(&self.data.messages, None, placement)),
            // A summary written with recall on, shown where none answers.
            Some(state) if state.recall && self.data.engine_only => {
                let quiet = FoldState {
                    recall: false,
                    ..state.clone()
                };
                Some(fold::view::layout_planned(
                    self.messages(),
                    &quiet,
                    placement,
                ))
            }
            Some(state) => Some(fold::view::layout_planned(
                self.messages(),
                state,
                placement,
            )),
        };
        let (view, raw_out, compressed) = match items {
            None => (None, u64::from(estimate.raw_input_tokens), 0),
            Some(items) => {
                let mark = state.map_or(0, |s| s.retained.stubs_before);
                let items = compression.apply_marked(items, mark);
                let mut compressed = 0;
                let counted: u64 = items
                    .iter()
                    .map(|item| match item {
                        Item::Original(i) => estimate.messages.get(*i).copied().unwrap_or(0),
                        Item::Stub(i, _) => {
                            compressed += 1;
                            compression.tokens_of(*i).unwrap_or(0)
                        }
                        Item::New(v) => self.app.tokens.message_tokens(&self.data.model, v),
                    })
                    .map(u64::from)
                    .sum();
                (
                    Some(items),
                    u64::from(estimate.overhead) + counted,
                    compressed,
                )
            }
        };
        let view_ids = self.view_ids(view.as_deref());
        Prepared {
            view_ids,
            view,
            fold,
            tokens_in: estimate.input_tokens,
            tokens_out: estimate.calibrated(raw_out),
            raw_tokens_out: u32::try_from(raw_out).unwrap_or(u32::MAX),
            warning: warning.map(str::to_string),
            compressed,
            injected: 0,
            landed: state.map(|s| s.messages),
        }
    }
    /// The ids of the view's messages (the request's own when it forwards
    /// them unchanged).
    fn view_ids(&self, view: Option<&[Item]>) -> Arc<[u128]> {
        let ids = &self.data.ids;
        match view {
            None => ids.as_slice().into(),
            Some(items) => items
                .iter()
                .map(|item| match item {
                    Item::Original(i) => ids.get(*i).copied().unwrap_or_default(),
                    // A stub is a pure function of its message: its identity
                    // follows the message's, without hashing the stub again.
                    Item::Stub(i, _) => !ids.get(*i).copied().unwrap_or_default(),
                    Item::New(v) => crate::message::message_id(v),
                })
                .collect(),
        }
    }
}

impl FoldRequestData {
    /// How this request's conversation recalls archived messages: its
    /// model's mode; nothing without a key (no archive) or for the engine
    /// alone ([`FoldRequest::without_recall`]).
    fn recall(&self, app: &App) -> Recall {
        match self.engine_only {
            true => Recall::Off,
            false => recall_for(app, &self.model, self.key.as_ref()),
        }
    }

    /// Chooses the older-turn stubs ([`compression_for`]) and the counts
    /// planning sees with them.
    fn compress(&mut self, app: &App) {
        self.compression = compression_for(
            app,
            (&self.provider, &self.model),
            self.key.as_ref(),
            &self.policy,
            (&self.messages, &self.ids),
            (&self.estimate, self.api, self.engine_only),
        );
        let estimate = &self.estimate;
        self.counts = self
            .compression
            .counts(&estimate.messages, |c| estimate.calibrated(u64::from(c)));
        self.stubbed = self
            .compression
            .stubbed(&self.counts, |c| estimate.calibrated(u64::from(c)));
    }
}

/// How a conversation recalls archived messages: its model's mode, and
/// nothing for a conversation without a key (it has no archive).
fn recall_for(app: &App, model: &str, key: Option<&ConvKey>) -> Recall {
    match key {
        Some(_) => app.config.recall_for(model),
        None => Recall::Off,
    }
}

/// The request's older-turn compression ([`compress_settings`]); stubs
/// come from the process's cache, with the recall line unless
/// `engine_only`.
fn compression_for(
    app: &App,
    (provider, model): (&str, &str),
    key: Option<&ConvKey>,
    policy: &Policy,
    (messages, ids): (&[Value], &[MessageId]),
    (estimate, api, engine_only): (&Estimate, Api, bool),
) -> Compression {
    let Some(settings) = compress_settings(app, (provider, model), key.is_some(), api) else {
        return Compression::default();
    };
    let recall = !engine_only && recall_for(app, model, key) == Recall::Tool;
    let count = |m: &Value| app.tokens.message_tokens(model, m);
    let raw = &estimate.messages;
    // Only batches that pay for their cache miss (docs/folding.md).
    let room = Room::of(policy.trigger_ratio, estimate.context_window);
    let settings = (&settings, policy.preserve_recent);
    Compression::within(messages, raw, settings, room, &mut |i| {
        let me = (*ids.get(i)?, *raw.get(i)?);
        app.stubs.get(messages, i, me, (model, recall), &count)
    })
}
