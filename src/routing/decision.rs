//! One routed request, from body bytes to the ranked plan and the body attempts start from.
//! The host adapter applies the result; nothing here touches the host.

use serde_json::{json, Value};

use crate::answer::errors::ApiError;
use crate::api::{Api, Surface};
use crate::config::{Catalog, StreamUsage};
use crate::protocol::bytes::push_json_string;
use crate::protocol::plan::{AttemptPlan, EndpointRef};
use crate::protocol::rewrite::model_prefix;
use crate::protocol::rewrite::{asks_usage, translation_source, upstream_body_for, Dialect};
use crate::routing::health::HealthView;
use crate::routing::policy::Policy;
use crate::routing::presets::{Presets, NO_PRESETS};
use crate::routing::request::ChatRequest;
use crate::routing::router::{cut_to_budget, plan_under, Plan};
use crate::surface::without_caller_key;

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
    /// The operator policy the request ran under (`x-switchyard-policy`).
    pub policy: Option<String>,
    /// Attempts Envoy may make: `routing.max_attempts`, lowered by the policy's `max_attempts`.
    pub max_attempts: usize,
    /// Function tools the request offers (answers naming another tool are malformed).
    pub offered_tools: Vec<String>,
    /// The API the request speaks.
    pub api: Api,
    /// The provider was asked for a usage chunk the caller did not ask for (an OpenAI chat or
    /// completions stream without `stream_options.include_usage`) and `routing.stream_usage` is
    /// `when_asked`: it is counted, not passed on. With `always` (the default) it is passed on.
    pub hide_usage_chunk: bool,
    /// The API of `body`: the first endpoint's (`ApiSet::serving`), the caller's unless that
    /// endpoint serves the request translated.
    pub body_api: Api,
    /// The body for every other API of the plan, stored for its attempts
    /// (`plan::encode_body`: prefix length and body).
    pub bodies: Vec<(Api, Vec<u8>)>,
    /// Per translated API, the fields its translation dropped (`x-switchyard-warning` when an
    /// endpoint of that API serves).
    pub translation_warnings: Vec<(Api, String)>,
    /// The body in Bedrock's Converse API when an endpoint of the plan takes it
    /// (`Kind::converse`), stored for its attempts (`plan::CONVERSE_BODY_PROPERTY`), and what
    /// its translation dropped (`x-switchyard-warning` when such an endpoint serves).
    pub converse_body: Option<Vec<u8>>,
    pub converse_warning: Option<String>,
    /// The prompt's token estimate (its bytes / 4) and the completion the caller capped
    /// (`max_tokens` and its aliases): what mesh-wide token and spend limits admit it for.
    pub prompt_tokens: u64,
    pub max_tokens: Option<u64>,
}

pub fn decide(
    catalog: &Catalog,
    body: &[u8],
    health: &dyn HealthView,
    rand: &mut dyn FnMut() -> f64,
) -> Result<Decision, ApiError> {
    decide_under(catalog, None, body, health, rand)
}

/// As [`decide`], under the operator policy selected for this caller (if any).
pub fn decide_under(
    catalog: &Catalog,
    policy: Option<&Policy>,
    body: &[u8],
    health: &dyn HealthView,
    rand: &mut dyn FnMut() -> f64,
) -> Result<Decision, ApiError> {
    decide_for(catalog, policy, &NO_PRESETS, &Surface::OPENAI, None, body, health, rand)
}

/// As [`decide_under`], for a request of `surface`'s API with the optional routing header
/// (`x-switchyard-routing`). Errors come in that API's shape.
// The request, its catalog, policy and presets: each is one of its inputs.
#[allow(clippy::too_many_arguments)]
pub fn decide_for<'a>(
    catalog: &Catalog,
    policy: Option<&Policy>,
    presets: &'a Presets,
    surface: &Surface,
    routing_header: Option<&str>,
    body: &'a [u8],
    health: &dyn HealthView,
    rand: &mut dyn FnMut() -> f64,
) -> Result<Decision, ApiError> {
    let mut req = ChatRequest::parse_for(body, surface, routing_header)?;
    // A preset the request names is merged in before routing; the policy then bounds both.
    presets.apply(&mut req).map_err(|e| e.for_api(surface.api))?;
    let mut plan = plan_under(catalog, &req, policy, health, rand).map_err(|e| e.for_api(surface.api))?;
    // Every OpenAI chat or completions stream asks for its usage: real providers send it only
    // when asked, and without it the request has no cost, token metrics or limit charge. The
    // caller sees that usage chunk always (OpenRouter), or only when it asked (OpenAI's rule,
    // `routing.stream_usage: when_asked`).
    let ask_usage = surface.usage_on_request && req.stream;
    let hide_usage_chunk =
        ask_usage && catalog.routing.stream_usage == StreamUsage::WhenAsked && !asks_usage(&req.fields);
    // Which of OpenRouter's fields the caller's own API lacks depends on the OpenAI body too.
    let dialect = Dialect::of(req.api, req.translatable, !surface.usage_on_request);
    let bodies = plan_bodies(catalog, &req, dialect, &mut plan, ask_usage)?;
    let no_attempt = || ApiError::new(500, "server_error", "internal_error", "routing produced no attempt");
    let first = plan.attempts.first().and_then(|a| catalog.endpoint(a.endpoint)).ok_or_else(no_attempt)?;
    let model = catalog.models.get(first.model).ok_or_else(no_attempt)?.id.clone();
    let body_api = first.apis.serving(req.api);
    let mut body = Vec::new();
    let mut stored = Vec::new();
    for (api, prefix_len, b) in bodies.bodies {
        if api == body_api {
            body = b;
        } else {
            stored.push((api, crate::protocol::plan::encode_body(prefix_len, &b)));
        }
    }
    let max_attempts = policy
        .and_then(|p| p.max_attempts)
        .map_or(catalog.routing.max_attempts, |n| n.min(catalog.routing.max_attempts))
        .max(1);
    // Answers are judged in the request API's shape (the provider speaks it).
    let offered_tools = if req.has_tools {
        crate::routing::quality::offered_tools(req.api, req.fields.get("tools"))
    } else {
        Vec::new()
    };
    Ok(Decision {
        api: req.api,
        stream: req.stream,
        plan,
        body,
        model,
        policy: policy.map(|p| p.name.clone()),
        max_attempts,
        offered_tools,
        hide_usage_chunk,
        body_api,
        bodies: stored,
        translation_warnings: bodies.warnings,
        converse_body: bodies.converse,
        converse_warning: bodies.converse_warning,
        prompt_tokens: req.prompt_tokens,
        max_tokens: req.max_tokens,
    })
}

/// Every API's body a plan needs, each with the upstream model of that API's first endpoint
/// spliced in (and its prefix length).
struct PlanBodies {
    bodies: Vec<(Api, usize, Vec<u8>)>,
    warnings: Vec<(Api, String)>,
    converse: Option<Vec<u8>>,
    converse_warning: Option<String>,
}

/// Whether endpoint `i` is sent Bedrock's Converse body when serving a `caller`.
fn takes_converse(catalog: &Catalog, i: usize, caller: Api) -> bool {
    catalog.endpoint(i).is_some_and(|e| {
        catalog.provider_of(e).is_some_and(|p| p.kind.converse(e.apis.serving(caller), &e.upstream_model))
    })
}

/// The request's body for each API the plan's endpoints serve it in: the caller's own, and
/// each other API's translated (`translate::request`). Endpoints of an API the translation
/// refuses leave the plan; if none is left, the refusal is the answer (400 naming the field).
fn plan_bodies(
    catalog: &Catalog,
    req: &ChatRequest,
    dialect: Dialect,
    plan: &mut Plan,
    ask_usage: bool,
) -> Result<PlanBodies, ApiError> {
    let caller = req.api;
    let api_of = |i: usize| catalog.endpoint(i).map_or(caller, |e| e.apis.serving(caller));
    let first_model = |plan: &Plan, api: Api| {
        plan.attempts
            .iter()
            .filter_map(|a| catalog.endpoint(a.endpoint))
            .find(|e| e.apis.serving(caller) == api)
            .map(|e| e.upstream_model.clone())
    };
    let mut out = PlanBodies { bodies: Vec::new(), warnings: Vec::new(), converse: None, converse_warning: None };
    let mut refused: Option<crate::translate::Refused> = None;
    let mut unsupported = false;
    for api in Api::ALL.into_iter().filter(|&a| a != caller) {
        let Some(model) = first_model(plan, api) else { continue };
        let source = translation_source(caller, &req.fields);
        match crate::translate::request(caller, api, &source, &model, req.stream) {
            // `require_parameters`: an endpoint whose translation drops a parameter cannot
            // honour it, as one that does not support it.
            Ok(t) if req.provider.require_parameters && !t.dropped.is_empty() => {
                plan.attempts.retain(|a| api_of(a.endpoint) != api);
                unsupported = true;
            }
            Ok(t) => {
                if let Some(w) = t.warning(api) {
                    out.warnings.push((api, w));
                }
                let prefix_len = if api == Api::Google { 0 } else { model_prefix(&model).len() };
                out.bodies.push((api, prefix_len, t.body));
            }
            Err(r) => {
                plan.attempts.retain(|a| api_of(a.endpoint) != api);
                if !plan.attempts.is_empty() {
                    let why = crate::translate::header_text(&r.message);
                    let param = crate::translate::header_text(&r.param);
                    plan.warnings.push(format!("{} endpoints left out: {param} ({why})", api.name()));
                }
                refused.get_or_insert(r);
            }
        }
    }
    // Bedrock's Converse endpoints take a body of their own, translated from the caller's.
    if plan.attempts.iter().any(|a| takes_converse(catalog, a.endpoint, caller)) {
        let source = translation_source(caller, &req.fields);
        match crate::translate::converse_request(caller, &source) {
            Ok(t) if req.provider.require_parameters && !t.dropped.is_empty() => {
                plan.attempts.retain(|a| !takes_converse(catalog, a.endpoint, caller));
                unsupported = true;
            }
            Ok(t) => {
                out.converse_warning = t.warning_for(crate::translate::CONVERSE);
                out.converse = Some(t.body);
            }
            Err(r) => {
                plan.attempts.retain(|a| !takes_converse(catalog, a.endpoint, caller));
                if !plan.attempts.is_empty() {
                    let why = crate::translate::header_text(&r.message);
                    let param = crate::translate::header_text(&r.param);
                    plan.warnings.push(format!("{} endpoints left out: {param} ({why})", crate::translate::CONVERSE));
                }
                refused.get_or_insert(r);
            }
        }
    }
    if plan.attempts.is_empty() {
        if let Some(r) = refused {
            return Err(r.error(caller));
        }
        if unsupported {
            let model = req.model.as_deref().unwrap_or_default();
            return Err(ApiError::no_endpoints(model, "require_parameters").for_api(caller));
        }
    }
    if let Some(model) = first_model(plan, caller) {
        let prefix_len = if caller == Api::Google { 0 } else { model_prefix(&model).len() };
        out.bodies.push((caller, prefix_len, upstream_body_for(dialect, &req.fields, &model, ask_usage)));
    }
    Ok(out)
}

/// What the downstream filter hands to Envoy for one decision.
#[derive(Debug, Clone, PartialEq)]
pub struct HandOff {
    /// The plan every attempt's upstream filter reads (filter state).
    pub plan: AttemptPlan,
    /// The provider cluster of each attempt, in order (the priority-group override).
    pub clusters: Vec<String>,
}

impl HandOff {
    /// Retries Envoy may make after the first attempt (`x-envoy-max-retries`).
    pub fn max_retries(&self) -> usize {
        self.clusters.len().saturating_sub(1)
    }
}

/// The plan cut to the decision's attempt budget, with everything an attempt needs to rewrite
/// itself: endpoints by index and by name, the body and prefix lengths, the original path.
pub fn hand_off(catalog: &Catalog, catalog_id: u64, d: &Decision, path: &str) -> HandOff {
    // The budget cut keeps one attempt for every fallback model (SPEC section 3).
    let model_of = |i: usize| catalog.endpoint(i).map_or(usize::MAX, |e| e.model);
    let endpoints: Vec<u16> = cut_to_budget(d.plan.attempts.clone(), d.max_attempts.max(1), &model_of)
        .iter()
        .filter(|a| catalog.endpoint(a.endpoint).is_some() && a.endpoint <= usize::from(u16::MAX))
        .map(|a| a.endpoint as u16)
        .collect();
    let planned = || endpoints.iter().filter_map(|&i| catalog.endpoint(usize::from(i)));
    let mut clusters: Vec<String> =
        planned().filter_map(|e| catalog.provider_of(e)).map(|p| p.cluster.clone()).collect();
    // The first attempt skips the per-attempt Wasm when its provider has a first-attempt cluster
    // and every planned endpoint serves the same model: a refusal then never needs turning into
    // a retry for a fallback model (that conversion runs in the per-attempt filter).
    let first = planned().next();
    let one_model = planned().all(|e| Some(e.model) == first.map(|f| f.model));
    let first_cluster = first.and_then(|e| catalog.provider_of(e)).and_then(|p| p.first_attempt_cluster.clone());
    let first_prepared = match (first_cluster, clusters.first_mut()) {
        (Some(first), Some(slot)) if one_model => {
            *slot = first;
            true
        }
        _ => false,
    };
    let first_model = first.map(|e| e.upstream_model.as_str()).unwrap_or("");
    // Google bodies carry no model (it is in the path): nothing to splice per attempt.
    let prefix_len = if d.body_api == Api::Google { 0 } else { model_prefix(first_model).len() };
    let refs: Vec<EndpointRef> = planned()
        .filter_map(|e| {
            let model = catalog.models.get(e.model)?.id.clone();
            Some(EndpointRef { model, slug: e.slug.clone(), upstream_model: e.upstream_model.clone() })
        })
        .collect();
    let plan = AttemptPlan {
        catalog_id,
        stream: d.stream,
        body_len: u32::try_from(d.body.len()).unwrap_or(u32::MAX),
        prefix_len: u32::try_from(prefix_len).unwrap_or(u32::MAX),
        // A Google caller's `?key=` never reaches a provider.
        path: without_caller_key(path).into_owned(),
        endpoints,
        refs,
        first_prepared,
        body_api: (d.body_api != d.api).then_some(d.body_api),
    };
    HandOff { plan, clusters }
}

/// The ranked candidates with their scores and the live statistics the decision saw, for the
/// opt-in debug header (one line of JSON).
pub fn candidates_json(catalog: &Catalog, plan: &Plan, health: &dyn HealthView) -> String {
    let num = |v: Option<f64>| v.filter(|x| x.is_finite()).map_or(Value::Null, |x| json!(x));
    let indices: Vec<usize> = plan.attempts.iter().map(|a| a.endpoint).collect();
    let outages = crate::routing::outage::outage_flags(catalog, health, &indices);
    let terms = |i: usize| {
        plan.cost_terms.iter().find(|(e, _)| *e == i).map(|(_, t)| {
            json!({
                "price_usd": num(Some(t.price_usd)),
                "effective_price_ratio": num(Some(t.effective_ratio)),
                "wait_s": num(Some(t.wait_s)),
                "wait_usd": num(Some(t.wait_usd)),
                "rate_limit_usd": num(Some(t.rate_limit_usd)),
                "success_p": num(Some(t.success_p)),
                "routing_cost": num(Some(t.routing_cost)),
                "share": num(Some(t.share)),
                "backoff": num(Some(t.backoff)),
                "paused": t.paused,
                "capped": t.capped,
            })
        })
    };
    let list: Vec<Value> = plan
        .attempts
        .iter()
        .zip(outages)
        .filter_map(|(a, outage)| {
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
                    "recent_attempts": h.recent_attempts,
                    "recent_failures": h.recent_failures,
                    "failure_run": h.failure_run,
                    "recent_outage": outage,
                    "cooling_down": h.cooling_down,
                    "rate_limited_rate": num(h.rate_limited_rate),
                    "bad_response_rate": num(h.bad_response_rate),
                    "tool_error_rate": num(h.tool_error_rate),
                    "capacity": h.capacity,
                },
                "routing_cost": terms(a.endpoint),
            }))
        })
        .collect();
    crate::json::to_text(&Value::Array(list))
}

/// Filter-state key of the audit record (`wasm.switchyard_decision` in Envoy's filter state):
/// Envoy's access log prints it with `%FILTER_STATE(wasm.switchyard_decision:PLAIN)%`.
pub const AUDIT_PROPERTY: &str = "switchyard_decision";

/// What an auditor needs about one routed request: the policy and what selected it, the model
/// and endpoint that served (or the error code and constraint), and the attempts made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Audit<'a> {
    pub policy: Option<&'a str>,
    pub selected_by: Option<&'a str>,
    pub model: Option<&'a str>,
    pub endpoint: Option<&'a str>,
    pub attempts: usize,
    pub status: u32,
    pub error: Option<&'a str>,
    pub constraint: Option<&'a str>,
    /// The request path (the access log's `%REQ(:PATH)%` shows the provider's path after the
    /// per-attempt rewrite).
    pub path: Option<&'a str>,
    /// How the order was decided (`x-switchyard-strategy`).
    pub strategy: Option<&'a str>,
    /// Milliseconds from routing to the response headers (the serving attempt's first byte).
    pub ttft_ms: Option<u64>,
}

impl Audit<'_> {
    /// One line of JSON; absent facts are `null`.
    pub fn to_json(&self) -> String {
        // Written directly (no intermediate map or value): this runs on every request.
        let mut out: Vec<u8> = Vec::with_capacity(256);
        let mut sep = b'{';
        let mut key = |out: &mut Vec<u8>, k: &str| {
            out.push(sep);
            sep = b',';
            out.push(b'"');
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(b"\":");
        };
        let text = |out: &mut Vec<u8>, v: Option<&str>| match v {
            Some(s) => push_json_string(out, s),
            None => out.extend_from_slice(b"null"),
        };
        for (k, v) in [("policy", self.policy), ("selected_by", self.selected_by), ("model", self.model)] {
            key(&mut out, k);
            text(&mut out, v);
        }
        key(&mut out, "endpoint");
        text(&mut out, self.endpoint);
        key(&mut out, "attempts");
        out.extend_from_slice(self.attempts.to_string().as_bytes());
        key(&mut out, "status");
        out.extend_from_slice(self.status.to_string().as_bytes());
        for (k, v) in
            [("error", self.error), ("constraint", self.constraint), ("path", self.path), ("strategy", self.strategy)]
        {
            key(&mut out, k);
            text(&mut out, v);
        }
        key(&mut out, "ttft_ms");
        match self.ttft_ms {
            Some(t) => out.extend_from_slice(t.to_string().as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
        // Only whole UTF-8 strings and ASCII were written.
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_record_is_one_json_line() {
        let a = Audit {
            policy: Some("finance"),
            selected_by: Some("peer_uri_san"),
            model: Some("m/a"),
            endpoint: Some("alpha"),
            attempts: 2,
            status: 200,
            ..Audit::default()
        };
        let v: Value = serde_json::from_str(&a.to_json()).unwrap();
        assert_eq!(v["policy"], "finance");
        assert_eq!(v["selected_by"], "peer_uri_san");
        assert_eq!(v["endpoint"], "alpha");
        assert_eq!(v["attempts"], 2);
        assert!(v["error"].is_null());
        assert!(!a.to_json().contains('\n'));
        assert_eq!(v.as_object().map(|o| o.len()), Some(11), "every fact is present, absent ones null");
        let odd = Audit { path: Some("/v1/\"x\"\n"), ttft_ms: Some(7), ..Audit::default() };
        let v: Value = serde_json::from_str(&odd.to_json()).unwrap();
        assert_eq!((v["path"].as_str(), v["ttft_ms"].as_u64()), (Some("/v1/\"x\"\n"), Some(7)));
    }
}

#[cfg(test)]
#[path = "decision_responses_tests.rs"]
mod responses_tests;
