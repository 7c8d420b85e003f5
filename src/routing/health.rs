//! The health view routing reads: per-endpoint live statistics over a rolling window.
//!
//! Routing only ever sees this trait. The host adapter backs it with statistics kept in
//! proxy-wasm shared data (shared by all workers); tests back it with fixed numbers. Every field
//! is optional: "no data" is a normal state (a new endpoint, a fresh Envoy) and every ordering
//! has a defined behaviour for it (see `router`).

/// Percentiles of one measured quantity over the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentiles {
    pub p50: Option<f64>,
    pub p75: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

impl Percentiles {
    pub fn at(&self, which: Percentile) -> Option<f64> {
        match which {
            Percentile::P50 => self.p50,
            Percentile::P75 => self.p75,
            Percentile::P90 => self.p90,
            Percentile::P99 => self.p99,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Percentile {
    P50,
    P75,
    P90,
    P99,
}

pub const PERCENTILES: [Percentile; 4] = [Percentile::P50, Percentile::P75, Percentile::P90, Percentile::P99];

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EndpointHealth {
    /// Attempts seen over the window (0: no data).
    pub attempts: u32,
    /// Attempts in flight right now, across all workers.
    pub in_flight: u32,
    /// Fraction of attempts that succeeded over the window (None: no attempts seen).
    pub uptime: Option<f64>,
    /// Fraction of attempts that failed (5xx, reset, timeout) over the window.
    pub error_rate: Option<f64>,
    /// Fraction of tool-call responses that were malformed (arguments not JSON, or a tool the
    /// request did not offer).
    pub tool_error_rate: Option<f64>,
    /// Fraction of served responses that were bad (malformed tool calls, empty answers).
    pub bad_response_rate: Option<f64>,
    /// Fraction of attempts answered 429.
    pub rate_limited_rate: Option<f64>,
    /// Usage reported by successful answers over the window (None: none reported yet).
    pub usage: Option<MeasuredUsage>,
    /// Learned capacity: attempts in flight at which the endpoint answers 429 (None: unknown).
    pub capacity: Option<u32>,
    /// Time to first token, milliseconds.
    pub ttft_ms: Percentiles,
    /// Output tokens per second.
    pub throughput_tps: Percentiles,
    /// Attempts and reliability failures (5xx, reset, timeout, interrupted answers) within the
    /// outage window (`routing.outage_window_s`, rounded up to whole 20 s buckets).
    pub recent_attempts: u32,
    pub recent_failures: u32,
    /// 429s within the same window (backoff: recovers as soon as they stop).
    pub recent_rate_limited: u32,
    /// Consecutive reliability failures, while the last one is within the outage window.
    pub failure_run: u32,
    /// A significant outage (see `significant_outage`): price_weighted sends it to the back.
    /// Judged against the endpoint's peers, so the router fills it in; views leave it false.
    pub recent_outage: bool,
    /// In cool-down after a `Retry-After`: tried only after every other endpoint.
    pub cooling_down: bool,
}

/// Usage totals of an endpoint's recent successful answers.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MeasuredUsage {
    pub reports: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// What those answers cost at the endpoint's catalog prices (cached prompt tokens included).
    pub cost_usd: f64,
}

/// Failures in the outage window (or in a run) below this are never an outage.
pub const OUTAGE_MIN_FAILURES: u32 = 3;
/// The shortest run of consecutive failures that can pause an endpoint (when the peers are
/// healthy: the improbability rule below decides), so a provider that falls over is paused
/// after a couple of attempts rather than a window's worth.
pub const OUTAGE_MIN_RUN: u32 = 2;
/// The endpoint's own error rate over the window must reach this...
pub const OUTAGE_ERROR_RATE: f64 = 0.5;
/// ...and exceed its peers' pooled error rate by at least this much.
pub const OUTAGE_PEER_MARGIN: f64 = 0.25;
/// A run of consecutive failures is an outage when its chance, were the endpoint failing only as
/// often as its peers (peer_rate^run), is below this.
pub const OUTAGE_RUN_IMPROBABILITY: f64 = 0.01;

/// Whether an endpoint is in a significant outage, judged against its peers (the model's other
/// endpoints; `peer_failures`/`peer_attempts` are their pooled counts over the same window).
///
/// Either rule makes an outage:
/// - window: at least 3 failures, an error rate of at least 50 %, and at least 25 points above
///   the peers' rate;
/// - run: at least 2 consecutive failures whose probability at the peers' error rate is below
///   1 % (e.g. 2 when peers fail under 10 % of the time, 4 at 30 %, 7 at 50 %). Successes of
///   attempts sent before the run began do not end it (`EndpointStats::finish`).
///
/// So a dead endpoint is flagged within a few attempts, while under faults that hit every
/// endpoint alike no endpoint is singled out (a fixed "N consecutive failures" saturates there:
/// every endpoint ends up flagged and the flag no longer tells them apart).
pub fn significant_outage(own: &EndpointHealth, peer_failures: u32, peer_attempts: u32) -> bool {
    let peer_rate = if peer_attempts > 0 { f64::from(peer_failures) / f64::from(peer_attempts) } else { 0.0 };
    let own_rate =
        if own.recent_attempts > 0 { f64::from(own.recent_failures) / f64::from(own.recent_attempts) } else { 0.0 };
    let window = own.recent_failures >= OUTAGE_MIN_FAILURES
        && own_rate >= OUTAGE_ERROR_RATE
        && own_rate >= peer_rate + OUTAGE_PEER_MARGIN;
    let run =
        own.failure_run >= OUTAGE_MIN_RUN && peer_rate.powi(own.failure_run.min(64) as i32) < OUTAGE_RUN_IMPROBABILITY;
    window || run
}

/// Read-only access to live state, keyed by (model id, endpoint slug).
pub trait HealthView {
    fn endpoint(&self, model: &str, slug: &str) -> EndpointHealth;

    /// The endpoint a conversation is stuck to, as (model id, slug), while its entry lives.
    fn sticky(&self, _conversation: u64) -> Option<(String, String)> {
        None
    }

    /// The caller's `x-session-id` header, which names a conversation explicitly.
    fn session_header(&self) -> Option<&str> {
        None
    }

    /// Who is calling (e.g. a hash of its credential or identity): conversations are keyed per
    /// caller, so different callers that open with the same messages are not glued together.
    fn caller_scope(&self) -> u64 {
        0
    }

    /// Seconds until `provider` (a slug in `providers`) is under its mesh-wide capacity again;
    /// None when it is not capped. A capped provider's endpoints are skipped.
    fn capped_for_s(&self, _provider: &str) -> Option<u64> {
        None
    }

    /// Whether `provider` (a slug in `providers`) takes an access token that is not there yet
    /// (`credential.google_metadata`): its endpoints are skipped.
    fn lacks_credential(&self, _provider: &str) -> bool {
        false
    }
}

/// The view before any statistics exist.
pub struct NoHealthData;

impl HealthView for NoHealthData {
    fn endpoint(&self, _model: &str, _slug: &str) -> EndpointHealth {
        EndpointHealth::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(recent_attempts: u32, recent_failures: u32, failure_run: u32) -> EndpointHealth {
        EndpointHealth { recent_attempts, recent_failures, failure_run, ..EndpointHealth::default() }
    }

    #[test]
    fn a_dead_endpoint_among_healthy_peers_is_an_outage() {
        // Two failures in a row, peers fine: flagged by the run rule at once.
        assert!(significant_outage(&h(2, 2, 2), 0, 40));
        assert!(significant_outage(&h(3, 3, 3), 0, 40));
        // ...and with no peer data at all.
        assert!(significant_outage(&h(2, 2, 2), 0, 0));
        // One is not enough; nor are two when the peers fail 20 % of the time (4 % likely).
        assert!(!significant_outage(&h(1, 1, 1), 0, 40));
        assert!(!significant_outage(&h(2, 2, 2), 8, 40));
        // Mostly failing over the window, even if the last attempt succeeded.
        assert!(significant_outage(&h(10, 7, 0), 1, 40));
    }

    #[test]
    fn widespread_faults_do_not_single_anyone_out() {
        // Every endpoint fails about 30 %: the window rule never fires...
        assert!(!significant_outage(&h(50, 15, 0), 45, 150));
        // ...a run of 3 at a 30 % peer rate is common (2.7 %), so it is not an outage...
        assert!(!significant_outage(&h(50, 15, 3), 45, 150));
        // ...but a run of 4 is rare enough (0.8 %).
        assert!(significant_outage(&h(50, 15, 4), 45, 150));
        // At 50 % everywhere, even 6 in a row happens (1.6 %); 7 does not.
        assert!(!significant_outage(&h(40, 20, 6), 60, 120));
        assert!(significant_outage(&h(40, 20, 7), 60, 120));
    }

    #[test]
    fn an_endpoint_is_compared_with_its_peers_not_an_absolute_bar() {
        // 60 % errors while peers have 50 %: not singled out (margin 25 points).
        assert!(!significant_outage(&h(20, 12, 1), 50, 100));
        // 100 % while peers have 50 %: singled out.
        assert!(significant_outage(&h(20, 20, 0), 50, 100));
        // Everyone dead: nobody is worse than its peers, the run rule needs peer_rate^run < 1 %.
        assert!(!significant_outage(&h(20, 20, 2), 100, 100));
    }
}
