//! What each attempt ended with (its record, the outcome class, why Envoy stopped retrying)
//! and the final error when no attempt served.

use serde_json::{json, Value};

use crate::answer::errors::ApiError;
use crate::config::Catalog;
use crate::protocol::bytes::Reader;

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

/// The provider refused the attempt's key or access (401, 403): the key is the operator's,
/// never the caller's, so this is the provider's failure and the next planned attempt is made
/// (the last attempt's refusal still reaches the caller).
pub fn key_refused(status: u16) -> bool {
    status == 401 || status == 403
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

    /// A small index per outcome (0..6), for tables kept per outcome.
    pub fn index(self) -> usize {
        self as usize
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
    /// Every reason (the metrics create their counters at zero).
    pub const ALL: [StopReason; 3] = [StopReason::RetryLimit, StopReason::Timeout, StopReason::Other];

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

/// The `Retry-After` of an answer: the header's value, else Azure's `retry-after-ms`
/// (milliseconds, rounded up to whole seconds) as delta-seconds. None when neither says a delay.
pub fn retry_after_of<'a>(
    retry_after: Option<&'a str>,
    retry_after_ms: Option<&str>,
) -> Option<std::borrow::Cow<'a, str>> {
    if let Some(v) = retry_after {
        return Some(std::borrow::Cow::Borrowed(v));
    }
    let ms = retry_after_ms?.trim();
    if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: too long for u64 means huge (capped later, like `Retry-After`).
    let ms: u64 = ms.parse().unwrap_or(u64::MAX);
    Some(std::borrow::Cow::Owned(ms.div_ceil(1000).to_string()))
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

/// Google's retry delay: a Gemini error body's `google.rpc.RetryInfo` detail
/// (`{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}}`),
/// where Gemini reports how long to wait (it sends no `Retry-After`). The delay is a protobuf
/// Duration in JSON (`"7s"`, `"0.5s"`, `"12.345s"`): whole seconds, a fraction rounded up, capped
/// at `max_s` like `Retry-After`. None for anything else.
pub fn parse_google_retry_delay(body: &[u8], max_s: u32) -> Option<u32> {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Error,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        #[serde(default)]
        details: Vec<Detail>,
    }
    #[derive(serde::Deserialize)]
    struct Detail {
        #[serde(rename = "@type", default)]
        kind: String,
        #[serde(rename = "retryDelay", default)]
        retry_delay: Option<String>,
    }
    let body: Body = crate::json::from_slice(body).ok()?;
    let delay = body
        .error
        .details
        .into_iter()
        .find(|d| d.kind.ends_with("google.rpc.RetryInfo"))
        .and_then(|d| d.retry_delay)?;
    let (whole, fraction) = delay.strip_suffix('s')?.split_once('.').unwrap_or((delay.strip_suffix('s')?, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) {
        return None;
    }
    let seconds = whole.parse::<u32>().unwrap_or(u32::MAX);
    let up = u32::from(fraction.bytes().any(|b| b != b'0'));
    Some(seconds.saturating_add(up).min(max_s))
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
