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
    /// Fraction of tool-call responses that were malformed.
    pub tool_error_rate: Option<f64>,
    /// Time to first token, milliseconds.
    pub ttft_ms: Percentiles,
    /// Output tokens per second.
    pub throughput_tps: Percentiles,
    /// A significant outage inside the outage window (price_weighted sends it to the back).
    pub recent_outage: bool,
    /// In cool-down after a `Retry-After`: tried only after every other endpoint.
    pub cooling_down: bool,
}

/// Read-only access to live statistics, keyed by (model id, endpoint slug).
pub trait HealthView {
    fn endpoint(&self, model: &str, slug: &str) -> EndpointHealth;
}

/// The view before any statistics exist.
pub struct NoHealthData;

impl HealthView for NoHealthData {
    fn endpoint(&self, _model: &str, _slug: &str) -> EndpointHealth {
        EndpointHealth::default()
    }
}
