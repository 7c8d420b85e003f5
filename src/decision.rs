//! One routed request, from body bytes to what the first attempt sends upstream.
//! The host adapter applies the result; nothing here touches the host.

use serde_json::{json, Value};

use crate::config::Catalog;
use crate::errors::ApiError;
use crate::health::HealthView;
use crate::request::ChatRequest;
use crate::rewrite::{upstream_body, upstream_path};
use crate::router::{plan, Plan};

/// What one attempt sends to its provider.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamRequest {
    pub cluster: String,
    pub authority: String,
    pub path: String,
    /// (lower-case header name, full value)
    pub credential: Option<(String, String)>,
    pub body: Vec<u8>,
    /// Endpoint slug (`deepinfra/turbo`) and catalog model id that serve this attempt.
    pub slug: String,
    pub model: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub plan: Plan,
    pub stream: bool,
    pub first: UpstreamRequest,
}

/// Builds the upstream request for the plan's attempt number `n` (0-based).
pub fn attempt_request(catalog: &Catalog, req: &ChatRequest, plan: &Plan, n: usize, request_path: &str) -> Option<UpstreamRequest> {
    let a = plan.attempts.get(n)?;
    let ep = catalog.endpoint(a.endpoint)?;
    let provider = catalog.provider_of(ep)?;
    let model = catalog.models.get(ep.model)?;
    Some(UpstreamRequest {
        cluster: provider.cluster.clone(),
        authority: provider.authority.clone(),
        path: upstream_path(request_path, &provider.path_prefix),
        credential: provider.credential.as_ref().map(|c| (c.header.clone(), c.value.clone())),
        body: upstream_body(&req.fields, &ep.upstream_model),
        slug: ep.slug.clone(),
        model: model.id.clone(),
    })
}

pub fn decide(
    catalog: &Catalog,
    body: &[u8],
    request_path: &str,
    health: &dyn HealthView,
    rand: &mut dyn FnMut() -> f64,
) -> Result<Decision, ApiError> {
    let req = ChatRequest::parse(body)?;
    let plan = plan(catalog, &req, health, rand)?;
    let first = attempt_request(catalog, &req, &plan, 0, request_path)
        .ok_or_else(|| ApiError::new(500, "server_error", "internal_error", "routing produced no attempt"))?;
    Ok(Decision { stream: req.stream, plan, first })
}

/// The ranked candidates with their scores and the live statistics the decision saw, for the
/// opt-in debug header (one line of JSON).
pub fn candidates_json(catalog: &Catalog, plan: &Plan, health: &dyn HealthView) -> String {
    let num = |v: Option<f64>| v.filter(|x| x.is_finite()).map_or(Value::Null, |x| json!(x));
    let list: Vec<Value> = plan
        .attempts
        .iter()
        .filter_map(|a| {
            let ep = catalog.endpoint(a.endpoint)?;
            let model = catalog.models.get(ep.model)?;
            let h = health.endpoint(&model.id, &ep.slug);
            Some(json!({
                "endpoint": ep.slug,
                "model": model.id,
                "score": num(Some(a.score)),
                "health": {
                    "attempts": h.attempts,
                    "uptime": num(h.uptime),
                    "error_rate": num(h.error_rate),
                    "ttft_p50_ms": num(h.ttft_ms.p50),
                    "throughput_p50_tps": num(h.throughput_tps.p50),
                    "recent_outage": h.recent_outage,
                    "cooling_down": h.cooling_down,
                }
            }))
        })
        .collect();
    Value::Array(list).to_string()
}
