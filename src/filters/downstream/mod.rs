//! Downstream (per-request) filter: routes the request and shapes the response. The stream's
//! state and its callbacks are here; `request` decides and hands the plan to Envoy, `response`
//! shapes what the caller gets, `accounting` records what the request leaves behind.

mod accounting;
mod request;
mod response;

use std::rc::Rc;

use super::attempts::{cooled_down_late, finished, read_record, read_records, started, watch_chunk, AttemptOf};
use super::caller::HostFacts;
use super::host::{find, span, status_of, Action, Host};
use super::mesh::{self, Admission, AdmissionState};
use super::shared::{count, stats_key, step_in_flight, stick, tag, update_stats, SharedHealth};
use super::usage::{self, Attributes, UsageKey, Used};
use super::{Configured, Filter};
use crate::answer::ending::{ending, Ending};
use crate::answer::errors::ApiError;
use crate::answer::listing;
use crate::answer::response::{
    attempt_log, is_json_object, rewrite_answer, wrap_provider_error, Collected, Served, SseRewriter,
};
use crate::answer::sse::interrupted_event_for;
use crate::answer::watch::{AttemptWatch, MAX_ERROR_BODY_BYTES};
use crate::api::{Api, Surface};
use crate::protocol::bytes::u64_at;
use crate::protocol::outcome::{AttemptRecord, CutShort, StopReason};
use crate::protocol::plan::{body_property, AttemptPlan, CONVERSE_BODY_PROPERTY, INTERRUPTED_PROPERTY, PLAN_PROPERTY};
use crate::protocol::rewrite::{api_headers, attempt_rewrite, ANTHROPIC_VERSION};
use crate::protocol::scope;
use crate::protocol::slots::{
    encode_slots, next_state_property, next_token, Handoff, NEXT_CLUSTER_HEADER, SLOTS_PROPERTY,
};
use crate::routing::decision::{candidates_json, decide_for, hand_off, Audit, Decision, HandOff, AUDIT_PROPERTY};
use crate::routing::quality::{judge_body, StreamJudge, Verdict};
use crate::routing::router::policy_allows;
use crate::surface::{debug_allowed, disposition, is_caller_router_control, Disposition};
use crate::telemetry::strategy_metric_name;
use crate::translate::stream::StreamTranslator;
use crate::wiring::{
    ATTEMPTS_HEADER, ATTEMPT_LOG_HEADER, AUTHORITY_HEADER, AUTO_HEADER, CANDIDATES_HEADER, DEBUG_HEADER,
    INTERNAL_PREFIX, LIMITS_HEADER, MODEL_HEADER, OWN_REPLY_HEADER, PASSTHROUGH_HEADER, POLICY_HEADER, PROVIDER_HEADER,
    ROUTING_HEADER, STRATEGY_HEADER, WARNING_HEADER,
};

/// Envoy drains an HTTP/1 connection after any local reply with status 400 (it assumes a
/// malformed request). A 400 the filter answers after reading the whole request is sent as
/// this status and set back to 400 on the way out, so the caller's connection stays open.
const LOCAL_400_CARRIER: u32 = 422;
/// A non-streaming answer larger than this is passed on unrewritten (bounds the filter's memory).
const MAX_REWRITE_BYTES: usize = 64 << 20;
/// Answers up to this size keep the response headers until the rewritten body is complete, so
/// it goes out with its own `content-length`. Larger ones release the headers without a length
/// (chunked) and the rewritten body follows at the end: writing more than Envoy's buffer limit
/// into a held response would make Envoy answer 500 instead.
const HOLD_HEADERS_BYTES: usize = 256 << 10;
/// A provider error body larger than this is passed on as it is.
const MAX_ERROR_BYTES: usize = 64 << 10;

enum BodyAction {
    None,
    /// Non-streaming JSON answer: collected in the filter (not in Envoy's buffer, so answers
    /// larger than the buffer limit work), then rewritten whole (catalog model id, `provider`,
    /// `usage.cost`) and handed back as pieces of the collected bytes (no second copy).
    Rewrite {
        served: Served,
        collected: Collected,
        headers_sent: bool,
    },
    /// SSE answer: every event rewritten as it passes, nothing buffered but a split event.
    Stream(SseRewriter),
    /// SSE answer of an endpoint of another API: translated event by event into the caller's
    /// API, then rewritten as `Stream` (not for a Google array stream).
    Translate(Box<StreamTranslator>, Option<SseRewriter>),
    /// A provider's error returned to the caller: wrapped in the OpenAI shape if not JSON.
    ProviderError {
        status: u16,
        slug: String,
        collected: Vec<u8>,
    },
    /// Every attempt failed: the whole body becomes this error. `late_retry_after`: a 429 whose
    /// `Retry-After` is not known yet, with this many attempt records to read again at the end
    /// (a Gemini 429 names its delay only in the body, read by its attempt's filter).
    Replace {
        body: String,
        late_retry_after: Option<usize>,
    },
    /// A served stream the filter does not rewrite: if the serving attempt broke off, end it
    /// with an error event.
    WatchStream,
}

/// A first attempt this filter prepared itself: it runs on the provider's first-attempt cluster,
/// without the per-attempt filter, so this filter records it when it serves (or fails without
/// a retry after it); a retry's per-attempt filter records it otherwise.
struct PreparedFirst {
    model: String,
    slug: String,
    in_catalog: bool,
    /// The planner's index of its endpoint.
    planned: u16,
    watch: AttemptWatch,
    /// Its answer is the one the caller gets (the cluster's hook named attempt 1).
    answered: bool,
    recorded: bool,
    /// The served answer's quality, recorded with the outcome.
    verdict: Option<Verdict>,
}

/// `switchyard_requests_total{result}` of routed requests as they end, and
/// `switchyard_fallbacks_total{kind}` (the gauges' first tick creates each at zero).
pub const SERVED_METRIC: &str = "switchyard.requests_total.result.served";
pub const INTERRUPTED_METRIC: &str = "switchyard.requests_total.result.interrupted";
pub const PROVIDER_ERROR_METRIC: &str = "switchyard.requests_total.result.provider_error";
pub const FAILED_METRIC: &str = "switchyard.requests_total.result.failed";
pub const FALLBACK_PROVIDER_METRIC: &str = "switchyard.fallbacks_total.kind.provider";
pub const FALLBACK_MODEL_METRIC: &str = "switchyard.fallbacks_total.kind.model";
/// The counters above, every one.
pub const END_METRICS: [&str; 6] = [
    SERVED_METRIC,
    INTERRUPTED_METRIC,
    PROVIDER_ERROR_METRIC,
    FAILED_METRIC,
    FALLBACK_PROVIDER_METRIC,
    FALLBACK_MODEL_METRIC,
];

/// `switchyard_failover_incomplete_total{reason}`.
pub fn failover_incomplete_metric(reason: StopReason) -> String {
    format!("switchyard.failover_incomplete_total.reason.{}", reason.name())
}

/// How a routed request ended, counted once in `on_log` (`switchyard_requests_total{result}`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum RequestResult {
    /// A 2xx/3xx answer; becomes `interrupted` if its body broke off.
    Served,
    ProviderError,
    Failed,
}

pub struct Stream<H: Host> {
    host: H,
    config: Rc<Configured>,
    routed: bool,
    path: String,
    debug: bool,
    decision: Option<Decision>,
    /// Credential headers the caller sent (removed before any attempt).
    caller_credentials: Vec<String>,
    /// Debug header value, computed with the statistics the decision used.
    candidates: Option<String>,
    /// Auto router explanation (debug header), when the request asked for `auto`.
    auto_explain: Option<String>,
    body_action: BodyAction,
    /// Request body bytes buffered so far.
    body_size: usize,
    /// The operator policy selected for this caller (index into `Policies::list`) and what
    /// selected it.
    policy: Option<usize>,
    selected_by: Option<&'static str>,
    /// Attempts in the plan handed to Envoy (after the budget cut).
    planned: usize,
    result: Option<RequestResult>,
    /// The response's end was seen (headers or body with end_of_stream).
    response_complete: bool,
    /// The caller's `x-session-id` (names a conversation for sticky routing).
    session: Option<String>,
    caller_scope: u64,
    /// (model id, slug) of the endpoint that served.
    served: Option<(String, String)>,
    /// Judges a served stream's quality from its chunks.
    judge: Option<StreamJudge>,
    /// When the routed request was handed to Envoy (for the audit record's TTFT).
    decided_ms: u64,
    /// The whole request has been received (a local reply then keeps the connection).
    request_complete: bool,
    /// This stream's local 400 was sent with the carrier status.
    carried_400: bool,
    /// The API of the request's path: every error it gets comes in that API's shape.
    api: Api,
    /// A routed request's surface (Google: model and method from the path).
    surface: Option<Surface>,
    /// The caller's `x-switchyard-routing` header (routing fields outside the body).
    routing_header: Option<String>,
    /// The answer is an event stream (only a stream can be marked interrupted after it ended).
    sse_response: bool,
    /// The serving attempt marked the answer interrupted (read once, at the stream's end).
    interrupted: Option<bool>,
    /// Caller headers the `upstream_headers` policy keeps from providers (removed here when this
    /// filter prepares the first attempt).
    swept: Vec<String>,
    /// The first attempt, when this filter prepared it.
    first: Option<PreparedFirst>,
    /// Mesh-wide limits that apply to this request and their admission.
    admission: Option<Admission>,
    /// Routed and held until the admission answers.
    held: bool,
    /// The limits were settled (once, when the answer ended, or at the log).
    settled: bool,
    /// The served answer's usage, read for the usage metrics and the limits' settlement (the
    /// prepared first attempt's own watch serves when it answered).
    usage_watch: Option<AttemptWatch>,
    /// The serving endpoint speaks this other API: its answer is translated back (`translate`).
    translate_from: Option<Api>,
    /// The prepared first attempt answered a Gemini 429 that Envoy passes on: its body is read
    /// at its end for the delay it names (that attempt has no per-attempt filter to read it).
    first_error_body: bool,
    /// `telemetry.caller`'s label index for this caller, when configured.
    caller: Option<usize>,
    /// Catalog model index the caller asked for (the number of models for `auto`).
    request_model: usize,
    /// The span and access-log attributes were written (once, at the answer's end).
    attributes_written: bool,
    /// The caller's `x-request-id`, kept for the attributes (providers never see it).
    request_id: Option<String>,
}

impl<H: Host> Stream<H> {
    pub fn new(host: H, config: Rc<Configured>) -> Stream<H> {
        Stream {
            host,
            config,
            routed: false,
            path: String::new(),
            debug: false,
            decision: None,
            caller_credentials: Vec::new(),
            candidates: None,
            auto_explain: None,
            body_action: BodyAction::None,
            body_size: 0,
            policy: None,
            selected_by: None,
            planned: 0,
            result: None,
            response_complete: false,
            session: None,
            caller_scope: 0,
            served: None,
            judge: None,
            decided_ms: 0,
            request_complete: false,
            carried_400: false,
            api: Api::OpenAi,
            surface: None,
            routing_header: None,
            sse_response: false,
            interrupted: None,
            swept: Vec::new(),
            first: None,
            admission: None,
            held: false,
            settled: false,
            usage_watch: None,
            translate_from: None,
            first_error_body: false,
            caller: None,
            request_model: 0,
            attributes_written: false,
            request_id: None,
        }
    }

    fn policy_name(&self) -> Option<&str> {
        self.policy.and_then(|i| self.config.policies.list.get(i)).map(|p| p.name.as_str())
    }
}

/// The native build's fault injection: a panic the hook must catch (test-only feature).
#[cfg(all(feature = "fault-injection", not(target_arch = "wasm32")))]
#[allow(clippy::panic)]
fn forced_panic() {
    panic!("x-switchyard-test-trap: forced panic (fault-injection build)");
}

impl<H: Host> Filter for Stream<H> {
    fn on_request_headers(&mut self, end_of_stream: bool) -> Action {
        // Only Switchyard's own routes (the route mark): a request for another virtual host or
        // route of a shared listener goes on untouched. Every later callback then finds
        // nothing to do (no decision, no body action, nothing prepared).
        if !span("route_mark", || scope::is_marked(self.host.property(&scope::route_mark_path()).as_deref())) {
            return Action::Continue;
        }
        self.request_complete = end_of_stream;
        let headers = self.host.req_headers();
        #[cfg(all(feature = "fault-injection", target_arch = "wasm32"))]
        if find(&headers, "x-switchyard-test-trap").is_some() {
            core::arch::wasm32::unreachable();
        }
        #[cfg(all(feature = "fault-injection", not(target_arch = "wasm32")))]
        if find(&headers, "x-switchyard-test-trap").is_some() {
            forced_panic();
        }
        // Switchyard's headers are never taken from a caller as they are: the internal ones
        // (slots, markers) would steer, the caller-facing ones (`x-switchyard-routing`,
        // `x-switchyard-debug`) are read below from this snapshot and reach no provider.
        for (h, _) in headers.iter().filter(|(k, _)| k.starts_with(INTERNAL_PREFIX)) {
            self.host.set_req_header(h, None);
        }
        let method = find(&headers, ":method").unwrap_or_default();
        let path = find(&headers, ":path").unwrap_or_default();
        self.path = path.to_string();
        self.api = Api::of_path(path);
        match disposition(method, path, &self.config.catalog) {
            Disposition::Route(surface) => self.surface = Some(surface),
            Disposition::Listing(which) => {
                self.select_policy(&headers);
                // An Anthropic client (its SDK always sends `anthropic-version`) gets Anthropic's
                // shapes, errors included.
                let anthropic = find(&headers, ANTHROPIC_VERSION).is_some();
                if anthropic {
                    self.api = Api::Anthropic;
                }
                return self.listing(&which, anthropic);
            }
            Disposition::PassThrough(cluster) => {
                self.host.set_req_header(PASSTHROUGH_HEADER, Some(&cluster));
                return Action::Continue;
            }
            Disposition::Local(e) => return self.reject(&e),
        }
        self.routed = true;
        for (name, _) in headers.iter().filter(|(k, _)| is_caller_router_control(k)) {
            self.host.set_req_header(name, None);
        }
        self.select_policy(&headers);
        if let Some(c) = &self.config.telemetry.caller {
            self.caller = Some(c.index(find(&headers, &c.header)));
        }
        if self.config.telemetry.request_attributes {
            self.request_id = find(&headers, "x-request-id").map(str::to_string);
        }
        let catalog = &self.config.catalog;
        self.caller_credentials =
            catalog.credential_headers.iter().filter(|h| find(&headers, h).is_some()).cloned().collect();
        // What providers must not see of the caller's headers (removed before a first attempt
        // this filter prepares), less what is removed anyway.
        let removed_anyway = |k: &str| {
            is_caller_router_control(k)
                || k.starts_with(INTERNAL_PREFIX)
                || self.caller_credentials.iter().any(|c| c == k)
                || self.config.policies.trusted_headers.iter().any(|t| t == k)
        };
        self.swept = catalog
            .upstream_headers
            .to_remove(headers.iter().map(|(k, _)| k.as_str()).filter(|k| !removed_anyway(k)))
            .into_iter()
            .map(str::to_string)
            .collect();
        self.session = find(&headers, "x-session-id").filter(|v| v.len() <= 256).map(str::to_string);
        // Conversations are per caller: its credential (hashed, never kept) scopes the key.
        self.caller_scope = ["authorization", "x-api-key", "x-goog-api-key"]
            .iter()
            .filter_map(|h| find(&headers, h))
            .flat_map(str::bytes)
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        if let Some(v) = find(&headers, ROUTING_HEADER) {
            self.routing_header = Some(v.to_string());
        }
        if let Some(v) = find(&headers, DEBUG_HEADER) {
            self.debug = debug_allowed(v, &catalog.routing);
        }
        let limit = catalog.routing.max_body_bytes;
        if let Some(len) = find(&headers, "content-length").and_then(|v| v.parse::<u64>().ok()) {
            if len > limit {
                return self.reject(&ApiError::too_large(limit));
            }
        }
        if end_of_stream {
            return self.reject(&ApiError::invalid_json("request body is empty; expected a JSON object"));
        }
        // Mesh-wide limits are checked while the body arrives (nothing is called when none
        // applies).
        let policy = self.policy_name().map(str::to_string);
        let config = Rc::clone(&self.config);
        self.admission =
            mesh::admit(&self.host, &config, policy.as_deref(), &mut HostFacts { host: &self.host, headers: &headers });
        if let Some(Admission { state: AdmissionState::Refused(e), .. }) = &self.admission {
            let e = e.clone();
            self.routed = false;
            return self.reject(&e);
        }
        // Wait for the whole body before routing (needs allow_on_headers_stop_iteration).
        Action::Pause
    }

    fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !self.routed || self.decision.is_some() {
            return Action::Continue;
        }
        let limit = self.config.catalog.routing.max_body_bytes;
        if body_size as u64 > limit {
            return self.reject(&ApiError::too_large(limit));
        }
        self.body_size = body_size;
        if !end_of_stream {
            return Action::Pause;
        }
        self.route_admitted(body_size)
    }

    // A body followed by trailers never sees end_of_stream in on_http_request_body: route here,
    // or the request would continue unrouted.
    fn on_request_trailers(&mut self) -> Action {
        if !self.routed || self.decision.is_some() {
            return Action::Continue;
        }
        self.route_admitted(self.body_size)
    }

    fn on_response_headers(&mut self, end_of_stream: bool) -> Action {
        let Some(d) = &self.decision else {
            // Our own 400 sent with the carrier status: restore it.
            if self.carried_400 {
                self.host.set_resp_header(":status", Some("400"));
            }
            return Action::Continue;
        };
        let strategy = d.plan.strategy.to_string();
        let warning = d.plan.warnings.join("; ");
        let primary_model = d.model.clone();
        let config = Rc::clone(&self.config);
        let catalog = &config.catalog;
        let headers = self.host.resp_headers();
        // One clock reading for this callback (each reading is a host call).
        let now = self.host.now_ms();
        let status = status_of(&headers);
        // A provider that compressed its answer although asked for `identity`: the answer goes
        // on as it came (its bytes cannot be rewritten); the caller is told why it carries no
        // `provider`, catalog `model` or `usage.cost` (the headers still name both).
        let mut warning = warning;
        if let Some(encoding) = find(&headers, "content-encoding").filter(|e| *e != "identity" && status < 300) {
            let note = format!(
                "the provider answered with content-encoding {}: passed on unrewritten (no provider, model or usage.cost in the body)",
                crate::answer::errors::echo(encoding)
            );
            warning = if warning.is_empty() { note } else { format!("{warning}; {note}") };
        }
        // The serving attempt names its number; without it (every attempt failed, or Envoy
        // answered) every planned attempt's slot is read.
        let made = find(&headers, ATTEMPTS_HEADER).and_then(|n| n.parse::<usize>().ok());
        // A first attempt prepared here answered: the hook on its cluster names attempt 1
        // (only the per-attempt filter names attempts on the regular clusters).
        let first_answered = made == Some(1) && self.first.is_some();
        self.translate_from = self.serving_api(&headers, first_answered);
        let note = if self.served_converse(&headers, first_answered) {
            self.converse_warning()
        } else {
            self.translate_from.and_then(|api| self.translation_warning(api))
        };
        if let Some(note) = note {
            warning = if warning.is_empty() { note } else { format!("{warning}; {note}") };
        }
        let records = self.attempt_records(&headers, status, made, first_answered, end_of_stream, now);
        let log = attempt_log(catalog, &records, status);
        let policy = self.policy_name().map(str::to_string);
        let ttft_ms = Some(now.saturating_sub(self.decided_ms));
        let candidates = self.candidates.take();
        let auto_explain = self.auto_explain.take();
        // Headers every routed answer carries, final errors included.
        let mut own: Vec<(&str, &str)> = vec![(STRATEGY_HEADER, &strategy), (ATTEMPT_LOG_HEADER, &log)];
        let limits_explained = self.admission.as_ref().filter(|_| self.debug).map(|a| a.explain(&self.config.limits));
        for (name, value) in [
            (LIMITS_HEADER, limits_explained.as_deref()),
            (POLICY_HEADER, policy.as_deref()),
            (WARNING_HEADER, Some(warning.as_str()).filter(|w| !w.is_empty())),
            (CANDIDATES_HEADER, candidates.as_deref()),
            (AUTO_HEADER, auto_explain.as_deref()),
        ] {
            if let Some(v) = value {
                own.push((name, v));
            }
        }
        if end_of_stream {
            self.response_complete = true;
        }
        // Envoy answered itself (no upstream response recorded for the last attempt) or the last
        // attempt failed retryably: the failover is over. If fewer attempts were made than
        // planned, Envoy stopped it early (retry circuit breaker or budget, route timeout).
        let flags = || self.host.property(&["response", "flags"]).and_then(|b| u64_at(&b, 0)).unwrap_or(0);
        let ended = ending(catalog, status, &records, self.planned, flags);
        // A per-attempt filter refused the last attempt (an endpoint a reload removed since the
        // plan was made) and marked its reply as shaped: that reply is the answer.
        let refused = matches!(ended, Ending::Failed { .. })
            && made.is_none()
            && self.host.req_header(OWN_REPLY_HEADER).is_some();
        let audit = Audit {
            policy: policy.as_deref(),
            selected_by: self.selected_by,
            attempts: records.len(),
            strategy: Some(&strategy),
            ttft_ms,
            ..Audit::default()
        };
        if let (false, Ending::Failed { error, cut_short }) = (refused, ended) {
            return self.answer_failed(error, cut_short, audit, own, &headers, end_of_stream);
        }
        for (k, v) in own {
            self.host.set_resp_header(k, Some(v));
        }
        let (served_model, slug) = match self.first.as_ref().filter(|_| first_answered) {
            Some(f) => {
                // No per-attempt filter named the endpoint: name it here.
                self.host.set_resp_header(PROVIDER_HEADER, Some(&f.slug));
                self.host.set_resp_header(MODEL_HEADER, Some(&f.model));
                (f.model.clone(), Some(f.slug.clone()))
            }
            None => (
                find(&headers, MODEL_HEADER).unwrap_or_default().to_string(),
                find(&headers, PROVIDER_HEADER).map(str::to_string),
            ),
        };
        span("audit", || {
            self.audit(Audit {
                model: (!served_model.is_empty()).then_some(served_model.as_str()),
                endpoint: slug.as_deref(),
                status: u32::from(status),
                ..audit
            })
        });
        let Some(slug) = slug else { return Action::Continue };
        if records.len() > 1 && status < 400 {
            let metric = if served_model != primary_model { FALLBACK_MODEL_METRIC } else { FALLBACK_PROVIDER_METRIC };
            count(&self.host, metric);
        }
        let action = self.take_answer(&headers, status, served_model, slug, end_of_stream, now);
        if end_of_stream {
            self.write_attributes(None);
        }
        action
    }

    fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if end_of_stream {
            self.response_complete = true;
        }
        // The chunk is read once, for everything that needs its bytes.
        let rewriting = matches!(
            self.body_action,
            BodyAction::Stream(_)
                | BodyAction::Translate(..)
                | BodyAction::Rewrite { .. }
                | BodyAction::ProviderError { .. }
        );
        let chunk = if rewriting || self.judge.is_some() { self.host.response_body(0, body_size) } else { None };
        // Read once when the prepared first attempt is watched (its chunk and, at the end, its
        // record); `watching_first` cannot turn true in this callback.
        let now = if self.watching_first() { self.host.now_ms() } else { 0 };
        if self.watching_first() {
            if let Some(f) = self.first.as_mut() {
                match &chunk {
                    Some(c) => f.watch.whole_chunk(now, c),
                    // Only the usage needs bytes here: a tail (and an Anthropic stream's head).
                    None => watch_chunk(&self.host, &mut f.watch, body_size, now),
                }
                if end_of_stream {
                    f.watch.body_ended();
                }
            }
        }
        if self.first_error_body && end_of_stream {
            // Held by the final error until here (the filter pauses it): the whole body.
            self.first_error_body = false;
            let body = match &chunk {
                Some(c) => c.get(..MAX_ERROR_BODY_BYTES).unwrap_or(c).to_vec(),
                None => self.host.response_body(0, body_size.min(MAX_ERROR_BODY_BYTES)).unwrap_or_default(),
            };
            self.first_delay_from_body(&body);
        }
        if let Some(w) = self.usage_watch.as_mut() {
            match &chunk {
                Some(c) => w.whole_chunk(now, c),
                None => watch_chunk(&self.host, w, body_size, now),
            }
        }
        let action = self.shape_response_body(body_size, end_of_stream, chunk);
        if end_of_stream && self.result == Some(RequestResult::Served) {
            // Settled before the answer's last bytes reach the caller: its next request's
            // admission finds this one's use counted.
            let used = self.served_usage();
            self.settle_limits(used);
        }
        if end_of_stream && self.watching_first() {
            span("record_outcome", || self.finish_first(now));
        }
        if end_of_stream && self.decision.is_some() {
            self.write_attributes(None);
        }
        action
    }

    fn on_log(&mut self) {
        if let Some(f) = self.first.as_mut() {
            // The first attempt this filter prepared never finished here: its answer broke off
            // (or the caller left) while it was being served, or it got no answer and no retry
            // recorded it.
            if !f.recorded && (f.answered || read_record(&self.host, 1).is_none()) {
                f.watch.unanswered();
                self.finish_first(self.host.now_ms());
            }
        }
        self.count_result();
        // Priced once for both: the usage metrics and the limits' settlement.
        let used = self.served_usage();
        self.record_usage(used);
        self.settle_limits(used);
    }

    fn on_grpc_response(&mut self, token: u32, status: u32, size: usize) {
        if !self.admission.as_ref().is_some_and(|a| a.waits_for(token)) {
            return;
        }
        let now = self.host.now_ms();
        let config = Rc::clone(&self.config);
        let Some(adm) = self.admission.as_mut() else { return };
        mesh::answered(&self.host, &config.limits, adm, token, status, size, now);
        match adm.state.clone() {
            AdmissionState::Refused(e) => self.refuse_admission(&e),
            AdmissionState::Admitted | AdmissionState::FailedOpen if self.held => {
                self.held = false;
                self.host.resume_request();
            }
            _ => {}
        }
    }
}
