//! Failover across provider clusters, executed by Envoy's own retry policy.
//!
//! The downstream filter computes the ranked plan once and names each attempt's cluster in a
//! slot header (`slots`), which the route's cluster specifier reads before every attempt; the
//! upstream (per-attempt) filter
//! rewrites each attempt for its provider and records its outcome. This module is the pure part:
//! encodings shared by both filters, the per-attempt rewrite, outcome classes and the final error.

use serde_json::{json, Value};

use crate::answer::errors::ApiError;
use crate::api::Api;
use crate::config::Catalog;
use crate::protocol::bytes::Reader;

/// Filter-state keys (Envoy stores them as `wasm.<key>` on the request's stream info, which the
/// upstream filters of every attempt share).
pub const PLAN_PROPERTY: &str = "switchyard_plan";
/// Attempt k's record is `switchyard_attempt_<k>`: one key per attempt, so an attempt writes its
/// record without reading the others first.
pub const ATTEMPT_PROPERTY_PREFIX: &str = "switchyard_attempt_";

pub fn attempt_property(attempt: usize) -> String {
    format!("{ATTEMPT_PROPERTY_PREFIX}{attempt}")
}
/// Set by the serving attempt when its answer broke off after the first byte: the downstream
/// filter ends the caller's stream with an error event (value: the SSE event to append).
pub const INTERRUPTED_PROPERTY: &str = "switchyard_interrupted";

/// What every attempt's upstream filter needs to know about the request.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptPlan {
    /// Fingerprint of the catalog `endpoints` index into. Another value means the configuration
    /// was reloaded between the decision and this attempt: `refs` then name the endpoints.
    pub catalog_id: u64,
    pub stream: bool,
    /// Length of the body the downstream filter produced.
    pub body_len: u32,
    /// Length of its `{"model":"<id>"` prefix, replaced per attempt.
    pub prefix_len: u32,
    /// Original request path (header changes persist across attempts: never derive from them).
    pub path: String,
    /// Catalog endpoint index per attempt (in the planner's catalog).
    pub endpoints: Vec<u16>,
    /// The same endpoints by name, valid in any configuration, so a plan survives a reload.
    pub refs: Vec<EndpointRef>,
    /// The downstream filter prepared attempt 1 itself and sent it to the provider's
    /// `first_attempt_cluster`, where no per-attempt Wasm runs: the second attempt's filter
    /// records the first one's failure (from the hook's dynamic metadata).
    pub first_prepared: bool,
}

/// An endpoint by name: what an attempt needs from the configuration that planned it.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRef {
    pub model: String,
    pub slug: String,
    pub upstream_model: String,
}

const PLAN_VERSION: u8 = 3;
/// Plans of the previous version (no `first_prepared` flag) still decode.
const PLAN_VERSION_2: u8 = 2;

fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let n = b.len().min(u16::MAX as usize);
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(b.get(..n).unwrap_or(&[]));
}

impl AttemptPlan {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.path.len() + 2 * self.endpoints.len());
        out.push(PLAN_VERSION);
        out.extend_from_slice(&self.catalog_id.to_le_bytes());
        out.push(u8::from(self.stream) | (u8::from(self.first_prepared) << 1));
        out.extend_from_slice(&self.body_len.to_le_bytes());
        out.extend_from_slice(&self.prefix_len.to_le_bytes());
        let path = self.path.as_bytes();
        let plen = path.len().min(u16::MAX as usize);
        out.extend_from_slice(&(plen as u16).to_le_bytes());
        out.extend_from_slice(path.get(..plen).unwrap_or(&[]));
        out.push(self.endpoints.len().min(255) as u8);
        for e in self.endpoints.iter().take(255) {
            out.extend_from_slice(&e.to_le_bytes());
        }
        out.push(self.refs.len().min(255) as u8);
        for r in self.refs.iter().take(255) {
            put_str(&mut out, &r.model);
            put_str(&mut out, &r.slug);
            put_str(&mut out, &r.upstream_model);
        }
        out
    }

    /// This configuration's endpoint index for each attempt (None: not in this configuration).
    pub fn local_endpoints(&self, catalog: &Catalog, catalog_id: u64) -> Vec<Option<usize>> {
        if self.catalog_id == catalog_id {
            return self.endpoints.iter().map(|&i| Some(i as usize)).collect();
        }
        self.refs.iter().map(|r| catalog.find_endpoint(&r.model, &r.slug)).collect()
    }

    pub fn decode(b: &[u8]) -> Option<AttemptPlan> {
        let mut r = Reader::new(b);
        let version = r.u8()?;
        if version != PLAN_VERSION && version != PLAN_VERSION_2 {
            return None;
        }
        let catalog_id = r.u64()?;
        let flags = r.u8()?;
        let stream = flags & 1 != 0;
        let first_prepared = version == PLAN_VERSION && flags & 2 != 0;
        let body_len = r.u32()?;
        let prefix_len = r.u32()?;
        let plen = r.u16()? as usize;
        let path = String::from_utf8(r.take(plen)?.to_vec()).ok()?;
        let n = r.u8()? as usize;
        let mut endpoints = Vec::with_capacity(n);
        for _ in 0..n {
            endpoints.push(r.u16()?);
        }
        let n = r.u8()? as usize;
        let mut refs = Vec::with_capacity(n);
        for _ in 0..n {
            let model = r.string()?;
            let slug = r.string()?;
            let upstream_model = r.string()?;
            refs.push(EndpointRef { model, slug, upstream_model });
        }
        Some(AttemptPlan { catalog_id, stream, body_len, prefix_len, path, endpoints, refs, first_prepared })
    }
}

/// FNV-1a, used to fingerprint the configuration bytes.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

// ---------------------------------------------------------------------------------------------
// Per-attempt rewrite
// ---------------------------------------------------------------------------------------------

/// What one attempt's upstream filter sets.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRewrite {
    /// This configuration's endpoint, if it still has it.
    pub endpoint: Option<usize>,
    /// Model id and endpoint slug of the attempt (statistics, metrics).
    pub model: String,
    pub slug: String,
    /// The planner's endpoint index (attempt records, read by the filter that made the plan).
    pub planned: u16,
    pub authority: String,
    pub path: String,
    pub credential: Option<(String, String)>,
    /// The header the provider's cluster injected the key in (`credential.injected`): kept.
    pub injected_header: Option<String>,
    pub content_length: usize,
    /// Replacement for the body's first `prefix_len` bytes; None when already right.
    pub new_prefix: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttemptError {
    /// The planned endpoint's provider is not in this configuration (removed by a reload, so its
    /// key is gone too), or the plan is corrupt.
    StalePlan,
    /// Envoy sent this attempt to a cluster the plan did not choose.
    WrongCluster { expected: String, got: String },
    /// More attempts than planned endpoints.
    PlanExhausted,
}

pub fn model_prefix(upstream_model: &str) -> Vec<u8> {
    let mut p = b"{\"model\":".to_vec();
    p.extend_from_slice(&serde_json::to_vec(upstream_model).unwrap_or_else(|_| b"\"\"".to_vec()));
    p
}

/// The rewrite for attempt `attempt` (1-based) that Envoy sent to `cluster`.
pub fn attempt_rewrite(
    catalog: &Catalog,
    catalog_id: u64,
    plan: &AttemptPlan,
    attempt: usize,
    cluster: &str,
) -> Result<AttemptRewrite, AttemptError> {
    let k = attempt.saturating_sub(1);
    let planned = *plan.endpoints.get(k).ok_or(AttemptError::PlanExhausted)?;
    let same_config = plan.catalog_id == catalog_id;
    // After a reload the plan's endpoints are found by name. An endpoint the new catalog no
    // longer lists is still tried through its provider (the plan approved it before the
    // change); a provider the new catalog removed cannot be: its cluster and key are gone.
    let (idx, provider, upstream_model, model, slug) = if same_config {
        let ep = catalog.endpoint(planned as usize).ok_or(AttemptError::StalePlan)?;
        let provider = catalog.provider_of(ep).ok_or(AttemptError::StalePlan)?;
        let model = catalog.models.get(ep.model).map(|m| m.id.clone()).unwrap_or_default();
        (Some(planned as usize), provider, ep.upstream_model.clone(), model, ep.slug.clone())
    } else {
        let r = plan.refs.get(k).ok_or(AttemptError::StalePlan)?;
        match catalog.find_endpoint(&r.model, &r.slug) {
            Some(i) => {
                let ep = catalog.endpoint(i).ok_or(AttemptError::StalePlan)?;
                let provider = catalog.provider_of(ep).ok_or(AttemptError::StalePlan)?;
                (Some(i), provider, ep.upstream_model.clone(), r.model.clone(), r.slug.clone())
            }
            None => {
                let provider = catalog.provider_for_slug(&r.slug).ok_or(AttemptError::StalePlan)?;
                (None, provider, r.upstream_model.clone(), r.model.clone(), r.slug.clone())
            }
        }
    };
    if provider.cluster != cluster {
        return Err(AttemptError::WrongCluster { expected: provider.cluster.clone(), got: cluster.to_string() });
    }
    // The plan's path is the caller's: it says which API the request speaks. A provider that no
    // longer speaks it (a reload since the plan) cannot take the attempt.
    let api = Api::of_path(&plan.path);
    if !provider.apis.has(api) {
        return Err(AttemptError::StalePlan);
    }
    let (content_length, new_prefix) = if api == Api::Google {
        // Google bodies carry no model: the path names it.
        (plan.body_len as usize, None)
    } else {
        let prefix = model_prefix(&upstream_model);
        let content_length = (plan.body_len as usize).saturating_sub(plan.prefix_len as usize) + prefix.len();
        let first =
            plan.endpoints.first().and_then(|&i| catalog.endpoint(i as usize)).map(|e| e.upstream_model.as_str());
        // Under another configuration the body's model may differ from this one's: always splice.
        let keep = same_config && (attempt <= 1 || first == Some(upstream_model.as_str()));
        (content_length, (!keep).then_some(prefix))
    };
    let bare = plan.path.split('?').next().unwrap_or("");
    let prefix = provider.prefix(api);
    let path = match api {
        Api::Google => crate::protocol::rewrite::google_upstream_path(&plan.path, prefix, &upstream_model)
            .ok_or(AttemptError::StalePlan)?,
        Api::OpenAi | Api::Anthropic => {
            let mut path = crate::protocol::rewrite::upstream_path(bare, prefix);
            if let Some((_, q)) = plan.path.split_once('?') {
                path = format!("{path}?{q}");
            }
            path
        }
    };
    Ok(AttemptRewrite {
        endpoint: idx,
        model,
        slug,
        planned,
        authority: provider.authority.clone(),
        path,
        credential: provider.credential_for(api).map(|(h, v)| (h.to_string(), v.to_string())),
        injected_header: provider.injected_header(api).map(str::to_string),
        content_length,
        new_prefix,
    })
}

// ---------------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------------

/// One attempt's outcome as recorded by its upstream filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptRecord {
    pub endpoint: u16,
    /// HTTP status; 0 = no response (connect failure, reset, timeout).
    pub status: u16,
    /// Seconds from `Retry-After`, if any.
    pub retry_after_s: Option<u32>,
}

pub fn encode_records(records: &[AttemptRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.len() * 8);
    for r in records {
        out.extend_from_slice(&r.endpoint.to_le_bytes());
        out.extend_from_slice(&r.status.to_le_bytes());
        out.extend_from_slice(&r.retry_after_s.map_or(u32::MAX, |s| s.min(u32::MAX - 1)).to_le_bytes());
    }
    out
}

pub fn decode_records(b: &[u8]) -> Vec<AttemptRecord> {
    let mut r = Reader::new(b);
    let mut out = Vec::new();
    while let (Some(endpoint), Some(status), Some(ra)) = (r.u16(), r.u16(), r.u32()) {
        out.push(AttemptRecord { endpoint, status, retry_after_s: (ra != u32::MAX).then_some(ra) });
    }
    out
}

/// Statuses Envoy's retry policy retries (besides connect failure, reset and timeout).
pub fn is_retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || (500..600).contains(&status)
}

/// Outcome class for metrics and health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    Success,
    RateLimited,
    ServerError,
    ClientError,
    #[default]
    NoResponse,
    /// The answer started (status 2xx) but broke off: a stream that ended without its final
    /// event or was reset, or a body cut short. Counts as a failure in statistics.
    Interrupted,
}

impl Outcome {
    pub fn of(status: u16) -> Outcome {
        match status {
            0 => Outcome::NoResponse,
            200..=399 => Outcome::Success,
            429 => Outcome::RateLimited,
            408 | 500..=599 => Outcome::ServerError,
            _ => Outcome::ClientError,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::RateLimited => "rate_limited",
            Outcome::ServerError => "server_error",
            Outcome::ClientError => "client_error",
            Outcome::NoResponse => "no_response",
            Outcome::Interrupted => "interrupted",
        }
    }

    /// Failures that count against an endpoint's reliability (outage, error rate).
    pub fn is_failure(self) -> bool {
        matches!(self, Outcome::ServerError | Outcome::NoResponse | Outcome::Interrupted)
    }
}

/// Why Envoy stopped before the plan's last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Envoy refused the retry: the cluster's retry circuit breaker (`max_retries`) or retry
    /// budget was full (response flag UO).
    RetryLimit,
    /// The route timeout expired before the next attempt could finish (response flag UT).
    Timeout,
    /// Envoy stopped for a reason it did not flag.
    Other,
}

/// Envoy's legacy response-flag bits (`response.flags`), as in `StreamInfo::CoreResponseFlag`.
pub const FLAG_UPSTREAM_REQUEST_TIMEOUT: u64 = 1 << 2;
pub const FLAG_UPSTREAM_OVERFLOW: u64 = 1 << 7;

impl StopReason {
    pub fn from_response_flags(flags: u64) -> StopReason {
        if flags & FLAG_UPSTREAM_OVERFLOW != 0 {
            StopReason::RetryLimit
        } else if flags & FLAG_UPSTREAM_REQUEST_TIMEOUT != 0 {
            StopReason::Timeout
        } else {
            StopReason::Other
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StopReason::RetryLimit => "retry_limit",
            StopReason::Timeout => "timeout",
            StopReason::Other => "stopped",
        }
    }

    fn explain(self) -> &'static str {
        match self {
            StopReason::RetryLimit => {
                "Envoy refused the next failover (the provider cluster's retry circuit breaker or retry budget is full)"
            }
            StopReason::Timeout => "the request timed out before the next endpoint could answer",
            StopReason::Other => "Envoy did not start the next attempt",
        }
    }
}

/// A failover that ended before every planned attempt was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutShort {
    pub planned: usize,
    pub reason: StopReason,
}

/// Parses `Retry-After` as delta-seconds (HTTP dates are treated as absent), capped at `max_s`
/// (`routing.max_retry_after_s`): one provider header must not cool an endpoint down for a
/// century on every worker.
pub fn parse_retry_after(v: &str, max_s: u32) -> Option<u32> {
    let v = v.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: too long for u32 means huge, so it is capped rather than ignored.
    Some(v.parse::<u32>().unwrap_or(u32::MAX).min(max_s))
}

/// The caller's error when the last attempt failed. Every planned attempt made: all 429 -> 429
/// `capacity_exhausted` with the smallest `Retry-After` seen; otherwise 502 (or 503 when every
/// failure was a 503/no response). Fewer attempts than planned (`cut_short`): 503
/// `failover_incomplete` (504 on a timeout) naming the reason, never a claim that every endpoint
/// failed. Every shape lists the attempts made.
pub fn final_error(catalog: &Catalog, records: &[AttemptRecord], cut_short: Option<CutShort>) -> ApiError {
    let sent: Vec<&AttemptRecord> = records.iter().collect();
    let list: Vec<Value> = records
        .iter()
        .map(|r| {
            let ep = catalog.endpoint(r.endpoint as usize);
            let model = ep.and_then(|e| catalog.models.get(e.model)).map(|m| m.id.clone());
            json!({
                "endpoint": ep.map(|e| e.slug.clone()),
                "model": model,
                "status": if r.status == 0 { Value::Null } else { json!(r.status) },
                "outcome": Outcome::of(r.status).name(),
            })
        })
        .collect();
    let min_retry_after = sent.iter().filter_map(|r| r.retry_after_s).min();
    let mut e = if let Some(cut) = cut_short {
        let status = if cut.reason == StopReason::Timeout { 504 } else { 503 };
        let mut e = ApiError::new(
            status,
            "server_error",
            "failover_incomplete",
            format!(
                "failover stopped after {} of {} planned attempts: {}",
                records.len(),
                cut.planned,
                cut.reason.explain()
            ),
        );
        e.metadata.insert("reason".to_string(), json!(cut.reason.name()));
        e.metadata.insert("planned_attempts".to_string(), json!(cut.planned));
        if let Some(min) = min_retry_after {
            e.headers.push(("retry-after".to_string(), min.to_string()));
        }
        e
    } else if !sent.is_empty() && sent.iter().all(|r| r.status == 429) {
        let mut e = ApiError::new(
            429,
            "rate_limit_error",
            "capacity_exhausted",
            "every allowed endpoint is rate limited; retry later",
        );
        if let Some(min) = min_retry_after {
            e.headers.push(("retry-after".to_string(), min.to_string()));
        }
        e
    } else if !sent.is_empty() && sent.iter().all(|r| r.status == 503 || r.status == 0 || r.status == 429) {
        ApiError::new(503, "server_error", "no_endpoint_available", "every allowed endpoint failed or was unavailable")
    } else {
        ApiError::new(502, "server_error", "all_endpoints_failed", "every allowed endpoint failed")
    };
    e.metadata.insert("attempts".to_string(), Value::Array(list));
    e
}

#[cfg(test)]
mod tests {
    // Regression: an unbounded Retry-After put an endpoint in cool-down for up to 136 years.
    #[test]
    fn retry_after_is_capped() {
        assert_eq!(parse_retry_after("7", 300), Some(7));
        assert_eq!(parse_retry_after(" 300 ", 300), Some(300));
        assert_eq!(parse_retry_after("301", 300), Some(300));
        assert_eq!(parse_retry_after("4294967295", 300), Some(300));
        assert_eq!(parse_retry_after("99999999999999999999999", 300), Some(300));
        assert_eq!(parse_retry_after("5", 0), Some(0));
        for bad in ["", "-1", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "+5", "5s"] {
            assert_eq!(parse_retry_after(bad, 300), None, "{bad}");
        }
    }

    use super::*;

    #[test]
    fn plan_round_trips() {
        let p = AttemptPlan {
            catalog_id: 42,
            stream: true,
            body_len: 1000,
            prefix_len: 20,
            path: "/v1/chat/completions?x=1".into(),
            endpoints: vec![3, 0, 7],
            refs: vec![
                EndpointRef { model: "m/x".into(), slug: "a".into(), upstream_model: "x-a".into() },
                EndpointRef { model: "m/é".into(), slug: "b/fast".into(), upstream_model: "".into() },
            ],
            first_prepared: false,
        };
        assert_eq!(AttemptPlan::decode(&p.encode()), Some(p.clone()));
        let prepared = AttemptPlan { first_prepared: true, ..p.clone() };
        assert_eq!(AttemptPlan::decode(&prepared.encode()), Some(prepared.clone()));
        // A plan of the previous version (no flag) still decodes, never as prepared.
        let mut v2 = prepared.encode();
        v2[0] = PLAN_VERSION_2;
        assert_eq!(AttemptPlan::decode(&v2), Some(p.clone()));
        assert_eq!(AttemptPlan::decode(&p.encode()[..10]), None);
        assert_eq!(AttemptPlan::decode(b""), None);
    }

    #[test]
    fn records_round_trip() {
        let r = vec![
            AttemptRecord { endpoint: 1, status: 429, retry_after_s: Some(7) },
            AttemptRecord { endpoint: 2, status: 0, retry_after_s: None },
        ];
        assert_eq!(decode_records(&encode_records(&r)), r);
    }

    #[test]
    fn retryable_statuses() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(is_retryable_status(s), "{s}");
        }
        for s in [200, 400, 401, 404, 413, 422] {
            assert!(!is_retryable_status(s), "{s}");
        }
        assert_eq!(Outcome::of(0), Outcome::NoResponse);
        assert_eq!(Outcome::of(429), Outcome::RateLimited);
        assert_eq!(Outcome::of(400), Outcome::ClientError);
    }

    fn catalog() -> Catalog {
        let json = r#"{"providers": {
            "a": {"cluster": "c_a", "authority": "a.example", "credential": {"value": "ka"}},
            "b": {"cluster": "c_b", "authority": "b.example", "path_prefix": "/openai/v1", "credential": {"header": "x-api-key", "prefix": "", "value": "kb"}}},
          "models": {"m/one": {"endpoints": [
            {"provider": "a", "upstream_model": "one-a", "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "b", "upstream_model": "one-b-longer", "pricing": {"prompt": 2, "completion": 2}}]}}}"#;
        Catalog::from_json(json.as_bytes(), &|_| None).unwrap()
    }

    #[test]
    fn attempt_rewrite_per_provider() {
        let c = catalog();
        let prefix = model_prefix("one-a");
        let plan = AttemptPlan {
            catalog_id: 9,
            stream: false,
            body_len: 100,
            prefix_len: prefix.len() as u32,
            path: "/v1/chat/completions".into(),
            endpoints: vec![0, 1],
            refs: Vec::new(),
            first_prepared: false,
        };
        let a1 = attempt_rewrite(&c, 9, &plan, 1, "c_a").unwrap();
        assert_eq!(a1.authority, "a.example");
        assert_eq!(a1.credential, Some(("authorization".into(), "Bearer ka".into())));
        assert_eq!(a1.content_length, 100);
        assert_eq!(a1.new_prefix, None);
        assert_eq!(a1.path, "/v1/chat/completions");
        let a2 = attempt_rewrite(&c, 9, &plan, 2, "c_b").unwrap();
        assert_eq!(a2.authority, "b.example");
        assert_eq!(a2.credential, Some(("x-api-key".into(), "kb".into())));
        assert_eq!(a2.new_prefix.as_deref(), Some(&br#"{"model":"one-b-longer""#[..]));
        assert_eq!(a2.content_length, 100 - prefix.len() + a2.new_prefix.as_ref().unwrap().len());
        assert_eq!(a2.path, "/openai/v1/chat/completions");
        assert_eq!(attempt_rewrite(&c, 9, &plan, 3, "c_b"), Err(AttemptError::PlanExhausted));
        assert_eq!(attempt_rewrite(&c, 8, &plan, 1, "c_a"), Err(AttemptError::StalePlan));
        assert!(matches!(attempt_rewrite(&c, 9, &plan, 2, "c_a"), Err(AttemptError::WrongCluster { .. })));
    }

    // A reload between the decision and an attempt: the endpoints are found by (model, slug) in
    // the new catalog (other indices), a removed one is never tried, the record keeps the
    // planner's index, and the model prefix is always spliced.
    #[test]
    fn plan_survives_a_configuration_reload() {
        let old = catalog();
        let json = r#"{"providers": {
            "b": {"cluster": "c_b", "authority": "b2.example", "credential": {"value": "kb2"}},
            "c": {"cluster": "c_c", "authority": "c.example", "credential": {"value": "kc"}}},
          "models": {"m/zero": {"endpoints": [{"provider": "c", "pricing": {"prompt": 1, "completion": 1}}]},
                     "m/one": {"endpoints": [
            {"provider": "b", "upstream_model": "one-b-new", "pricing": {"prompt": 2, "completion": 2}},
            {"provider": "c", "upstream_model": "one-c", "pricing": {"prompt": 1, "completion": 1}}]}}}"#;
        let new = Catalog::from_json(json.as_bytes(), &|_| None).unwrap();
        let prefix = model_prefix("one-a");
        let refs = |c: &Catalog, i: u16| {
            let e = c.endpoint(i as usize).unwrap();
            EndpointRef {
                model: c.models[e.model].id.clone(),
                slug: e.slug.clone(),
                upstream_model: e.upstream_model.clone(),
            }
        };
        let plan = AttemptPlan {
            catalog_id: 1,
            stream: false,
            body_len: 100,
            prefix_len: prefix.len() as u32,
            path: "/v1/chat/completions".into(),
            endpoints: vec![1, 0],
            refs: vec![refs(&old, 1), refs(&old, 0)],
            first_prepared: false,
        };
        assert_eq!(plan.local_endpoints(&new, 2), vec![new.find_endpoint("m/one", "b"), None]);
        let b = attempt_rewrite(&new, 2, &plan, 1, "c_b").unwrap();
        assert_eq!(b.endpoint, new.find_endpoint("m/one", "b"));
        assert_ne!(b.endpoint, Some(1), "the new catalog indexes it differently");
        assert_eq!((b.model.as_str(), b.slug.as_str()), ("m/one", "b"));
        assert_eq!(b.planned, 1);
        assert_eq!(b.authority, "b2.example");
        assert_eq!(b.credential, Some(("authorization".into(), "Bearer kb2".into())));
        assert_eq!(b.new_prefix.as_deref(), Some(&br#"{"model":"one-b-new""#[..]));
        // Provider `a` is gone from the new configuration (and its key): that attempt is refused.
        assert_eq!(attempt_rewrite(&new, 2, &plan, 2, "c_a"), Err(AttemptError::StalePlan));
        // An endpoint the new catalog dropped while keeping its provider: still tried, with the
        // planned upstream model, the provider's current settings.
        let dropped = AttemptPlan {
            endpoints: vec![0],
            refs: vec![EndpointRef { model: "m/gone".into(), slug: "c".into(), upstream_model: "gone-c".into() }],
            ..plan.clone()
        };
        let c = attempt_rewrite(&new, 2, &dropped, 1, "c_c").unwrap();
        assert_eq!(c.endpoint, None);
        assert_eq!(c.authority, "c.example");
        assert_eq!(c.new_prefix.as_deref(), Some(&br#"{"model":"gone-c""#[..]));
        // Without names a plan from another configuration is refused.
        let bare = AttemptPlan { refs: Vec::new(), ..plan };
        assert_eq!(attempt_rewrite(&new, 2, &bare, 1, "c_b"), Err(AttemptError::StalePlan));
    }

    #[test]
    fn final_error_shapes() {
        let c = catalog();
        let r = |endpoint, status, ra| AttemptRecord { endpoint, status, retry_after_s: ra };
        let e = final_error(&c, &[r(0, 429, Some(30)), r(1, 429, Some(5))], None);
        assert_eq!((e.status, e.code), (429, "capacity_exhausted"));
        assert_eq!(e.headers, vec![("retry-after".to_string(), "5".to_string())]);
        let e = final_error(&c, &[r(0, 429, None), r(1, 429, None)], None);
        assert!(e.headers.is_empty());
        let e = final_error(&c, &[r(0, 503, None), r(1, 0, None)], None);
        assert_eq!((e.status, e.code), (503, "no_endpoint_available"));
        let e = final_error(&c, &[r(0, 500, None), r(1, 429, Some(1))], None);
        assert_eq!((e.status, e.code), (502, "all_endpoints_failed"));
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        let attempts = v["error"]["metadata"]["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[0]["endpoint"], "a");
        assert_eq!(attempts[0]["status"], 500);
        assert_eq!(attempts[1]["endpoint"], "b");
        assert_eq!(attempts[1]["outcome"], "rate_limited");
        assert_eq!(attempts[0]["model"], "m/one");
    }

    #[test]
    fn a_cut_short_failover_never_claims_every_endpoint_failed() {
        let c = catalog();
        let r = |endpoint, status, ra| AttemptRecord { endpoint, status, retry_after_s: ra };
        // One 429 while three attempts were planned: not "every endpoint is rate limited".
        let cut = CutShort { planned: 3, reason: StopReason::RetryLimit };
        let e = final_error(&c, &[r(0, 429, Some(7))], Some(cut));
        assert_eq!((e.status, e.code), (503, "failover_incomplete"));
        assert!(e.message.contains("1 of 3 planned attempts"), "{}", e.message);
        assert!(e.message.contains("circuit breaker"), "{}", e.message);
        assert!(!e.message.contains("every allowed endpoint"), "{}", e.message);
        assert_eq!(e.metadata["reason"], "retry_limit");
        assert_eq!(e.metadata["planned_attempts"], 3);
        assert_eq!(e.metadata["attempts"].as_array().map(Vec::len), Some(1));
        assert_eq!(e.headers, vec![("retry-after".to_string(), "7".to_string())]);
        let timeout = CutShort { planned: 4, reason: StopReason::Timeout };
        let e = final_error(&c, &[r(0, 0, None), r(1, 0, None)], Some(timeout));
        assert_eq!((e.status, e.code), (504, "failover_incomplete"));
        assert_eq!(e.metadata["reason"], "timeout");
    }

    #[test]
    fn stop_reason_from_envoy_response_flags() {
        assert_eq!(StopReason::from_response_flags(FLAG_UPSTREAM_OVERFLOW), StopReason::RetryLimit);
        assert_eq!(StopReason::from_response_flags(FLAG_UPSTREAM_REQUEST_TIMEOUT), StopReason::Timeout);
        assert_eq!(StopReason::from_response_flags(FLAG_UPSTREAM_OVERFLOW | 1), StopReason::RetryLimit);
        assert_eq!(StopReason::from_response_flags(0), StopReason::Other);
    }

    fn multi_api_catalog() -> Catalog {
        let json = r#"{"providers": {
            "oa": {"cluster": "c_oa", "authority": "oa.example", "credential": {"value": "k-oa"}},
            "an": {"cluster": "c_an", "authority": "an.example", "credential": {"value": "k-an"},
                   "apis": {"anthropic": {}, "openai": {"path_prefix": "/compat/v1"}}},
            "go": {"cluster": "c_go", "authority": "go.example", "credential": {"value": "k-go"},
                   "apis": {"google": {"path_prefix": "/gl"}}}},
          "models": {"m/one": {"endpoints": [
            {"provider": "an", "upstream_model": "claude-x", "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "go", "upstream_model": "gemini-x", "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "oa", "upstream_model": "gpt-x", "pricing": {"prompt": 1, "completion": 1}}]}}}"#;
        Catalog::from_json(json.as_bytes(), &|_| None).unwrap()
    }

    // Each API's own credential header and path; the same provider speaks OpenAI with its
    // Bearer key at its OpenAI prefix.
    #[test]
    fn attempt_rewrite_per_api() {
        let c = multi_api_catalog();
        let plan = |path: &str, endpoints: Vec<u16>, prefix_len: u32| AttemptPlan {
            catalog_id: 1,
            stream: false,
            body_len: 50,
            prefix_len,
            path: path.into(),
            endpoints,
            refs: Vec::new(),
            first_prepared: false,
        };
        let an = attempt_rewrite(&c, 1, &plan("/v1/messages", vec![0], 20), 1, "c_an").unwrap();
        assert_eq!(an.credential, Some(("x-api-key".into(), "k-an".into())));
        assert_eq!(an.path, "/v1/messages");
        let oa = attempt_rewrite(&c, 1, &plan("/v1/chat/completions?x=1", vec![0], 20), 1, "c_an").unwrap();
        assert_eq!(oa.credential, Some(("authorization".into(), "Bearer k-an".into())));
        assert_eq!(oa.path, "/compat/v1/chat/completions?x=1");
        let p = plan("/v1beta/models/m%2Fone:streamGenerateContent?alt=sse", vec![1], 0);
        let go = attempt_rewrite(&c, 1, &p, 1, "c_go").unwrap();
        assert_eq!(go.credential, Some(("x-goog-api-key".into(), "k-go".into())));
        assert_eq!(go.path, "/gl/v1beta/models/gemini-x:streamGenerateContent?alt=sse");
        // Google bodies carry no model: never spliced, length unchanged, on any attempt.
        assert_eq!((go.new_prefix, go.content_length), (None, 50));
        let p = plan("/v1beta/models/m%2Fone:generateContent", vec![1, 1], 0);
        let second = attempt_rewrite(&c, 1, &p, 2, "c_go").unwrap();
        assert_eq!((second.new_prefix, second.content_length), (None, 50));
        // A provider that does not speak the request's API never takes an attempt (a plan made
        // before a reload that dropped the API).
        let p = plan("/v1/messages", vec![2], 20);
        assert_eq!(attempt_rewrite(&c, 1, &p, 1, "c_oa"), Err(AttemptError::StalePlan));
    }
}
