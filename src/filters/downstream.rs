//! Downstream (per-request) filter: routes the request and shapes the response.

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
use crate::protocol::plan::{body_property, AttemptPlan, INTERRUPTED_PROPERTY, PLAN_PROPERTY};
use crate::protocol::rewrite::{api_headers, attempt_rewrite, ANTHROPIC_VERSION};
use crate::protocol::scope;
use crate::protocol::slots::{encode_slots, slot_token, NEXT_CLUSTER_HEADER, SLOTS_PROPERTY};
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

    /// The operator policy for this caller, if policies are configured.
    fn select_policy(&mut self, headers: &[(String, String)]) {
        let policies = &self.config.policies;
        if policies.is_empty() {
            return;
        }
        if let Some(sel) = policies.select(&mut HostFacts { host: &self.host, headers }) {
            self.policy = policies.list.iter().position(|p| std::ptr::eq(p, sel.policy));
            self.selected_by = Some(sel.by);
            count(&self.host, &format!("switchyard.policy_requests_total.policy.{}", tag(&sel.policy.name)));
        }
        // Trusted selection headers are for Switchyard only: no provider sees them.
        for h in &policies.trusted_headers {
            if headers.iter().any(|(k, _)| k == h) {
                self.host.set_req_header(h, None);
            }
        }
    }

    /// The audit record in filter state, for Envoy's access log (one JSON line per routed or
    /// rejected request, with the request path filled in).
    fn audit<'a>(&'a self, mut audit: Audit<'a>) {
        let path = self.path.split('?').next().unwrap_or("");
        if !path.is_empty() {
            audit.path = Some(path);
        }
        self.host.set_property(&[AUDIT_PROPERTY], audit.to_json().as_bytes());
    }

    fn reject(&mut self, e: &ApiError) -> Action {
        let shaped;
        let e = if e.api == self.api {
            e
        } else {
            shaped = e.clone().for_api(self.api);
            &shaped
        };
        // Natively the reply never comes back through this filter: sent as the 400 it is.
        let carried = e.status == 400 && self.request_complete && self.host.reply_reaches_filter();
        if carried {
            self.carried_400 = true;
        }
        count(&self.host, &format!("switchyard.requests_total.result.rejected.code.{}", e.code));
        let constraint = e.metadata.get("constraint").and_then(|v| v.as_str());
        let policy = self.policy_name();
        if let Some(name) = policy {
            // Denials by the policy itself (403, or a 404 whose emptying constraint is the policy's).
            if e.code == "policy_denied" || constraint.is_some_and(|c| c.starts_with("policy:")) {
                count(&self.host, &format!("switchyard.policy_denials_total.policy.{}.code.{}", tag(name), e.code));
            }
        }
        self.audit(Audit {
            policy,
            selected_by: self.selected_by,
            status: e.status,
            error: Some(e.code),
            constraint,
            ..Audit::default()
        });
        let body = e.body();
        let code = e.code;
        let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        if let Some(name) = policy {
            headers.push((POLICY_HEADER, name));
        }
        for (k, v) in &e.headers {
            headers.push((k.as_str(), v.as_str()));
        }
        let status = if carried { LOCAL_400_CARRIER } else { e.status };
        if status == 503 {
            // Marked so the listener's local_reply_config (which shapes Envoy's own 503s)
            // leaves this JSON alone.
            self.host.set_req_header(OWN_REPLY_HEADER, Some("1"));
        }
        self.host.reply(status, &headers, body.as_bytes());
        self.write_attributes(Some(code));
        Action::Pause
    }

    /// Answers `GET /v1/models[/{id}[/endpoints]]` from the catalog, showing only what the
    /// caller's operator policy lets it reach.
    fn listing(&mut self, which: &listing::Listing) -> Action {
        let config = Rc::clone(&self.config);
        let health = SharedHealth::new(
            &self.host,
            self.host.now_ms(),
            config.catalog.routing.outage_window_s.saturating_mul(1000),
        );
        let policy = self.policy.and_then(|i| config.policies.list.get(i));
        let allowed = |e: &crate::config::Endpoint| {
            !config.catalog.shadowed_by_byok(e) && policy.is_none_or(|p| policy_allows(p, &config.catalog, e))
        };
        match listing::answer(&config.catalog, &config.presets, which, &health, &allowed) {
            Ok(body) => {
                let mut headers = vec![("content-type", "application/json")];
                if let Some(p) = policy {
                    headers.push((POLICY_HEADER, p.name.as_str()));
                }
                self.host.reply(200, &headers, body.as_bytes());
                Action::Pause
            }
            Err(e) => self.reject(&e),
        }
    }

    /// Routes the complete buffered body: applies the plan, or answers with the error.
    fn route(&mut self, body_size: usize) -> Action {
        self.request_complete = true;
        let body = self.host.request_body(0, body_size).unwrap_or_default();
        let config = Rc::clone(&self.config);
        let mut health = SharedHealth::new(
            &self.host,
            self.host.now_ms(),
            config.catalog.routing.outage_window_s.saturating_mul(1000),
        );
        health.session = self.session.clone();
        health.caller_scope = self.caller_scope;
        if !config.limits.capacity.is_empty() {
            health.capped = mesh::capped(&self.host, &config.limits, self.host.now_ms());
        }
        let policy = self.policy.and_then(|i| config.policies.list.get(i));
        let surface = self.surface.take().unwrap_or(Surface::OPENAI);
        let header = self.routing_header.take();
        let decided = span("decide", || {
            decide_for(
                &config.catalog,
                policy,
                &config.presets,
                &surface,
                header.as_deref(),
                &body,
                &health,
                &mut || self.host.random_unit(),
            )
        });
        match decided {
            Ok(d) => {
                if self.debug {
                    self.candidates = Some(candidates_json(&config.catalog, &d.plan, &health));
                    self.auto_explain = d.plan.auto.as_ref().map(|c| c.explain_json(&config.catalog));
                }
                span("hand_off", || self.apply(d));
                Action::Continue
            }
            Err(e) => self.reject(&e),
        }
    }

    /// Hands the ranked list to Envoy: the first attempt's cluster in `x-switchyard-next` (the
    /// route's matcher reads it; each attempt's filter names the next from the slots in filter
    /// state, see `slots`), the retry count, and the plan the upstream filter reads.
    fn apply(&mut self, mut d: Decision) {
        // One clock reading for the hand-off: when it was decided, and the prepared first
        // attempt's start (each reading is a host call).
        let now = self.host.now_ms();
        let HandOff { mut plan, mut clusters } = hand_off(&self.config.catalog, self.config.id, &d, &self.path);
        // Neither the caller's key nor any provider key is on the request before an attempt.
        for h in &self.caller_credentials {
            self.host.set_req_header(h, None);
        }
        if plan.first_prepared && !self.prepare_first(&plan, d.stream, now) {
            // Not preparable (cannot happen with a plan of this configuration): the regular
            // cluster's per-attempt filter takes the first attempt as it takes the others.
            plan.first_prepared = false;
            let regular = plan.endpoints.first().and_then(|&i| self.config.catalog.endpoint(usize::from(i)));
            if let (Some(slot), Some(p)) =
                (clusters.first_mut(), regular.and_then(|e| self.config.catalog.provider_of(e)))
            {
                *slot = p.cluster.clone();
            }
        }
        let clusters: Vec<&str> = clusters.iter().map(String::as_str).collect();
        // Attempts in another API than the written body's take theirs from here.
        for (api, body) in std::mem::take(&mut d.bodies) {
            self.host.set_property(&[&body_property(api)], &body);
        }
        self.host.set_property(&[PLAN_PROPERTY], &plan.encode());
        // The order for Envoy's retries: the first cluster now, each attempt's filter the next.
        self.host.set_property(&[SLOTS_PROPERTY], encode_slots(&clusters).as_bytes());
        if let Some(first) = clusters.first() {
            self.host.set_req_header(NEXT_CLUSTER_HEADER, Some(&slot_token(first)));
        }
        self.host.set_req_header("x-envoy-max-retries", Some(&clusters.len().saturating_sub(1).to_string()));
        // The answer is rewritten (model id, provider, cost): ask providers for it unencoded.
        // A compressor filter before this one still compresses for callers that accept it.
        self.host.set_req_header("accept-encoding", Some("identity"));
        self.host.set_req_header("content-length", Some(&d.body.len().to_string()));
        self.host.set_request_body(0, usize::MAX, &d.body);
        // Envoy holds the body now. A copy kept for the request's lifetime would hold one body
        // per request in flight in the VM's memory, which never shrinks again.
        d.body = Vec::new();
        self.planned = clusters.len();
        self.decided_ms = now;
        // The first planned endpoint's model (`d.model`), or `auto`.
        let catalog = &self.config.catalog;
        let first_model = d.plan.attempts.first().and_then(|a| catalog.endpoint(a.endpoint)).map(|e| e.model);
        self.request_model = match (&d.plan.auto, first_model) {
            (None, Some(m)) => m,
            _ => catalog.models.len(),
        };
        count(&self.host, &strategy_metric_name(&tag(&d.plan.strategy.to_string())));
        self.decision = Some(d);
    }

    /// Prepares the first attempt as the per-attempt filter would (its provider's first-attempt
    /// cluster has none): removes the caller headers providers must not see, sets the path, and
    /// counts the attempt as started. The provider's key is never written here: this is the
    /// downstream request, which any route could send anywhere; the first-attempt cluster's own
    /// upstream filter (`credential_injector`) adds it on the way to that provider only.
    /// `:authority` is named in `x-switchyard-authority`, which the routed route's
    /// `host_rewrite_header` applies once the route is chosen: changing `:authority` here would
    /// change the virtual host the route is resolved in.
    fn prepare_first(&mut self, plan: &AttemptPlan, stream: bool, now_ms: u64) -> bool {
        let config = Rc::clone(&self.config);
        let catalog = &config.catalog;
        let Some(ep) = plan.endpoints.first().and_then(|&i| catalog.endpoint(usize::from(i))) else { return false };
        let Some(provider) = catalog.provider_of(ep) else { return false };
        let Ok(rw) = attempt_rewrite(catalog, config.id, plan, 1, &provider.cluster) else { return false };
        for h in &self.swept {
            self.host.set_req_header(h, None);
        }
        if rw.path != self.path {
            self.host.set_req_header(":path", Some(&rw.path));
        }
        let has_version = self.host.req_header(ANTHROPIC_VERSION).is_some();
        for (h, v) in api_headers(rw.api, has_version) {
            self.host.set_req_header(h, v);
        }
        self.host.set_req_header(AUTHORITY_HEADER, Some(&rw.authority));
        let of = AttemptOf { model: &rw.model, slug: &rw.slug, in_catalog: rw.endpoint.is_some() };
        started(&self.host, &of);
        self.first = Some(PreparedFirst {
            in_catalog: of.in_catalog,
            model: rw.model,
            slug: rw.slug,
            planned: rw.planned,
            watch: AttemptWatch::new(rw.api, stream, now_ms),
            answered: false,
            recorded: false,
            verdict: None,
        });
        true
    }

    /// Records the prepared first attempt once: on its endpoint's statistics and the metrics.
    /// `now_ms`: this callback's clock reading.
    fn finish_first(&mut self, now_ms: u64) {
        let Some(f) = self.first.as_mut() else { return };
        if f.recorded {
            return;
        }
        f.recorded = true;
        let s = f.watch.summary(now_ms);
        let of = AttemptOf { model: &f.model, slug: &f.slug, in_catalog: f.in_catalog };
        finished(&self.host, &self.config, &of, &s, &f.watch.usage, true, f.verdict, now_ms);
    }

    /// The end of a Gemini 429 the prepared first attempt got: the delay it names is that
    /// attempt's (see `cooled_down_late`), before the final error reads the records.
    fn first_delay_from_body(&mut self, body: &[u8]) {
        let cap = self.config.catalog.routing.max_retry_after_s;
        let Some(f) = self.first.as_mut() else { return };
        f.watch.error_body(body, cap);
        let Some(delay) = f.watch.retry_after_s else { return };
        let record = AttemptRecord { endpoint: f.planned, status: 429, retry_after_s: Some(delay) };
        let of = AttemptOf { model: &f.model, slug: &f.slug, in_catalog: f.in_catalog };
        cooled_down_late(&self.host, &self.config, 1, record, &of, self.host.now_ms());
    }

    /// The API the serving endpoint speaks when it is not the caller's (its answer is
    /// translated back): the endpoint named by the serving attempt (or the prepared first).
    fn serving_api(&self, headers: &[(String, String)], first_answered: bool) -> Option<Api> {
        let (model, slug) = match self.first.as_ref().filter(|_| first_answered) {
            Some(f) => (f.model.as_str(), Some(f.slug.as_str())),
            None => (find(headers, MODEL_HEADER).unwrap_or_default(), find(headers, PROVIDER_HEADER)),
        };
        let ep = self.config.catalog.endpoint_of(model, slug?)?;
        Some(ep.apis.serving(self.api)).filter(|a| *a != self.api)
    }

    /// What the translation into `api` dropped (`x-switchyard-warning`).
    fn translation_warning(&self, api: Api) -> Option<String> {
        let d = self.decision.as_ref()?;
        d.translation_warnings.iter().find(|(a, _)| *a == api).map(|(_, w)| w.clone())
    }

    /// The prepared first attempt is still being answered to the caller.
    fn watching_first(&self) -> bool {
        self.first.as_ref().is_some_and(|f| f.answered && !f.recorded)
    }
}

/// Removes every response header but `:status`: a final error the filter built carries only
/// its own headers, none left over from the last attempt.
fn clear_response_headers(host: &dyn Host, headers: &[(String, String)]) {
    for (k, _) in headers {
        if k != ":status" {
            host.set_resp_header(k, None);
        }
    }
}

impl<H: Host> Stream<H> {
    fn offered_tools(&self) -> &[String] {
        self.decision.as_ref().map(|d| d.offered_tools.as_slice()).unwrap_or(&[])
    }

    /// The end of a served stream: the interrupted-stream event when the serving attempt broke
    /// off (appended at `at`), otherwise the stream's quality verdict.
    fn end_stream(&mut self, at: usize) {
        let event = match self.first.as_ref().filter(|f| f.answered) {
            // A prepared first attempt has no per-attempt filter to mark it: its watch knows.
            Some(f) => f.watch.interrupted.then(|| interrupted_event_for(self.api, &f.slug, &f.model).into_bytes()),
            None => self.host.property(&[INTERRUPTED_PROPERTY]),
        };
        self.interrupted = Some(event.is_some());
        if let Some(event) = event {
            self.host.set_response_body(at, 0, &event);
        } else if let Some(judge) = self.judge.take() {
            let verdict = judge.verdict(self.offered_tools());
            self.record_quality(verdict);
        }
    }

    /// Counts a served answer's quality on the endpoint that served it.
    fn record_quality(&mut self, verdict: Option<Verdict>) {
        if let (Some(v), Some((model, slug))) = (verdict, &self.served) {
            if self.watching_first() {
                // Written with the prepared first attempt's outcome, in one update.
                if let Some(f) = self.first.as_mut() {
                    f.verdict = Some(v);
                }
            } else {
                let now = self.host.now_ms();
                update_stats(&self.host, &stats_key(model, slug), |s| s.judge(now, v.bad, v.tool));
            }
            if v.bad {
                count(
                    &self.host,
                    &format!("switchyard.bad_responses_total.model.{}.endpoint.{}", tag(model), tag(slug)),
                );
            }
        }
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
                return self.listing(&which);
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
        if let Some(note) = self.translate_from.and_then(|api| self.translation_warning(api)) {
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
        let Some(adm) = &self.admission else { return };
        if adm.state != AdmissionState::Waiting(token) {
            return;
        }
        let state = mesh::answered(&self.host, &self.config.limits, adm, status, size);
        if let Some(a) = self.admission.as_mut() {
            a.state = state.clone();
        }
        match state {
            AdmissionState::Refused(e) => {
                // Refused after routing: nothing was sent; the prepared first attempt never
                // started.
                if let Some(f) = self.first.take() {
                    if f.in_catalog {
                        step_in_flight(&self.host, &stats_key(&f.model, &f.slug), false);
                    }
                }
                self.decision = None;
                self.routed = false;
                self.held = false;
                self.reject(&e);
            }
            AdmissionState::Admitted | AdmissionState::FailedOpen if self.held => {
                self.held = false;
                self.host.resume_request();
            }
            _ => {}
        }
    }
}

impl<H: Host> Stream<H> {
    /// Routes a complete request unless its admission refused it; held (paused) while the
    /// admission has not answered yet.
    fn route_admitted(&mut self, body_size: usize) -> Action {
        match self.admission.as_ref().map(|a| &a.state) {
            Some(AdmissionState::Refused(e)) => {
                let e = e.clone();
                self.routed = false;
                self.reject(&e)
            }
            Some(AdmissionState::Waiting(_)) => {
                let action = self.route(body_size);
                if action == Action::Continue && self.decision.is_some() {
                    self.held = true;
                    return Action::Pause;
                }
                action
            }
            _ => self.route(body_size),
        }
    }

    /// Queues what an admitted, served request used (`used`: its priced usage) against its
    /// limits.
    fn settle_limits(&mut self, used: Option<Used>) {
        let Some(adm) = &self.admission else { return };
        if !adm.admitted() || self.result != Some(RequestResult::Served) {
            return;
        }
        let Some((model, slug)) = &self.served else { return };
        let pricing = self.config.catalog.endpoint_of(model, slug).map(|e| e.pricing).unwrap_or_default();
        // An answer that reported no usage (a stream cut before its usage event): its prompt,
        // estimated from the body that was sent, at the prompt price.
        let estimate = self.decision.as_ref().map_or(0, |d| (d.body.len() as u64).div_ceil(4));
        let (tokens, cost) = match used {
            Some(u) => (u.input_tokens + u.output_tokens, u.cost_usd),
            None => (estimate, pricing.cost_usd(estimate, 0, 0)),
        };
        mesh::settle(&self.host, &self.config.limits, &adm.applied, tokens, cost);
    }

    /// What the served answer reported, priced as its `usage.cost` (None: no answer served, or
    /// it reported no complete usage).
    fn served_usage(&self) -> Option<Used> {
        let (model, slug) = self.served.as_ref()?;
        let pricing = self.config.catalog.endpoint_of(model, slug)?.pricing;
        let usage = match self.first.as_ref().filter(|f| f.answered) {
            Some(f) => f.watch.usage,
            None => self.usage_watch.as_ref()?.usage,
        };
        let priced = usage.priced(&pricing)?;
        Some(Used {
            input_tokens: priced.prompt_tokens,
            output_tokens: priced.completion_tokens,
            cache_read_tokens: usage.cached_tokens.unwrap_or(0).min(priced.prompt_tokens),
            cost_usd: priced.cost_usd,
        })
    }

    /// The served request's usage and duration in the metrics (served attempt only; a
    /// provider's error or a failed failover used nothing billable here).
    fn record_usage(&self, used: Option<Used>) {
        if !matches!(self.result, Some(RequestResult::Served)) {
            return;
        }
        let Some(endpoint) = self.served.as_ref().and_then(|(m, s)| self.config.catalog.find_endpoint(m, s)) else {
            return;
        };
        let key = UsageKey { request_model: self.request_model, endpoint, policy: self.policy, caller: self.caller };
        let duration = self.host.now_ms().saturating_sub(self.decided_ms);
        usage::record(&self.host, &self.config, key, used, duration);
    }

    /// The request's span and access-log attributes, once, when its answer ends (Envoy
    /// finishes the span and writes the log before the filter's own log callback).
    fn write_attributes(&mut self, error: Option<&str>) {
        if !self.config.telemetry.request_attributes || self.attributes_written {
            return;
        }
        self.attributes_written = true;
        let config = Rc::clone(&self.config);
        let served = self.served.as_ref().and_then(|(m, s)| config.catalog.endpoint_of(m, s));
        let used = self.served_usage();
        let path = self.path.split('?').next().filter(|p| !p.is_empty());
        let caller = self.caller.zip(config.telemetry.caller.as_ref()).map(|(i, c)| c.name(i));
        usage::write_attributes(
            &self.host,
            &Attributes {
                request_model: self.decision.as_ref().map(|_| usage::request_model_name(&config, self.request_model)),
                provider: served.map(|e| config.catalog.provider_name(e)),
                used,
                caller,
                path,
                error,
                request_id: self.request_id.as_deref(),
                operation: path.and_then(crate::telemetry::operation_name),
            },
        );
    }

    /// The attempts' records, in order, as far as they are known when the answer's headers
    /// arrive; completes a prepared first attempt whose outcome is known by now.
    fn attempt_records(
        &mut self,
        headers: &[(String, String)],
        status: u16,
        made: Option<usize>,
        first_answered: bool,
        end_of_stream: bool,
        now: u64,
    ) -> Vec<AttemptRecord> {
        let read_up_to = made.map_or(self.planned, |n| n.min(self.planned));
        if first_answered {
            if let Some(f) = self.first.as_mut() {
                f.answered = true;
                let cap = self.config.catalog.routing.max_retry_after_s;
                f.watch.headers(status, find(headers, "retry-after"), find(headers, "content-type"), cap);
            }
            if status >= 400 || end_of_stream {
                // A refusal, or an answer without a body: complete here.
                self.finish_first(now);
            }
            if self.first.as_ref().is_some_and(|f| f.watch.reads_error_body()) && !end_of_stream {
                self.first_error_body = true;
            }
            let record =
                |f: &PreparedFirst| AttemptRecord { endpoint: f.planned, status, retry_after_s: f.watch.retry_after_s };
            self.first.as_ref().map(record).into_iter().collect()
        } else if let Some(planned) = self.first.as_ref().map(|f| f.planned) {
            // Envoy answered itself, or a later attempt did. Without a retry's record of the
            // first attempt, it got no answer and nothing came after it.
            let retried = read_record(&self.host, 1);
            if retried.is_none() {
                self.finish_first(now);
            }
            let unanswered = AttemptRecord { endpoint: planned, status: 0, retry_after_s: None };
            read_records(&self.host, read_up_to, Some(retried.unwrap_or(unanswered)))
        } else {
            read_records(&self.host, read_up_to, None)
        }
    }

    /// Every attempt failed (or Envoy stopped the failover): the answer becomes the final error
    /// in the caller's API shape, with Switchyard's headers.
    fn answer_failed(
        &mut self,
        error: ApiError,
        cut_short: Option<CutShort>,
        audit: Audit,
        own: Vec<(&str, &str)>,
        headers: &[(String, String)],
        end_of_stream: bool,
    ) -> Action {
        let e = error.for_api(self.api);
        if let Some(cut) = cut_short {
            log::warn!(
                "switchyard: failover stopped after {} of {} planned attempts ({})",
                audit.attempts,
                cut.planned,
                cut.reason.name()
            );
            count(&self.host, &failover_incomplete_metric(cut.reason));
        }
        self.result = Some(RequestResult::Failed);
        let audit_attempts = audit.attempts;
        let attempts = audit.attempts.to_string();
        self.audit(Audit { status: e.status, error: Some(e.code), ..audit });
        self.write_attributes(Some(e.code));
        // Rebound so it may also borrow what this function owns.
        let mut own: Vec<(&str, &str)> = own.into_iter().collect();
        own.push(("content-type", "application/json"));
        own.push((ATTEMPTS_HEADER, &attempts));
        for (k, v) in &e.headers {
            own.push((k.as_str(), v.as_str()));
        }
        if end_of_stream {
            // The failed answer had no body to replace: answer with a local reply, marked so
            // the listener's local_reply_config leaves our JSON alone.
            self.host.set_req_header(OWN_REPLY_HEADER, Some("1"));
            self.host.reply(e.status, &own, e.body().as_bytes());
            return Action::Pause;
        }
        clear_response_headers(&self.host, headers);
        self.host.set_resp_header(":status", Some(&e.status.to_string()));
        for (k, v) in own {
            self.host.set_resp_header(k, Some(v));
        }
        // Held until the failed answer's body is complete, then replaced with its length.
        let known = e.headers.iter().any(|(k, _)| k == "retry-after");
        let late_retry_after = (e.status == 429 && !known).then_some(audit_attempts);
        self.body_action = BodyAction::Replace { body: e.body(), late_retry_after };
        Action::Pause
    }

    /// An endpoint answered: decide what happens to its body (rewritten as a whole, rewritten
    /// event by event, a provider error wrapped, or only watched) and remember who served.
    fn take_answer(
        &mut self,
        headers: &[(String, String)],
        status: u16,
        served_model: String,
        slug: String,
        end_of_stream: bool,
        now: u64,
    ) -> Action {
        let content_type = find(headers, "content-type").unwrap_or_default();
        let json = content_type.contains("application/json");
        let sse = content_type.contains("text/event-stream");
        self.sse_response = sse;
        // A provider that ignored `accept-encoding: identity`: its bytes cannot be rewritten.
        let encoded = find(headers, "content-encoding").is_some_and(|e| e != "identity");
        if status >= 400 {
            self.result = Some(RequestResult::ProviderError);
            if !end_of_stream && !encoded {
                // Held until the body is complete: a non-JSON body is replaced by a JSON error.
                self.body_action = BodyAction::ProviderError { status, slug, collected: Vec::new() };
                return Action::Pause;
            }
            return Action::Continue;
        }
        self.result = Some(RequestResult::Served);
        // A conversation sticks only to an endpoint whose cache reads are cheaper than its prompt
        // price (nothing to keep warm elsewhere, and no shared-data write).
        let caches = self.config.catalog.endpoint_of(&served_model, &slug).is_some_and(|e| e.pricing.caches_cheaper());
        if let Some(conv) = self.decision.as_ref().and_then(|d| d.plan.conversation).filter(|_| caches) {
            let ttl_ms = self.config.catalog.routing.sticky_ttl_s.saturating_mul(1000);
            stick(&self.host, conv, &served_model, &slug, now.saturating_add(ttl_ms));
        }
        self.served = Some((served_model.clone(), slug.clone()));
        let stream = self.decision.as_ref().is_some_and(|d| d.stream);
        // The served attempt's usage, for the metrics (and the limits): the prepared first
        // attempt's watch has it when it served.
        if !self.first.as_ref().is_some_and(|f| f.answered) {
            self.usage_watch = Some(AttemptWatch::new(self.translate_from.unwrap_or(self.api), stream, now));
        }
        if end_of_stream {
            return Action::Continue;
        }
        if stream && !encoded && status < 300 {
            // The served stream's quality (malformed tool calls, empty answers) is judged.
            self.judge = Some(StreamJudge::new(self.translate_from.unwrap_or(self.api)));
        }
        let ep = self.config.catalog.endpoint_of(&served_model, &slug);
        let Some(pricing) = ep.filter(|_| !encoded).map(|e| e.pricing) else {
            if status < 300 {
                self.body_action = BodyAction::WatchStream;
            }
            return Action::Continue;
        };
        let served = Served { model: served_model, slug, pricing, api: self.api };
        if sse {
            // Rewritten event by event; the length changes, so the answer goes out chunked.
            self.host.set_resp_header("content-length", None);
            let hide = self.decision.as_ref().is_some_and(|d| d.hide_usage_chunk);
            let rewriter = SseRewriter::new(served).hiding_usage_chunk(hide);
            self.body_action = match self.translate_from {
                Some(from) => {
                    // A Google caller without `alt=sse` streams one JSON array (not rewritten).
                    let array = self.api == Api::Google && !self.path.contains("alt=sse");
                    if array {
                        self.host.set_resp_header("content-type", Some("application/json"));
                    }
                    let created = now / 1000;
                    let tr = StreamTranslator::new(from, self.api, created, array);
                    BodyAction::Translate(Box::new(tr), (!array).then_some(rewriter))
                }
                None => BodyAction::Stream(rewriter),
            };
            return Action::Continue;
        }
        if json && !stream {
            // Hold the headers until the body is complete so the rewritten body goes out with
            // its own content-length.
            // Sized from the announced length: no growth by doubling in a VM that never shrinks
            // (an answer too large to rewrite is passed on, nothing reserved for it).
            let length = find(headers, "content-length").and_then(|l| l.trim().parse::<usize>().ok());
            let collected = Collected::expecting(length.filter(|&l| l <= MAX_REWRITE_BYTES));
            self.body_action = BodyAction::Rewrite { served, collected, headers_sent: false };
            return Action::Pause;
        }
        if status < 300 {
            self.body_action = BodyAction::WatchStream;
        }
        Action::Continue
    }

    /// What the caller gets of the answer's body (see `BodyAction`); `chunk` is this body
    /// chunk's bytes when something needed them.
    fn shape_response_body(&mut self, body_size: usize, end_of_stream: bool, chunk: Option<Vec<u8>>) -> Action {
        if let (Some(judge), Some(c)) = (self.judge.as_mut(), chunk.as_ref()) {
            judge.feed(c);
        }
        let translate_from = self.translate_from;
        match &mut self.body_action {
            BodyAction::None => Action::Continue,
            BodyAction::WatchStream => {
                if end_of_stream {
                    self.body_action = BodyAction::None;
                    self.end_stream(body_size);
                }
                Action::Continue
            }
            BodyAction::Translate(tr, rewriter) => {
                let translated = tr.feed(chunk.as_deref().unwrap_or(&[]));
                let out = match rewriter {
                    Some(r) => r.feed(&translated, end_of_stream),
                    None => translated,
                };
                self.host.set_response_body(0, body_size, &out);
                if end_of_stream {
                    self.body_action = BodyAction::None;
                    self.end_stream(out.len());
                }
                Action::Continue
            }
            BodyAction::Stream(rewriter) => {
                let out = rewriter.feed(chunk.as_deref().unwrap_or(&[]), end_of_stream);
                self.host.set_response_body(0, body_size, &out);
                if end_of_stream {
                    self.body_action = BodyAction::None;
                    self.end_stream(out.len());
                }
                Action::Continue
            }
            BodyAction::Rewrite { served, collected, headers_sent } => {
                // Move each chunk into the filter and leave Envoy's buffer empty: the answer is
                // never counted against Envoy's buffer limit.
                if let Some(chunk) = chunk {
                    collected.push(chunk);
                    self.host.set_response_body(0, body_size, &[]);
                }
                if collected.len() > MAX_REWRITE_BYTES && *headers_sent {
                    // Too large to rewrite: pass on as received.
                    let chunks = collected.take_chunks();
                    append_response_body(&self.host, chunks.iter().map(Vec::as_slice));
                    self.body_action = BodyAction::None;
                    return Action::Continue;
                }
                if end_of_stream {
                    let mut collected = std::mem::take(collected);
                    let served = served.clone();
                    let headers_sent = *headers_sent;
                    self.body_action = BodyAction::None;
                    let collected = if headers_sent && collected.is_split() {
                        // A large answer of unknown length, held as the chunks it came in:
                        // joined in Envoy's buffer (the chunks freed first) and read back in
                        // one piece, so the VM never holds the chunks and the joined copy at
                        // once. The headers are gone, so the buffer limit does not apply.
                        let size = collected.len();
                        let chunks = collected.take_chunks();
                        append_response_body(&self.host, chunks.iter().map(Vec::as_slice));
                        drop(chunks);
                        match self.host.response_body(0, size).filter(|whole| whole.len() == size) {
                            Some(whole) => {
                                self.host.set_response_body(0, size, &[]);
                                whole
                            }
                            // Not readable: it goes on as received.
                            None => return Action::Continue,
                        }
                    } else {
                        collected.into_whole()
                    };
                    let collected = match translate_from {
                        Some(from) => {
                            let created = self.host.now_ms() / 1000;
                            crate::translate::answer(from, served.api, &collected, created).unwrap_or(collected)
                        }
                        None => collected,
                    };
                    let verdict = span("answer_judge", || judge_body(served.api, &collected, self.offered_tools()));
                    self.record_quality(verdict);
                    // Handed to Envoy as pieces (the replaced members and the unchanged runs
                    // of the collected answer): no second copy of the answer in the VM.
                    match span("answer_rewrite", || rewrite_answer(&collected, &served)) {
                        Some(out) => {
                            if !headers_sent {
                                self.host.set_resp_header("content-length", Some(&out.len().to_string()));
                            }
                            append_response_body(&self.host, out.iter());
                        }
                        None => {
                            if !headers_sent {
                                self.host.set_resp_header("content-length", Some(&collected.len().to_string()));
                            }
                            self.host.set_response_body(0, 0, &collected);
                        }
                    }
                    return Action::Continue;
                }
                if !*headers_sent && collected.len() > HOLD_HEADERS_BYTES {
                    // Release the headers (chunked); the body follows when complete.
                    self.host.set_resp_header("content-length", None);
                    *headers_sent = true;
                }
                if *headers_sent {
                    Action::Continue
                } else {
                    Action::Pause
                }
            }
            BodyAction::ProviderError { status, slug, collected } => {
                if let Some(chunk) = &chunk {
                    collected.extend_from_slice(chunk);
                    self.host.set_response_body(0, body_size, &[]);
                }
                let too_large = collected.len() > MAX_ERROR_BYTES;
                if !end_of_stream && !too_large {
                    return Action::Pause;
                }
                let out = if let (Some(from), false) = (translate_from, too_large) {
                    // In the caller's shape, with the caller's API's status for it.
                    let (to_status, body) = crate::translate::error(from, self.api, *status, collected);
                    self.host.set_resp_header("content-type", Some("application/json"));
                    if to_status != *status {
                        self.host.set_resp_header(":status", Some(&to_status.to_string()));
                    }
                    body
                } else if too_large || is_json_object(collected) {
                    std::mem::take(collected)
                } else {
                    self.host.set_resp_header("content-type", Some("application/json"));
                    wrap_provider_error(*status, collected, slug).for_api(self.api).body().into_bytes()
                };
                if end_of_stream {
                    self.host.set_resp_header("content-length", Some(&out.len().to_string()));
                }
                self.host.set_response_body(0, 0, &out);
                self.body_action = BodyAction::None;
                Action::Continue
            }
            BodyAction::Replace { .. } => {
                if !end_of_stream {
                    return Action::Pause;
                }
                if let BodyAction::Replace { body, late_retry_after } =
                    std::mem::replace(&mut self.body_action, BodyAction::None)
                {
                    // The last attempt's filter has read its body by now.
                    let min = late_retry_after
                        .and_then(|n| read_records(&self.host, n, None).iter().filter_map(|r| r.retry_after_s).min());
                    if let Some(s) = min {
                        self.host.set_resp_header("retry-after", Some(&s.to_string()));
                    }
                    self.host.set_response_body(0, usize::MAX, body.as_bytes());
                    self.host.set_resp_header("content-length", Some(&body.len().to_string()));
                }
                Action::Continue
            }
        }
    }

    /// How the routed request ended, counted once (`switchyard_requests_total{result}`).
    fn count_result(&mut self) {
        let name = match self.result {
            Some(RequestResult::Served) => {
                // A complete answer can only have been marked interrupted if it was an event
                // stream (ended without its final event); its end already read the mark.
                let first = self.first.as_ref().filter(|f| f.answered);
                let interrupted = !self.response_complete
                    || first.is_some_and(|f| f.watch.interrupted)
                    || (first.is_none()
                        && self.interrupted.unwrap_or_else(|| {
                            self.sse_response && self.host.property(&[INTERRUPTED_PROPERTY]).is_some()
                        }));
                if interrupted {
                    INTERRUPTED_METRIC
                } else {
                    SERVED_METRIC
                }
            }
            Some(RequestResult::ProviderError) => PROVIDER_ERROR_METRIC,
            Some(RequestResult::Failed) => FAILED_METRIC,
            None => return,
        };
        count(&self.host, name);
    }
}

/// Writes `pieces` in order into this callback's response body, which the caller emptied:
/// the first at the start, each further one appended (proxy-wasm `set_buffer_bytes` with a
/// start at or past the end appends, one at 0 with length 0 prepends).
fn append_response_body<'p>(host: &dyn Host, pieces: impl Iterator<Item = &'p [u8]>) {
    let mut at = 0usize;
    for piece in pieces {
        host.set_response_body(at, 0, piece);
        at = at.saturating_add(piece.len());
    }
}
