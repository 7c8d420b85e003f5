//! Plugin configuration: the operator's provider/model catalog and routing defaults.
//!
//! The JSON given to the Wasm plugin is parsed into `Raw*` structs (serde, unknown fields
//! rejected), then validated and compiled into a [`Catalog`] with indexes the request path uses.
//! Every error names the offending field so an operator can fix it from the log line alone.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use crate::api::{Api, ApiSet};
use crate::forwarding::{valid_pattern, HeaderPolicy};

/// The most models a request's `models` list (and `auto.max_models`) may name.
pub const MAX_MODELS: usize = 8;

/// A configuration error: `field` is a JSON path such as `models["x"].endpoints[0].pricing`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid plugin configuration: {}: {}", self.field, self.reason)
    }
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), reason: reason.into() }
}

// ---------------------------------------------------------------------------------------------
// Raw (as written by the operator)
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    providers: BTreeMap<String, RawProvider>,
    models: BTreeMap<String, RawModel>,
    #[serde(default)]
    routing: RawRouting,
    /// The auto router (`model: "auto"`); absent = `auto` is not offered.
    #[serde(default)]
    auto: Option<RawAuto>,
    #[serde(default)]
    upstream_headers: RawUpstreamHeaders,
    /// Operator policies: compiled by `policy::Policies::from_json` against this catalog.
    #[serde(default, rename = "policies")]
    _policies: Option<serde_json::Value>,
    #[serde(default, rename = "policy_selection")]
    _policy_selection: Option<serde_json::Value>,
    /// Mesh-wide limits: compiled by `limits::MeshLimits::from_json` against this catalog.
    #[serde(default, rename = "rate_limits")]
    _rate_limits: Option<serde_json::Value>,
    /// Presets: compiled by `routing::presets::Presets::from_json` against this catalog.
    #[serde(default, rename = "presets")]
    _presets: Option<serde_json::Value>,
    /// Metrics, traces and access-log attributes: compiled by `telemetry::Telemetry::from_json`.
    #[serde(default, rename = "telemetry")]
    _telemetry: Option<serde_json::Value>,
}

/// Caller headers forwarded to providers (see `forwarding`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawUpstreamHeaders {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuto {
    #[serde(default = "default_cost_tier")]
    default_cost_tier: String,
    #[serde(default = "default_auto_max_models")]
    max_models: usize,
    #[serde(default = "default_long_context_tokens")]
    long_context_tokens: u64,
    /// Task type -> model id -> preference weight.
    tasks: BTreeMap<String, BTreeMap<String, f64>>,
}

fn default_cost_tier() -> String {
    "medium".to_string()
}
fn default_auto_max_models() -> usize {
    3
}
fn default_long_context_tokens() -> u64 {
    32_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    cluster: String,
    /// A second cluster to the same provider whose upstream filter chain has no per-attempt Wasm
    /// (only the hook that reports a failed answer, see the README): the first attempt of a
    /// single-model plan goes there, prepared by the decision filter.
    #[serde(default)]
    first_attempt_cluster: Option<String>,
    authority: String,
    #[serde(default = "default_path_prefix")]
    path_prefix: String,
    #[serde(default)]
    credential: Option<RawCredential>,
    #[serde(default)]
    byok: bool,
    /// With `byok`: this key is the only way to its provider (OpenRouter's "Always use for this
    /// provider"): the same provider's other, non-BYOK endpoints are never planned.
    #[serde(default)]
    byok_always: bool,
    #[serde(default)]
    data_policy: RawDataPolicy,
    /// Operator labels (`eu`, `hipaa`, `contract-2026`) that policies' `require_tags` select on.
    #[serde(default)]
    tags: Vec<String>,
    /// The APIs this provider serves, each with its own path prefix; absent = OpenAI only.
    #[serde(default)]
    apis: Option<BTreeMap<String, RawApi>>,
}

/// One API a provider serves (`providers[..].apis.<api>`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawApi {
    /// OpenAI and Anthropic: replaces the request path's `/v1` (default `/v1`; OpenAI: the
    /// provider's `path_prefix`). Google: put before the caller's `/{version}/models/...`
    /// (default empty).
    #[serde(default)]
    path_prefix: Option<String>,
}

fn default_path_prefix() -> String {
    "/v1".to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCredential {
    #[serde(default = "default_credential_header")]
    header: String,
    #[serde(default = "default_credential_prefix")]
    prefix: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    env: Option<String>,
    /// The provider's cluster adds the key itself (`credential_injector` fed by SDS, e.g. from a
    /// mounted Kubernetes Secret): the filter never holds it, and keeps the header the cluster
    /// wrote for the attempt's API while removing every other credential header.
    #[serde(default)]
    injected: bool,
}

fn default_credential_header() -> String {
    "authorization".to_string()
}
fn default_credential_prefix() -> String {
    "Bearer ".to_string()
}

/// Unknown data handling is assumed to be the unsafe kind, so compliance filters
/// (`data_collection: deny`, `zdr`) never pass a provider whose policy was not declared.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDataPolicy {
    #[serde(default = "yes")]
    retains_data: bool,
    #[serde(default = "yes")]
    trains_on_data: bool,
    #[serde(default)]
    zdr: bool,
}

fn yes() -> bool {
    true
}

impl Default for RawDataPolicy {
    fn default() -> Self {
        RawDataPolicy { retains_data: true, trains_on_data: true, zdr: false }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    #[serde(default)]
    distillable: bool,
    #[serde(default)]
    cost_tier: Option<String>,
    #[serde(default)]
    input_modalities: Option<Vec<String>>,
    endpoints: Vec<RawEndpoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpoint {
    provider: String,
    #[serde(default)]
    upstream_model: Option<String>,
    pricing: Pricing,
    #[serde(default)]
    quantization: Option<String>,
    #[serde(default)]
    context_length: Option<u64>,
    #[serde(default)]
    supported_parameters: Vec<String>,
    /// The APIs this endpoint serves (a subset of its provider's); absent = all of them.
    #[serde(default)]
    apis: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouting {
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
    #[serde(default)]
    handoff: Option<String>,
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
            handoff: None,
            handoff_key: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compiled catalog
// ---------------------------------------------------------------------------------------------

/// Prices in USD: per million tokens for prompt/completion, per unit for request/image.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Pricing {
    pub prompt: f64,
    pub completion: f64,
    #[serde(default)]
    pub request: f64,
    #[serde(default)]
    pub image: f64,
    /// Per million cached prompt tokens (prompt-cache hits); absent = the prompt price.
    #[serde(default)]
    pub cached_prompt: Option<f64>,
}

impl Pricing {
    /// Cache reads cost less than the prompt price: only then does keeping a conversation on
    /// this endpoint (sticky routing) save anything.
    pub fn caches_cheaper(&self) -> bool {
        self.cached_prompt.is_some_and(|c| c < self.prompt)
    }

    /// USD for one answer's reported usage (`cached` of the prompt tokens were cache hits).
    pub fn cost_usd(&self, prompt_tokens: u64, cached: u64, completion_tokens: u64) -> f64 {
        let cached = cached.min(prompt_tokens);
        ((prompt_tokens - cached) as f64 * self.prompt
            + cached as f64 * self.cached_prompt.unwrap_or(self.prompt)
            + completion_tokens as f64 * self.completion)
            / 1e6
            + self.request
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantization {
    Int4,
    Int8,
    Fp4,
    Fp6,
    Fp8,
    Fp16,
    Bf16,
    Fp32,
    Unknown,
}

/// Every quantization by its name in the catalog, the `provider` object and the listings:
/// the one table that parsing, naming and the error messages read.
const QUANTIZATIONS: [(&str, Quantization); 9] = [
    ("int4", Quantization::Int4),
    ("int8", Quantization::Int8),
    ("fp4", Quantization::Fp4),
    ("fp6", Quantization::Fp6),
    ("fp8", Quantization::Fp8),
    ("fp16", Quantization::Fp16),
    ("bf16", Quantization::Bf16),
    ("fp32", Quantization::Fp32),
    ("unknown", Quantization::Unknown),
];

impl Quantization {
    pub fn parse(s: &str) -> Option<Quantization> {
        QUANTIZATIONS.iter().find(|(name, _)| *name == s).map(|&(_, q)| q)
    }

    pub fn name(self) -> &'static str {
        QUANTIZATIONS.iter().find(|&&(_, q)| q == self).map_or("unknown", |&(name, _)| name)
    }

    /// The error for a name that is not a quantization, listing the ones that are.
    pub fn unknown(name: &str) -> String {
        let known: Vec<&str> = QUANTIZATIONS.iter().map(|&(n, _)| n).collect();
        format!("unknown quantization \"{name}\" ({})", known.join(", "))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultPolicy {
    PriceWeighted,
    RoutingCost,
}

#[derive(Clone)]
pub struct Credential {
    /// Lower-case header name.
    pub header: String,
    /// Full header value (prefix + secret). Never logged.
    pub value: String,
    /// The secret alone (Anthropic's `x-api-key` and Google's `x-goog-api-key` carry it bare).
    pub secret: String,
    /// The provider's cluster injects the key (`credential.injected`): `value` and `secret` are
    /// empty, and the filter sets nothing.
    pub injected: bool,
}

/// Hand-written so that `{:?}` of a provider (or the whole catalog) never prints a key.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("header", &self.header).field("value", &"<redacted>").finish()
    }
}

#[derive(Debug, Clone)]
pub struct Provider {
    /// The key in `providers`: `name` or `name/variant`.
    pub slug: String,
    pub cluster: String,
    /// The cluster a prepared first attempt goes to (no per-attempt Wasm), if configured.
    pub first_attempt_cluster: Option<String>,
    pub authority: String,
    pub path_prefix: String,
    pub credential: Option<Credential>,
    pub byok: bool,
    /// The provider's traffic stays on this BYOK key (see `Catalog::byok_always_bases`).
    pub byok_always: bool,
    pub retains_data: bool,
    pub trains_on_data: bool,
    pub zdr: bool,
    /// Operator labels for data residency and contract scope (policy `require_tags`).
    pub tags: Vec<String>,
    /// The APIs it serves.
    pub apis: ApiSet,
    /// Path prefix per API (indexed by `Api::index`; empty for APIs it does not serve).
    pub api_prefixes: [String; 3],
}

impl Provider {
    /// The path prefix of `api` on this provider.
    pub fn prefix(&self, api: Api) -> &str {
        self.api_prefixes.get(api.index()).map_or("", String::as_str)
    }

    /// The credential header and value an attempt in `api` carries: the configured header for
    /// OpenAI, `x-api-key` for Anthropic, `x-goog-api-key` for Google (both with the bare secret).
    /// None when the provider's cluster injects the key itself (`credential.injected`).
    pub fn credential_for(&self, api: Api) -> Option<(&str, &str)> {
        let c = self.credential.as_ref().filter(|c| !c.injected)?;
        let header = self.key_header(api)?;
        Some((header, if api == Api::OpenAi { c.value.as_str() } else { c.secret.as_str() }))
    }

    /// The header an attempt in `api` carries the key in (set by the filter, or by the cluster
    /// for an injected credential).
    pub fn key_header(&self, api: Api) -> Option<&str> {
        let c = self.credential.as_ref()?;
        Some(match api {
            Api::OpenAi => c.header.as_str(),
            Api::Anthropic => ANTHROPIC_KEY_HEADER,
            Api::Google => GOOGLE_KEY_HEADER,
        })
    }

    /// The header the provider's cluster injected the key in for `api`, which the filter must
    /// keep (None: the filter sets the key, or there is none).
    pub fn injected_header(&self, api: Api) -> Option<&str> {
        self.credential.as_ref().filter(|c| c.injected)?;
        self.key_header(api)
    }
}

/// Anthropic's and Google's API key headers.
pub const ANTHROPIC_KEY_HEADER: &str = "x-api-key";
pub const GOOGLE_KEY_HEADER: &str = "x-goog-api-key";

/// The default path prefix of an API. OpenAI and Anthropic: what the request's `/v1` is replaced
/// with. Google: what goes before the caller's `/{version}/models/...` (its clients choose the
/// API version, `v1beta` or `v1`, so the version is kept).
fn default_api_prefix(api: Api) -> &'static str {
    match api {
        Api::OpenAi | Api::Anthropic => "/v1",
        Api::Google => "",
    }
}

#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Full slug of the serving provider: `name` or `name/variant`.
    pub slug: String,
    /// Index into `Catalog::providers`.
    pub provider: usize,
    /// Index into `Catalog::models`.
    pub model: usize,
    pub upstream_model: String,
    pub pricing: Pricing,
    pub quantization: Quantization,
    pub context_length: Option<u64>,
    pub supported_parameters: Vec<String>,
    /// The APIs this endpoint serves.
    pub apis: ApiSet,
}

impl Endpoint {
    /// Provider name without the variant (`deepinfra` for `deepinfra/turbo`).
    pub fn base_slug(&self) -> &str {
        base_of(&self.slug)
    }

    /// A base slug matches every variant; a full slug only itself.
    pub fn matches_slug(&self, slug: &str) -> bool {
        if slug.contains('/') {
            self.slug == slug
        } else {
            self.base_slug() == slug
        }
    }

    pub fn supports(&self, parameter: &str) -> bool {
        self.supported_parameters.iter().any(|p| p == parameter)
    }
}

pub fn base_of(slug: &str) -> &str {
    slug.split('/').next().unwrap_or(slug)
}

#[derive(Debug, Clone)]
pub struct Model {
    pub id: String,
    pub distillable: bool,
    /// Indexes into `Catalog::endpoints`.
    pub endpoints: Vec<usize>,
    /// Price class for the auto router; None = undeclared (only `cost_tier: max` may pick it).
    pub cost_tier: Option<CostTier>,
    /// What the model accepts as input; always includes text.
    pub input_modalities: Vec<Modality>,
    /// Some endpoint lists `tools` in `supported_parameters`.
    pub supports_tools: bool,
    /// Largest endpoint context length; None when some endpoint declares no limit.
    pub max_context: Option<u64>,
}

impl Model {
    pub fn accepts(&self, m: Modality) -> bool {
        self.input_modalities.contains(&m)
    }
}

/// A model's price class, cheapest first (ordered: a request tier is a ceiling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CostTier {
    Low,
    Medium,
    High,
    XHigh,
}

impl CostTier {
    pub fn parse(s: &str) -> Option<CostTier> {
        Some(match s {
            "low" => CostTier::Low,
            "medium" => CostTier::Medium,
            "high" => CostTier::High,
            "xhigh" => CostTier::XHigh,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CostTier::Low => "low",
            CostTier::Medium => "medium",
            CostTier::High => "high",
            CostTier::XHigh => "xhigh",
        }
    }
}

/// What a request is willing to spend: a tier ceiling, or `max` (best regardless of price).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierLimit {
    UpTo(CostTier),
    Max,
}

impl TierLimit {
    pub fn parse(s: &str) -> Option<TierLimit> {
        if s == "max" {
            Some(TierLimit::Max)
        } else {
            CostTier::parse(s).map(TierLimit::UpTo)
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TierLimit::UpTo(t) => t.name(),
            TierLimit::Max => "max",
        }
    }

    /// Whether a model of tier `t` (None = undeclared) is within this limit.
    pub fn admits(self, t: Option<CostTier>) -> bool {
        match (self, t) {
            (TierLimit::Max, _) => true,
            (TierLimit::UpTo(limit), Some(t)) => t <= limit,
            (TierLimit::UpTo(_), None) => false,
        }
    }
}

/// Input kinds a model may accept (`input_modalities`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modality {
    Text,
    Image,
    Audio,
    File,
    Video,
}

impl Modality {
    pub fn parse(s: &str) -> Option<Modality> {
        Some(match s {
            "text" => Modality::Text,
            "image" => Modality::Image,
            "audio" => Modality::Audio,
            "file" => Modality::File,
            "video" => Modality::Video,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Modality::Text => "text",
            Modality::Image => "image",
            Modality::Audio => "audio",
            Modality::File => "file",
            Modality::Video => "video",
        }
    }
}

/// Task types the auto router classifies a request into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskType {
    Code,
    Reasoning,
    LongContext,
    ToolUse,
    StructuredOutput,
    Chat,
}

impl TaskType {
    pub const ALL: [TaskType; 6] = [
        TaskType::Code,
        TaskType::Reasoning,
        TaskType::LongContext,
        TaskType::ToolUse,
        TaskType::StructuredOutput,
        TaskType::Chat,
    ];

    pub fn parse(s: &str) -> Option<TaskType> {
        TaskType::ALL.into_iter().find(|t| t.name() == s)
    }

    pub fn name(self) -> &'static str {
        match self {
            TaskType::Code => "code",
            TaskType::Reasoning => "reasoning",
            TaskType::LongContext => "long_context",
            TaskType::ToolUse => "tool_use",
            TaskType::StructuredOutput => "structured_output",
            TaskType::Chat => "chat",
        }
    }

    fn index(self) -> usize {
        match self {
            TaskType::Code => 0,
            TaskType::Reasoning => 1,
            TaskType::LongContext => 2,
            TaskType::ToolUse => 3,
            TaskType::StructuredOutput => 4,
            TaskType::Chat => 5,
        }
    }
}

/// One ranked candidate of a task list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoCandidate {
    /// Index into `Catalog::models`.
    pub model: usize,
    pub weight: f64,
}

/// The compiled `auto` section.
#[derive(Debug, Clone)]
pub struct AutoConfig {
    pub default_tier: TierLimit,
    /// Models planned per auto request (primary + fallbacks).
    pub max_models: usize,
    /// Prompt estimate (tokens) from which a request counts as `long_context`.
    pub long_context_tokens: u64,
    /// Per task type, candidates by descending weight (ties: cheaper tier, then id).
    tasks: [Vec<AutoCandidate>; 6],
    /// From the configuration's `auto` section (false: the default ranking).
    pub configured: bool,
}

impl AutoConfig {
    /// The configured candidates of a task (empty when the task has no list).
    pub fn candidates(&self, task: TaskType) -> &[AutoCandidate] {
        self.tasks.get(task.index()).map(Vec::as_slice).unwrap_or(&[])
    }
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
    /// Where the next attempt's cluster token travels to Envoy's retry (`protocol::slots`):
    /// filter state (the default, nothing on the request) or the `x-switchyard-next` header
    /// (istio-proxy, whose matcher cannot read filter state).
    pub handoff: crate::protocol::slots::Handoff,
    /// The deployment's secret key of the header tokens (`handoff: header` only).
    pub handoff_key: Option<[u8; 16]>,
}

#[derive(Debug, Clone)]
pub struct Catalog {
    pub providers: Vec<Provider>,
    pub models: Vec<Model>,
    pub endpoints: Vec<Endpoint>,
    pub routing: Routing,
    /// The auto router: the `auto` section, or without one the default ranking
    /// (`default_auto`). Always present since a catalog without `auto` got its default.
    pub auto: Option<AutoConfig>,
    model_index: HashMap<String, usize>,
    /// Base provider names, for `provider-slug/vendor/model` pinning and slug validation.
    provider_bases: Vec<String>,
    /// Base provider names (`openai` for `openai/byok`) with a `byok_always` provider: their
    /// endpoints at providers that are not BYOK are never planned.
    pub byok_always_bases: Vec<String>,
    /// Every credential header name in the catalog (lower-case), stripped from every upstream
    /// request so no attempt carries a key meant for another provider or the caller's own.
    pub credential_headers: Vec<String>,
    /// Which caller headers may reach a provider.
    pub upstream_headers: HeaderPolicy,
}

impl Catalog {
    /// Parses and validates the plugin configuration. `env` resolves `credential.env` names
    /// (the Wasm VM's environment in production; a closure in tests).
    pub fn from_json(bytes: &[u8], env: &dyn Fn(&str) -> Option<String>) -> Result<Catalog, ConfigError> {
        let raw: RawConfig = serde_json::from_slice(bytes).map_err(|e| err("<root>", e.to_string()))?;
        compile(raw, env)
    }

    pub fn model(&self, id: &str) -> Option<&Model> {
        self.model_index.get(id).and_then(|&i| self.models.get(i))
    }

    pub fn endpoint(&self, idx: usize) -> Option<&Endpoint> {
        self.endpoints.get(idx)
    }

    /// The provider entry serving `slug` (`name/variant` falls back to `name`).
    pub fn provider_for_slug(&self, slug: &str) -> Option<&Provider> {
        let find = |s: &str| self.providers.iter().find(|p| p.slug == s);
        find(slug).or_else(|| find(base_of(slug)))
    }

    /// The endpoint of `model` served by `slug` (stable across configuration reloads).
    pub fn find_endpoint(&self, model: &str, slug: &str) -> Option<usize> {
        let m = self.model(model)?;
        m.endpoints.iter().copied().find(|&i| self.endpoint(i).is_some_and(|e| e.slug == slug))
    }

    /// As `find_endpoint`, the endpoint itself.
    pub fn endpoint_of(&self, model: &str, slug: &str) -> Option<&Endpoint> {
        self.find_endpoint(model, slug).and_then(|i| self.endpoint(i))
    }

    pub fn provider_of(&self, ep: &Endpoint) -> Option<&Provider> {
        self.providers.get(ep.provider)
    }

    /// The provider slug an endpoint is labelled with (`gen_ai.provider.name`): its provider's,
    /// else its slug's base.
    pub fn provider_name<'a>(&'a self, ep: &'a Endpoint) -> &'a str {
        self.provider_of(ep).map_or(ep.base_slug(), |p| p.slug.as_str())
    }

    /// The endpoint is at a shared (non-BYOK) provider whose provider has a `byok_always` key:
    /// it is never planned, nor listed.
    pub fn shadowed_by_byok(&self, ep: &Endpoint) -> bool {
        !self.byok_always_bases.is_empty()
            && self.provider_of(ep).is_some_and(|p| !p.byok)
            && self.byok_always_bases.iter().any(|b| b == ep.base_slug())
    }

    pub fn is_provider_base(&self, name: &str) -> bool {
        self.provider_bases.iter().any(|b| b == name)
    }

    /// Whether a request's provider slug can match anything here: a base name of a configured
    /// provider, or a full `name/variant` slug of a provider entry or of some endpoint.
    pub fn knows_slug(&self, slug: &str) -> bool {
        if slug.contains('/') {
            self.providers.iter().any(|p| p.slug == slug) || self.endpoints.iter().any(|e| e.slug == slug)
        } else {
            self.is_provider_base(slug)
        }
    }
}

fn valid_header_name(h: &str) -> bool {
    !h.is_empty() && h.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Bytes never allowed in a header value (HTAB is).
fn is_control(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

fn valid_slug(s: &str) -> bool {
    let mut parts = s.split('/');
    let ok_part =
        |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(a), None, None) => ok_part(a),
        (Some(a), Some(b), None) => ok_part(a) && ok_part(b),
        _ => false,
    }
}

/// One provider: its slug, clusters, authority, path prefix, key and the APIs it serves.
fn compile_provider(
    slug: &str,
    p: &RawProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Provider, ConfigError> {
    let field = format!("providers[\"{slug}\"]");
    if !valid_slug(slug) {
        return Err(err(&field, "provider slug must be `name` or `name/variant` (letters, digits, - _ .)"));
    }
    if p.cluster.is_empty() {
        return Err(err(format!("{field}.cluster"), "must name the Envoy cluster of this provider"));
    }
    if p.byok_always && !p.byok {
        return Err(err(
            format!("{field}.byok_always"),
            "needs `byok: true`: it keeps the provider's traffic on this BYOK key",
        ));
    }
    if p.authority.is_empty() {
        return Err(err(format!("{field}.authority"), "must be the provider's host (sent as :authority)"));
    }
    if let Some(first) = &p.first_attempt_cluster {
        if first.is_empty() || *first == p.cluster {
            return Err(err(
                format!("{field}.first_attempt_cluster"),
                "must name a second cluster to this provider, other than `cluster`",
            ));
        }
    }
    if !p.path_prefix.starts_with('/') {
        return Err(err(format!("{field}.path_prefix"), "must start with '/'"));
    }
    let credential = match &p.credential {
        None => None,
        Some(c) => Some(compile_credential(&field, c, env)?),
    };
    for (i, t) in p.tags.iter().enumerate() {
        if t.is_empty() || t.contains(char::is_whitespace) {
            return Err(err(format!("{field}.tags[{i}]"), "a tag must be non-empty without whitespace"));
        }
    }
    let (apis, api_prefixes) = compile_apis(&field, p)?;
    Ok(Provider {
        slug: slug.to_string(),
        cluster: p.cluster.clone(),
        first_attempt_cluster: p.first_attempt_cluster.clone(),
        authority: p.authority.clone(),
        path_prefix: p.path_prefix.trim_end_matches('/').to_string(),
        credential,
        byok: p.byok,
        byok_always: p.byok_always,
        retains_data: p.data_policy.retains_data,
        trains_on_data: p.data_policy.trains_on_data,
        zdr: p.data_policy.zdr,
        tags: p.tags.clone(),
        apis,
        api_prefixes,
    })
}

/// A provider's `credential`: its header and the secret, read from the value or the VM's
/// environment (or left to the Envoy configuration with `injected`).
fn compile_credential(
    field: &str,
    c: &RawCredential,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Credential, ConfigError> {
    let header = c.header.to_ascii_lowercase();
    if !valid_header_name(&header) || header.starts_with(':') {
        return Err(err(format!("{field}.credential.header"), "must be a plain header name"));
    }
    let secret = match (&c.value, &c.env, c.injected) {
        (Some(v), None, false) => v.clone(),
        (None, Some(name), false) => env(name).ok_or_else(|| {
            err(
                format!("{field}.credential.env"),
                format!(
                    "environment variable {name} is not set in the Wasm VM (add it to vm_config.environment_variables)"
                ),
            )
        })?,
        (None, None, true) => String::new(),
        _ => {
            return Err(err(format!("{field}.credential"), "set exactly one of `value`, `env` or `injected: true`"));
        }
    };
    // A control character (CR/LF above all) in a header value would let the
    // configuration inject headers into every upstream request.
    if c.prefix.bytes().any(is_control) {
        return Err(err(format!("{field}.credential.prefix"), "contains a control character (CR, LF, ...)"));
    }
    if (secret.is_empty() && !c.injected) || secret.bytes().any(is_control) {
        return Err(err(
            format!("{field}.credential"),
            "the secret is empty or contains a control character (CR, LF, ...)",
        ));
    }
    let value = if c.injected { String::new() } else { format!("{}{}", c.prefix, secret) };
    Ok(Credential { header, value, secret, injected: c.injected })
}

/// One endpoint of model `id` (index `model`) on the provider at `slot`: prices, quantization,
/// context, the upstream model name and the APIs it serves (a subset of its provider's).
fn compile_endpoint(
    ef: &str,
    e: &RawEndpoint,
    id: &str,
    model: usize,
    slot: usize,
    providers: &[Provider],
) -> Result<Endpoint, ConfigError> {
    let pr = e.pricing;
    for (name, v) in [
        ("prompt", pr.prompt),
        ("completion", pr.completion),
        ("request", pr.request),
        ("image", pr.image),
        ("cached_prompt", pr.cached_prompt.unwrap_or(0.0)),
    ] {
        if !v.is_finite() || v < 0.0 {
            return Err(err(format!("{ef}.pricing.{name}"), "must be a finite number >= 0"));
        }
    }
    let quantization = match &e.quantization {
        None => Quantization::Unknown,
        Some(q) => Quantization::parse(q).ok_or_else(|| err(format!("{ef}.quantization"), Quantization::unknown(q)))?,
    };
    if e.context_length == Some(0) {
        return Err(err(format!("{ef}.context_length"), "must be > 0 when set"));
    }
    let upstream_model = e.upstream_model.clone().unwrap_or_else(|| id.to_string());
    if upstream_model.is_empty() {
        return Err(err(format!("{ef}.upstream_model"), "must not be empty"));
    }
    let offered = providers.get(slot).map_or(ApiSet::OPENAI, |p: &Provider| p.apis);
    let apis = match &e.apis {
        None => offered,
        Some(list) => {
            let mut set = ApiSet::default();
            for (k, name) in list.iter().enumerate() {
                let af = format!("{ef}.apis[{k}]");
                let api = Api::parse(name)
                    .ok_or_else(|| err(&af, format!("unknown API \"{name}\" (openai, anthropic, google)")))?;
                if !offered.has(api) {
                    return Err(err(
                        &af,
                        format!("provider \"{}\" does not serve the {name} API (add it to its `apis`)", e.provider),
                    ));
                }
                set = set.with(api);
            }
            if set.is_empty() {
                return Err(err(format!("{ef}.apis"), "must list at least one API when set"));
            }
            set
        }
    };
    Ok(Endpoint {
        slug: e.provider.clone(),
        provider: slot,
        model,
        upstream_model,
        pricing: pr,
        quantization,
        context_length: e.context_length,
        supported_parameters: e.supported_parameters.clone(),
        apis,
    })
}

fn compile(raw: RawConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Catalog, ConfigError> {
    if raw.providers.is_empty() {
        return Err(err("providers", "at least one provider is required"));
    }
    if raw.models.is_empty() {
        return Err(err("models", "at least one model is required"));
    }

    let routing = compile_routing(&raw.routing)?;

    let mut providers = Vec::with_capacity(raw.providers.len());
    let mut provider_slot: HashMap<String, usize> = HashMap::new();
    let mut credential_headers: Vec<String> = Vec::new();
    for (slug, p) in &raw.providers {
        let provider = compile_provider(slug, p, env)?;
        if let Some(c) = &provider.credential {
            if !credential_headers.contains(&c.header) {
                credential_headers.push(c.header.clone());
            }
        }
        provider_slot.insert(slug.clone(), providers.len());
        providers.push(provider);
    }
    check_first_attempt_clusters(&providers)?;
    // The caller's own key never reaches a provider, whatever the catalog uses: every API's
    // key header is removed from every attempt.
    for h in ["authorization", ANTHROPIC_KEY_HEADER, GOOGLE_KEY_HEADER] {
        if !credential_headers.iter().any(|x| x == h) {
            credential_headers.push(h.to_string());
        }
    }

    let mut provider_bases: Vec<String> = providers.iter().map(|p| base_of(&p.slug).to_string()).collect();
    crate::routing::sorting::sort_by(&mut provider_bases, |a, b| a.cmp(b));
    provider_bases.dedup();
    let mut byok_always_bases: Vec<String> =
        providers.iter().filter(|p| p.byok_always).map(|p| base_of(&p.slug).to_string()).collect();
    byok_always_bases.dedup();

    let mut models = Vec::with_capacity(raw.models.len());
    let mut endpoints = Vec::new();
    let mut model_index = HashMap::new();
    for (id, m) in &raw.models {
        let field = format!("models[\"{id}\"]");
        if id.is_empty() || id.contains(char::is_whitespace) {
            return Err(err(&field, "model id must be non-empty without whitespace"));
        }
        if m.endpoints.is_empty() {
            return Err(err(format!("{field}.endpoints"), "a model needs at least one endpoint"));
        }
        let model_idx = models.len();
        let mut ids = Vec::with_capacity(m.endpoints.len());
        for (i, e) in m.endpoints.iter().enumerate() {
            let ef = format!("{field}.endpoints[{i}]");
            if !valid_slug(&e.provider) {
                return Err(err(format!("{ef}.provider"), "must be `name` or `name/variant`"));
            }
            // A variant may have its own provider entry (own cluster/key) or share its base's.
            let slot = provider_slot
                .get(&e.provider)
                .or_else(|| provider_slot.get(base_of(&e.provider)))
                .copied()
                .ok_or_else(|| {
                    err(format!("{ef}.provider"), format!("unknown provider \"{}\" (not in providers)", e.provider))
                })?;
            if ids.iter().any(|&j: &usize| endpoints.get(j).map(|x: &Endpoint| x.slug == e.provider).unwrap_or(false)) {
                return Err(err(
                    format!("{ef}.provider"),
                    format!("duplicate endpoint \"{}\" for this model", e.provider),
                ));
            }
            ids.push(endpoints.len());
            endpoints.push(compile_endpoint(&ef, e, id, model_idx, slot, &providers)?);
        }
        let cost_tier = match &m.cost_tier {
            None => None,
            Some(t) => Some(CostTier::parse(t).ok_or_else(|| {
                err(format!("{field}.cost_tier"), format!("unknown cost tier \"{t}\" (low, medium, high, xhigh)"))
            })?),
        };
        let mut input_modalities = vec![Modality::Text];
        for (i, name) in m.input_modalities.iter().flatten().enumerate() {
            let modality = Modality::parse(name).ok_or_else(|| {
                err(
                    format!("{field}.input_modalities[{i}]"),
                    format!("unknown modality \"{name}\" (text, image, audio, file, video)"),
                )
            })?;
            if !input_modalities.contains(&modality) {
                input_modalities.push(modality);
            }
        }
        let own = || ids.iter().filter_map(|&j| endpoints.get(j));
        let supports_tools = own().any(|e: &Endpoint| e.supports("tools"));
        let max_context = own().map(|e: &Endpoint| e.context_length).try_fold(0u64, |acc, c| c.map(|c| acc.max(c)));
        model_index.insert(id.clone(), model_idx);
        models.push(Model {
            id: id.clone(),
            distillable: m.distillable,
            endpoints: ids,
            cost_tier,
            input_modalities,
            supports_tools,
            max_context,
        });
    }

    let auto = Some(match &raw.auto {
        None => default_auto(&models, &endpoints),
        Some(a) => compile_auto(a, &models, &model_index)?,
    });

    if let Some(pc) = &routing.passthrough_cluster {
        if let Some(p) = providers.iter().find(|p| &p.cluster == pc) {
            return Err(err(
                "routing.passthrough_cluster",
                format!("\"{pc}\" is provider {}'s cluster; unrouted requests must never reach a provider with the caller's credentials", p.slug),
            ));
        }
    }
    let upstream_headers = compile_upstream_headers(&raw.upstream_headers)?;

    Ok(Catalog {
        providers,
        models,
        endpoints,
        routing,
        auto,
        model_index,
        provider_bases,
        byok_always_bases,
        credential_headers,
        upstream_headers,
    })
}

/// A provider's `apis`: the set it serves and each API's path prefix. Absent = OpenAI only,
/// at the provider's `path_prefix`.
/// A first-attempt cluster adds its provider's key itself (its own upstream filter, Envoy's
/// `credential_injector`: the decision filter never writes a key into the downstream request),
/// so it must be able to: one API (one key header) per such cluster, and every provider sent
/// to it has the same key.
fn check_first_attempt_clusters(providers: &[Provider]) -> Result<(), ConfigError> {
    for (i, p) in providers.iter().enumerate() {
        let Some(first) = &p.first_attempt_cluster else { continue };
        let field = format!("providers[\"{}\"].first_attempt_cluster", p.slug);
        let mut apis = p.apis.iter();
        let (Some(api), None) = (apis.next(), apis.next()) else {
            return Err(err(
                field,
                "a first-attempt cluster injects one key header, so its provider must serve exactly one API (apis)",
            ));
        };
        let key = |q: &Provider| {
            q.credential.as_ref().map(|c| (q.key_header(api).map(str::to_string), c.value.clone(), c.injected))
        };
        let clash = providers.iter().take(i).find(|q| {
            q.first_attempt_cluster.as_ref() == Some(first) && (q.apis.iter().ne(p.apis.iter()) || key(q) != key(p))
        });
        if let Some(q) = clash {
            return Err(err(
                field,
                format!("\"{first}\" is also provider {}'s first-attempt cluster with another API or key; the cluster injects one key", q.slug),
            ));
        }
    }
    Ok(())
}

fn compile_apis(field: &str, p: &RawProvider) -> Result<(ApiSet, [String; 3]), ConfigError> {
    let openai_prefix = p.path_prefix.trim_end_matches('/').to_string();
    let mut prefixes: [String; 3] = Default::default();
    let Some(apis) = &p.apis else {
        if let Some(slot) = prefixes.get_mut(Api::OpenAi.index()) {
            *slot = openai_prefix;
        }
        return Ok((ApiSet::OPENAI, prefixes));
    };
    if apis.is_empty() {
        return Err(err(format!("{field}.apis"), "must name at least one API (openai, anthropic, google)"));
    }
    let mut set = ApiSet::default();
    for (name, a) in apis {
        let af = format!("{field}.apis.{name}");
        let api = Api::parse(name).ok_or_else(|| err(&af, "unknown API (openai, anthropic, google)"))?;
        let prefix = match (&a.path_prefix, api) {
            (Some(pp), _) => {
                if !pp.starts_with('/') {
                    return Err(err(format!("{af}.path_prefix"), "must start with '/'"));
                }
                pp.trim_end_matches('/').to_string()
            }
            (None, Api::OpenAi) => openai_prefix.clone(),
            (None, other) => default_api_prefix(other).to_string(),
        };
        if let Some(slot) = prefixes.get_mut(api.index()) {
            *slot = prefix;
        }
        set = set.with(api);
    }
    Ok((set, prefixes))
}

fn compile_auto(a: &RawAuto, models: &[Model], index: &HashMap<String, usize>) -> Result<AutoConfig, ConfigError> {
    let default_tier = TierLimit::parse(&a.default_cost_tier).ok_or_else(|| {
        err(
            "auto.default_cost_tier",
            format!("unknown cost tier \"{}\" (low, medium, high, xhigh, max)", a.default_cost_tier),
        )
    })?;
    if !(1..=MAX_MODELS).contains(&a.max_models) {
        return Err(err("auto.max_models", format!("must be between 1 and {}", MAX_MODELS)));
    }
    if a.long_context_tokens == 0 {
        return Err(err("auto.long_context_tokens", "must be > 0"));
    }
    let mut tasks: [Vec<AutoCandidate>; 6] = Default::default();
    for (name, list) in &a.tasks {
        let field = format!("auto.tasks.{name}");
        let task = TaskType::parse(name).ok_or_else(|| {
            err(&field, "unknown task type (code, reasoning, long_context, tool_use, structured_output, chat)")
        })?;
        let mut ranked = Vec::with_capacity(list.len());
        for (id, &weight) in list {
            let mf = format!("{field}[\"{id}\"]");
            let model =
                index.get(id).copied().ok_or_else(|| err(&mf, format!("unknown model \"{id}\" (not in models)")))?;
            if !weight.is_finite() || weight <= 0.0 {
                return Err(err(&mf, "weight must be a finite number > 0"));
            }
            ranked.push(AutoCandidate { model, weight });
        }
        let tier = |c: &AutoCandidate| models.get(c.model).and_then(|m| m.cost_tier);
        let id = |c: &AutoCandidate| models.get(c.model).map(|m| m.id.as_str()).unwrap_or("");
        // Best first; equal weights: the cheaper tier (undeclared last), then the id.
        crate::routing::sorting::sort_by(&mut ranked, |x, y| {
            y.weight
                .partial_cmp(&x.weight)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| tier(x).map_or(u8::MAX, |t| t as u8).cmp(&tier(y).map_or(u8::MAX, |t| t as u8)))
                .then_with(|| id(x).cmp(id(y)))
        });
        if let Some(slot) = tasks.get_mut(task.index()) {
            *slot = ranked;
        }
    }
    if tasks.get(TaskType::Chat.index()).is_none_or(Vec::is_empty) {
        return Err(err("auto.tasks.chat", "required and non-empty: the general list every task falls back to"));
    }
    Ok(AutoConfig {
        default_tier,
        max_models: a.max_models,
        long_context_tokens: a.long_context_tokens,
        tasks,
        configured: true,
    })
}

/// The auto router of a catalog without an `auto` section: every catalog model is a candidate
/// of every task, ranked by what the catalog says of it (documented in docs/configuration.md,
/// "Auto router"): code and reasoning the dearest model first (its price as the proxy of its
/// ability), long context the largest context first (then the cheapest), every other task the
/// cheapest first. A model's price is its cheapest endpoint's prompt + completion price; ties go
/// by id. No cost-tier ceiling (`max`), three models planned, long context from 32,000 tokens.
fn default_auto(models: &[Model], endpoints: &[Endpoint]) -> AutoConfig {
    let price = |m: &Model| {
        m.endpoints
            .iter()
            .filter_map(|&i| endpoints.get(i))
            .map(|e| e.pricing.prompt + e.pricing.completion)
            .fold(f64::INFINITY, f64::min)
    };
    let by = |order: &dyn Fn(&Model, &Model) -> std::cmp::Ordering| -> Vec<AutoCandidate> {
        let mut ranked: Vec<usize> = (0..models.len()).collect();
        crate::routing::sorting::sort_by(&mut ranked, |&a, &b| match (models.get(a), models.get(b)) {
            (Some(x), Some(y)) => order(x, y).then_with(|| x.id.cmp(&y.id)),
            _ => std::cmp::Ordering::Equal,
        });
        // Weights only order the list: the first gets the most.
        let n = ranked.len();
        ranked.iter().enumerate().map(|(rank, &model)| AutoCandidate { model, weight: (n - rank) as f64 }).collect()
    };
    let cheapest = |x: &Model, y: &Model| price(x).total_cmp(&price(y));
    let dearest = |x: &Model, y: &Model| price(y).total_cmp(&price(x));
    // No declared limit counts as the largest.
    let context = |m: &Model| m.max_context.unwrap_or(u64::MAX);
    let largest = |x: &Model, y: &Model| context(y).cmp(&context(x)).then_with(|| cheapest(x, y));
    let mut tasks: [Vec<AutoCandidate>; 6] = Default::default();
    for task in TaskType::ALL {
        let list = match task {
            TaskType::Code | TaskType::Reasoning => by(&dearest),
            TaskType::LongContext => by(&largest),
            TaskType::ToolUse | TaskType::StructuredOutput | TaskType::Chat => by(&cheapest),
        };
        if let Some(slot) = tasks.get_mut(task.index()) {
            *slot = list;
        }
    }
    AutoConfig {
        default_tier: TierLimit::Max,
        max_models: default_auto_max_models(),
        long_context_tokens: default_long_context_tokens(),
        tasks,
        configured: false,
    }
}

fn compile_upstream_headers(h: &RawUpstreamHeaders) -> Result<HeaderPolicy, ConfigError> {
    let check = |list: &[String], field: &str| -> Result<Vec<String>, ConfigError> {
        list.iter()
            .enumerate()
            .map(|(i, p)| {
                let p = p.to_ascii_lowercase();
                if valid_pattern(&p) {
                    Ok(p)
                } else {
                    Err(err(
                        format!("upstream_headers.{field}[{i}]"),
                        "must be a header name (letters, digits, - _ .), optionally with `*` wildcards",
                    ))
                }
            })
            .collect()
    };
    let allow = match &h.allow {
        Some(list) => Some(check(list, "allow")?),
        None => None,
    };
    Ok(HeaderPolicy { allow, deny: check(&h.deny, "deny")? })
}

fn compile_routing(r: &RawRouting) -> Result<Routing, ConfigError> {
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
        (Some(_), Handoff::FilterState) => {
            return Err(err("routing.handoff_key", "only used with handoff: header"));
        }
        (Some(k), Handoff::Header) => {
            Some(parse_handoff_key(k).ok_or_else(|| err("routing.handoff_key", "must be 32 hex digits"))?)
        }
    };
    Ok((handoff, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_quantization_parses_from_its_own_name_and_the_error_lists_them_all() {
        for (name, q) in QUANTIZATIONS {
            assert_eq!((Quantization::parse(name), q.name()), (Some(q), name));
        }
        assert_eq!(Quantization::parse("fp9"), None);
        assert_eq!(
            Quantization::unknown("fp9"),
            "unknown quantization \"fp9\" (int4, int8, fp4, fp6, fp8, fp16, bf16, fp32, unknown)"
        );
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    pub(crate) fn sample() -> &'static str {
        r#"{
          "providers": {
            "deepinfra": {"cluster": "c_deepinfra", "authority": "api.deepinfra.com",
                          "credential": {"value": "di-key"},
                          "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
            "together": {"cluster": "c_together", "authority": "api.together.xyz",
                         "credential": {"header": "x-api-key", "prefix": "", "env": "TOGETHER_KEY"}}
          },
          "models": {
            "meta-llama/llama-4-maverick": {
              "distillable": true,
              "endpoints": [
                {"provider": "deepinfra/turbo", "upstream_model": "llama-4-turbo", "pricing": {"prompt": 1, "completion": 2},
                 "quantization": "fp8", "context_length": 8192, "supported_parameters": ["tools"]},
                {"provider": "together", "pricing": {"prompt": 2, "completion": 2}}
              ]
            }
          }
        }"#
    }

    #[test]
    fn compiles_sample_with_env_credential_and_variant() {
        let env = |k: &str| (k == "TOGETHER_KEY").then(|| "tk".to_string());
        let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
        let m = c.model("meta-llama/llama-4-maverick").unwrap();
        assert_eq!(m.endpoints.len(), 2);
        let e0 = c.endpoint(m.endpoints[0]).unwrap();
        assert_eq!(e0.slug, "deepinfra/turbo");
        assert_eq!(e0.base_slug(), "deepinfra");
        assert_eq!(c.provider_of(e0).unwrap().cluster, "c_deepinfra");
        assert_eq!(e0.quantization, Quantization::Fp8);
        let e1 = c.endpoint(m.endpoints[1]).unwrap();
        assert_eq!(e1.upstream_model, "meta-llama/llama-4-maverick");
        assert_eq!(e1.quantization, Quantization::Unknown);
        let p1 = c.provider_of(e1).unwrap();
        assert_eq!(p1.credential.as_ref().unwrap().value, "tk");
        assert_eq!(p1.credential.as_ref().unwrap().header, "x-api-key");
        assert!(p1.retains_data && p1.trains_on_data && !p1.zdr, "undeclared data policy is assumed unsafe");
        assert_eq!(c.credential_headers, vec!["authorization", "x-api-key", "x-goog-api-key"]);
        assert_eq!(c.routing.default_policy, DefaultPolicy::RoutingCost);
        assert_eq!(c.routing.outage_window_s, 30);
        assert!(c.is_provider_base("deepinfra"));
        assert!(!c.is_provider_base("deepinfra/turbo"));
    }

    #[test]
    fn slug_matching_base_and_variant() {
        let env = |_: &str| Some("k".to_string());
        let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
        let e0 = &c.endpoints[0];
        assert!(e0.matches_slug("deepinfra"));
        assert!(e0.matches_slug("deepinfra/turbo"));
        assert!(!e0.matches_slug("deepinfra/fast"));
        assert!(!e0.matches_slug("deep"));
    }

    fn expect_err(json: &str) -> ConfigError {
        let env = |_: &str| Some("k".to_string());
        match Catalog::from_json(json.as_bytes(), &env) {
            Ok(_) => panic!("config should be rejected: {json}"),
            Err(e) => e,
        }
    }

    #[test]
    fn errors_name_the_field() {
        let e = expect_err(&sample().replace("\"fp8\"", "\"fp9\""));
        assert_eq!(e.field, "models[\"meta-llama/llama-4-maverick\"].endpoints[0].quantization");
        let e = expect_err(&sample().replace("\"provider\": \"together\"", "\"provider\": \"nobody\""));
        assert_eq!(e.field, "models[\"meta-llama/llama-4-maverick\"].endpoints[1].provider");
        assert!(e.reason.contains("unknown provider"));
        let e = expect_err(&sample().replace("\"prompt\": 2", "\"prompt\": -2"));
        assert_eq!(e.field, "models[\"meta-llama/llama-4-maverick\"].endpoints[1].pricing.prompt");
        let e = expect_err(&sample().replace("\"cluster\": \"c_together\"", "\"cluster\": \"\""));
        assert_eq!(e.field, "providers[\"together\"].cluster");
        let e = expect_err(&sample().replace("\"header\": \"x-api-key\"", "\"header\": \"x api\""));
        assert_eq!(e.field, "providers[\"together\"].credential.header");
        let e = expect_err(&sample().replace("\"value\": \"di-key\"", "\"value\": \"a\", \"env\": \"B\""));
        assert_eq!(e.field, "providers[\"deepinfra\"].credential");
        let e = expect_err(&sample().replace("\"distillable\": true,", "\"distillable\": true, \"colour\": 1,"));
        assert!(e.reason.contains("unknown field `colour`"), "{e}");
        let e = expect_err(&sample().replace("\"deepinfra/turbo\"", "\"together\""));
        assert!(e.reason.contains("duplicate endpoint"), "{e}");
        let e = expect_err(&format!(
            "{}, \"routing\": {{\"default_policy\": \"magic\"}}}}",
            sample().trim_end().trim_end_matches('}')
        ));
        assert_eq!(e.field, "routing.default_policy");
        let e = expect_err(r#"{"providers": {}, "models": {}}"#);
        assert_eq!(e.field, "providers");
    }

    #[test]
    fn missing_env_var_is_rejected() {
        let e = Catalog::from_json(sample().as_bytes(), &no_env).unwrap_err();
        assert_eq!(e.field, "providers[\"together\"].credential.env");
        assert!(e.reason.contains("TOGETHER_KEY"));
    }

    // Regression: `Credential` derived Debug, so `{:?}` of a provider or the catalog printed keys.
    #[test]
    fn debug_output_never_shows_a_secret() {
        let env = |k: &str| (k == "TOGETHER_KEY").then(|| "tk-env-secret".to_string());
        let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
        let shown = format!("{c:?}");
        assert!(shown.contains("x-api-key"), "the header name is still shown");
        for secret in ["di-key", "tk-env-secret"] {
            assert!(!shown.contains(secret), "{secret} leaked into Debug output");
        }
    }

    // Regression: a CR/LF in `credential.prefix` reached every upstream request (header injection).
    #[test]
    fn control_characters_in_credentials_are_rejected() {
        for prefix in ["Bearer\\r\\nx-evil: 1 ", "a\\nb", "\\u0000", "x\\u007f"] {
            let e = expect_err(&sample().replace("\"prefix\": \"\"", &format!("\"prefix\": \"{prefix}\"")));
            assert_eq!(e.field, "providers[\"together\"].credential.prefix", "{prefix}");
        }
        let e = expect_err(&sample().replace("\"value\": \"di-key\"", "\"value\": \"di\\u0007key\""));
        assert_eq!(e.field, "providers[\"deepinfra\"].credential");
        // A tab is legal in a header value.
        let ok = sample().replace("\"prefix\": \"\"", "\"prefix\": \"Key\\t\"");
        assert!(Catalog::from_json(ok.as_bytes(), &|_| Some("k".into())).is_ok());
    }

    // Regression: `outage_window_s` had no upper bound and is multiplied into milliseconds;
    // `max_retry_after_s` is bounded the same way.
    #[test]
    fn durations_are_bounded() {
        let with_routing = |r: &str| format!("{}, \"routing\": {r}}}", sample().trim_end().trim_end_matches('}'));
        let e = expect_err(&with_routing(r#"{"outage_window_s": 18446744073709551615}"#));
        assert_eq!(e.field, "routing.outage_window_s");
        let e = expect_err(&with_routing(r#"{"outage_window_s": 3601}"#));
        assert_eq!(e.field, "routing.outage_window_s");
        let e = expect_err(&with_routing(r#"{"max_retry_after_s": 86401}"#));
        assert_eq!(e.field, "routing.max_retry_after_s");
        let env = |_: &str| Some("k".to_string());
        let c =
            Catalog::from_json(with_routing(r#"{"outage_window_s": 3600, "max_retry_after_s": 0}"#).as_bytes(), &env)
                .unwrap();
        assert_eq!((c.routing.outage_window_s, c.routing.max_retry_after_s), (3600, 0));
        let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
        assert_eq!(c.routing.max_retry_after_s, 300);
    }

    #[test]
    fn a_header_handoff_needs_its_key_and_a_filter_state_one_takes_none() {
        use crate::protocol::slots::Handoff;
        let with_routing = |r: &str| format!("{}, \"routing\": {r}}}", sample().trim_end().trim_end_matches('}'));
        let env = |_: &str| Some("k".to_string());
        let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
        assert_eq!((c.routing.handoff, c.routing.handoff_key), (Handoff::FilterState, None));
        let key = r#""handoff_key": "000102030405060708090a0b0c0d0e0f""#;
        let c =
            Catalog::from_json(with_routing(&format!(r#"{{"handoff": "header", {key}}}"#)).as_bytes(), &env).unwrap();
        assert_eq!(c.routing.handoff, Handoff::Header);
        assert_eq!(c.routing.handoff_key, Some(std::array::from_fn(|i| i as u8)));
        for (routing, field) in [
            (r#"{"handoff": "header"}"#.to_string(), "routing.handoff_key"),
            (format!(r#"{{"handoff": "filter_state", {key}}}"#), "routing.handoff_key"),
            (format!(r#"{{{key}}}"#), "routing.handoff_key"),
            (r#"{"handoff": "header", "handoff_key": "0001"}"#.to_string(), "routing.handoff_key"),
            (r#"{"handoff": "metadata"}"#.to_string(), "routing.handoff"),
        ] {
            assert_eq!(expect_err(&with_routing(&routing)).field, field, "{routing}");
        }
    }

    #[test]
    fn providers_declare_their_apis_and_endpoints_may_narrow_them() {
        let c = Catalog::from_json(
            br#"{"providers": {
                "p": {"cluster": "c_p", "authority": "p", "path_prefix": "/o/v1"},
                "q": {"cluster": "c_q", "authority": "q", "credential": {"value": "s"},
                      "apis": {"anthropic": {}, "google": {}, "openai": {"path_prefix": "/compat/"}}}},
              "models": {"m": {"endpoints": [
                {"provider": "p", "pricing": {"prompt": 1, "completion": 1}},
                {"provider": "q", "pricing": {"prompt": 1, "completion": 1}},
                {"provider": "q/cheap", "apis": ["google"], "pricing": {"prompt": 1, "completion": 1}}]}}}"#,
            &no_env,
        )
        .unwrap();
        let p = &c.providers[0];
        assert_eq!((p.apis, p.prefix(Api::OpenAi), p.prefix(Api::Anthropic)), (ApiSet::OPENAI, "/o/v1", ""));
        let q = &c.providers[1];
        assert!(Api::ALL.iter().all(|a| q.apis.has(*a)));
        assert_eq!((q.prefix(Api::OpenAi), q.prefix(Api::Anthropic), q.prefix(Api::Google)), ("/compat", "/v1", ""));
        assert_eq!(q.credential_for(Api::OpenAi), Some(("authorization", "Bearer s")));
        assert_eq!(q.credential_for(Api::Anthropic), Some(("x-api-key", "s")));
        assert_eq!(q.credential_for(Api::Google), Some(("x-goog-api-key", "s")));
        let apis: Vec<ApiSet> = c.endpoints.iter().map(|e| e.apis).collect();
        assert_eq!(apis[0], ApiSet::OPENAI);
        assert_eq!(apis[1], q.apis);
        assert_eq!(apis[2].iter().collect::<Vec<_>>(), vec![Api::Google]);
    }

    #[test]
    fn a_first_attempt_cluster_serves_one_api_with_one_key() {
        let with = |providers: &str| {
            format!(
                r#"{{"providers": {{{providers}}},
                    "models": {{"m": {{"endpoints": [{{"provider": "p", "pricing": {{"prompt": 1, "completion": 1}}}}]}}}}}}"#
            )
        };
        let one = r#""p": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {"value": "k"}}"#;
        assert!(Catalog::from_json(with(one).as_bytes(), &no_env).is_ok());
        // Two providers on one first-attempt cluster: fine with the same key, refused otherwise.
        let same = format!(
            r#"{one}, "p/fast": {{"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {{"value": "k"}}}}"#
        );
        assert!(Catalog::from_json(with(&same).as_bytes(), &no_env).is_ok());
        let field = r#"providers["q"].first_attempt_cluster"#;
        for other in [
            r#""q": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {"value": "k2"}}"#,
            r#""q": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a"}"#,
            r#""q": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {"value": "k"},
                     "apis": {"anthropic": {}}}"#,
        ] {
            let e = expect_err(&with(&format!("{one}, {other}")));
            assert_eq!(e.field, field, "{other}");
            assert!(e.reason.contains("provider p's first-attempt cluster"), "{}", e.reason);
        }
        // One key header per cluster: a provider serving two APIs cannot have one.
        let two = r#""p": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {"value": "k"},
                        "apis": {"openai": {}, "anthropic": {}}}"#;
        let e = expect_err(&with(two));
        assert_eq!(e.field, r#"providers["p"].first_attempt_cluster"#);
        assert!(e.reason.contains("exactly one API"), "{}", e.reason);
    }

    #[test]
    fn api_errors_name_the_field() {
        let with = |provider: &str, endpoint: &str| {
            format!(
                r#"{{"providers": {{"p": {{"cluster": "c", "authority": "a"{provider}}}}},
                    "models": {{"m": {{"endpoints": [{{"provider": "p"{endpoint}, "pricing": {{"prompt": 1, "completion": 1}}}}]}}}}}}"#
            )
        };
        for (json, field) in [
            (with(r#", "apis": {}"#, ""), r#"providers["p"].apis"#),
            (with(r#", "apis": {"cohere": {}}"#, ""), r#"providers["p"].apis.cohere"#),
            (
                with(r#", "apis": {"google": {"path_prefix": "v1beta"}}"#, ""),
                r#"providers["p"].apis.google.path_prefix"#,
            ),
            (with(r#", "apis": {"google": {"prefix": "/x"}}"#, ""), "<root>"),
            (with("", r#", "apis": ["anthropic"]"#), r#"models["m"].endpoints[0].apis[0]"#),
            (with("", r#", "apis": ["grpc"]"#), r#"models["m"].endpoints[0].apis[0]"#),
            (with("", r#", "apis": []"#), r#"models["m"].endpoints[0].apis"#),
        ] {
            assert_eq!(expect_err(&json).field, field, "{json}");
        }
    }
}
