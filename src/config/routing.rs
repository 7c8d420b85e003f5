//! `routing`: the routing defaults (policy, attempts, bounds, the debug header, passthrough).

use serde::Deserialize;

use super::{err, ConfigError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouting {
    #[serde(default = "default_policy")]
    default_policy: String,
    #[serde(default = "default_outage_window")]
    outage_window_s: u64,
    #[serde(default = "default_max_body")]
    max_body_bytes: u64,
    #[serde(default = "default_expected_completion")]
    expected_completion_tokens: u64,
    #[serde(default)]
    debug_header: bool,
    #[serde(default)]
    debug_token: Option<String>,
    #[serde(default)]
    passthrough_cluster: Option<String>,
    #[serde(default = "default_max_attempts")]
    max_attempts: usize,
    #[serde(default = "default_max_retry_after")]
    max_retry_after_s: u32,
    #[serde(default)]
    routing_cost: RawRoutingCost,
    #[serde(default)]
    strict_provider_slugs: bool,
    /// Whether an OpenAI chat completions or completions stream ends with the usage chunk
    /// (`"choices": []`, `usage` with `cost`): `"always"` (OpenRouter's rule, the default: the
    /// caller's `stream_options.include_usage` is ignored, `false` included) or `"when_asked"`
    /// (OpenAI's rule: only when the caller asked, for clients that break on a chunk without
    /// choices). Providers are asked for their usage either way, so metrics and limits count it.
    #[serde(default = "default_stream_usage")]
    stream_usage: String,
    /// Where each attempt names the next attempt's cluster for Envoy's retry
    /// (`protocol::slots::Handoff`): `"filter_state"` (the default) or `"header"` (istio-proxy).
    #[serde(default)]
    handoff: Option<String>,
    /// With `handoff: "header"`: the deployment's secret keying the header's tokens, 32 hex
    /// digits.
    #[serde(default)]
    handoff_key: Option<String>,
}

/// `routing.routing_cost`: tunables of the routing_cost policy (defaults need no tuning).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRoutingCost {
    competitive_margin: f64,
    floor_share: f64,
    rate_limit_penalty_s: f64,
    wait_usd_per_s: Option<f64>,
    sticky_ttl_s: u64,
}

impl Default for RawRoutingCost {
    fn default() -> Self {
        let p = crate::routing::routing_cost::CostParams::default();
        RawRoutingCost {
            competitive_margin: p.competitive_margin,
            floor_share: p.floor_share,
            rate_limit_penalty_s: p.rate_limit_penalty_s,
            wait_usd_per_s: p.wait_usd_per_s,
            sticky_ttl_s: DEFAULT_STICKY_TTL_S,
        }
    }
}

/// Idle time after which a conversation is routed afresh.
const DEFAULT_STICKY_TTL_S: u64 = 600;

fn default_max_retry_after() -> u32 {
    300
}

/// Upper bounds of operator-set durations (both are multiplied into milliseconds).
const MAX_OUTAGE_WINDOW_S: u64 = 3600;
const MAX_RETRY_AFTER_S: u32 = 86_400;

fn default_max_attempts() -> usize {
    4
}

fn default_policy() -> String {
    "routing_cost".to_string()
}
fn default_outage_window() -> u64 {
    30
}
fn default_max_body() -> u64 {
    1024 * 1024
}
fn default_expected_completion() -> u64 {
    256
}

impl Default for RawRouting {
    fn default() -> Self {
        RawRouting {
            default_policy: default_policy(),
            outage_window_s: default_outage_window(),
            max_body_bytes: default_max_body(),
            expected_completion_tokens: default_expected_completion(),
            debug_header: false,
            debug_token: None,
            passthrough_cluster: None,
            max_attempts: default_max_attempts(),
            max_retry_after_s: default_max_retry_after(),
            routing_cost: RawRoutingCost::default(),
            strict_provider_slugs: false,
            stream_usage: default_stream_usage(),
            handoff: None,
            handoff_key: None,
        }
    }
}

fn default_stream_usage() -> String {
    StreamUsage::Always.name().to_string()
}

/// Which OpenAI streams end with their usage chunk (`routing.stream_usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamUsage {
    /// Every stream, whatever the caller's `stream_options.include_usage` (OpenRouter).
    Always,
    /// Only a stream whose caller set `stream_options.include_usage: true` (OpenAI).
    WhenAsked,
}

impl StreamUsage {
    pub fn parse(s: &str) -> Option<StreamUsage> {
        match s {
            "always" => Some(StreamUsage::Always),
            "when_asked" => Some(StreamUsage::WhenAsked),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StreamUsage::Always => "always",
            StreamUsage::WhenAsked => "when_asked",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultPolicy {
    PriceWeighted,
    RoutingCost,
}

#[derive(Debug, Clone)]
pub struct Routing {
    pub default_policy: DefaultPolicy,
    pub outage_window_s: u64,
    pub max_body_bytes: u64,
    pub expected_completion_tokens: u64,
    /// Honour `x-switchyard-debug` (off by default: it shows live health to the caller).
    pub debug_header: bool,
    /// When set, the debug header's value must equal this secret.
    pub debug_token: Option<String>,
    /// Cluster for requests Switchyard does not route; None = answer them with a 404/405.
    pub passthrough_cluster: Option<String>,
    /// Attempts per request (first try + failovers), across providers and fallback models.
    pub max_attempts: usize,
    /// Longest cool-down a provider's `Retry-After` can cause (seconds).
    pub max_retry_after_s: u32,
    /// Tunables of the routing_cost policy.
    pub cost: crate::routing::routing_cost::CostParams,
    /// Idle time after which a conversation is no longer sticky (seconds; 0 = no stickiness).
    pub sticky_ttl_s: u64,
    /// A provider slug in `order`/`only`/`ignore` that names no configured provider is a 400
    /// instead of a warning header.
    pub strict_provider_slugs: bool,
    /// Which OpenAI chat completions and completions streams show the caller their usage chunk.
    pub stream_usage: StreamUsage,
    /// Where the next attempt's cluster token travels to Envoy's retry (`protocol::slots`):
    /// filter state (the default, nothing on the request) or the `x-switchyard-next` header
    /// (istio-proxy, whose matcher cannot read filter state).
    pub handoff: crate::protocol::slots::Handoff,
    /// The deployment's secret key of the header tokens (`handoff: header` only).
    pub handoff_key: Option<[u8; 16]>,
}

pub(super) fn compile_routing(r: &RawRouting) -> Result<Routing, ConfigError> {
    let default_policy = match r.default_policy.as_str() {
        "price_weighted" => DefaultPolicy::PriceWeighted,
        "routing_cost" => DefaultPolicy::RoutingCost,
        other => {
            return Err(err(
                "routing.default_policy",
                format!("unknown policy \"{other}\" (available: routing_cost, price_weighted)"),
            ));
        }
    };
    let stream_usage = StreamUsage::parse(&r.stream_usage).ok_or_else(|| {
        err("routing.stream_usage", format!("unknown value \"{}\" (always, when_asked)", r.stream_usage))
    })?;
    let rc = &r.routing_cost;
    if !(rc.competitive_margin.is_finite() && rc.competitive_margin > 0.0 && rc.competitive_margin <= 10.0) {
        return Err(err("routing.routing_cost.competitive_margin", "must be a number in (0, 10]"));
    }
    if !(rc.floor_share.is_finite() && (0.0..=0.2).contains(&rc.floor_share)) {
        return Err(err("routing.routing_cost.floor_share", "must be a number in [0, 0.2]"));
    }
    if !(rc.rate_limit_penalty_s.is_finite() && (0.0..=3600.0).contains(&rc.rate_limit_penalty_s)) {
        return Err(err("routing.routing_cost.rate_limit_penalty_s", "must be a number in [0, 3600]"));
    }
    if rc.wait_usd_per_s.is_some_and(|w| !(w.is_finite() && w >= 0.0)) {
        return Err(err("routing.routing_cost.wait_usd_per_s", "must be a finite number >= 0"));
    }
    if rc.sticky_ttl_s > 86_400 {
        return Err(err("routing.routing_cost.sticky_ttl_s", "must be at most 86400"));
    }
    if !(1..=MAX_OUTAGE_WINDOW_S).contains(&r.outage_window_s) {
        return Err(err("routing.outage_window_s", format!("must be between 1 and {MAX_OUTAGE_WINDOW_S}")));
    }
    if r.max_retry_after_s > MAX_RETRY_AFTER_S {
        return Err(err("routing.max_retry_after_s", format!("must be at most {MAX_RETRY_AFTER_S}")));
    }
    if r.max_body_bytes == 0 {
        return Err(err("routing.max_body_bytes", "must be > 0"));
    }
    if !(1..=16).contains(&r.max_attempts) {
        return Err(err("routing.max_attempts", "must be between 1 and 16"));
    }
    if let Some(t) = &r.debug_token {
        if t.len() < 16 || t.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(err("routing.debug_token", "must be at least 16 printable characters without spaces"));
        }
    }
    if let Some(c) = &r.passthrough_cluster {
        if c.is_empty() || c.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(err("routing.passthrough_cluster", "must be an Envoy cluster name"));
        }
    }
    let (handoff, handoff_key) = compile_handoff(r)?;
    Ok(Routing {
        default_policy,
        outage_window_s: r.outage_window_s,
        max_body_bytes: r.max_body_bytes,
        expected_completion_tokens: r.expected_completion_tokens,
        debug_header: r.debug_header,
        debug_token: r.debug_token.clone(),
        passthrough_cluster: r.passthrough_cluster.clone(),
        max_attempts: r.max_attempts,
        max_retry_after_s: r.max_retry_after_s,
        cost: crate::routing::routing_cost::CostParams {
            competitive_margin: rc.competitive_margin,
            floor_share: rc.floor_share,
            rate_limit_penalty_s: rc.rate_limit_penalty_s,
            wait_usd_per_s: rc.wait_usd_per_s,
        },
        sticky_ttl_s: rc.sticky_ttl_s,
        strict_provider_slugs: r.strict_provider_slugs,
        stream_usage,
        handoff,
        handoff_key,
    })
}

/// `routing.handoff` and `routing.handoff_key`: a header handoff needs its key (tokens on the
/// request are never the unkeyed hash of public names), a filter-state one takes none.
fn compile_handoff(r: &RawRouting) -> Result<(crate::protocol::slots::Handoff, Option<[u8; 16]>), ConfigError> {
    use crate::protocol::slots::{parse_handoff_key, Handoff};
    let handoff = match r.handoff.as_deref() {
        None | Some("filter_state") => Handoff::FilterState,
        Some("header") => Handoff::Header,
        Some(_) => return Err(err("routing.handoff", "must be filter_state or header")),
    };
    let key = match (&r.handoff_key, handoff) {
        (None, Handoff::FilterState) => None,
        (None, Handoff::Header) => {
            return Err(err(
                "routing.handoff_key",
                "required with handoff: header (32 hex digits, secret per deployment)",
            ))
        }
        (Some(_), Handoff::FilterState) => return Err(err("routing.handoff_key", "only used with handoff: header")),
        (Some(k), Handoff::Header) => {
            Some(parse_handoff_key(k).ok_or_else(|| err("routing.handoff_key", "must be 32 hex digits"))?)
        }
    };
    Ok((handoff, key))
}
