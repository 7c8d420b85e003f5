//! Downstream (per-request) filter: routes the request and shapes the response.

use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use super::caller::HostFacts;
use super::shared::{count, stats_key, stick, tag, update_stats, SharedHealth};
use super::{api, random_unit, Configured, ROUTED_HEADER};
use crate::decision::{candidates_json, decide_under, hand_off, Audit, Decision, HandOff, AUDIT_PROPERTY};
use crate::ending::{ending, record_attempt, Ending};
use crate::errors::ApiError;
use crate::failover::{
    base64, decode_records, encode_records, groups_value, ATTEMPTS_PROPERTY, GROUPS_HEADER, INTERRUPTED_PROPERTY,
    PLAN_PROPERTY,
};
use crate::quality::{judge_body, StreamJudge, Verdict};
use crate::rewrite::with_provider_field;
use crate::surface::{debug_allowed, disposition, Disposition};

const DEBUG_HEADER: &str = "x-switchyard-debug";
/// Response header naming the operator policy a routed request ran under.
const POLICY_HEADER: &str = "x-switchyard-policy";
/// Request header marking a local reply Switchyard already shaped (see the bootstrap's
/// local_reply_config, which skips requests carrying it).
const OWN_REPLY_HEADER: &str = "x-switchyard-own-reply";
/// Set to `routing.passthrough_cluster` on unrouted requests; the generated route sends a request
/// carrying exactly that value to that cluster (and removes the header).
const PASSTHROUGH_HEADER: &str = "x-switchyard-passthrough";

enum BodyAction {
    None,
    /// Non-streaming JSON: add `"provider"`.
    InjectProvider(String),
    /// Every attempt failed: the whole body becomes this error.
    Replace(String),
    /// A served SSE stream: if the serving attempt broke off, end it with an error event.
    WatchStream,
}

/// How a routed request ended, counted once in `on_log` (`switchyard_requests{result}`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum RequestResult {
    /// A 2xx/3xx answer; becomes `interrupted` if its body broke off.
    Served,
    ProviderError,
    Failed,
}

pub struct Stream {
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
}

impl Stream {
    pub fn new(config: Rc<Configured>) -> Stream {
        Stream {
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
        }
    }

    fn policy_name(&self) -> Option<&str> {
        self.policy.and_then(|i| self.config.policies.list.get(i)).map(|p| p.name.as_str())
    }

    /// The audit record in filter state, for Envoy's access log (only where policies are
    /// configured: it costs a JSON line and a host call per request).
    fn audit(&self, audit: Audit) {
        if !self.config.policies.is_empty() {
            api::set_property(vec![AUDIT_PROPERTY], audit.to_json().as_bytes());
        }
    }

    fn reject(&self, e: &ApiError) -> Action {
        count(&format!("switchyard.requests.result.rejected.code.{}", e.code));
        let constraint = e.metadata.get("constraint").and_then(|v| v.as_str());
        let policy = self.policy_name();
        if let Some(name) = policy {
            // Denials by the policy itself (403, or a 404 whose emptying constraint is the policy's).
            if e.code == "policy_denied" || constraint.is_some_and(|c| c.starts_with("policy:")) {
                count(&format!("switchyard.policy_denials.policy.{}.code.{}", tag(name), e.code));
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
        let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        if let Some(name) = policy {
            headers.push((POLICY_HEADER, name));
        }
        for (k, v) in &e.headers {
            headers.push((k.as_str(), v.as_str()));
        }
        api::reply(e.status, headers, body.as_bytes());
        Action::Pause
    }

    /// Routes the complete buffered body: applies the plan, or answers with the error.
    fn route(&mut self, body_size: usize) -> Action {
        let body = api::request_body(0, body_size).unwrap_or_default();
        let config = Rc::clone(&self.config);
        let mut health = SharedHealth::new(api::now_ms(), config.catalog.routing.outage_window_s.saturating_mul(1000));
        health.session = self.session.clone();
        health.caller_scope = self.caller_scope;
        let policy = self.policy.and_then(|i| config.policies.list.get(i));
        match decide_under(&config.catalog, policy, &body, &health, &mut random_unit) {
            Ok(d) => {
                if self.debug {
                    self.candidates = Some(candidates_json(&config.catalog, &d.plan, &health));
                    self.auto_explain = d.plan.auto.as_ref().map(|c| c.explain_json(&config.catalog));
                }
                self.apply(d);
                Action::Continue
            }
            Err(e) => self.reject(&e),
        }
    }

    /// Hands the ranked list to Envoy: the per-attempt cluster order (priority_group override
    /// via header_to_metadata), the retry count, and the plan the upstream filter reads.
    fn apply(&mut self, d: Decision) {
        let HandOff { plan, clusters } = hand_off(&self.config.catalog, self.config.id, &d, &self.path);
        let clusters: Vec<&str> = clusters.iter().map(String::as_str).collect();
        api::set_property(vec![PLAN_PROPERTY], &plan.encode());
        // Neither the caller's key nor any provider key is on the request before an attempt.
        for h in &self.caller_credentials {
            api::set_req_header(h, None);
        }
        api::set_req_header(ROUTED_HEADER, Some("1"));
        api::set_req_header(GROUPS_HEADER, Some(&base64(&groups_value(&clusters))));
        api::set_req_header("x-envoy-max-retries", Some(&clusters.len().saturating_sub(1).to_string()));
        api::set_req_header("content-length", Some(&d.body.len().to_string()));
        api::set_request_body(0, usize::MAX, &d.body);
        self.planned = clusters.len();
        self.decision = Some(d);
    }
}

impl Stream {
    fn offered_tools(&self) -> &[String] {
        self.decision.as_ref().map(|d| d.offered_tools.as_slice()).unwrap_or(&[])
    }

    /// Counts a served answer's quality on the endpoint that served it.
    fn record_quality(&self, verdict: Option<Verdict>) {
        if let (Some(v), Some((model, slug))) = (verdict, &self.served) {
            let now = api::now_ms();
            update_stats(&stats_key(model, slug), |s| s.judge(now, v.bad, v.tool));
            if v.bad {
                count(&format!("switchyard.bad_responses.model.{}.endpoint.{}", tag(model), tag(slug)));
            }
        }
    }
}

impl Context for Stream {}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let headers = api::req_headers();
        #[cfg(feature = "fault-injection")]
        if api::find(&headers, "x-switchyard-test-trap").is_some() {
            core::arch::wasm32::unreachable();
        }
        // Internal headers are never taken from a caller.
        for h in [ROUTED_HEADER, GROUPS_HEADER, OWN_REPLY_HEADER, PASSTHROUGH_HEADER] {
            if api::find(&headers, h).is_some() {
                api::set_req_header(h, None);
            }
        }
        let method = api::find(&headers, ":method").unwrap_or_default();
        let path = api::find(&headers, ":path").unwrap_or_default();
        match disposition(method, path, &self.config.catalog.routing) {
            Disposition::Route => {}
            Disposition::PassThrough(cluster) => {
                api::set_req_header(PASSTHROUGH_HEADER, Some(&cluster));
                return Action::Continue;
            }
            Disposition::Local(e) => return self.reject(&e),
        }
        self.routed = true;
        self.path = path.to_string();
        let catalog = &self.config.catalog;
        let policies = &self.config.policies;
        if !policies.is_empty() {
            if let Some(sel) = policies.select(&mut HostFacts { headers: &headers }) {
                self.policy = policies.list.iter().position(|p| std::ptr::eq(p, sel.policy));
                self.selected_by = Some(sel.by);
                count(&format!("switchyard.policy_requests.policy.{}", tag(&sel.policy.name)));
            }
            // Trusted selection headers are for Switchyard only: no provider sees them.
            for h in &policies.trusted_headers {
                if api::find(&headers, h).is_some() {
                    api::set_req_header(h, None);
                }
            }
        }
        self.caller_credentials =
            catalog.credential_headers.iter().filter(|h| api::find(&headers, h).is_some()).cloned().collect();
        self.session = api::find(&headers, "x-session-id").filter(|v| v.len() <= 256).map(str::to_string);
        // Conversations are per caller: its credential (hashed, never kept) scopes the key.
        self.caller_scope = ["authorization", "x-api-key"]
            .iter()
            .filter_map(|h| api::find(&headers, h))
            .flat_map(str::bytes)
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        if let Some(v) = api::find(&headers, DEBUG_HEADER) {
            self.debug = debug_allowed(v, &catalog.routing);
            api::set_req_header(DEBUG_HEADER, None);
        }
        let limit = catalog.routing.max_body_bytes;
        if let Some(len) = api::find(&headers, "content-length").and_then(|v| v.parse::<u64>().ok()) {
            if len > limit {
                return self.reject(&ApiError::too_large(limit));
            }
        }
        if end_of_stream {
            return self.reject(&ApiError::invalid_json("request body is empty; expected a JSON object"));
        }
        // Wait for the whole body before routing (needs allow_on_headers_stop_iteration).
        Action::Pause
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
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
        self.route(body_size)
    }

    // A body followed by trailers never sees end_of_stream in on_http_request_body: route here,
    // or the request would continue unrouted.
    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        if !self.routed || self.decision.is_some() {
            return Action::Continue;
        }
        self.route(self.body_size)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(d) = &self.decision else { return Action::Continue };
        let config = Rc::clone(&self.config);
        let catalog = &config.catalog;
        let headers = api::resp_headers();
        let status: u16 = api::find(&headers, ":status").and_then(|s| s.parse().ok()).unwrap_or(0);
        let records = api::property(vec![ATTEMPTS_PROPERTY]).map(|b| decode_records(&b)).unwrap_or_default();
        let strategy = d.plan.strategy.clone();
        let candidates = self.candidates.take();
        let primary_model = d.model.clone();
        let stream = d.stream;
        api::set_resp_header("x-switchyard-strategy", Some(&strategy));
        let policy = self.policy_name().map(str::to_string);
        if let Some(name) = &policy {
            api::set_resp_header(POLICY_HEADER, Some(name));
        }
        if let Some(c) = candidates {
            api::set_resp_header("x-switchyard-candidates", Some(&c));
        }
        if let Some(a) = self.auto_explain.take() {
            api::set_resp_header("x-switchyard-auto", Some(&a));
        }
        if end_of_stream {
            self.response_complete = true;
        }
        // Envoy answered itself (no upstream response recorded for the last attempt) or the last
        // attempt failed retryably: the failover is over. If fewer attempts were made than
        // planned, Envoy stopped it early (retry circuit breaker or budget, route timeout).
        let flags = || {
            api::property(vec!["response", "flags"])
                .and_then(|b| b.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes))
                .unwrap_or(0)
        };
        if let Ending::Failed { error: e, cut_short } = ending(catalog, status, &records, self.planned, flags) {
            if let Some(cut) = cut_short {
                log::warn!(
                    "switchyard: failover stopped after {} of {} planned attempts ({})",
                    records.len(),
                    cut.planned,
                    cut.reason.name()
                );
                count(&format!("switchyard.failover_incomplete.reason.{}", cut.reason.name()));
            }
            self.result = Some(RequestResult::Failed);
            self.audit(Audit {
                policy: policy.as_deref(),
                selected_by: self.selected_by,
                attempts: records.len(),
                status: e.status,
                error: Some(e.code),
                ..Audit::default()
            });
            api::set_resp_header(":status", Some(&e.status.to_string()));
            api::set_resp_header("content-type", Some("application/json"));
            api::set_resp_header("content-length", None);
            api::set_resp_header("content-encoding", None);
            api::set_resp_header("retry-after", None);
            for (k, v) in &e.headers {
                api::set_resp_header(k, Some(v));
            }
            api::set_resp_header("x-switchyard-provider", None);
            api::set_resp_header("x-switchyard-model", None);
            api::set_resp_header("x-switchyard-model-failure", None);
            api::set_resp_header("x-switchyard-attempts", Some(&records.len().to_string()));
            if end_of_stream {
                // The failed answer had no body to replace: answer with a local reply, marked so
                // the listener's local_reply_config leaves our JSON alone.
                api::set_req_header(OWN_REPLY_HEADER, Some("1"));
                let attempts = records.len().to_string();
                let mut h: Vec<(&str, &str)> = vec![
                    ("content-type", "application/json"),
                    ("x-switchyard-strategy", &strategy),
                    ("x-switchyard-attempts", &attempts),
                ];
                if let Some(name) = &policy {
                    h.push((POLICY_HEADER, name));
                }
                for (k, v) in &e.headers {
                    h.push((k.as_str(), v.as_str()));
                }
                api::reply(e.status, h, e.body().as_bytes());
                return Action::Pause;
            }
            self.body_action = BodyAction::Replace(e.body());
            return Action::Continue;
        }
        let served_model = api::find(&headers, "x-switchyard-model");
        self.audit(Audit {
            policy: policy.as_deref(),
            selected_by: self.selected_by,
            model: served_model,
            endpoint: api::find(&headers, "x-switchyard-provider"),
            attempts: records.len(),
            status: u32::from(status),
            ..Audit::default()
        });
        if let Some(slug) = api::find(&headers, "x-switchyard-provider") {
            let slug = slug.to_string();
            if status < 400 {
                self.result = Some(RequestResult::Served);
                let model = served_model.unwrap_or_default().to_string();
                if let Some(conv) = self.decision.as_ref().and_then(|d| d.plan.conversation) {
                    let ttl_ms = self.config.catalog.routing.sticky_ttl_s.saturating_mul(1000);
                    stick(conv, &model, &slug, api::now_ms().saturating_add(ttl_ms));
                }
                self.served = Some((model, slug.clone()));
                if records.len() > 1 {
                    let served_model = api::find(&headers, "x-switchyard-model").unwrap_or_default();
                    let kind = if served_model != primary_model { "model" } else { "provider" };
                    count(&format!("switchyard.fallbacks.kind.{kind}"));
                }
            } else {
                self.result = Some(RequestResult::ProviderError);
            }
            let json = api::find(&headers, "content-type").is_some_and(|c| c.contains("application/json"));
            let encoded = api::find(&headers, "content-encoding").is_some_and(|e| e != "identity");
            if !stream && json && !encoded && !end_of_stream {
                // Hold the headers until the body is complete so the grown body goes out with
                // its own content-length in one piece.
                self.body_action = BodyAction::InjectProvider(slug);
                return Action::Pause;
            }
            if status < 300 && !end_of_stream {
                self.body_action = BodyAction::WatchStream;
                if stream && !encoded {
                    self.judge = Some(StreamJudge::default());
                }
            }
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if end_of_stream {
            self.response_complete = true;
        }
        if let Some(judge) = self.judge.as_mut() {
            if let Some(chunk) = api::response_body(0, body_size) {
                judge.feed(&chunk);
            }
        }
        match self.body_action {
            BodyAction::None => return Action::Continue,
            // Streams pass through chunk by chunk; only their end matters here.
            BodyAction::WatchStream if !end_of_stream => return Action::Continue,
            _ if !end_of_stream => return Action::Pause,
            _ => {}
        }
        match std::mem::replace(&mut self.body_action, BodyAction::None) {
            BodyAction::WatchStream => {
                // The serving attempt saw the answer end without its final event.
                if let Some(event) = api::property(vec![INTERRUPTED_PROPERTY]) {
                    api::set_response_body(body_size, 0, &event);
                } else if let Some(judge) = self.judge.take() {
                    let verdict = judge.verdict(self.offered_tools());
                    self.record_quality(verdict);
                }
            }
            BodyAction::Replace(body) => api::set_response_body(0, usize::MAX, body.as_bytes()),
            BodyAction::InjectProvider(slug) => {
                if let Some(body) = api::response_body(0, body_size) {
                    let verdict = judge_body(&body, self.offered_tools());
                    self.record_quality(verdict);
                    if let Some(out) = with_provider_field(&body, &slug) {
                        api::set_response_body(0, body_size, &out);
                        api::set_resp_header("content-length", Some(&out.len().to_string()));
                    }
                }
            }
            BodyAction::None => {}
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        let name = match self.result {
            Some(RequestResult::Served) => {
                let interrupted = !self.response_complete || api::property(vec![INTERRUPTED_PROPERTY]).is_some();
                if interrupted {
                    "interrupted"
                } else {
                    "served"
                }
            }
            Some(RequestResult::ProviderError) => "provider_error",
            Some(RequestResult::Failed) => "failed",
            None => return,
        };
        count(&format!("switchyard.requests.result.{name}"));
    }
}

/// Writes attempt `attempt`'s (1-based) record into the request's filter state. The upstream
/// filter writes it when the attempt starts (status 0: no response yet) and again when the
/// answer arrives, so attempts that never got one are listed too.
pub fn set_record(attempt: usize, record: crate::failover::AttemptRecord) {
    let mut records = api::property(vec![ATTEMPTS_PROPERTY]).map(|b| decode_records(&b)).unwrap_or_default();
    if !record_attempt(&mut records, attempt, record) {
        return;
    }
    api::set_property(vec![ATTEMPTS_PROPERTY], &encode_records(&records));
}
