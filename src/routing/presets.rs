//! Presets (OpenRouter's `@preset/<name>`): routing settings the operator names once in the
//! configuration (`presets`) and callers use by name: `model: "@preset/<name>"`,
//! `model: "<model>@preset/<name>"`, or a `preset` field. What a preset sets is merged with the
//! request before routing (the request narrows it, see `apply`); an operator policy then bounds
//! both, as it bounds any request.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::Value;

use crate::answer::errors::ApiError;
use crate::config::{Catalog, ConfigError};
use crate::routing::auto::is_auto;
use crate::routing::policy::{intersect_slugs, min_price};
use crate::routing::request::{parse_provider, ChatRequest, MaxPrice, ProviderPrefs, NON_PARAMETERS};

/// The model-id form of a preset reference: `@preset/<name>`, alone or after a model id.
pub const PREFIX: &str = "@preset/";
/// Top-level fields a preset's `parameters` may not set: they are the request itself or steer
/// routing (a preset routes through its own `model`, `models`, `provider` and `plugins`).
const NOT_PARAMETERS: [&str; 10] =
    ["model", "models", "provider", "plugins", "route", "preset", "messages", "prompt", "input", "stream"];

/// One compiled preset.
#[derive(Debug)]
pub struct Preset {
    pub name: String,
    /// The model when the request names none (`@preset/<name>` alone or a `preset` field).
    pub model: Option<String>,
    /// Fallback models when the request lists none.
    pub models: Vec<String>,
    /// The provider preferences the request narrows.
    pub provider: Option<ProviderPrefs>,
    /// The `plugins` array when the request has none (the auto router's steering).
    pub plugins: Option<Box<RawValue>>,
    /// Top-level parameters added when the request does not set them (`temperature`, ...).
    pub parameters: Vec<(String, Box<RawValue>)>,
}

#[derive(Debug, Default)]
pub struct Presets {
    pub list: Vec<Preset>,
}

/// No presets (a configuration without a `presets` section).
pub static NO_PRESETS: Presets = Presets { list: Vec::new() };

fn err(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), reason: reason.into() }
}

#[derive(serde::Deserialize)]
struct RawRoot {
    #[serde(default)]
    presets: BTreeMap<String, RawPreset>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPreset {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    provider: Option<Value>,
    #[serde(default)]
    plugins: Option<Box<RawValue>>,
    #[serde(default)]
    parameters: BTreeMap<String, Box<RawValue>>,
}

impl Presets {
    /// The `presets` section of the plugin configuration, checked against `catalog`.
    pub fn from_json(bytes: &[u8], catalog: &Catalog) -> Result<Presets, ConfigError> {
        let raw: RawRoot = crate::json::from_slice(bytes).map_err(|e| err("presets", e.to_string()))?;
        let mut list = Vec::with_capacity(raw.presets.len());
        for (name, p) in raw.presets {
            let field = format!("presets[\"{name}\"]");
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return Err(err(&field, "a preset name is letters, digits, `-`, `_` or `.`"));
            }
            let known = |m: &str| is_auto(m) || catalog.model(m.split(':').next().unwrap_or(m)).is_some();
            if let Some(m) = p.model.as_deref().filter(|m| !known(m)) {
                return Err(err(format!("{field}.model"), format!("unknown model \"{m}\" (not in models)")));
            }
            if let Some((i, m)) = p.models.iter().enumerate().find(|(_, m)| !known(m)) {
                return Err(err(format!("{field}.models[{i}]"), format!("unknown model \"{m}\" (not in models)")));
            }
            let provider = match &p.provider {
                None => None,
                Some(v) => Some(parse_provider(v).map_err(|e| {
                    err(format!("{field}.{}", e.param.as_deref().unwrap_or("provider")), e.message.clone())
                })?),
            };
            if let Some(k) = p.parameters.keys().find(|k| NOT_PARAMETERS.contains(&k.as_str())) {
                return Err(err(
                    format!("{field}.parameters.{k}"),
                    "not a parameter a preset can set (model, models, provider and plugins are its own fields; the messages and `stream` are the request's)",
                ));
            }
            list.push(Preset {
                name,
                model: p.model,
                models: p.models,
                provider,
                plugins: p.plugins,
                parameters: p.parameters.into_iter().collect(),
            });
        }
        Ok(Presets { list })
    }

    pub fn get(&self, name: &str) -> Option<&Preset> {
        self.list.iter().find(|p| p.name == name)
    }

    /// Merges the preset the request names (if any) into it:
    /// - `model`: the request's own model (`<model>@preset/<name>`, or `model` beside a `preset`
    ///   field), else the preset's;
    /// - `models`: the request's if it lists any, else the preset's;
    /// - `provider`: the preset's, narrowed by the request's (`narrowed_by`);
    /// - `plugins`: the request's if present, else the preset's;
    /// - `parameters`: each one the request does not set is added to the body.
    ///
    /// An unknown preset is a 400 naming it.
    pub fn apply<'a>(&'a self, req: &mut ChatRequest<'a>) -> Result<(), ApiError> {
        let written = req.model.clone().unwrap_or_default();
        let (own_model, name, param) = match written.split_once(PREFIX) {
            Some((m, name)) => ((!m.is_empty()).then(|| m.to_string()), name.to_string(), "model"),
            None => match req.preset.clone() {
                Some(name) => (req.model.clone(), name, "preset"),
                None => return Ok(()),
            },
        };
        let Some(preset) = self.get(&name) else {
            let mut e = ApiError::invalid(
                param,
                format!("preset \"{}\" is not configured on this router", crate::answer::errors::echo(&name)),
            );
            e.code = "preset_not_found";
            return Err(e);
        };
        req.model = own_model.or_else(|| preset.model.clone());
        if req.model.is_none() && req.models.is_empty() && preset.models.is_empty() {
            return Err(ApiError::invalid(
                param,
                format!("preset \"{}\" names no model and the request names none", preset.name),
            ));
        }
        if req.models.is_empty() {
            req.models = preset.models.clone();
        }
        if let Some(p) = &preset.provider {
            req.provider = if req.provider_set { narrowed_by(p, &req.provider) } else { p.clone() };
        }
        if req.fields.get("plugins").is_none() {
            if let Some(plugins) = &preset.plugins {
                req.fields.0.push(("plugins".into(), plugins));
            }
        }
        for (k, v) in &preset.parameters {
            if req.fields.get(k).is_none() {
                req.fields.0.push((k.as_str().into(), v));
                if !NON_PARAMETERS.contains(&k.as_str()) && !req.parameters.contains(k) {
                    req.parameters.push(k.clone());
                }
            }
        }
        req.preset = Some(preset.name.clone());
        Ok(())
    }
}

/// A preset's provider preferences narrowed by the request's: a restriction either sets holds
/// (`only` intersected as a policy intersects it, so `openai` and `openai/byok` meet in
/// `openai/byok`; `ignore` and `quantizations` combined; the lower `max_price`;
/// `data_collection: deny`, `zdr`, `enforce_distillable_text`, `require_parameters`,
/// `allow_fallbacks: false` from either), an ordering or soft preference the request sets
/// replaces the preset's (`order`, `sort`, `preferred_*`).
pub fn narrowed_by(preset: &ProviderPrefs, request: &ProviderPrefs) -> ProviderPrefs {
    ProviderPrefs {
        order: if request.order.is_empty() { preset.order.clone() } else { request.order.clone() },
        allow_fallbacks: preset.allow_fallbacks && request.allow_fallbacks,
        only: match (&preset.only, &request.only) {
            (Some(a), Some(b)) => Some(intersect_slugs(a, b)),
            (a, b) => a.clone().or_else(|| b.clone()),
        },
        ignore: preset
            .ignore
            .iter()
            .chain(request.ignore.iter().filter(|s| !preset.ignore.contains(s)))
            .cloned()
            .collect(),
        sort: request.sort.or(preset.sort),
        quantizations: match (&preset.quantizations, &request.quantizations) {
            (Some(a), Some(b)) => Some(a.iter().copied().filter(|q| b.contains(q)).collect()),
            (a, b) => a.clone().or_else(|| b.clone()),
        },
        data_collection_deny: preset.data_collection_deny || request.data_collection_deny,
        zdr: preset.zdr || request.zdr,
        enforce_distillable_text: preset.enforce_distillable_text || request.enforce_distillable_text,
        require_parameters: preset.require_parameters || request.require_parameters,
        max_price: MaxPrice {
            prompt: min_price(preset.max_price.prompt, request.max_price.prompt),
            completion: min_price(preset.max_price.completion, request.max_price.completion),
            request: min_price(preset.max_price.request, request.max_price.request),
            image: min_price(preset.max_price.image, request.max_price.image),
        },
        preferred_min_throughput: request.preferred_min_throughput.or(preset.preferred_min_throughput),
        preferred_max_latency: request.preferred_max_latency.or(preset.preferred_max_latency),
    }
}

#[cfg(test)]
#[path = "presets_tests.rs"]
mod tests;
