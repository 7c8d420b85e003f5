//! Operator policies (compliance routes, SPEC section 7): named ceilings on what a request may
//! reach, selected by something the caller cannot forge (the Envoy route, the mTLS peer's URI
//! SAN, a claim Envoy's `jwt_authn` verified, a header only where the operator trusts it).
//! A request can narrow its policy, never widen it: [`Policy::narrow`] intersects every field,
//! and the router applies the policy's own filters before the request's, naming the policy
//! (`policy:<name>.<field>`) when it is what emptied the candidate set.
//!
//! Pure: the host adapter supplies the caller's facts through [`CallerFacts`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::{base_of, Catalog, ConfigError, Quantization};
use crate::routing::request::{MaxPrice, ProviderPrefs};
use crate::routing::wildcard;

fn err(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), reason: reason.into() }
}

// ---------------------------------------------------------------------------------------------
// Raw (as written by the operator): the `policies` and `policy_selection` members of the plugin
// configuration. The catalog parser ignores them; `Policies::from_json` reads only them.
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct RawPolicyConfig {
    #[serde(default)]
    policies: BTreeMap<String, RawPolicy>,
    #[serde(default)]
    policy_selection: Option<RawSelection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    only: Option<Vec<String>>,
    #[serde(default)]
    ignore: Vec<String>,
    #[serde(default)]
    allowed_models: Option<Vec<String>>,
    #[serde(default = "yes")]
    allow_fallbacks: bool,
    #[serde(default)]
    data_collection: Option<String>,
    #[serde(default)]
    zdr: bool,
    #[serde(default)]
    quantizations: Option<Vec<String>>,
    #[serde(default)]
    max_price: RawMaxPrice,
    #[serde(default)]
    max_attempts: Option<usize>,
    #[serde(default)]
    require_tags: Vec<String>,
    /// Only endpoints whose `region` is one of these (lower-case); an endpoint without a region
    /// is excluded. None: every region.
    #[serde(default)]
    allowed_regions: Option<Vec<String>>,
    #[serde(default)]
    request_provider: Option<String>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMaxPrice {
    #[serde(default)]
    prompt: Option<f64>,
    #[serde(default)]
    completion: Option<f64>,
    #[serde(default)]
    request: Option<f64>,
    #[serde(default)]
    image: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSelection {
    #[serde(default)]
    rules: Vec<RawRule>,
    #[serde(default)]
    trusted_headers: Vec<String>,
    #[serde(default)]
    default: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    policy: String,
    #[serde(default)]
    route: Option<String>,
    #[serde(default)]
    peer_uri_san: Option<String>,
    #[serde(default)]
    jwt_claim: Option<RawClaim>,
    #[serde(default)]
    header: Option<RawHeader>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClaim {
    #[serde(default = "default_jwt_namespace")]
    namespace: String,
    #[serde(default = "default_payload_key")]
    payload_key: String,
    claim: ClaimPath,
    value: String,
}

/// A claim name, or a path into nested claims (`["realm_access", "tenant"]`).
#[derive(Deserialize)]
#[serde(untagged)]
enum ClaimPath {
    One(String),
    Path(Vec<String>),
}

fn default_jwt_namespace() -> String {
    "envoy.filters.http.jwt_authn".to_string()
}
fn default_payload_key() -> String {
    "jwt_payload".to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeader {
    name: String,
    value: String,
}

// ---------------------------------------------------------------------------------------------
// Compiled policies
// ---------------------------------------------------------------------------------------------

/// Whether the request's own `provider` object counts under a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestProvider {
    /// Every field counts, intersected with the policy (ordering and soft preferences too).
    Honor,
    /// Only fields that narrow the allowed set count (`only`, `ignore`, `quantizations`,
    /// `data_collection`, `zdr`, `max_price`, `enforce_distillable_text`, `require_parameters`,
    /// `allow_fallbacks: false`); `order`, `sort` and the soft preferences are dropped.
    NarrowOnly,
    /// The `provider` object and provider-pinned model ids are ignored.
    Ignore,
}

impl RequestProvider {
    pub fn name(self) -> &'static str {
        match self {
            RequestProvider::Honor => "honor",
            RequestProvider::NarrowOnly => "narrow_only",
            RequestProvider::Ignore => "ignore",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    /// The policy's ceilings in the request's own shape: `only`, `ignore`, `quantizations`,
    /// `data_collection_deny`, `zdr`, `max_price`, `allow_fallbacks` (the other fields unset).
    pub limits: ProviderPrefs,
    /// Model id patterns (`*` matches any run of characters); `None` = every model.
    pub allowed_models: Option<Vec<String>>,
    /// Every tag here must be among the serving provider's `tags`.
    pub require_tags: Vec<String>,
    /// The endpoint's `region` must be one of these (lower-case); None = any region.
    pub allowed_regions: Option<Vec<String>>,
    /// Attempts per request under this policy (at most `routing.max_attempts`).
    pub max_attempts: Option<usize>,
    pub request_provider: RequestProvider,
}

/// What selects a policy. Every pattern may use `*` (any run of characters, `/` included).
#[derive(Debug, Clone, PartialEq)]
pub enum Matcher {
    /// The matched Envoy route's metadata `filter_metadata.switchyard.policy`.
    Route(String),
    /// The first URI SAN of the downstream mTLS peer certificate (a SPIFFE id under Istio).
    PeerUriSan(String),
    /// A claim `jwt_authn` verified and wrote to dynamic metadata
    /// (`namespace` / `payload_key` / `path...`).
    JwtClaim { namespace: String, payload_key: String, path: Vec<String>, value: String },
    /// A request header the configuration lists in `trusted_headers`.
    Header { name: String, value: String },
}

impl Matcher {
    /// The selector's kind, as reported in the decision (`selected_by`).
    pub fn kind(&self) -> &'static str {
        match self {
            Matcher::Route(_) => "route",
            Matcher::PeerUriSan(_) => "peer_uri_san",
            Matcher::JwtClaim { .. } => "jwt_claim",
            Matcher::Header { .. } => "header",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub matcher: Matcher,
    /// Index into `Policies::list`.
    pub policy: usize,
}

/// The caller's unforgeable facts, read lazily (only what the rules ask for, in rule order).
pub trait CallerFacts {
    /// The matched route's `filter_metadata.switchyard.policy`.
    fn route_policy(&mut self) -> Option<String>;
    /// The first URI SAN of the downstream peer certificate (mTLS only).
    fn peer_uri_san(&mut self) -> Option<String>;
    /// A string value in dynamic metadata: `filter_metadata[namespace][path[0]][path[1]]...`.
    fn dynamic_metadata(&mut self, namespace: &str, path: &[String]) -> Option<String>;
    /// A request header (lower-case name).
    fn header(&mut self, name: &str) -> Option<String>;
}

/// The policy a request runs under and what selected it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selected<'a> {
    pub policy: &'a Policy,
    /// `route`, `peer_uri_san`, `jwt_claim`, `header` or `default`.
    pub by: &'static str,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policies {
    pub list: Vec<Policy>,
    pub rules: Vec<Rule>,
    /// Applies where no rule matches; `None` = no policy (the request alone decides).
    pub default: Option<usize>,
    pub trusted_headers: Vec<String>,
}

impl Policies {
    /// Reads `policies` and `policy_selection` from the plugin configuration (the rest is the
    /// catalog's), checked against the compiled catalog.
    pub fn from_json(bytes: &[u8], catalog: &Catalog) -> Result<Policies, ConfigError> {
        let raw: RawPolicyConfig = crate::json::from_slice(bytes).map_err(|e| err("<root>", e.to_string()))?;
        compile(raw, catalog)
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&Policy> {
        self.list.iter().find(|p| p.name == name)
    }

    /// First matching rule in configured order, else the default policy.
    pub fn select(&self, facts: &mut dyn CallerFacts) -> Option<Selected<'_>> {
        for rule in &self.rules {
            let hit = match &rule.matcher {
                Matcher::Route(p) => facts.route_policy().is_some_and(|v| glob(p, &v)),
                Matcher::PeerUriSan(p) => facts.peer_uri_san().is_some_and(|v| glob(p, &v)),
                Matcher::JwtClaim { namespace, payload_key, path, value } => {
                    let mut full = Vec::with_capacity(path.len() + 1);
                    full.push(payload_key.clone());
                    full.extend(path.iter().cloned());
                    facts.dynamic_metadata(namespace, &full).is_some_and(|v| glob(value, &v))
                }
                Matcher::Header { name, value } => facts.header(name).is_some_and(|v| glob(value, &v)),
            };
            if hit {
                if let Some(policy) = self.list.get(rule.policy) {
                    return Some(Selected { policy, by: rule.matcher.kind() });
                }
            }
        }
        self.default.and_then(|i| self.list.get(i)).map(|policy| Selected { policy, by: "default" })
    }
}

/// Pattern matching for selectors and `allowed_models`: `*` matches any run of characters
/// (`/` included), the rest is literal; linear in the (caller-supplied) value for a fixed pattern.
pub fn glob(pattern: &str, value: &str) -> bool {
    wildcard::matches(pattern, value)
}

/// A slug of the `only` intersection: an endpoint passes the result iff it passes both lists
/// (a base slug covers its variants, so `deepinfra` and `deepinfra/turbo` meet in the variant).
pub fn intersect_slugs(a: &[String], b: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for x in a {
        for y in b {
            let meet = if x == y {
                Some(x)
            } else if !x.contains('/') && base_of(y) == x {
                Some(y)
            } else if !y.contains('/') && base_of(x) == y {
                Some(x)
            } else {
                None
            };
            if let Some(s) = meet {
                if !out.contains(s) {
                    out.push(s.clone());
                }
            }
        }
    }
    out
}

pub fn min_price(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl Policy {
    /// Whether `model` (a catalog id) is within `allowed_models`. `auto` and `models`
    /// fallbacks are held to the same patterns.
    pub fn allows_model(&self, model: &str) -> bool {
        self.allowed_models.as_ref().is_none_or(|pats| wildcard::any_matches(pats, model))
    }

    /// Whether the endpoint's `region` is within `allowed_regions` (an endpoint without one is
    /// not, once the policy names regions).
    pub fn allows_region(&self, e: &crate::config::Endpoint) -> bool {
        self.allowed_regions.as_ref().is_none_or(|list| e.region.as_ref().is_some_and(|r| list.contains(r)))
    }

    /// The `provider` object that routing uses: the request's (as far as `request_provider`
    /// lets it count) intersected with the policy, field by field. Never wider than the policy:
    /// `only` is the intersection, `ignore` the union, `quantizations` the intersection,
    /// `data_collection: deny` / `zdr` stay on if either sets them, each `max_price` field is
    /// the lower one, `allow_fallbacks` is false if either says so.
    pub fn narrow(&self, request: &ProviderPrefs) -> ProviderPrefs {
        let mut p = match self.request_provider {
            RequestProvider::Honor => request.clone(),
            RequestProvider::NarrowOnly => ProviderPrefs {
                order: Vec::new(),
                sort: None,
                preferred_min_throughput: None,
                preferred_max_latency: None,
                ..request.clone()
            },
            RequestProvider::Ignore => ProviderPrefs::default(),
        };
        let l = &self.limits;
        // An `order` the caller lets fall back is a preference: cut it to what the policy
        // permits (with fallbacks forced off, the rest of it would become a restriction the
        // caller never asked for). With the caller's own `allow_fallbacks: false` it is a
        // restriction and stays whole: emptied by the policy, it is a 404 naming the policy.
        if p.allow_fallbacks {
            p.order.retain(|s| self.permits_slug(s));
        }
        p.only = match (&l.only, &p.only) {
            (Some(ceiling), Some(asked)) => Some(intersect_slugs(ceiling, asked)),
            (Some(ceiling), None) => Some(ceiling.clone()),
            (None, asked) => asked.clone(),
        };
        for s in &l.ignore {
            if !p.ignore.contains(s) {
                p.ignore.push(s.clone());
            }
        }
        p.quantizations = match (&l.quantizations, &p.quantizations) {
            (Some(allowed), Some(asked)) => Some(asked.iter().copied().filter(|q| allowed.contains(q)).collect()),
            (Some(allowed), None) => Some(allowed.clone()),
            (None, asked) => asked.clone(),
        };
        p.data_collection_deny |= l.data_collection_deny;
        p.zdr |= l.zdr;
        p.max_price = MaxPrice {
            prompt: min_price(l.max_price.prompt, p.max_price.prompt),
            completion: min_price(l.max_price.completion, p.max_price.completion),
            request: min_price(l.max_price.request, p.max_price.request),
            image: min_price(l.max_price.image, p.max_price.image),
        };
        p.allow_fallbacks &= l.allow_fallbacks;
        p
    }

    /// Whether some endpoint of slug `s` can pass the policy's `only` and `ignore`.
    pub fn permits_slug(&self, s: &str) -> bool {
        let l = &self.limits;
        let in_ceiling = l.only.as_ref().is_none_or(|only| !intersect_slugs(&[s.to_string()], only).is_empty());
        let ignored = l.ignore.iter().any(|i| i == s || (!i.contains('/') && base_of(s) == i));
        in_ceiling && !ignored
    }

    /// Whether pinned model ids (`provider/vendor/model`) count under this policy.
    pub fn honors_pins(&self) -> bool {
        self.request_provider != RequestProvider::Ignore
    }

    /// The constraint name reported when this policy's `field` emptied the candidate set.
    pub fn constraint(&self, field: &str) -> String {
        format!("policy:{}.{field}", self.name)
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn parse_quantizations(names: &[String], field: &str) -> Result<Vec<Quantization>, ConfigError> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| Quantization::parse(n).ok_or_else(|| err(format!("{field}[{i}]"), Quantization::unknown(n))))
        .collect()
}

/// A slug in a policy must name a configured provider: a typo in `ignore` would otherwise
/// silently let traffic through.
fn check_slugs(catalog: &Catalog, slugs: &[String], field: &str) -> Result<(), ConfigError> {
    for (i, s) in slugs.iter().enumerate() {
        let known = if s.contains('/') {
            catalog.providers.iter().any(|p| &p.slug == s) || catalog.endpoints.iter().any(|e| &e.slug == s)
        } else {
            catalog.is_provider_base(s)
        };
        if !known {
            return Err(err(format!("{field}[{i}]"), format!("unknown provider \"{s}\" (not in providers)")));
        }
    }
    Ok(())
}

fn compile_policy(name: &str, r: &RawPolicy, catalog: &Catalog) -> Result<Policy, ConfigError> {
    let field = format!("policies[\"{name}\"]");
    if !valid_name(name) {
        return Err(err(&field, "policy name must be letters, digits, - _ . (it appears in headers and metrics)"));
    }
    if let Some(only) = &r.only {
        check_slugs(catalog, only, &format!("{field}.only"))?;
    }
    check_slugs(catalog, &r.ignore, &format!("{field}.ignore"))?;
    if let Some(models) = &r.allowed_models {
        for (i, m) in models.iter().enumerate() {
            if m.is_empty() || m.contains(char::is_whitespace) {
                return Err(err(format!("{field}.allowed_models[{i}]"), "must be a non-empty model id pattern"));
            }
        }
    }
    let data_collection_deny = match r.data_collection.as_deref() {
        None | Some("allow") => false,
        Some("deny") => true,
        Some(other) => {
            return Err(err(
                format!("{field}.data_collection"),
                format!("must be \"deny\" or \"allow\", got \"{other}\""),
            ))
        }
    };
    let quantizations = match &r.quantizations {
        None => None,
        Some(q) => Some(parse_quantizations(q, &format!("{field}.quantizations"))?),
    };
    let mp = &r.max_price;
    for (n, v) in [("prompt", mp.prompt), ("completion", mp.completion), ("request", mp.request), ("image", mp.image)] {
        if let Some(v) = v {
            if !v.is_finite() || v < 0.0 {
                return Err(err(format!("{field}.max_price.{n}"), "must be a finite number >= 0"));
            }
        }
    }
    if let Some(n) = r.max_attempts {
        if !(1..=16).contains(&n) {
            return Err(err(format!("{field}.max_attempts"), "must be between 1 and 16"));
        }
    }
    for (i, t) in r.require_tags.iter().enumerate() {
        if t.is_empty() {
            return Err(err(format!("{field}.require_tags[{i}]"), "must be a non-empty tag"));
        }
    }
    let mut allowed_regions = None;
    if let Some(list) = &r.allowed_regions {
        let mut out = Vec::with_capacity(list.len());
        for (i, region) in list.iter().enumerate() {
            if !crate::config::valid_region(region) {
                return Err(err(format!("{field}.allowed_regions[{i}]"), "a region name: letters, digits and -"));
            }
            out.push(region.to_ascii_lowercase());
        }
        allowed_regions = Some(out);
    }
    let request_provider = match r.request_provider.as_deref() {
        None | Some("honor") => RequestProvider::Honor,
        Some("narrow_only") => RequestProvider::NarrowOnly,
        Some("ignore") => RequestProvider::Ignore,
        Some(other) => {
            return Err(err(
                format!("{field}.request_provider"),
                format!("must be \"honor\", \"narrow_only\" or \"ignore\", got \"{other}\""),
            ))
        }
    };
    let limits = ProviderPrefs {
        only: r.only.clone(),
        ignore: r.ignore.clone(),
        quantizations,
        data_collection_deny,
        zdr: r.zdr,
        max_price: MaxPrice { prompt: mp.prompt, completion: mp.completion, request: mp.request, image: mp.image },
        allow_fallbacks: r.allow_fallbacks,
        ..ProviderPrefs::default()
    };
    Ok(Policy {
        name: name.to_string(),
        limits,
        allowed_models: r.allowed_models.clone(),
        require_tags: r.require_tags.clone(),
        allowed_regions,
        max_attempts: r.max_attempts.map(|n| n.min(catalog.routing.max_attempts)),
        request_provider,
    })
}

fn compile(raw: RawPolicyConfig, catalog: &Catalog) -> Result<Policies, ConfigError> {
    let mut list = Vec::with_capacity(raw.policies.len());
    for (name, r) in &raw.policies {
        list.push(compile_policy(name, r, catalog)?);
    }
    let Some(sel) = raw.policy_selection else {
        return Ok(Policies { list, ..Policies::default() });
    };
    let index = |name: &str, field: &str| -> Result<usize, ConfigError> {
        list.iter()
            .position(|p| p.name == name)
            .ok_or_else(|| err(field, format!("unknown policy \"{name}\" (not in policies)")))
    };
    let mut trusted_headers = Vec::with_capacity(sel.trusted_headers.len());
    for (i, h) in sel.trusted_headers.iter().enumerate() {
        let h = h.to_ascii_lowercase();
        if h.is_empty() || h.starts_with(':') || !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(err(format!("policy_selection.trusted_headers[{i}]"), "must be a plain header name"));
        }
        trusted_headers.push(h);
    }
    let mut rules = Vec::with_capacity(sel.rules.len());
    for (i, r) in sel.rules.iter().enumerate() {
        let field = format!("policy_selection.rules[{i}]");
        let policy = index(&r.policy, &format!("{field}.policy"))?;
        let mut matchers = Vec::new();
        if let Some(v) = &r.route {
            matchers.push(Matcher::Route(v.clone()));
        }
        if let Some(v) = &r.peer_uri_san {
            matchers.push(Matcher::PeerUriSan(v.clone()));
        }
        if let Some(c) = &r.jwt_claim {
            let path = match &c.claim {
                ClaimPath::One(s) => vec![s.clone()],
                ClaimPath::Path(p) => p.clone(),
            };
            if path.is_empty()
                || path.iter().any(String::is_empty)
                || c.namespace.is_empty()
                || c.payload_key.is_empty()
            {
                return Err(err(format!("{field}.jwt_claim"), "namespace, payload_key and claim must be non-empty"));
            }
            matchers.push(Matcher::JwtClaim {
                namespace: c.namespace.clone(),
                payload_key: c.payload_key.clone(),
                path,
                value: c.value.clone(),
            });
        }
        if let Some(h) = &r.header {
            let name = h.name.to_ascii_lowercase();
            if !trusted_headers.contains(&name) {
                return Err(err(
                    format!("{field}.header.name"),
                    format!(
                        "header \"{name}\" is not in policy_selection.trusted_headers (list it only if a gateway in \
                         front removes it from every caller)"
                    ),
                ));
            }
            matchers.push(Matcher::Header { name, value: h.value.clone() });
        }
        let matcher = match (matchers.pop(), matchers.is_empty()) {
            (Some(m), true) => m,
            _ => {
                return Err(err(&field, "set exactly one of route, peer_uri_san, jwt_claim, header"));
            }
        };
        let pattern = match &matcher {
            Matcher::Route(p) | Matcher::PeerUriSan(p) => p,
            Matcher::JwtClaim { value, .. } | Matcher::Header { value, .. } => value,
        };
        if pattern.is_empty() {
            return Err(err(format!("{field}.{}", matcher.kind()), "the pattern must not be empty"));
        }
        rules.push(Rule { matcher, policy });
    }
    let default = match &sel.default {
        None => None,
        Some(name) => Some(index(name, "policy_selection.default")?),
    };
    Ok(Policies { list, rules, default, trusted_headers })
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
