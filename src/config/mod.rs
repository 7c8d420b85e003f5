//! Plugin configuration: the operator's provider/model catalog and routing defaults.
//!
//! The JSON given to the Wasm plugin is parsed into `Raw*` structs (serde, unknown fields
//! rejected), then validated and compiled into a [`Catalog`] with indexes the request path uses.
//! Every error names the offending field so an operator can fix it from the log line alone.
//!
//! One module per section: `providers` (clusters, keys, APIs), `models` (models, endpoints,
//! prices), `routing` (the `routing` section's defaults), `auto` (the auto router),
//! `upstream_headers` (which caller headers reach a provider). Their public items are
//! re-exported here, so `crate::config::X` names every one of them.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use crate::forwarding::HeaderPolicy;

mod auto;
mod models;
mod providers;
mod routing;
#[cfg(test)]
mod tests;
mod upstream_headers;

pub use auto::{AutoCandidate, AutoConfig, TaskType, TierLimit};
pub use models::{base_of, valid_region, CostTier, Endpoint, Modality, Model, Pricing, Quantization};
pub use providers::{Credential, Provider, ANTHROPIC_KEY_HEADER, GOOGLE_KEY_HEADER};
pub use routing::{DefaultPolicy, Routing, StreamUsage};

use auto::{compile_auto, default_auto, RawAuto};
use models::{compile_models, CompiledModels, RawModel};
use providers::{check_first_attempt_clusters, compile_provider, RawProvider};
use routing::{compile_routing, RawRouting};
use upstream_headers::{compile_upstream_headers, RawUpstreamHeaders};

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

pub(crate) fn err(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), reason: reason.into() }
}

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
    /// The access-token sources of the providers' `credential.google_metadata` and
    /// `credential.azure_managed_identity`, one per
    /// shared-data record (`TokenSource::key`): what the root context's tick keeps fresh.
    pub token_sources: Vec<std::sync::Arc<crate::tokens::TokenSource>>,
}

impl Catalog {
    /// Parses and validates the plugin configuration. `env` resolves `credential.env` names
    /// (the Wasm VM's environment in production; a closure in tests).
    pub fn from_json(bytes: &[u8], env: &dyn Fn(&str) -> Option<String>) -> Result<Catalog, ConfigError> {
        let raw: RawConfig = crate::json::from_slice(bytes).map_err(|e| err("<root>", e.to_string()))?;
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
        // The configured header, and the kind's own key header too: an Azure provider on an
        // Entra token must not pass on a caller's `api-key`.
        let kind_header = provider.kind.default_credential().0;
        for h in provider.credential.iter().map(|c| c.header.as_str()).chain([kind_header]) {
            if !credential_headers.iter().any(|x| x == h) {
                credential_headers.push(h.to_string());
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
    let CompiledModels { models, endpoints, index: model_index } =
        compile_models(&raw.models, &providers, &provider_slot)?;
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
    let token_sources = token_sources(&providers, routing.passthrough_cluster.as_deref())?;

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
        token_sources,
    })
}

/// The token sources, one per record. A metadata server's cluster is never a provider's nor the
/// pass-through cluster: the token request must not reach a provider, nor a provider's attempt
/// the metadata server.
fn token_sources(
    providers: &[Provider],
    passthrough: Option<&str>,
) -> Result<Vec<std::sync::Arc<crate::tokens::TokenSource>>, ConfigError> {
    let mut sources: Vec<std::sync::Arc<crate::tokens::TokenSource>> = Vec::new();
    for p in providers {
        let Some(s) = p.token_source() else { continue };
        let field = format!("providers[\"{}\"].credential.{}.cluster", p.slug, s.field());
        let clash =
            providers.iter().find(|q| q.cluster == s.cluster || q.first_attempt_cluster.as_ref() == Some(&s.cluster));
        if let Some(q) = clash {
            return Err(err(
                field,
                format!("\"{}\" is provider {}'s cluster; name the metadata server's own cluster", s.cluster, q.slug),
            ));
        }
        if passthrough == Some(s.cluster.as_str()) {
            return Err(err(field, "is routing.passthrough_cluster; name the metadata server's own cluster"));
        }
        if !sources.iter().any(|x| x.key() == s.key()) {
            sources.push(std::sync::Arc::clone(s));
        }
    }
    Ok(sources)
}
