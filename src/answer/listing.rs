//! `GET /v1/models`, `GET /v1/models/{id}` and `GET /v1/models/{id}/endpoints`, answered from
//! the catalog: the OpenAI list shape (`client.models.list()` works) with OpenRouter's extras,
//! and OpenRouter's per-model endpoints listing with live statistics. An Anthropic client (one
//! sending `anthropic-version`) gets the model list and a model in Anthropic's shape instead
//! ([`anthropic`]): `{"data": [{"type": "model", "id", "display_name", "created_at"}], ...}`.
//!
//! Prices follow OpenRouter's API: USD per token, as decimal strings. `allowed` decides which
//! endpoints the caller may see (an operator policy narrows it; without one, all).

use serde_json::{json, Map, Value};

use crate::answer::errors::ApiError;
use crate::config::{Catalog, Endpoint, Model};
use crate::routing::health::{HealthView, Percentiles};
use crate::routing::presets::{Presets, PREFIX as PRESET_PREFIX};

/// Which listing a GET path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    Models,
    Model(String),
    Endpoints(String),
}

/// The listing a GET path names, or None when the path is not one of ours. A model id keeps its
/// slashes (`/v1/models/meta-llama/llama-4/endpoints`); a catalog id that itself ends in
/// `/endpoints` is the model, not its listing.
pub fn parse_path(catalog: &Catalog, path: &str) -> Option<Listing> {
    let bare = path.split(['?', '#']).next().unwrap_or("");
    let bare = bare.strip_suffix('/').unwrap_or(bare);
    if bare == "/v1/models" {
        return Some(Listing::Models);
    }
    let rest = crate::api::percent_decode(bare.strip_prefix("/v1/models/")?)?;
    if rest.is_empty() {
        return None;
    }
    match rest.strip_suffix("/endpoints") {
        Some(id) if catalog.model(&rest).is_none() => Some(Listing::Endpoints(id.to_string())),
        _ => Some(Listing::Model(rest)),
    }
}

/// USD per million tokens (catalog unit) as OpenRouter's USD-per-token decimal string.
fn per_token(per_million: f64) -> String {
    let v = per_million / 1e6;
    if v == 0.0 {
        return "0".to_string();
    }
    let s = format!("{v:.12}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn per_unit(usd: f64) -> String {
    let s = format!("{usd:.12}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".to_string()
    } else {
        s.to_string()
    }
}

fn pricing_json(e: &Endpoint) -> Value {
    let p = e.pricing;
    let mut o = Map::new();
    o.insert("prompt".into(), json!(per_token(p.prompt)));
    o.insert("completion".into(), json!(per_token(p.completion)));
    o.insert("request".into(), json!(per_unit(p.request)));
    o.insert("image".into(), json!(per_unit(p.image)));
    if let Some(c) = p.cached_prompt {
        o.insert("input_cache_read".into(), json!(per_token(c)));
    }
    Value::Object(o)
}

fn visible<'a>(catalog: &'a Catalog, m: &Model, allowed: &dyn Fn(&Endpoint) -> bool) -> Vec<&'a Endpoint> {
    m.endpoints.iter().filter_map(|&i| catalog.endpoint(i)).filter(|e| allowed(e)).collect()
}

/// One model in OpenAI's shape plus OpenRouter's extras. Pricing is the cheapest visible
/// endpoint's (what the default policy mostly picks); `context_length` the largest;
/// `supported_parameters` those any visible endpoint supports.
fn model_json(m: &Model, eps: &[&Endpoint]) -> Value {
    let cheapest = eps.iter().min_by(|a, b| {
        (a.pricing.prompt + a.pricing.completion)
            .partial_cmp(&(b.pricing.prompt + b.pricing.completion))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let context = if eps.iter().any(|e| e.context_length.is_none()) {
        Value::Null
    } else {
        eps.iter().filter_map(|e| e.context_length).max().map_or(Value::Null, |c| json!(c))
    };
    let mut params: Vec<&str> = Vec::new();
    for e in eps {
        for p in &e.supported_parameters {
            if !params.contains(&p.as_str()) {
                params.push(p);
            }
        }
    }
    crate::routing::sorting::sort_by(&mut params, |a, b| a.cmp(b));
    let owner = m.id.split('/').next().unwrap_or(&m.id);
    json!({
        "id": m.id,
        "object": "model",
        "created": 0,
        "owned_by": owner,
        "name": m.id,
        "context_length": context,
        "pricing": cheapest.map_or(Value::Null, |e| pricing_json(e)),
        "supported_parameters": params,
        "endpoint_count": eps.len(),
    })
}

fn not_found(id: &str) -> ApiError {
    let mut e = ApiError::new(
        404,
        "not_found_error",
        "model_not_found",
        format!("\"{id}\" is not a model configured on this router"),
    );
    e.param = Some("model".to_string());
    e
}

fn percentiles_json(p: &Percentiles) -> Value {
    let n = |v: Option<f64>| v.filter(|x| x.is_finite()).map_or(Value::Null, |x| json!(x));
    json!({"p50": n(p.p50), "p75": n(p.p75), "p90": n(p.p90), "p99": n(p.p99)})
}

/// The JSON body for a listing (status 200), or the 404 for an unknown or hidden model.
pub fn answer(
    catalog: &Catalog,
    presets: &Presets,
    listing: &Listing,
    health: &dyn HealthView,
    allowed: &dyn Fn(&Endpoint) -> bool,
) -> Result<String, ApiError> {
    value(catalog, presets, listing, health, allowed).map(|v| crate::json::to_text(&v))
}

/// One listed model in Anthropic's shape, from its OpenAI-shaped entry. The catalog has no
/// creation dates: `created_at` is the epoch, as OpenAI's `created` is 0.
fn anthropic_model(m: &Value) -> Value {
    let field = |k: &str| m.get(k).cloned().unwrap_or(Value::Null);
    json!({"type": "model", "id": field("id"), "display_name": field("name"), "created_at": "1970-01-01T00:00:00Z"})
}

/// The listing for an Anthropic client: the list (all of it in one page: `has_more` false, the
/// SDK's `limit` / `after_id` ignored) and a model in Anthropic's shape; a model's endpoints
/// listing is OpenRouter's, whoever asks.
pub fn anthropic(
    catalog: &Catalog,
    presets: &Presets,
    listing: &Listing,
    health: &dyn HealthView,
    allowed: &dyn Fn(&Endpoint) -> bool,
) -> Result<String, ApiError> {
    let v = value(catalog, presets, listing, health, allowed)?;
    Ok(crate::json::to_text(&match listing {
        Listing::Models => {
            let listed = v.get("data").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            let data: Vec<Value> = listed.iter().map(anthropic_model).collect();
            let id = |m: Option<&Value>| m.and_then(|m| m.get("id")).cloned().unwrap_or(Value::Null);
            let (first, last) = (id(data.first()), id(data.last()));
            json!({"data": data, "has_more": false, "first_id": first, "last_id": last})
        }
        Listing::Model(_) => anthropic_model(&v),
        Listing::Endpoints(_) => v,
    }))
}

fn value(
    catalog: &Catalog,
    presets: &Presets,
    listing: &Listing,
    health: &dyn HealthView,
    allowed: &dyn Fn(&Endpoint) -> bool,
) -> Result<Value, ApiError> {
    match listing {
        Listing::Models => {
            let mut data: Vec<Value> = catalog
                .models
                .iter()
                .filter_map(|m| {
                    let eps = visible(catalog, m, allowed);
                    (!eps.is_empty()).then(|| model_json(m, &eps))
                })
                .collect();
            // Presets after the models, as `@preset/<name>`: each that names a model the caller
            // can reach (or the auto router, or none).
            let reachable = |id: &str| {
                crate::routing::auto::is_auto(id)
                    || catalog
                        .model(id.split(':').next().unwrap_or(id))
                        .is_some_and(|m| !visible(catalog, m, allowed).is_empty())
            };
            for p in &presets.list {
                let named: Vec<&str> = p.model.iter().chain(p.models.iter()).map(String::as_str).collect();
                if named.is_empty() || named.iter().any(|m| reachable(m)) {
                    data.push(json!({
                        "id": format!("{PRESET_PREFIX}{}", p.name),
                        "object": "model",
                        "created": 0,
                        "owned_by": "preset",
                        "name": format!("Preset {}", p.name),
                        "preset": {"model": p.model, "models": p.models},
                    }));
                }
            }
            Ok(json!({"object": "list", "data": data}))
        }
        Listing::Model(id) => {
            let m = catalog.model(id).ok_or_else(|| not_found(id))?;
            let eps = visible(catalog, m, allowed);
            if eps.is_empty() {
                return Err(not_found(id));
            }
            Ok(model_json(m, &eps))
        }
        Listing::Endpoints(id) => {
            let m = catalog.model(id).ok_or_else(|| not_found(id))?;
            let eps = visible(catalog, m, allowed);
            if eps.is_empty() {
                return Err(not_found(id));
            }
            let n = |v: Option<f64>| v.filter(|x| x.is_finite()).map_or(Value::Null, |x| json!(x));
            let list: Vec<Value> = eps
                .iter()
                .map(|e| {
                    let h = health.endpoint(&m.id, &e.slug);
                    let provider = catalog.provider_of(e);
                    json!({
                        "name": format!("{} | {}", e.slug, m.id),
                        "provider_name": e.base_slug(),
                        "tag": e.slug,
                        "model_id": e.upstream_model,
                        "context_length": e.context_length,
                        "pricing": pricing_json(e),
                        "quantization": e.quantization.name(),
                        "supported_parameters": e.supported_parameters,
                        // The request APIs this endpoint serves (`openai`, `anthropic`, `google`).
                        "apis": e.apis.iter().map(|a| a.name()).collect::<Vec<_>>(),
                        "byok": provider.is_some_and(|p| p.byok),
                        "data_policy": {
                            "retains_data": provider.is_none_or(|p| p.retains_data),
                            "trains_on_data": provider.is_none_or(|p| p.trains_on_data),
                            "zdr": provider.is_some_and(|p| p.zdr),
                        },
                        "stats": {
                            "window_s": 300,
                            "attempts": h.attempts,
                            "in_flight": h.in_flight,
                            "uptime": n(h.uptime),
                            "error_rate": n(h.error_rate),
                            "ttft_ms": percentiles_json(&h.ttft_ms),
                            "throughput_tps": percentiles_json(&h.throughput_tps),
                            "recent_outage": h.recent_outage,
                            "cooling_down": h.cooling_down,
                        },
                    })
                })
                .collect();
            Ok(json!({"data": {"id": m.id, "name": m.id, "endpoints": list}}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::health::{EndpointHealth, NoHealthData};

    fn catalog() -> Catalog {
        Catalog::from_json(
            br#"{"providers": {
                "a": {"cluster": "ca", "authority": "a", "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
                "b": {"cluster": "cb", "authority": "b", "byok": true}},
              "models": {
                "v/m": {"endpoints": [
                    {"provider": "a", "upstream_model": "m-a", "pricing": {"prompt": 0.5, "completion": 1.5, "cached_prompt": 0.125},
                     "context_length": 1000, "quantization": "fp8", "supported_parameters": ["tools", "max_tokens"]},
                    {"provider": "b/fast", "pricing": {"prompt": 3, "completion": 15, "request": 0.01},
                     "context_length": 8000, "supported_parameters": ["temperature"]}]},
                "v/n:free": {"endpoints": [{"provider": "a", "pricing": {"prompt": 0, "completion": 0}}]},
                "w/x/endpoints": {"endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 1}}]}}}"#,
            &|_| None,
        )
        .unwrap()
    }

    #[test]
    fn paths() {
        let c = catalog();
        assert_eq!(parse_path(&c, "/v1/models"), Some(Listing::Models));
        assert_eq!(parse_path(&c, "/v1/models/?x=1"), Some(Listing::Models));
        assert_eq!(parse_path(&c, "/v1/models/v/m"), Some(Listing::Model("v/m".into())));
        assert_eq!(parse_path(&c, "/v1/models/v/m/endpoints"), Some(Listing::Endpoints("v/m".into())));
        assert_eq!(parse_path(&c, "/v1/models/v/n%3Afree/endpoints"), Some(Listing::Endpoints("v/n:free".into())));
        assert_eq!(parse_path(&c, "/v1/models/w/x/endpoints"), Some(Listing::Model("w/x/endpoints".into())));
        assert_eq!(parse_path(&c, "/v1/models/%zz"), None);
        assert_eq!(parse_path(&c, "/v1/modelsx"), None);
        assert_eq!(parse_path(&c, "/v1/chat/completions"), None);
    }

    #[test]
    fn model_list_is_openai_shaped_with_openrouter_extras() {
        let c = catalog();
        let v: Value = serde_json::from_str(
            &answer(&c, &crate::routing::presets::NO_PRESETS, &Listing::Models, &NoHealthData, &|_| true).unwrap(),
        )
        .unwrap();
        assert_eq!(v["object"], "list");
        let data = v["data"].as_array().unwrap();
        assert_eq!(data.len(), 3);
        let m = data.iter().find(|m| m["id"] == "v/m").unwrap();
        assert_eq!(m["object"], "model");
        assert_eq!(m["owned_by"], "v");
        assert_eq!(m["context_length"], 8000);
        assert_eq!(m["pricing"]["prompt"], "0.0000005");
        assert_eq!(m["pricing"]["completion"], "0.0000015");
        assert_eq!(m["pricing"]["input_cache_read"], "0.000000125");
        assert_eq!(m["pricing"]["request"], "0");
        assert_eq!(m["supported_parameters"], json!(["max_tokens", "temperature", "tools"]));
        let free = data.iter().find(|m| m["id"] == "v/n:free").unwrap();
        assert_eq!(free["pricing"]["prompt"], "0");
        assert!(free["context_length"].is_null(), "an endpoint without a limit");
        // A policy that hides endpoints hides them here too (and models left without any).
        let only_b = |e: &Endpoint| e.slug.starts_with('b');
        let v: Value = serde_json::from_str(
            &answer(&c, &crate::routing::presets::NO_PRESETS, &Listing::Models, &NoHealthData, &only_b).unwrap(),
        )
        .unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 1);
        assert_eq!(v["data"][0]["pricing"]["request"], "0.01");
    }

    #[test]
    fn endpoints_listing_with_live_stats() {
        let c = catalog();
        struct H;
        impl HealthView for H {
            fn endpoint(&self, _m: &str, slug: &str) -> EndpointHealth {
                if slug == "a" {
                    EndpointHealth {
                        attempts: 10,
                        uptime: Some(0.9),
                        ttft_ms: Percentiles { p50: Some(120.0), ..Default::default() },
                        cooling_down: true,
                        ..Default::default()
                    }
                } else {
                    EndpointHealth::default()
                }
            }
        }
        let body =
            answer(&c, &crate::routing::presets::NO_PRESETS, &Listing::Endpoints("v/m".into()), &H, &|_| true).unwrap();
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["data"]["id"], "v/m");
        let eps = v["data"]["endpoints"].as_array().unwrap();
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0]["tag"], "a");
        assert_eq!(eps[0]["quantization"], "fp8");
        assert_eq!(eps[0]["data_policy"]["zdr"], true);
        assert_eq!(eps[0]["stats"]["uptime"], 0.9);
        assert_eq!(eps[0]["stats"]["ttft_ms"]["p50"], 120.0);
        assert_eq!(eps[0]["stats"]["cooling_down"], true);
        assert_eq!(eps[1]["tag"], "b/fast");
        assert_eq!(eps[1]["provider_name"], "b");
        assert_eq!(eps[1]["byok"], true);
        assert_eq!(eps[1]["apis"], json!(["openai"]));
        assert!(eps[1]["stats"]["uptime"].is_null());
        assert_eq!(eps[1]["data_policy"]["retains_data"], true);
        let e = answer(&c, &crate::routing::presets::NO_PRESETS, &Listing::Endpoints("v/zzz".into()), &H, &|_| true)
            .unwrap_err();
        assert_eq!((e.status, e.code), (404, "model_not_found"));
        let e = answer(&c, &crate::routing::presets::NO_PRESETS, &Listing::Endpoints("v/m".into()), &H, &|_| false)
            .unwrap_err();
        assert_eq!(e.status, 404);
        let one: Value = serde_json::from_str(
            &answer(&c, &crate::routing::presets::NO_PRESETS, &Listing::Model("v/m".into()), &H, &|_| true).unwrap(),
        )
        .unwrap();
        assert_eq!(one["id"], "v/m");
    }
}
