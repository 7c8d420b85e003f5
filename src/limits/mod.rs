//! Mesh-wide limits (`rate_limits` in the configuration): spend, token and request budgets per
//! policy or caller identity, provider account capacity, and shared cool-downs, counted by a
//! rate limit service that speaks Envoy's `RateLimitService` API (envoyproxy/ratelimit,
//! Kuadrant's Limitador, ...) and keeps its counters in Redis, so every pod sees the same
//! counts.
//!
//! How a request meets them (the filter side is `filters::downstream` and `filters::mesh`):
//! - **Admission**: request limits at the request headers (in parallel with the body upload),
//!   one unit; token and spend limits once the body is routed, the request's reservation
//!   (`reservation`: prompt estimate plus `max_tokens` or `default_completion_tokens`, spend
//!   priced at the plan's dearest endpoint). A reservation the worker's lease on that counter
//!   covers (`Ledger`: budget the service counted that no request used yet) is admitted with no
//!   call; one it does not cover leases a chunk in one `ShouldRateLimit` call, `hits_addend` the
//!   chunk (sized from the worker's recent use, exactly the reservation near the end of the
//!   budget). An over-limit answer refuses the request with 429 before any provider is tried.
//!   Nothing is called when no limit applies.
//! - **Settlement**, when the answer ends: what the request used less its reservation. An
//!   excess is taken from the lease, and what the lease does not cover is sent at once, one
//!   call per counter, on the root context's behalf (the ending stream would cancel its own
//!   call); what was reserved and not used (a shorter answer, a request no answer was served
//!   for) cannot be taken back over the API (no negative hits) and goes back to the lease, in
//!   the same window only. Provider capacity is charged per attempt, queued and sent by the
//!   root context every tick, summed per descriptor.
//! - **Overshoot**: every admission is backed by its whole reservation counted in the service
//!   (by its own call or by the lease it came from), so a budget is exceeded only by what the
//!   requests admitted and not yet settled use beyond their reservations: one estimate error per caller with one request in flight. Capacity is
//!   learned from the charges' answers: a pod keeps sending to a provider over its cap until
//!   its next charge comes back over limit (one tick).
//! - **The service failing** (unreachable, slow past `timeout_ms`, a malformed answer): each
//!   limit's `failure_mode` decides; `open` serves and counts `switchyard.rate_limit.failure_total`,
//!   `closed` refuses with 503. Settlement and capacity failures are counted and dropped.
//!
//! This module is pure: which limits apply, their descriptors, the charges, the cool-down slots.

pub mod ledger;
pub mod rls;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::config::{Catalog, ConfigError};
use crate::routing::policy::{CallerFacts, Policies};
pub use ledger::{Lease, Ledger};
use rls::Descriptor;

/// Descriptor keys, shared with the rendered rate limit service configuration.
pub const LIMIT_KEY: &str = "switchyard_limit";
pub const SUBJECT_KEY: &str = "subject";
pub const CAPACITY_KEY: &str = "switchyard_capacity";
pub const KIND_KEY: &str = "kind";
pub const COOLDOWN_KEY: &str = "switchyard_cooldown";
pub const SLOT_KEY: &str = "slot";
/// The subject of a caller whose identity the limit's `per` could not read.
pub const UNIDENTIFIED: &str = "unidentified";
/// Spend is counted in units of 1/10,000 USD (a hundredth of a cent): limits up to
/// $429,496 per window fit the API's 32-bit counts; fractions are carried, not rounded up.
pub const SPEND_UNITS_PER_USD: f64 = 10_000.0;
/// Shared cool-downs are kept in slots of this many seconds.
pub const COOLDOWN_SLOT_S: u64 = 5;
/// How long past its slot's end a polled cool-down holds. The next slot's poll answers a tick
/// (100 ms) and a service round trip after the slot turns; a provider still marked there must
/// not be tried in between. A cool-down that really ended with its slot holds this much longer.
pub const COOLDOWN_GRACE_MS: u64 = 1_000;
/// A shared cool-down covers at most this long ahead (longer `Retry-After`s stay local).
pub const MAX_SHARED_COOLDOWN_S: u64 = 300;
/// What marks a cool-down slot; the limit is this count per hour, and each check adds one.
pub const COOLDOWN_MARK: u32 = 1_000_000;

fn err(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), reason: reason.into() }
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct RawRoot {
    #[serde(default)]
    rate_limits: Option<RawRateLimits>,
}

/// `rate_limits`: limits every pod shares through a rate limit service.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimits {
    /// The rate limit service: `cluster` (an HTTP/2 cluster in the Envoy configuration),
    /// `domain` (default `switchyard`), `timeout_ms` (default 50), `failure_mode` (`open` or
    /// `closed`, default `open`: the default of every limit).
    service: RawService,
    /// Named limits (see `RawLimit`).
    #[serde(default)]
    limits: BTreeMap<String, RawLimit>,
    /// A provider account's capacity, by provider slug: `requests_per_minute`,
    /// `tokens_per_minute`, counted across every pod that holds the key.
    #[serde(default)]
    capacity: BTreeMap<String, RawCapacity>,
    /// A provider's 429 with `Retry-After` seen by one pod makes every pod skip that provider
    /// until then (kept in 5-second slots, at most 300 s ahead). Default false.
    #[serde(default)]
    share_cooldowns: bool,
    /// Completion tokens a request that names no `max_tokens` (`max_completion_tokens`,
    /// `max_output_tokens`) is admitted for on token and spend limits, on top of its prompt
    /// estimate. Default: `routing.expected_completion_tokens`. An answer longer than this is
    /// what a budget can be overshot by (see docs/mesh-limits.md).
    #[serde(default)]
    default_completion_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    cluster: String,
    #[serde(default = "default_domain")]
    domain: String,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u32,
    #[serde(default)]
    failure_mode: Option<String>,
}

fn default_domain() -> String {
    "switchyard".to_string()
}

fn default_timeout_ms() -> u32 {
    50
}

/// One limit: exactly one of `requests`, `tokens`, `spend_usd`, per `window`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    /// Only requests routed under this operator policy (default: every routed request).
    #[serde(default)]
    policy: Option<String>,
    /// Whose counter: `all` (default, one counter), `policy` (one per policy), `peer_uri_san`,
    /// `{"header": "<trusted header>"}`, `{"jwt_claim": {"namespace", "payload_key", "claim"}}`.
    #[serde(default)]
    per: Option<Value>,
    /// Requests admitted per window.
    #[serde(default)]
    requests: Option<u64>,
    /// Prompt plus completion tokens per window, as the providers report them.
    #[serde(default)]
    tokens: Option<u64>,
    /// USD per window, priced like the `usage.cost` callers see.
    #[serde(default)]
    spend_usd: Option<f64>,
    /// `second`, `minute`, `hour`, `day` or `month` (30 days).
    window: String,
    /// `open` or `closed` when the service fails; default: the service's `failure_mode`.
    #[serde(default)]
    failure_mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapacity {
    #[serde(default)]
    requests_per_minute: Option<u64>,
    #[serde(default)]
    tokens_per_minute: Option<u64>,
}

/// The window a limit counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Second,
    Minute,
    Hour,
    Day,
    Month,
}

impl Window {
    fn parse(s: &str) -> Option<Window> {
        Some(match s {
            "second" => Window::Second,
            "minute" => Window::Minute,
            "hour" => Window::Hour,
            "day" => Window::Day,
            "month" => Window::Month,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Window::Second => "second",
            Window::Minute => "minute",
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Month => "month",
        }
    }

    pub fn seconds(self) -> u64 {
        match self {
            Window::Second => 1,
            Window::Minute => 60,
            Window::Hour => 3600,
            Window::Day => 86_400,
            Window::Month => 30 * 86_400,
        }
    }
}

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Requests,
    Tokens,
    /// In `SPEND_UNITS_PER_USD` units.
    Spend,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Tokens => "tokens",
            Kind::Spend => "spend",
        }
    }
}

/// Whose counter a request charges.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    All,
    Policy,
    PeerUriSan,
    Header(String),
    JwtClaim { namespace: String, payload_key: String, path: Vec<String> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub name: String,
    pub policy: Option<String>,
    pub per: Subject,
    pub kind: Kind,
    /// In the kind's units (requests, tokens, spend units).
    pub amount: u64,
    pub window: Window,
    pub fail_closed: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    pub provider: String,
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub cluster: String,
    pub domain: String,
    pub timeout_ms: u32,
    /// What the gRPC calls name as their target: a serialized `GrpcService` with the cluster
    /// and the `:authority` (see `grpc_target`), precompiled at load.
    pub target: String,
}

/// The `GrpcService` (`envoy_grpc { cluster_name = 1; authority = 2 }`, field 1 of
/// `GrpcService`) a call names, serialized: Envoy parses it before falling back to reading the
/// bytes as a bare cluster name. Its authority: for Istio's `outbound|<port>|<subset>|<host>`
/// the host (a `|` is not valid in `:authority` and HTTP/2 servers reset such a stream), else
/// the cluster name, as Envoy would send. Bytes that would not be UTF-8 (a name of 128 bytes or
/// more makes a multi-byte length) fall back to the bare cluster name.
pub fn grpc_target(cluster: &str) -> String {
    let authority = match cluster.split('|').collect::<Vec<_>>()[..] {
        ["outbound", _, _, host] if !host.is_empty() => host,
        _ => cluster,
    };
    let field = |tag: u8, v: &[u8]| -> Option<Vec<u8>> {
        let len = u8::try_from(v.len()).ok().filter(|&n| n < 0x80)?;
        let mut out = vec![tag, len];
        out.extend_from_slice(v);
        Some(out)
    };
    let envoy_grpc = field(0x0a, cluster.as_bytes()).zip(field(0x12, authority.as_bytes())).map(|(mut a, b)| {
        a.extend(b);
        a
    });
    envoy_grpc
        .and_then(|e| field(0x0a, &e))
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_else(|| cluster.to_string())
}

/// The compiled `rate_limits` (empty when absent: no call is ever made).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MeshLimits {
    pub service: Option<Service>,
    pub limits: Vec<Limit>,
    pub capacity: Vec<Capacity>,
    pub share_cooldowns: bool,
    /// Completion tokens reserved for a request that names no maximum.
    pub default_completion_tokens: u64,
}

fn failure_mode(v: Option<&str>, field: &str) -> Result<Option<bool>, ConfigError> {
    match v {
        None => Ok(None),
        Some("open") => Ok(Some(false)),
        Some("closed") => Ok(Some(true)),
        Some(other) => Err(err(field, format!("must be \"open\" or \"closed\", got \"{other}\""))),
    }
}

fn subject(v: Option<&Value>, field: &str, policies: &Policies) -> Result<Subject, ConfigError> {
    let bad = || {
        err(
            field,
            "must be \"all\", \"policy\", \"peer_uri_san\", {\"header\": ...} or {\"jwt_claim\": {\"namespace\", \"payload_key\", \"claim\"}}",
        )
    };
    match v {
        None => Ok(Subject::All),
        Some(Value::String(s)) => match s.as_str() {
            "all" => Ok(Subject::All),
            "policy" => Ok(Subject::Policy),
            "peer_uri_san" => Ok(Subject::PeerUriSan),
            _ => Err(bad()),
        },
        Some(Value::Object(m)) if m.len() == 1 => {
            if let Some(h) = m.get("header") {
                let name = h.as_str().ok_or_else(bad)?.to_ascii_lowercase();
                if !policies.trusted_headers.contains(&name) {
                    return Err(err(
                        format!("{field}.header"),
                        format!("\"{name}\" is not in policy_selection.trusted_headers (a header callers can set is no identity)"),
                    ));
                }
                return Ok(Subject::Header(name));
            }
            // The same shape and defaults as `policy_selection.rules[].jwt_claim` (no `value`).
            let c = m.get("jwt_claim").and_then(Value::as_object).ok_or_else(bad)?;
            let jf = format!("{field}.jwt_claim");
            if let Some(k) = c.keys().find(|k| !["namespace", "payload_key", "claim"].contains(&k.as_str())) {
                return Err(err(&jf, format!("unknown field `{k}` (namespace, payload_key, claim)")));
            }
            let text = |k: &str, default: &str| -> Result<String, ConfigError> {
                match c.get(k) {
                    None => Ok(default.to_string()),
                    Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                    Some(_) => Err(err(format!("{jf}.{k}"), "must be a non-empty string")),
                }
            };
            let bad_claim = || err(format!("{jf}.claim"), "must be a claim name or a list of names");
            let path: Vec<String> = match c.get("claim") {
                Some(Value::String(s)) if !s.is_empty() => vec![s.clone()],
                Some(Value::Array(a)) if !a.is_empty() => a
                    .iter()
                    .map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(bad_claim)?,
                _ => return Err(bad_claim()),
            };
            Ok(Subject::JwtClaim {
                namespace: text("namespace", "envoy.filters.http.jwt_authn")?,
                payload_key: text("payload_key", "jwt_payload")?,
                path,
            })
        }
        Some(_) => Err(bad()),
    }
}

/// Largest count the API's 32-bit `requests_per_unit` holds.
const MAX_AMOUNT: u64 = u32::MAX as u64;

impl MeshLimits {
    /// Compiles `rate_limits` from the plugin configuration, against the catalog and policies.
    pub fn from_json(bytes: &[u8], catalog: &Catalog, policies: &Policies) -> Result<MeshLimits, ConfigError> {
        let raw: RawRoot = crate::json::from_slice(bytes).map_err(|e| err("<root>", e.to_string()))?;
        let Some(r) = raw.rate_limits else { return Ok(MeshLimits::default()) };
        let f = "rate_limits.service";
        if r.service.cluster.is_empty() {
            return Err(err(format!("{f}.cluster"), "must name the Envoy cluster of the rate limit service"));
        }
        if r.service.domain.is_empty() {
            return Err(err(format!("{f}.domain"), "must not be empty"));
        }
        if r.service.timeout_ms == 0 || r.service.timeout_ms > 5000 {
            return Err(err(format!("{f}.timeout_ms"), "must be 1-5000 (a request waits this long at most)"));
        }
        if catalog.providers.iter().any(|p| p.cluster == r.service.cluster) {
            return Err(err(format!("{f}.cluster"), "is a provider's cluster"));
        }
        let default_closed =
            failure_mode(r.service.failure_mode.as_deref(), &format!("{f}.failure_mode"))?.unwrap_or(false);
        let mut limits = Vec::with_capacity(r.limits.len());
        for (name, l) in &r.limits {
            let lf = format!("rate_limits.limits[\"{name}\"]");
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
                return Err(err(&lf, "a limit name is letters, digits, - _ ."));
            }
            if let Some(p) = &l.policy {
                if policies.get(p).is_none() {
                    return Err(err(format!("{lf}.policy"), format!("unknown policy \"{p}\" (not in policies)")));
                }
            }
            let (kind, amount) = match (l.requests, l.tokens, l.spend_usd) {
                (Some(n), None, None) => (Kind::Requests, n),
                (None, Some(n), None) => (Kind::Tokens, n),
                (None, None, Some(usd)) => {
                    if !usd.is_finite() || usd <= 0.0 {
                        return Err(err(format!("{lf}.spend_usd"), "must be a finite number > 0"));
                    }
                    (Kind::Spend, (usd * SPEND_UNITS_PER_USD).round() as u64)
                }
                _ => return Err(err(&lf, "set exactly one of `requests`, `tokens`, `spend_usd`")),
            };
            if amount == 0 || amount > MAX_AMOUNT {
                return Err(err(
                    format!("{lf}.{}", if kind == Kind::Spend { "spend_usd" } else { kind.name() }),
                    "must be > 0 and fit the rate limit API's 32-bit counts (spend: at most $429,496 per window)",
                ));
            }
            let window = Window::parse(&l.window).ok_or_else(|| {
                err(
                    format!("{lf}.window"),
                    format!("unknown window \"{}\" (second, minute, hour, day, month)", l.window),
                )
            })?;
            limits.push(Limit {
                name: name.clone(),
                policy: l.policy.clone(),
                per: subject(l.per.as_ref(), &format!("{lf}.per"), policies)?,
                kind,
                amount,
                window,
                fail_closed: failure_mode(l.failure_mode.as_deref(), &format!("{lf}.failure_mode"))?
                    .unwrap_or(default_closed),
            });
        }
        let default_completion_tokens =
            r.default_completion_tokens.unwrap_or(catalog.routing.expected_completion_tokens);
        if default_completion_tokens == 0 || default_completion_tokens > MAX_AMOUNT {
            return Err(err(
                "rate_limits.default_completion_tokens",
                "must be 1-4294967295 (the completion a request without max_tokens is admitted for)",
            ));
        }
        let mut capacity = Vec::with_capacity(r.capacity.len());
        for (slug, c) in &r.capacity {
            let cf = format!("rate_limits.capacity[\"{slug}\"]");
            if !catalog.providers.iter().any(|p| p.slug == *slug) {
                return Err(err(&cf, format!("unknown provider \"{slug}\" (not in providers)")));
            }
            for (name, v) in
                [("requests_per_minute", c.requests_per_minute), ("tokens_per_minute", c.tokens_per_minute)]
            {
                if v.is_some_and(|n| n == 0 || n > MAX_AMOUNT) {
                    return Err(err(format!("{cf}.{name}"), "must be 1-4294967295"));
                }
            }
            if c.requests_per_minute.is_none() && c.tokens_per_minute.is_none() {
                return Err(err(&cf, "set `requests_per_minute`, `tokens_per_minute` or both"));
            }
            capacity.push(Capacity {
                provider: slug.clone(),
                requests_per_minute: c.requests_per_minute,
                tokens_per_minute: c.tokens_per_minute,
            });
        }
        Ok(MeshLimits {
            service: Some(Service {
                target: grpc_target(&r.service.cluster),
                cluster: r.service.cluster,
                domain: r.service.domain,
                timeout_ms: r.service.timeout_ms,
            }),
            limits,
            capacity,
            share_cooldowns: r.share_cooldowns,
            default_completion_tokens,
        })
    }

    /// The limits a request under `policy` is subject to, each with its subject (the counter it
    /// charges). Reads only the caller facts those limits need.
    pub fn applicable(&self, policy: Option<&str>, facts: &mut dyn CallerFacts) -> Vec<Applied> {
        let mut out = Vec::new();
        for (index, l) in self.limits.iter().enumerate() {
            if l.policy.as_deref().is_some_and(|p| Some(p) != policy) {
                continue;
            }
            let subject = match &l.per {
                Subject::All => Some("all".to_string()),
                Subject::Policy => Some(policy.unwrap_or("none").to_string()),
                Subject::PeerUriSan => facts.peer_uri_san(),
                Subject::Header(h) => facts.header(h),
                Subject::JwtClaim { namespace, payload_key, path } => {
                    let mut full = Vec::with_capacity(path.len() + 1);
                    full.push(payload_key.clone());
                    full.extend(path.iter().cloned());
                    facts.dynamic_metadata(namespace, &full)
                }
            };
            // Descriptor values are bounded: an identity is a name, not a payload.
            let subject =
                subject.filter(|s| !s.is_empty() && s.len() <= 256).unwrap_or_else(|| UNIDENTIFIED.to_string());
            out.push(Applied { index, subject });
        }
        out
    }

    pub fn limit(&self, a: &Applied) -> Option<&Limit> {
        self.limits.get(a.index)
    }

    pub fn capacity_of(&self, provider: &str) -> Option<&Capacity> {
        self.capacity.iter().find(|c| c.provider == provider)
    }

    /// Whether a provider's attempts are charged (capacity or shared cool-downs).
    pub fn tracks_provider(&self, provider: &str) -> bool {
        self.service.is_some() && (self.share_cooldowns || self.capacity_of(provider).is_some())
    }
}

/// A limit that applies to one request, and whose counter it charges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub index: usize,
    pub subject: String,
}

pub fn limit_descriptor(name: &str, subject: &str) -> Descriptor {
    vec![(LIMIT_KEY.to_string(), name.to_string()), (SUBJECT_KEY.to_string(), subject.to_string())]
}

pub fn capacity_descriptor(provider: &str, kind: Kind) -> Descriptor {
    vec![(CAPACITY_KEY.to_string(), provider.to_string()), (KIND_KEY.to_string(), kind.name().to_string())]
}

/// The cool-down slot holding `at_s` (seconds since the epoch).
pub fn cooldown_slot(at_s: u64) -> u64 {
    at_s / COOLDOWN_SLOT_S
}

pub fn cooldown_descriptor(provider: &str, slot: u64) -> Descriptor {
    vec![(COOLDOWN_KEY.to_string(), provider.to_string()), (SLOT_KEY.to_string(), slot.to_string())]
}

/// The slots a cool-down from `now_s` for `retry_after_s` marks (the current one first), at
/// most `MAX_SHARED_COOLDOWN_S` ahead.
pub fn cooldown_slots(now_s: u64, retry_after_s: u64) -> std::ops::RangeInclusive<u64> {
    let until = now_s.saturating_add(retry_after_s.min(MAX_SHARED_COOLDOWN_S));
    cooldown_slot(now_s)..=cooldown_slot(until.saturating_sub(1).max(now_s))
}

/// What a request is admitted for on a limit of `kind`, in whole units (at least one): its
/// token estimate (prompt estimate plus the completion it may ask for), or that estimate priced
/// at the dearest endpoint it may be served by. Requests count one.
pub fn reservation(kind: Kind, tokens: u64, cost_usd: f64) -> u64 {
    let units = match kind {
        Kind::Requests => 1.0,
        Kind::Tokens => tokens as f64,
        Kind::Spend => cost_usd.max(0.0) * SPEND_UNITS_PER_USD,
    };
    // `as` saturates (NaN is 0); the API counts in 32 bits.
    (units.ceil() as u64).clamp(1, MAX_AMOUNT)
}

/// What an answer used, in each limit kind's units (requests are not settled).
pub fn used(kind: Kind, tokens: u64, cost_usd: f64) -> f64 {
    match kind {
        Kind::Requests => 0.0,
        Kind::Tokens => tokens as f64,
        Kind::Spend => cost_usd.max(0.0) * SPEND_UNITS_PER_USD,
    }
}

/// Charges waiting for the next tick, summed per descriptor. Fractions (spend units) and
/// negative remainders (an answer that used less than admission counted) carry over to the
/// next charge of the same descriptor instead of being rounded away.
#[derive(Debug, Default)]
pub struct Pending {
    sums: Vec<(Descriptor, f64)>,
}

/// Bound on distinct pending descriptors: identities are caller-chosen values.
const MAX_PENDING: usize = 4096;

impl Pending {
    pub fn add(&mut self, descriptor: Descriptor, hits: f64) {
        if !hits.is_finite() || hits == 0.0 {
            return;
        }
        if let Some(e) = self.sums.iter_mut().find(|(d, _)| *d == descriptor) {
            e.1 += hits;
            return;
        }
        if self.sums.len() >= MAX_PENDING {
            // Full: give up the carried fractions (under one unit each) before a new charge.
            self.sums.retain(|(_, h)| h.abs() >= 1.0);
        }
        if self.sums.len() < MAX_PENDING {
            self.sums.push((descriptor, hits));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sums.iter().all(|(_, h)| *h < 1.0)
    }

    /// The whole hits ready to send, one per descriptor; what is left (fractions, negative
    /// balances) stays. Balances below -1,000,000 units are dropped (nothing will repay them).
    pub fn drain(&mut self) -> Vec<(Descriptor, u32)> {
        let mut out = Vec::new();
        self.sums.retain_mut(|(d, h)| {
            if *h >= 1.0 {
                let whole = h.floor().min(f64::from(u32::MAX));
                out.push((d.clone(), whole as u32));
                *h -= whole;
            }
            *h != 0.0 && *h > -1_000_000.0
        });
        out
    }
}

#[cfg(test)]
mod tests;
