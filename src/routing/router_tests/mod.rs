//! Native tests for the routing brain: SPEC sections 3-5 plus the README's "Behaviour where the
//! spec is silent". Every test builds a catalog from JSON, parses a real request body and asserts
//! on the ranked endpoint slugs (or on the ApiError) that `plan` produces.

use std::collections::HashMap;

use serde_json::Value;

use super::*;
use crate::api::{Api, GoogleMethod, Surface};
use crate::protocol::plan::AttemptPlan;
use crate::protocol::rewrite::{attempt_rewrite, model_prefix};
use crate::routing::decision::{candidates_json, decide, hand_off};
use crate::routing::health::NoHealthData;
use crate::test_support::{mutate, Lcg};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// Providers shared by every test catalog.
/// - alpha: no retention, no training, ZDR; credential from env (`Bearer k`).
/// - beta: no retention, no training, not ZDR; custom header, `/openai/v1` path prefix.
/// - gamma: data policy undeclared (counts as retains + trains, not ZDR).
/// - delta: retains data (does not train).
/// - deepinfra: base entry shared by its variants `deepinfra/turbo`, `deepinfra/fast`; ZDR.
/// - mine, mine2: BYOK.
/// - aa..zz: plain providers for ordering tests.
const PROVIDERS: &str = r#"{
  "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"env": "ALPHA_KEY"},
            "apis": {"openai": {}, "openai_responses": {}},
            "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
  "beta": {"cluster": "c_beta", "authority": "beta.example", "path_prefix": "/openai/v1",
           "apis": {"openai": {}, "openai_responses": {}},
           "credential": {"header": "x-api-key", "prefix": "", "value": "beta-secret"},
           "data_policy": {"retains_data": false, "trains_on_data": false}},
  "gamma": {"cluster": "c_gamma", "authority": "gamma.example"},
  "delta": {"cluster": "c_delta", "authority": "delta.example",
            "data_policy": {"retains_data": true, "trains_on_data": false}},
  "deepinfra": {"cluster": "c_deepinfra", "authority": "deepinfra.example",
                "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
  "mine": {"cluster": "c_mine", "authority": "mine.example", "byok": true},
  "mine2": {"cluster": "c_mine2", "authority": "mine2.example", "byok": true},
  "aa": {"cluster": "c_aa", "authority": "aa.example"},
  "bb": {"cluster": "c_bb", "authority": "bb.example"},
  "cc": {"cluster": "c_cc", "authority": "cc.example"},
  "dd": {"cluster": "c_dd", "authority": "dd.example"},
  "ee": {"cluster": "c_ee", "authority": "ee.example"},
  "ff": {"cluster": "c_ff", "authority": "ff.example"},
  "yy": {"cluster": "c_yy", "authority": "yy.example"},
  "zz": {"cluster": "c_zz", "authority": "zz.example"}
}"#;

/// An endpoint priced `price` per million for both prompt and completion tokens (same token
/// mix everywhere, so cost is proportional to `price`).
fn ep(slug: &str, price: f64) -> String {
    ep_x(slug, price, "")
}

/// As `ep`, with extra endpoint members (`extra` starts with a comma).
fn ep_x(slug: &str, price: f64, extra: &str) -> String {
    format!(r#"{{"provider": "{slug}", "pricing": {{"prompt": {price}, "completion": {price}}}{extra}}}"#)
}

fn model(id: &str, eps: &[String]) -> String {
    model_x(id, "", eps)
}

/// A model entry; `extra` are model members placed before `endpoints` (end with a comma).
fn model_x(id: &str, extra: &str, eps: &[String]) -> String {
    format!(r#""{id}": {{{extra}"endpoints": [{}]}}"#, eps.join(", "))
}

/// A catalog under the classic default policy (price_weighted), which most ordering tests pin;
/// `routing_cost` has its own tests (`cost_catalog`).
fn catalog(models: &[String]) -> Catalog {
    catalog_routing(models, "{}")
}

fn catalog_routing(models: &[String], routing: &str) -> Catalog {
    let routing = if routing.contains("default_policy") {
        routing.to_string()
    } else {
        let inner = routing.trim().trim_start_matches('{').trim_end_matches('}').trim();
        let sep = if inner.is_empty() { "" } else { ", " };
        format!(r#"{{"default_policy": "price_weighted"{sep}{inner}}}"#)
    };
    catalog_json(&format!(r#"{{"providers": {PROVIDERS}, "models": {{{}}}, "routing": {routing}}}"#, models.join(", ")))
}

/// A catalog under routing_cost (the default policy).
fn cost_catalog(models: &[String]) -> Catalog {
    catalog_json(&format!(r#"{{"providers": {PROVIDERS}, "models": {{{}}}}}"#, models.join(", ")))
}

fn catalog_json(json: &str) -> Catalog {
    Catalog::from_json(json.as_bytes(), &|_| Some("k".into())).unwrap_or_else(|e| panic!("test catalog rejected: {e}"))
}

const MSG: &str = r#""messages": [{"role": "user", "content": "hi"}]"#;
const TOOLS: &str = r#", "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]"#;

/// A chat body for `model`; `rest` is appended after `messages` (starts with a comma).
fn body(model: &str, rest: &str) -> String {
    format!(r#"{{"model": "{model}", {MSG}{rest}}}"#)
}

/// A body with `provider: {<fields>}` (`fields` without braces, may be empty).
fn with_provider(model: &str, fields: &str) -> String {
    body(model, &format!(r#", "provider": {{{fields}}}"#))
}

/// A body sorted by price (a deterministic order) plus extra `provider` fields.
fn priced(model: &str, more: &str) -> String {
    with_provider(model, &format!(r#""sort": "price"{more}"#))
}

/// Test statistics keyed by (model id, endpoint slug).
#[derive(Default)]
struct Stats(HashMap<(String, String), EndpointHealth>);

impl Stats {
    fn with(mut self, model: &str, slug: &str, h: EndpointHealth) -> Stats {
        self.0.insert((model.to_string(), slug.to_string()), h);
        self
    }
}

impl HealthView for Stats {
    fn endpoint(&self, model: &str, slug: &str) -> EndpointHealth {
        self.0.get(&(model.to_string(), slug.to_string())).copied().unwrap_or_default()
    }
}

fn p50(v: f64) -> Percentiles {
    Percentiles { p50: Some(v), ..Default::default() }
}

fn run_with(
    cat: &Catalog,
    body: &str,
    health: &dyn HealthView,
    rand: &mut dyn FnMut() -> f64,
) -> Result<Plan, ApiError> {
    let req = ChatRequest::parse(body.as_bytes())?;
    plan(cat, &req, health, rand)
}

/// Plans with `rand() == 0`, which makes `price_weighted` draw the cheapest stable endpoint.
fn run(cat: &Catalog, body: &str, health: &dyn HealthView) -> Result<Plan, ApiError> {
    run_with(cat, body, health, &mut || 0.0)
}

fn ok(cat: &Catalog, body: &str, health: &dyn HealthView) -> Plan {
    run(cat, body, health).unwrap_or_else(|e| panic!("{body}\n=> {}", e.body()))
}

fn slugs(cat: &Catalog, plan: &Plan) -> Vec<String> {
    plan.attempts.iter().map(|a| cat.endpoint(a.endpoint).map(|e| e.slug.clone()).unwrap_or_default()).collect()
}

/// `model@slug` per attempt, for tests with several models.
fn labels(cat: &Catalog, plan: &Plan) -> Vec<String> {
    plan.attempts
        .iter()
        .map(|a| {
            let e = cat.endpoint(a.endpoint).unwrap_or_else(|| panic!("bad endpoint index"));
            format!("{}@{}", cat.models[e.model].id, e.slug)
        })
        .collect()
}

/// Ranked slugs with `rand() == 0`.
fn ranked(cat: &Catalog, body: &str, health: &dyn HealthView) -> Vec<String> {
    slugs(cat, &ok(cat, body, health))
}

fn fails(cat: &Catalog, body: &str) -> ApiError {
    match run(cat, body, &NoHealthData) {
        Ok(p) => panic!("{body} should fail, got {:?}", slugs(cat, &p)),
        Err(e) => e,
    }
}

fn assert_no_endpoints(e: &ApiError, model: &str, constraint: &str) {
    assert_eq!(e.status, 404, "{}", e.body());
    assert_eq!(e.code, "no_endpoints");
    assert_eq!(e.kind, "not_found_error");
    assert_eq!(e.param, None);
    assert_eq!(e.metadata.get("constraint"), Some(&Value::String(constraint.to_string())), "{}", e.body());
    assert_eq!(e.metadata.get("model"), Some(&Value::String(model.to_string())), "{}", e.body());
    assert!(e.message.contains(constraint), "{}", e.message);
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// `m/x`: six endpoints differing in exactly what the hard filters read; prices 1..6 so that
/// `sort: price` lists them in declaration order. `m/d` is distillable; `m/unsafe` is served only
/// by providers that fail every compliance filter and have small context windows.
fn filter_catalog() -> Catalog {
    catalog(&[
        model(
            "m/x",
            &[
                ep_x(
                    "alpha",
                    1.0,
                    r#", "quantization": "fp8", "context_length": 1000, "supported_parameters": ["tools", "temperature"]"#,
                ),
                ep_x("beta", 2.0, r#", "quantization": "bf16", "supported_parameters": ["tools"]"#),
                ep_x("gamma", 3.0, r#", "quantization": "fp16", "context_length": 100000"#),
                ep_x(
                    "deepinfra/turbo",
                    4.0,
                    r#", "quantization": "int8", "supported_parameters": ["tools", "temperature"]"#,
                ),
                ep_x("deepinfra/fast", 5.0, r#", "quantization": "int8""#),
                ep_x("delta", 6.0, r#", "quantization": "fp8""#),
            ],
        ),
        model_x("m/d", r#""distillable": true, "#, &[ep("alpha", 1.0), ep("gamma", 2.0)]),
        model(
            "m/unsafe",
            &[ep_x("gamma", 1.0, r#", "context_length": 4096"#), ep_x("delta", 2.0, r#", "context_length": 8192"#)],
        ),
    ])
}

const ALL_X: [&str; 6] = ["alpha", "beta", "gamma", "deepinfra/turbo", "deepinfra/fast", "delta"];

/// `m/byok`: aa $1, bb $2, mine2 $3 (BYOK), mine $5 (BYOK).
fn byok_catalog() -> Catalog {
    catalog(&[model("m/byok", &[ep("aa", 1.0), ep("mine", 5.0), ep("bb", 2.0), ep("mine2", 3.0)])])
}

fn perf(ttft: Option<f64>, tps: Option<f64>, uptime: Option<f64>) -> EndpointHealth {
    EndpointHealth {
        ttft_ms: Percentiles { p50: ttft, ..Default::default() },
        throughput_tps: Percentiles { p50: tps, ..Default::default() },
        uptime,
        ..Default::default()
    }
}

/// `m/s`: aa $1 (10 tok/s, tool errors unmeasured), bb $2 (100 tok/s, 20 %), cc $3 (50 tok/s,
/// 5 %). `m/s2`: dd $1 (10 tok/s), ee $2 (100 tok/s).
fn suffix_catalog() -> (Catalog, Stats) {
    let c = catalog(&[
        model("m/s", &[ep("aa", 1.0), ep("bb", 2.0), ep("cc", 3.0)]),
        model("m/s2", &[ep("dd", 1.0), ep("ee", 2.0)]),
        model("v/llama3:8b", &[ep("aa", 2.0), ep("bb", 1.0)]),
    ]);
    let h = Stats::default()
        .with("m/s", "aa", EndpointHealth { throughput_tps: p50(10.0), ..Default::default() })
        .with(
            "m/s",
            "bb",
            EndpointHealth { throughput_tps: p50(100.0), tool_error_rate: Some(0.2), ..Default::default() },
        )
        .with(
            "m/s",
            "cc",
            EndpointHealth { throughput_tps: p50(50.0), tool_error_rate: Some(0.05), ..Default::default() },
        )
        .with("m/s2", "dd", EndpointHealth { throughput_tps: p50(10.0), ..Default::default() })
        .with("m/s2", "ee", EndpointHealth { throughput_tps: p50(100.0), ..Default::default() });
    (c, h)
}

/// Ranks the catalog `n` times with a deterministic LCG and counts who was drawn first; every
/// plan is passed to `check`.
fn draws(
    c: &Catalog,
    b: &str,
    h: &dyn HealthView,
    n: usize,
    check: &mut dyn FnMut(&[String]),
) -> HashMap<String, usize> {
    let req = ChatRequest::parse(b.as_bytes()).unwrap_or_else(|e| panic!("{}", e.body()));
    let mut lcg = Lcg(0x5eed_1234_abcd_0001);
    let mut firsts: HashMap<String, usize> = HashMap::new();
    for _ in 0..n {
        let p = plan(c, &req, h, &mut || lcg.next()).unwrap_or_else(|e| panic!("{}", e.body()));
        let order = slugs(c, &p);
        check(&order);
        *firsts.entry(order[0].clone()).or_default() += 1;
    }
    firsts
}

/// `m/p1`: aa $3, bb $1. `m/p2`: cc $2, dd $4.
fn two_model_catalog() -> Catalog {
    catalog(&[model("m/p1", &[ep("aa", 3.0), ep("bb", 1.0)]), model("m/p2", &[ep("cc", 2.0), ep("dd", 4.0)])])
}

mod cost;
mod decision;
mod filters;
mod preferences;
mod sorts;
mod surfaces;
