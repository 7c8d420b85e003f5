//! `models`: each model's endpoints, their prices, quantization, context and APIs.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::providers::{valid_slug, Provider};
use super::{err, ConfigError};
use crate::api::{Api, ApiSet};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
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
    /// Where the endpoint runs (the cloud's region name: `eastus`, `swedencentral`, `us-east-1`),
    /// for operators and policies (`allowed_regions`); absent = not said.
    #[serde(default)]
    region: Option<String>,
}

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
pub(super) const QUANTIZATIONS: [(&str, Quantization); 9] = [
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
    /// Its region (`region`), lower-case; None when not said.
    pub region: Option<String>,
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
    let region = match &e.region {
        None => None,
        Some(r) if valid_region(r) => Some(r.to_ascii_lowercase()),
        Some(_) => return Err(err(format!("{ef}.region"), "a region name: letters, digits and -, at most 64")),
    };
    // A kind whose options name the region (Vertex's location) decides it.
    let region = match (region, providers.get(slot).and_then(|p: &Provider| p.kind.region())) {
        (Some(r), Some(k)) if r != k => {
            return Err(err(
                format!("{ef}.region"),
                format!("provider \"{}\" serves from {k} (its kind_options): {r} disagrees", e.provider),
            ));
        }
        (None, Some(k)) => Some(k.to_string()),
        (r, _) => r,
    };
    let offered = providers.get(slot).map_or(ApiSet::OPENAI, |p: &Provider| p.apis);
    let apis = match &e.apis {
        None => offered,
        Some(list) => {
            let mut set = ApiSet::default();
            for (k, name) in list.iter().enumerate() {
                let af = format!("{ef}.apis[{k}]");
                let api = Api::parse(name).ok_or_else(|| {
                    err(&af, format!("unknown API \"{name}\" (openai, anthropic, google, openai_responses)"))
                })?;
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
            if set.has(Api::Responses) && !set.has(Api::OpenAi) {
                return Err(err(format!("{ef}.apis"), "openai_responses requires openai too"));
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
        region,
    })
}

/// A cloud region's name (`eastus`, `swedencentral`, `us-east-1`, `europe-west4`).
pub fn valid_region(r: &str) -> bool {
    !r.is_empty() && r.len() <= 64 && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The compiled `models` section: the models, every model's endpoints, and model id -> index.
pub(super) struct CompiledModels {
    pub(super) models: Vec<Model>,
    pub(super) endpoints: Vec<Endpoint>,
    pub(super) index: HashMap<String, usize>,
}

/// Every model of `models` and its endpoints (`provider_slot`: a provider slug's index in
/// `providers`).
pub(super) fn compile_models(
    raw: &BTreeMap<String, RawModel>,
    providers: &[Provider],
    provider_slot: &HashMap<String, usize>,
) -> Result<CompiledModels, ConfigError> {
    let mut models = Vec::with_capacity(raw.len());
    let mut endpoints = Vec::new();
    let mut model_index = HashMap::new();
    for (id, m) in raw {
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
            endpoints.push(compile_endpoint(&ef, e, id, model_idx, slot, providers)?);
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
    Ok(CompiledModels { models, endpoints, index: model_index })
}
