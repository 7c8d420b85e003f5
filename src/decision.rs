//! One routed request, from body bytes to the ranked plan and the body attempts start from.
//! The host adapter applies the result; nothing here touches the host.

use serde_json::{json, Value};

use crate::config::Catalog;
use crate::errors::ApiError;
use crate::health::HealthView;
use crate::request::ChatRequest;
use crate::rewrite::upstream_body;
use crate::router::{plan, Plan};

/// The routing decision for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub plan: Plan,
    pub stream: bool,
    /// The body every attempt starts from: routing fields removed, `model` first with the first
    /// endpoint's upstream id (later attempts splice their own id over that prefix).
    pub body: Vec<u8>,
    /// Catalog model id of the first planned endpoint.
    pub model: String,
}

pub fn decide(
    catalog: &Catalog,
    body: &[u8],
    health: &dyn HealthView,
    rand: &mut dyn FnMut() -> f64,
) -> Result<Decision, ApiError> {
    let req = ChatRequest::parse(body)?;
    let plan = plan(catalog, &req, health, rand)?;
    let no_attempt = || ApiError::new(500, "server_error", "internal_error", "routing produced no attempt");
    let first = plan.attempts.first().and_then(|a| catalog.endpoint(a.endpoint)).ok_or_else(no_attempt)?;
    let model = catalog.models.get(first.model).ok_or_else(no_attempt)?.id.clone();
    let body = upstream_body(&req.fields, &first.upstream_model);
    Ok(Decision { stream: req.stream, plan, body, model })
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
                    "in_flight": h.in_flight,
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
