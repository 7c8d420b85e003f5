//! Upstream (per-attempt) filter, installed on every provider cluster. Envoy runs it once per
//! attempt with a fresh context. It rewrites the attempt for its provider and records the
//! outcome. Header changes made here persist into later attempts, so every attempt sets all
//! per-provider headers from the plan and removes every other credential header.

use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use super::downstream::{set_record, OWN_REPLY_HEADER};
use super::shared::{count, observe, stats_key, tag, update_stats};
use super::{api, Configured};
use crate::failover::{
    attempt_rewrite, is_retryable_status, parse_retry_after, AttemptError, AttemptPlan, AttemptRecord, Outcome,
    INTERRUPTED_PROPERTY, PLAN_PROPERTY,
};
use crate::sse::{interrupted_event_for, StreamEnd};
use crate::stats::Finished;
use crate::surface::Api;
use crate::usage::{tokens_per_s, ReportedUsage, USAGE_TAIL_BYTES};

/// How much of an Anthropic stream's first chunk is read for `message_start`'s usage.
const ANTHROPIC_HEAD_BYTES: usize = 1024;

/// Response header telling the downstream filter that a non-retryable failure was turned into
/// a retry because a fallback model remains.
const MODEL_FAILURE_HEADER: &str = "x-switchyard-model-failure";

pub struct Attempt {
    config: Rc<Configured>,
    /// Model id and endpoint slug of this attempt, once the plan was applied.
    names: Option<(String, String)>,
    /// The endpoint is in this configuration's catalog. Attempts of a plan made before a reload
    /// that removed it write no statistics: that would recreate the pruned record.
    in_catalog: bool,
    /// The planner's index of that endpoint (what the attempt record carries back).
    planned: u16,
    attempt: usize,
    stream: bool,
    /// A later planned attempt serves another model (a refusal here may fall back to it).
    later_model: bool,
    new_prefix: Option<(usize, Vec<u8>)>,
    started_ms: u64,
    first_byte_ms: Option<u64>,
    status: Option<u16>,
    retry_after_s: Option<u32>,
    body_chunks: u32,
    usage: ReportedUsage,
    /// A successful SSE answer: watched for its terminating event.
    sse: Option<StreamEnd>,
    /// The answer started successfully but broke off (reset, or a stream without its final
    /// event): a failed attempt, though the caller already has the first bytes.
    interrupted: bool,
    recorded: bool,
    /// The API the request speaks (from the plan's path).
    api: Api,
}

fn u64_le(b: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?))
}

impl Attempt {
    pub fn new(config: Rc<Configured>) -> Attempt {
        Attempt {
            config,
            names: None,
            in_catalog: false,
            planned: 0,
            attempt: 0,
            stream: false,
            later_model: false,
            new_prefix: None,
            started_ms: 0,
            first_byte_ms: None,
            status: None,
            retry_after_s: None,
            body_chunks: 0,
            usage: ReportedUsage::default(),
            sse: None,
            interrupted: false,
            recorded: false,
            api: Api::OpenAi,
        }
    }

    fn names(&self) -> Option<(String, String)> {
        self.names.clone()
    }

    /// Refuses to send this attempt: a local reply the router treats as this attempt's answer.
    fn refuse(&mut self, status: u32, why: &str) -> Action {
        log::warn!("switchyard: attempt {} not sent: {why}", self.attempt);
        let body =
            crate::errors::ApiError::new(status, "server_error", "attempt_not_sent", why).for_api(self.api).body();
        // Shaped already: the listener's local_reply_config must leave it alone. (A later
        // attempt removes the marker with the other x-switchyard-* headers before it is sent.)
        api::set_req_header(OWN_REPLY_HEADER, Some("1"));
        api::reply(status, vec![("content-type", "application/json")], body.as_bytes());
        Action::Pause
    }

    /// No response at all (connect failure, reset, timeout), or an answer whose body never
    /// ended (reset mid-body).
    fn record_unanswered(&mut self) {
        if self.names.is_some() && !self.recorded {
            let status = self.status.unwrap_or(0);
            if (200..400).contains(&status) {
                self.interrupt();
            }
            self.record(status);
        }
    }

    /// This attempt's successful answer broke off after the first byte. The caller's stream is
    /// committed (no failover is possible), so it is told with a final error event.
    fn interrupt(&mut self) {
        self.interrupted = true;
        if let Some((model, slug)) = self.names() {
            api::set_property(vec![INTERRUPTED_PROPERTY], interrupted_event_for(self.api, &slug, &model).as_bytes());
        }
    }

    fn record(&mut self, status: u16) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        if self.names.is_none() {
            return;
        }
        set_record(self.attempt, AttemptRecord { endpoint: self.planned, status, retry_after_s: self.retry_after_s });
        let Some((model, slug)) = self.names() else { return };
        let outcome = if self.interrupted { Outcome::Interrupted } else { Outcome::of(status) };
        let now = api::now_ms();
        let ttft = self.first_byte_ms.map(|t| t.saturating_sub(self.started_ms) as u32);
        let tokens_per_s = match (self.first_byte_ms, outcome) {
            (Some(first), Outcome::Success) => {
                tokens_per_s(self.stream, self.started_ms, first, now, self.usage.completion_tokens, self.body_chunks)
            }
            _ => None,
        };
        let window = self.config.catalog.routing.outage_window_s.saturating_mul(1000);
        let catalog = &self.config.catalog;
        let pricing = catalog
            .model(&model)
            .and_then(|m| m.endpoints.iter().filter_map(|&i| catalog.endpoint(i)).find(|e| e.slug == slug))
            .map(|e| e.pricing)
            .unwrap_or_default();
        let usage = self.usage.priced(&pricing);
        let finished = Finished { outcome, ttft_ms: ttft, tokens_per_s, retry_after_s: self.retry_after_s, usage };
        if self.in_catalog {
            update_stats(&stats_key(&model, &slug), |s| s.finish(now, finished, window));
        }
        let tags = format!("model.{}.endpoint.{}", tag(&model), tag(&slug));
        count(&format!("switchyard.attempts.{tags}.outcome.{}", outcome.name()));
        if let Some(t) = ttft {
            observe(&format!("switchyard.ttft_ms.{tags}"), u64::from(t));
        }
        observe(&format!("switchyard.latency_ms.{tags}"), now.saturating_sub(self.started_ms));
    }
}

impl Context for Attempt {
    // Envoy does not run access-log callbacks (on_log) for upstream filters; on_done runs when
    // the attempt's stream ends, also after a connect failure, reset or timeout.
    fn on_done(&mut self) -> bool {
        self.record_unanswered();
        true
    }
}

impl HttpContext for Attempt {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Some(plan) = api::property(vec![PLAN_PROPERTY]).and_then(|b| AttemptPlan::decode(&b)) else {
            // Only Switchyard-routed requests may use a provider cluster (it injects keys).
            return self.refuse(403, "request reached a provider cluster without a Switchyard plan");
        };
        self.api = Api::of_path(&plan.path);
        self.attempt =
            api::property(vec!["upstream", "request_attempt_count"]).and_then(|b| u64_le(&b)).unwrap_or(1) as usize;
        let cluster =
            api::property(vec!["xds", "cluster_name"]).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
        let config = Rc::clone(&self.config);
        let catalog = &config.catalog;
        let rw = match attempt_rewrite(catalog, config.id, &plan, self.attempt, &cluster) {
            Ok(rw) => rw,
            Err(AttemptError::StalePlan) => {
                return self.refuse(503, "the planned provider is no longer in the configuration")
            }
            Err(AttemptError::PlanExhausted) => return self.refuse(503, "no planned endpoint left"),
            Err(AttemptError::WrongCluster { expected, got }) => {
                return self.refuse(503, &format!("attempt routed to {got}, plan chose {expected}"));
            }
        };
        self.planned = rw.planned;
        self.stream = plan.stream;
        // By model id: valid whichever configuration made the plan.
        self.later_model = plan.refs.iter().skip(self.attempt).any(|r| r.model != rw.model);
        self.names = Some((rw.model.clone(), rw.slug.clone()));
        self.in_catalog = rw.endpoint.is_some();
        self.started_ms = api::now_ms();
        // Caller headers a third party must not see (the default deny set and the operator's
        // upstream_headers policy), then every credential header, then this provider's own.
        let headers = api::req_headers();
        let swept = catalog.upstream_headers.to_remove(headers.iter().map(|(k, _)| k.as_str()));
        for h in &swept {
            api::set_req_header(h, None);
        }
        // Credential headers are lower-case, like Envoy's header names: only those present and
        // not swept already need a host call.
        for h in catalog.credential_headers.iter().filter(|h| !swept.contains(&h.as_str())) {
            if api::find(&headers, h).is_some() {
                api::set_req_header(h, None);
            }
        }
        if let Some((h, v)) = &rw.credential {
            api::set_req_header(h, Some(v));
        }
        api::set_req_header(":authority", Some(&rw.authority));
        api::set_req_header(":path", Some(&rw.path));
        // The first attempt's body is the one the downstream filter sized; later attempts may
        // carry another model id (and follow an attempt that changed the header).
        if self.attempt > 1 || rw.new_prefix.is_some() {
            api::set_req_header("content-length", Some(&rw.content_length.to_string()));
        }
        self.new_prefix = rw.new_prefix.map(|p| (plan.prefix_len as usize, p));
        set_record(self.attempt, AttemptRecord { endpoint: rw.planned, status: 0, retry_after_s: None });
        if let (true, Some((model, slug))) = (self.in_catalog, self.names()) {
            update_stats(&stats_key(&model, &slug), |s| s.start());
        }
        Action::Continue
    }

    fn on_http_request_body(&mut self, _body_size: usize, end_of_stream: bool) -> Action {
        if self.new_prefix.is_none() {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        if let Some((old_len, prefix)) = self.new_prefix.take() {
            api::set_request_body(0, old_len, &prefix);
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some((model, slug)) = self.names() else { return Action::Continue };
        let headers = api::resp_headers();
        let status: u16 = api::find(&headers, ":status").and_then(|s| s.parse().ok()).unwrap_or(0);
        self.status = Some(status);
        let cap = self.config.catalog.routing.max_retry_after_s;
        self.retry_after_s = api::find(&headers, "retry-after").and_then(|v| parse_retry_after(v, cap));
        if (200..300).contains(&status)
            && api::find(&headers, "content-type").is_some_and(|c| c.starts_with("text/event-stream"))
        {
            self.sse = Some(StreamEnd::for_api(self.api));
        }
        // A non-retryable failure with another model still planned: let Envoy retry.
        if status >= 400 && !is_retryable_status(status) && self.later_model {
            api::set_resp_header(":status", Some("503"));
            api::set_resp_header(MODEL_FAILURE_HEADER, Some(&status.to_string()));
            // Only a serving attempt names the attempt count (the downstream filter reads the
            // attempt records up to it): never the provider's own header.
            api::set_resp_header("x-switchyard-attempts", None);
            self.record(status);
            return Action::Continue;
        }
        api::set_resp_header("x-switchyard-provider", Some(&slug));
        api::set_resp_header("x-switchyard-model", Some(&model));
        api::set_resp_header("x-switchyard-attempts", Some(&self.attempt.to_string()));
        if status >= 400 || end_of_stream {
            // A body-less answer is complete here (never "interrupted").
            self.record(status);
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if self.names.is_none() || self.recorded {
            return Action::Continue;
        }
        if self.first_byte_ms.is_none() {
            self.first_byte_ms = Some(api::now_ms());
        }
        if body_size > 0 {
            self.body_chunks += 1;
            // An Anthropic stream reports its prompt tokens in the first event (`message_start`):
            // when the first chunk is longer than a tail, read its head too (before the tail,
            // whose later values win).
            if self.body_chunks == 1 && self.sse.is_some() && self.api == Api::Anthropic && body_size > USAGE_TAIL_BYTES
            {
                if let Some(head) = api::response_body(0, body_size.min(ANTHROPIC_HEAD_BYTES)) {
                    self.usage.scan_for(self.api, &head);
                }
            }
            // Usage sits at the end of JSON bodies and in the last SSE events: read only tails.
            let tail = body_size.min(USAGE_TAIL_BYTES);
            if let Some(b) = api::response_body(body_size - tail, tail) {
                self.usage.scan_for(self.api, &b);
                if let Some(sse) = self.sse.as_mut() {
                    sse.feed(&b);
                }
            }
        }
        if end_of_stream {
            if self.sse.as_ref().is_some_and(|s| !s.complete()) {
                self.interrupt();
            }
            self.record(self.status.unwrap_or(0));
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        self.record_unanswered();
    }
}
