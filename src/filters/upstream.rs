//! Upstream (per-attempt) filter, installed on every provider cluster. Envoy runs it once per
//! attempt with a fresh context. It rewrites the attempt for its provider and records the
//! outcome. Header changes made here persist into later attempts, so every attempt sets all
//! per-provider headers from the plan and removes every other credential header.

use std::rc::Rc;
use std::sync::Arc;

use super::attempts::{cooled_down_late, finished, read_record, set_record, started, watch_chunk, AttemptOf};
use super::host::{find, status_of, Action, Host};
use super::internals::{hand_on, is_internal, set_scheme};
use super::shared::count;
use super::tokens::{attempt_token, missing_metric};
use super::{Configured, Filter};
use crate::answer::sse::interrupted_event_for;
use crate::answer::usage::ReportedUsage;
use crate::answer::watch::{AttemptWatch, Summary, MAX_ERROR_BODY_BYTES};
use crate::api::Api;
use crate::protocol::bytes::u64_at;
use crate::protocol::outcome::{
    is_retryable_status, key_refused, parse_retry_after, retry_after_of, AttemptRecord, Outcome,
};
use crate::protocol::plan::{body_property, CONVERSE_BODY_PROPERTY};
use crate::protocol::plan::{AttemptPlan, FIRST_ATTEMPT_PROPERTY, INTERRUPTED_PROPERTY, PLAN_PROPERTY};
use crate::protocol::rewrite::{
    api_headers, attempt_rewrite, foreign_body, kind_body, model_prefix, AttemptError, ANTHROPIC_VERSION,
};
use crate::providers::{Kind, StreamConverter};
use crate::wiring::{ATTEMPTS_HEADER, MODEL_FAILURE_HEADER, MODEL_HEADER, OWN_REPLY_HEADER, PROVIDER_HEADER};

pub struct Attempt<H: Host> {
    host: H,
    config: Rc<Configured>,
    /// Model id and endpoint slug of this attempt, once the plan was applied.
    names: Option<(String, String)>,
    /// The endpoint is in this configuration's catalog. Attempts of a plan made before a reload
    /// that removed it write no statistics: that would recreate the pruned record.
    in_catalog: bool,
    /// The planner's index of that endpoint (what the attempt record carries back).
    planned: u16,
    attempt: usize,
    /// A later planned attempt serves another model (a refusal here may fall back to it).
    later_model: bool,
    /// The plan has an attempt after this one.
    later_attempt: bool,
    new_prefix: Option<(usize, Vec<u8>)>,
    /// The whole body of an attempt translated into another API than the written body's.
    new_body: Option<Vec<u8>>,
    /// The API the caller speaks (an interrupted stream's last event is in its shape).
    caller_api: Api,
    /// What the answer showed so far.
    watch: AttemptWatch,
    recorded: bool,
    /// A Gemini 429's body, collected for the delay it names.
    error_body: Option<Vec<u8>>,
    /// The kind of this attempt's provider.
    kind: Option<Arc<dyn Kind>>,
    /// Top-level members the kind never sends (`Kind::blanked_members`).
    blanked: &'static [&'static str],
    /// The kind's converter of this attempt's streamed answer (`Kind::stream_converter`).
    converter: Option<Box<dyn StreamConverter>>,
    /// An error answer whose body the kind rewrites (`Kind::error_body`).
    kind_error: Option<KindError>,
    /// The endpoint's upstream model id (what the kind's converters need).
    upstream_model: String,
    /// A whole answer the kind converts into the attempt's API (`Kind::convert_answer`),
    /// collected until its end (at most `MAX_CONVERTED_BYTES`).
    converted: Option<Vec<u8>>,
}

/// The largest whole answer a kind converts (Bedrock's Converse answers: a few kilobytes; an
/// answer over this is passed on cut, which the caller's translation refuses as malformed).
const MAX_CONVERTED_BYTES: usize = 8 << 20;

/// An error answer a kind rewrites: its status and headers as the provider sent them, and its
/// body so far (at most `MAX_ERROR_BODY_BYTES`).
struct KindError {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl<H: Host> Attempt<H> {
    pub fn new(host: H, config: Rc<Configured>) -> Attempt<H> {
        Attempt {
            host,
            config,
            names: None,
            in_catalog: false,
            planned: 0,
            attempt: 0,
            later_model: false,
            later_attempt: false,
            new_prefix: None,
            new_body: None,
            caller_api: Api::OpenAi,
            watch: AttemptWatch::new(Api::OpenAi, false, 0),
            recorded: false,
            error_body: None,
            kind: None,
            blanked: &[],
            converter: None,
            kind_error: None,
            upstream_model: String::new(),
            converted: None,
        }
    }

    /// Refuses to send this attempt: a local reply the router treats as this attempt's answer.
    fn refuse(&mut self, status: u32, why: &str) -> Action {
        log::warn!("switchyard: attempt {} not sent: {why}", self.attempt);
        let body = crate::answer::errors::ApiError::new(status, "server_error", "attempt_not_sent", why)
            .for_api(self.watch.api)
            .body();
        // Shaped already: the listener's local_reply_config must leave it alone. (A later
        // attempt removes the marker with the other x-switchyard-* headers before it is sent.)
        self.host.set_req_header(OWN_REPLY_HEADER, Some("1"));
        self.host.reply(status, &[("content-type", "application/json")], body.as_bytes());
        Action::Pause
    }

    /// No response at all (connect failure, reset, timeout), or an answer whose body never
    /// ended (reset mid-body).
    fn record_unanswered(&mut self) {
        if self.names.is_some() && !self.recorded {
            self.watch.unanswered();
            if self.watch.interrupted {
                self.interrupt();
            }
            self.record();
        }
    }

    /// This attempt's successful answer broke off after the first byte. The caller's stream is
    /// committed (no failover is possible), so it is told with a final error event.
    fn interrupt(&mut self) {
        self.watch.interrupted = true;
        if let Some((model, slug)) = &self.names {
            self.host
                .set_property(&[INTERRUPTED_PROPERTY], interrupted_event_for(self.caller_api, slug, model).as_bytes());
        }
    }

    fn record(&mut self) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        let Some((model, slug)) = &self.names else { return };
        let now = self.host.now_ms();
        let s = self.watch.summary(now);
        set_record(
            &self.host,
            self.attempt,
            AttemptRecord { endpoint: self.planned, status: s.status, retry_after_s: s.retry_after_s },
        );
        let of = AttemptOf { model, slug, in_catalog: self.in_catalog };
        finished(&self.host, &self.config, &of, &s, &self.watch.usage, true, None, now);
    }

    /// The end of a Gemini 429's body: its delay, recorded late (see `cooled_down_late`).
    fn delay_from_body(&mut self, body: &[u8]) {
        self.watch.error_body(body, self.config.catalog.routing.max_retry_after_s);
        let (Some(delay), Some((model, slug))) = (self.watch.retry_after_s, &self.names) else { return };
        let record = AttemptRecord { endpoint: self.planned, status: 429, retry_after_s: Some(delay) };
        let of = AttemptOf { model, slug, in_catalog: self.in_catalog };
        cooled_down_late(&self.host, &self.config, self.attempt, record, &of, self.host.now_ms());
    }

    /// The second attempt of a plan whose first attempt the decision filter prepared: that
    /// attempt ran without this filter, so its failure is recorded here, from what the hook on
    /// its cluster's filter noted (`<status>,<retry-after>`; nothing if it got no answer at all).
    fn record_prepared_first(&self, plan: &AttemptPlan) {
        if read_record(&self.host, 1).is_some() {
            return;
        }
        let (Some(&planned), Some(r)) = (plan.endpoints.first(), plan.refs.first()) else { return };
        let noted =
            self.host.property(&[FIRST_ATTEMPT_PROPERTY]).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
        let (status, retry_after) = noted.split_once(',').unwrap_or((noted.as_str(), ""));
        let status: u16 = status.trim().parse().unwrap_or(0);
        let cap = self.config.catalog.routing.max_retry_after_s;
        let retry_after_s = parse_retry_after(retry_after, cap);
        set_record(&self.host, 1, AttemptRecord { endpoint: planned, status, retry_after_s });
        let in_catalog = self.config.catalog.find_endpoint(&r.model, &r.slug).is_some();
        let s = Summary {
            outcome: Outcome::of(status),
            status,
            ttft_ms: None,
            tokens_per_s: None,
            retry_after_s,
            latency_ms: 0,
        };
        finished(
            &self.host,
            &self.config,
            &AttemptOf { model: &r.model, slug: &r.slug, in_catalog },
            &s,
            &ReportedUsage::default(),
            false,
            None,
            self.host.now_ms(),
        );
    }
}

impl<H: Host> Filter for Attempt<H> {
    fn on_request_headers(&mut self, _end_of_stream: bool) -> Action {
        let Some(plan) = self.host.property(&[PLAN_PROPERTY]).and_then(|b| AttemptPlan::decode(&b)) else {
            // Only Switchyard-routed requests may use a provider cluster (it injects keys).
            return self.refuse(403, "request reached a provider cluster without a Switchyard plan");
        };
        let api_of_plan = Api::of_path(&plan.path);
        self.caller_api = api_of_plan;
        self.attempt =
            self.host.property(&["upstream", "request_attempt_count"]).and_then(|b| u64_at(&b, 0)).unwrap_or(1)
                as usize;
        if plan.first_prepared && self.attempt == 2 {
            self.record_prepared_first(&plan);
        }
        let cluster =
            self.host.property(&["xds", "cluster_name"]).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
        let config = Rc::clone(&self.config);
        let catalog = &config.catalog;
        self.watch = AttemptWatch::new(api_of_plan, plan.stream, self.host.now_ms());
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
        // The answer is watched in the API the endpoint speaks (translated back downstream).
        self.watch = AttemptWatch::new(rw.api, plan.stream, self.host.now_ms());
        let kind = catalog.provider_for_slug(&rw.slug).map(|p| Arc::clone(&p.kind));
        self.blanked = kind.as_ref().map_or(&[], |k| k.blanked_members(rw.api));
        if kind.as_ref().is_some_and(|k| k.converse(rw.api, &rw.upstream_model)) {
            // Bedrock's Converse: the body the decision filter wrote for it (no model: the path
            // names it).
            match self.host.property(&[CONVERSE_BODY_PROPERTY]) {
                Some(body) => self.new_body = Some(body),
                None => return self.refuse(503, "the plan has no Converse body for this attempt"),
            }
        } else if rw.foreign_body {
            let stored = self.host.property(&[&body_property(rw.api)]);
            match stored.and_then(|b| foreign_body(rw.api, &b, &rw.upstream_model)) {
                Some(body) => {
                    self.new_body = Some(match kind.as_ref().and_then(|k| k.body_prefix(rw.api)) {
                        Some(own) => kind_body(&body, model_prefix(&rw.upstream_model).len(), own, self.blanked),
                        None => body,
                    });
                }
                None => return self.refuse(503, "the plan has no body for this attempt's API"),
            }
        }
        self.kind = kind;
        self.upstream_model = rw.upstream_model.clone();
        self.planned = rw.planned;
        // By model id: valid whichever configuration made the plan.
        self.later_model = plan.refs.iter().skip(self.attempt).any(|r| r.model != rw.model);
        self.later_attempt = plan.endpoints.len() > self.attempt;
        self.in_catalog = rw.endpoint.is_some();
        // Nothing of Envoy's or Switchyard's own goes to the provider but the next attempt's
        // cluster token (see `internals`); then the caller headers a third party must not see
        // (the default deny set and the operator's upstream_headers policy), every credential
        // header, and this provider's own.
        let headers = self.host.req_headers();
        let _ = hand_on(&self.host, headers.iter().map(|(k, _)| k.as_str()), self.attempt);
        set_scheme(&self.host);
        // The key the provider's cluster injected for this attempt's API (it ran before this
        // filter) stays.
        let injected = rw.injected_header.as_deref();
        let kept = |k: &str| is_internal(k) || Some(k) == injected;
        let swept = catalog.upstream_headers.to_remove(headers.iter().map(|(k, _)| k.as_str()).filter(|k| !kept(k)));
        for h in &swept {
            self.host.set_req_header(h, None);
        }
        // Credential headers are lower-case, like Envoy's header names: only those present and
        // not swept already need a host call.
        for h in catalog.credential_headers.iter().filter(|h| !swept.contains(&h.as_str()) && !kept(h)) {
            if find(&headers, h).is_some() {
                self.host.set_req_header(h, None);
            }
        }
        if let Some((h, v)) = &rw.credential {
            self.host.set_req_header(h, Some(v));
        }
        if let Some(source) = &rw.token {
            // The provider's access token, from the record the root's tick keeps fresh. None
            // usable (startup, the metadata server down): this attempt fails over at once, like
            // a connect failure, and is counted; no request waits for a fetch.
            match attempt_token(&self.host, source, self.host.now_ms()) {
                Some(bearer) => self.host.set_req_header("authorization", Some(&bearer)),
                None => {
                    let provider = catalog.provider_for_slug(&rw.slug).map_or(rw.slug.as_str(), |p| p.slug.as_str());
                    count(&self.host, &missing_metric(provider));
                    set_record(
                        &self.host,
                        self.attempt,
                        AttemptRecord { endpoint: rw.planned, status: 0, retry_after_s: None },
                    );
                    return self.refuse(503, &format!("no access token for provider {provider} yet"));
                }
            }
        }
        self.host.set_req_header(":authority", Some(&rw.authority));
        self.host.set_req_header(":path", Some(&rw.path));
        // The first attempt's body is the one the downstream filter sized; later attempts may
        // carry another model id (and follow an attempt that changed the header).
        if let Some(body) = &self.new_body {
            self.host.set_req_header("content-length", Some(&body.len().to_string()));
        } else if self.attempt > 1 || rw.new_prefix.is_some() {
            self.host.set_req_header("content-length", Some(&rw.content_length.to_string()));
        }
        for (h, v) in api_headers(rw.api, find(&headers, ANTHROPIC_VERSION).is_some()) {
            self.host.set_req_header(h, v);
        }
        self.new_prefix = rw.new_prefix.map(|p| (plan.prefix_len as usize, p));
        set_record(&self.host, self.attempt, AttemptRecord { endpoint: rw.planned, status: 0, retry_after_s: None });
        started(&self.host, &AttemptOf { model: &rw.model, slug: &rw.slug, in_catalog: self.in_catalog });
        self.names = Some((rw.model, rw.slug));
        Action::Continue
    }

    fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if self.new_prefix.is_none() && self.new_body.is_none() {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause;
        }
        if let Some(body) = self.new_body.take() {
            self.host.set_request_body(0, usize::MAX, &body);
            return Action::Continue;
        }
        if let Some((old_len, prefix)) = self.new_prefix.take() {
            if self.blanked.is_empty() {
                self.host.set_request_body(0, old_len, &prefix);
            } else {
                // The kind leaves members out: the whole body, rewritten to the same length.
                let body = self.host.request_body(0, body_size).unwrap_or_default();
                self.host.set_request_body(0, usize::MAX, &kind_body(&body, old_len, &prefix, self.blanked));
            }
        }
        Action::Continue
    }

    fn on_response_headers(&mut self, end_of_stream: bool) -> Action {
        let Some((model, slug)) = self.names.clone() else { return Action::Continue };
        let headers = self.host.resp_headers();
        let mut status = status_of(&headers);
        let mut content_type = find(&headers, "content-type");
        if let Some(kind) = self.kind.clone() {
            // The kind's answer in its API's terms: an error's status as the router should see
            // it (and its body rewritten), a stream converted.
            let (mapped, rewrites) = kind.error_status(self.watch.api, status, &headers);
            if rewrites && !end_of_stream {
                self.kind_error = Some(KindError { status, headers: headers.clone(), body: Vec::new() });
                self.host.set_resp_header("content-length", None);
                self.host.set_resp_header("content-type", Some("application/json"));
                content_type = Some("application/json");
            }
            if mapped != status {
                self.host.set_resp_header(":status", Some(&mapped.to_string()));
                status = mapped;
            }
            if (200..300).contains(&status) {
                self.converter = kind.stream_converter(self.watch.api, &self.upstream_model, content_type);
            }
            if let Some(c) = &self.converter {
                self.host.set_resp_header("content-length", None);
                self.host.set_resp_header("content-type", Some(c.content_type()));
                content_type = Some(c.content_type());
            } else if (200..300).contains(&status)
                && !end_of_stream
                && kind.converse(self.watch.api, &self.upstream_model)
            {
                // A whole answer in the kind's own API: converted at its end.
                self.converted = Some(Vec::new());
                self.host.set_resp_header("content-length", None);
            }
        }
        let cap = self.config.catalog.routing.max_retry_after_s;
        let retry_after = retry_after_of(find(&headers, "retry-after"), find(&headers, "retry-after-ms"));
        self.watch.headers(status, retry_after.as_deref(), content_type, cap);
        // A kind whose provider names no delay on its 429 has its own (Gemini's may still be in
        // the body: read there).
        if status == 429 && self.watch.retry_after_s.is_none() && self.watch.api != Api::Google {
            self.watch.retry_after_s = self.kind.as_ref().and_then(|k| k.rate_limit_delay_s()).map(|s| s.min(cap));
        }
        // A non-retryable failure with another model still planned, or the provider refusing
        // its own key (the operator's: `key_refused`) with another attempt planned: let Envoy
        // retry.
        let failed_over = self.later_model || (self.later_attempt && key_refused(status));
        if status >= 400 && !is_retryable_status(status) && failed_over {
            self.host.set_resp_header(":status", Some("503"));
            self.host.set_resp_header(MODEL_FAILURE_HEADER, Some(&status.to_string()));
            // Only a serving attempt names the attempt count (the downstream filter reads the
            // attempt records up to it): never the provider's own header.
            self.host.set_resp_header(ATTEMPTS_HEADER, None);
            self.record();
            return Action::Continue;
        }
        self.host.set_resp_header(PROVIDER_HEADER, Some(&slug));
        self.host.set_resp_header(MODEL_HEADER, Some(&model));
        self.host.set_resp_header(ATTEMPTS_HEADER, Some(&self.attempt.to_string()));
        if status >= 400 || end_of_stream {
            // A body-less answer is complete here (never "interrupted").
            self.record();
        }
        // Gemini names a 429's delay only in its body. Envoy passes that body on only for an
        // answer it does not retry (a retried attempt is reset at its headers, and a Wasm filter
        // cannot hold an upstream answer's headers for its body): that answer's delay is read at
        // its end and the record and cool-down follow.
        if self.watch.reads_error_body() && !end_of_stream {
            self.error_body = Some(Vec::new());
        }
        Action::Continue
    }

    fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if let Some(KindError { status, headers, body: collected }) = self.kind_error.as_mut() {
            // Held back chunk by chunk (bounded), answered whole in the API's shape at the end.
            let room = MAX_ERROR_BODY_BYTES.saturating_sub(collected.len()).min(body_size);
            if let Some(piece) = (room > 0).then(|| self.host.response_body(0, room)).flatten() {
                collected.extend_from_slice(&piece);
            }
            let out = match (&self.kind, end_of_stream) {
                (Some(kind), true) => kind.error_body(self.watch.api, *status, headers, collected),
                _ => Vec::new(),
            };
            self.host.set_response_body(0, body_size, &out);
            return Action::Continue;
        }
        let mut body_size = body_size;
        if let Some(collected) = self.converted.as_mut() {
            let room = MAX_CONVERTED_BYTES.saturating_sub(collected.len()).min(body_size);
            if let Some(piece) = (room > 0).then(|| self.host.response_body(0, room)).flatten() {
                collected.extend_from_slice(&piece);
            }
            let mut out = Vec::new();
            if end_of_stream {
                let body = self.converted.take().unwrap_or_default();
                let id = find(&self.host.resp_headers(), "x-amzn-requestid").unwrap_or("bdrk_converse").to_string();
                out = match &self.kind {
                    Some(kind) => kind.convert_answer(self.watch.api, &self.upstream_model, &id, &body),
                    None => None,
                }
                .unwrap_or(body);
            }
            self.host.set_response_body(0, body_size, &out);
            body_size = out.len();
        } else if let Some(c) = self.converter.as_mut() {
            let chunk =
                if body_size > 0 { self.host.response_body(0, body_size).unwrap_or_default() } else { Vec::new() };
            let out = c.feed(&chunk);
            self.host.set_response_body(0, body_size, &out);
            body_size = out.len();
        }
        if let Some(collected) = self.error_body.as_mut() {
            let room = MAX_ERROR_BODY_BYTES.saturating_sub(collected.len()).min(body_size);
            if let Some(piece) = (room > 0).then(|| self.host.response_body(0, room)).flatten() {
                collected.extend_from_slice(&piece);
            }
            if end_of_stream {
                let body = self.error_body.take().unwrap_or_default();
                self.delay_from_body(&body);
            }
            return Action::Continue;
        }
        if self.names.is_none() || self.recorded {
            return Action::Continue;
        }
        watch_chunk(&self.host, &mut self.watch, body_size, self.host.now_ms());
        if end_of_stream {
            self.watch.body_ended();
            if self.watch.interrupted {
                self.interrupt();
            }
            self.record();
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        self.record_unanswered();
    }

    // Envoy does not run access-log callbacks (on_log) for upstream filters; on_done runs when
    // the attempt's stream ends, also after a connect failure, reset or timeout.
    fn on_done(&mut self) {
        self.record_unanswered();
    }
}
