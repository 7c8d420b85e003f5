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

// ---------------------------------------------------------------------------------------------
// Hard filters
// ---------------------------------------------------------------------------------------------

// The fixture itself: with no filter every endpoint survives, in price order.
#[test]
fn no_filters_keep_every_endpoint() {
    let c = filter_catalog();
    assert_eq!(ranked(&c, &priced("m/x", ""), &NoHealthData), s(&ALL_X));
}

// `only` is a hard allow-list; a base slug allows every variant, a full slug only that variant.
#[test]
fn only_allows_listed_slugs_base_matching_every_variant() {
    let c = filter_catalog();
    assert_eq!(
        ranked(&c, &priced("m/x", r#", "only": ["beta", "deepinfra"]"#), &NoHealthData),
        s(&["beta", "deepinfra/turbo", "deepinfra/fast"])
    );
    assert_eq!(
        ranked(&c, &priced("m/x", r#", "only": ["deepinfra/fast", "gamma"]"#), &NoHealthData),
        s(&["gamma", "deepinfra/fast"])
    );
}

// `ignore` is a hard deny-list; a base slug removes every variant, a full slug only that one.
#[test]
fn ignore_base_slug_drops_every_variant_full_slug_only_that_one() {
    let c = filter_catalog();
    assert_eq!(
        ranked(&c, &priced("m/x", r#", "ignore": ["deepinfra"]"#), &NoHealthData),
        s(&["alpha", "beta", "gamma", "delta"])
    );
    assert_eq!(
        ranked(&c, &priced("m/x", r#", "ignore": ["deepinfra/turbo"]"#), &NoHealthData),
        s(&["alpha", "beta", "gamma", "deepinfra/fast", "delta"])
    );
    assert_eq!(
        ranked(
            &c,
            &priced("m/x", r#", "ignore": ["alpha", "beta", "gamma", "deepinfra/turbo", "delta"]"#),
            &NoHealthData
        ),
        s(&["deepinfra/fast"])
    );
}

// `quantizations` keeps only endpoints whose quantization is listed (`unknown` included).
#[test]
fn quantizations_keep_only_listed() {
    let c = filter_catalog();
    assert_eq!(
        ranked(&c, &priced("m/x", r#", "quantizations": ["fp8", "int8"]"#), &NoHealthData),
        s(&["alpha", "deepinfra/turbo", "deepinfra/fast", "delta"])
    );
    assert_eq!(ranked(&c, &priced("m/x", r#", "quantizations": ["bf16"]"#), &NoHealthData), s(&["beta"]));
    // m/d's endpoints declare no quantization: they are `unknown`.
    assert_eq!(ranked(&c, &priced("m/d", r#", "quantizations": ["unknown"]"#), &NoHealthData), s(&["alpha", "gamma"]));
}

// `data_collection: deny` keeps providers that neither retain nor train; undeclared = unsafe;
// variants share their base's policy. `allow` filters nothing.
#[test]
fn data_collection_deny_keeps_providers_that_neither_retain_nor_train() {
    let c = filter_catalog();
    assert_eq!(
        ranked(&c, &priced("m/x", r#", "data_collection": "deny""#), &NoHealthData),
        s(&["alpha", "beta", "deepinfra/turbo", "deepinfra/fast"])
    );
    assert_eq!(ranked(&c, &priced("m/x", r#", "data_collection": "allow""#), &NoHealthData), s(&ALL_X));
}

// `zdr: true` keeps only zero-data-retention providers; `zdr: false` filters nothing.
#[test]
fn zdr_keeps_only_zero_retention_providers() {
    let c = filter_catalog();
    assert_eq!(
        ranked(&c, &priced("m/x", r#", "zdr": true"#), &NoHealthData),
        s(&["alpha", "deepinfra/turbo", "deepinfra/fast"])
    );
    assert_eq!(ranked(&c, &priced("m/x", r#", "zdr": false"#), &NoHealthData), s(&ALL_X));
}

// `enforce_distillable_text` reads the model's `distillable` flag (all endpoints or none).
#[test]
fn enforce_distillable_text_uses_the_model_flag() {
    let c = filter_catalog();
    assert_eq!(
        ranked(&c, &priced("m/d", r#", "enforce_distillable_text": true"#), &NoHealthData),
        s(&["alpha", "gamma"])
    );
    let e = fails(&c, &priced("m/x", r#", "enforce_distillable_text": true"#));
    assert_no_endpoints(&e, "m/x", "enforce_distillable_text");
}

// `require_parameters` keeps endpoints supporting every optional top-level parameter of the
// request; without it nothing is dropped.
#[test]
fn require_parameters_drops_endpoints_missing_any_parameter() {
    let c = filter_catalog();
    let b = body("m/x", r#", "temperature": 0.2, "provider": {"sort": "price", "require_parameters": true}"#);
    assert_eq!(ranked(&c, &b, &NoHealthData), s(&["alpha", "deepinfra/turbo"]));
    let b = body("m/x", r#", "temperature": 0.2, "provider": {"sort": "price"}"#);
    assert_eq!(ranked(&c, &b, &NoHealthData), s(&ALL_X));
    // Only request members count: messages/stream/user/metadata are never "parameters".
    let b = body(
        "m/x",
        r#", "stream": true, "user": "u", "metadata": {}, "provider": {"sort": "price", "require_parameters": true}"#,
    );
    assert_eq!(ranked(&c, &b, &NoHealthData), s(&ALL_X));
}

/// Four endpoints with asymmetric prices. Costs of the default short request (8 prompt tokens,
/// 256 completion tokens): dd 520e-6 < bb 552e-6 < aa 2568e-6 < cc 10520e-6.
fn max_price_catalog() -> Catalog {
    catalog(&[r#""m/mp": {"endpoints": [
        {"provider": "aa", "pricing": {"prompt": 1, "completion": 10}},
        {"provider": "bb", "pricing": {"prompt": 5, "completion": 2}},
        {"provider": "cc", "pricing": {"prompt": 1, "completion": 2, "request": 0.01}},
        {"provider": "dd", "pricing": {"prompt": 1, "completion": 2, "image": 0.05}}
    ]}"#
    .to_string()])
}

// `max_price` is a hard ceiling on each listed dimension independently; equal is allowed.
#[test]
fn max_price_each_dimension_is_a_hard_ceiling() {
    let c = max_price_catalog();
    let r = |mp: &str| ranked(&c, &priced("m/mp", &format!(r#", "max_price": {mp}"#)), &NoHealthData);
    assert_eq!(r(r#"{"prompt": 1}"#), s(&["dd", "aa", "cc"]));
    assert_eq!(r(r#"{"completion": 2}"#), s(&["dd", "bb", "cc"]));
    assert_eq!(r(r#"{"request": 0.001}"#), s(&["dd", "bb", "aa"]));
    assert_eq!(r(r#"{"image": 0.01}"#), s(&["bb", "aa", "cc"]));
    // Boundaries are inclusive; explicit nulls are unset.
    assert_eq!(r(r#"{"prompt": 5, "completion": 10, "request": 0.01, "image": 0.05}"#), s(&["dd", "bb", "aa", "cc"]));
    assert_eq!(r(r#"{"prompt": null, "completion": 2}"#), s(&["dd", "bb", "cc"]));
    let e =
        fails(&c, &priced("m/mp", r#", "max_price": {"prompt": 1, "completion": 2, "request": 0.001, "image": 0.01}"#));
    assert_no_endpoints(&e, "m/mp", "max_price");
}

// Context length must hold the prompt estimate plus max_tokens (boundary inclusive); endpoints
// without `context_length` are never dropped.
#[test]
fn context_length_must_hold_prompt_plus_max_tokens() {
    let c = filter_catalog();
    let prompt = ChatRequest::parse(body("m/x", "").as_bytes()).map(|r| r.prompt_tokens).unwrap_or(0);
    assert!(prompt > 0);
    let with_max = |n: u64| priced_max("m/x", n);
    // Exactly fills alpha's 1000-token window: kept.
    assert_eq!(ranked(&c, &with_max(1000 - prompt), &NoHealthData), s(&ALL_X));
    // One token more: alpha dropped.
    assert_eq!(
        ranked(&c, &with_max(1001 - prompt), &NoHealthData),
        s(&["beta", "gamma", "deepinfra/turbo", "deepinfra/fast", "delta"])
    );
    // Beyond gamma's 100k as well: only endpoints without a declared window remain.
    assert_eq!(
        ranked(&c, &with_max(200_000), &NoHealthData),
        s(&["beta", "deepinfra/turbo", "deepinfra/fast", "delta"])
    );
    // max_completion_tokens / max_output_tokens count the same way.
    let b = body("m/x", &format!(r#", "max_output_tokens": {}, "provider": {{"sort": "price"}}"#, 1001 - prompt));
    assert_eq!(ranked(&c, &b, &NoHealthData)[0], "beta");
}

// Regression (hostile input): `prompt + max_tokens` once wrapped for a huge `max_tokens`, so an
// endpoint with a small window was kept (and debug builds panicked). The sum saturates.
#[test]
fn huge_max_tokens_saturates_instead_of_wrapping() {
    let c = filter_catalog();
    for n in [u64::MAX, u64::MAX - 1, u64::MAX / 2 + 1] {
        assert_eq!(
            ranked(&c, &with_max_tokens(n), &NoHealthData),
            s(&["beta", "deepinfra/turbo", "deepinfra/fast", "delta"]),
            "max_tokens {n}"
        );
    }
}

fn with_max_tokens(n: u64) -> String {
    priced_max("m/x", n)
}

fn priced_max(model: &str, max_tokens: u64) -> String {
    body(model, &format!(r#", "max_tokens": {max_tokens}, "provider": {{"sort": "price"}}"#))
}

// Each hard filter, emptying the set on its own, is named in `error.metadata.constraint`.
#[test]
fn each_filter_names_itself_when_it_empties_the_set() {
    let c = filter_catalog();
    let cases: [(&str, &str, &str); 10] = [
        ("m/x", r#""only": ["mine"]"#, "only"),
        ("m/x", r#""ignore": ["alpha", "beta", "gamma", "deepinfra", "delta"]"#, "ignore"),
        ("m/x", r#""quantizations": ["int4"]"#, "quantizations"),
        ("m/unsafe", r#""data_collection": "deny""#, "data_collection"),
        ("m/unsafe", r#""zdr": true"#, "zdr"),
        ("m/x", r#""enforce_distillable_text": true"#, "enforce_distillable_text"),
        ("m/x", r#""require_parameters": true"#, "require_parameters"),
        ("m/x", r#""max_price": {"completion": 0.5}"#, "max_price"),
        ("m/unsafe", "", "context_length"),
        ("m/x", r#""order": ["mine", "nobody"], "allow_fallbacks": false"#, "order"),
    ];
    for (m, fields, constraint) in cases {
        // `logprobs` is supported nowhere; 10000 tokens fit only endpoints without a small window.
        let b = body(m, &format!(r#", "logprobs": true, "max_tokens": 10000, "provider": {{{fields}}}"#));
        let e = fails(&c, &b);
        assert_no_endpoints(&e, m, constraint);
    }
}

// When several filters would empty the set, the constraint is the FIRST in SPEC order (only,
// ignore, quantizations, data_collection, zdr, enforce_distillable_text, require_parameters,
// max_price, context length). Each step below drops the first filter and expects the next.
#[test]
fn constraint_is_the_first_emptying_filter_in_spec_order() {
    let c = filter_catalog();
    let filters = [
        (r#""only": ["nobody"]"#, "only"),
        (r#""ignore": ["gamma", "delta"]"#, "ignore"),
        (r#""quantizations": ["int4"]"#, "quantizations"),
        (r#""data_collection": "deny""#, "data_collection"),
        (r#""zdr": true"#, "zdr"),
        (r#""enforce_distillable_text": true"#, "enforce_distillable_text"),
        (r#""require_parameters": true"#, "require_parameters"),
        (r#""max_price": {"prompt": 0.5}"#, "max_price"),
        ("", "context_length"),
    ];
    for i in 0..filters.len() {
        let fields: Vec<&str> = filters[i..].iter().map(|f| f.0).filter(|f| !f.is_empty()).collect();
        let b = body(
            "m/unsafe",
            &format!(r#", "logprobs": true, "max_tokens": 100000, "provider": {{{}}}"#, fields.join(", ")),
        );
        let e = fails(&c, &b);
        assert_no_endpoints(&e, "m/unsafe", filters[i].1);
    }
    // A filter that narrows without emptying never gets named: only leaves gamma, quantizations empties.
    let e = fails(&c, &priced("m/x", r#", "only": ["gamma"], "quantizations": ["fp8"]"#));
    assert_no_endpoints(&e, "m/x", "quantizations");
}

// All models filtered empty: the 404 names the primary model and ITS constraint, even when a
// fallback model failed on a filter that comes earlier in SPEC order.
#[test]
fn all_models_filtered_reports_the_primary_models_constraint() {
    let c = catalog(&[
        model("m/a", &[ep_x("gamma", 1.0, r#", "quantization": "bf16""#)]),
        model("m/b", &[ep_x("alpha", 1.0, r#", "quantization": "fp8""#)]),
    ]);
    // m/a passes quantizations and fails zdr; m/b fails quantizations.
    let b = body("m/a", r#", "models": ["m/b"], "provider": {"zdr": true, "quantizations": ["bf16"]}"#);
    let e = fails(&c, &b);
    assert_no_endpoints(&e, "m/a", "zdr");
}

// A later model is still served when the primary model is filtered empty.
#[test]
fn later_model_is_served_when_the_primary_is_filtered_empty() {
    let c = filter_catalog();
    let p =
        ok(&c, &body("m/unsafe", r#", "models": ["m/x"], "provider": {"sort": "price", "zdr": true}"#), &NoHealthData);
    assert_eq!(labels(&c, &p), s(&["m/x@alpha", "m/x@deepinfra/turbo", "m/x@deepinfra/fast"]));
}

// Unknown `model` / `models[i]` is a 400 model_not_found naming the field.
#[test]
fn unknown_model_is_400_model_not_found_naming_the_field() {
    let c = filter_catalog();
    let e = fails(&c, &body("m/nope", ""));
    assert_eq!((e.status, e.code, e.param.as_deref()), (400, "model_not_found", Some("model")));
    let e = fails(&c, &body("m/x", r#", "models": ["m/d", "m/nope"]"#));
    assert_eq!((e.status, e.code, e.param.as_deref()), (400, "model_not_found", Some("models[1]")));
}

// ---------------------------------------------------------------------------------------------
// `order` and `allow_fallbacks`
// ---------------------------------------------------------------------------------------------

/// `m/o`: aa $1, deepinfra/fast $1.5, bb $2, deepinfra/turbo $2.5, cc $3.
fn order_catalog() -> Catalog {
    catalog(&[model(
        "m/o",
        &[ep("aa", 1.0), ep("bb", 2.0), ep("cc", 3.0), ep("deepinfra/turbo", 2.5), ep("deepinfra/fast", 1.5)],
    )])
}

// `order` slugs go first in the given order; slugs not serving the model (a provider of another
// model, an unknown name) are skipped; the rest follow (here: cheapest first). Score = position.
#[test]
fn order_goes_first_skipping_slugs_that_do_not_serve_the_model() {
    let c = order_catalog();
    let p = ok(&c, &with_provider("m/o", r#""order": ["cc", "nobody", "mine", "bb"]"#), &NoHealthData);
    assert_eq!(slugs(&c, &p), s(&["cc", "bb", "aa", "deepinfra/fast", "deepinfra/turbo"]));
    assert_eq!(p.strategy.to_string(), "order");
    assert_eq!(p.attempts[0].score, 0.0);
    assert_eq!(p.attempts[1].score, 3.0);
}

// A base slug in `order` matches every variant, cheapest first; a full slug only its variant.
#[test]
fn order_base_slug_matches_variants_cheapest_first() {
    let c = order_catalog();
    assert_eq!(
        ranked(&c, &with_provider("m/o", r#""order": ["deepinfra"]"#), &NoHealthData),
        s(&["deepinfra/fast", "deepinfra/turbo", "aa", "bb", "cc"])
    );
    assert_eq!(
        ranked(&c, &with_provider("m/o", r#""order": ["deepinfra/turbo", "aa"]"#), &NoHealthData),
        s(&["deepinfra/turbo", "aa", "deepinfra/fast", "bb", "cc"])
    );
}

// After the `order` list the rest follow the default policy (a price-weighted draw: rand near 1
// draws the most expensive remaining endpoint first, then ascending price).
#[test]
fn order_rest_follows_the_default_price_weighted_draw() {
    let c = order_catalog();
    let p = run_with(&c, &with_provider("m/o", r#""order": ["cc"]"#), &NoHealthData, &mut || 0.9999)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(slugs(&c, &p), s(&["cc", "deepinfra/turbo", "aa", "deepinfra/fast", "bb"]));
}

// With `order` and `sort`, the rest follow the explicit sort.
#[test]
fn order_rest_follows_explicit_sort() {
    let c = order_catalog();
    let h = Stats::default()
        .with("m/o", "aa", EndpointHealth { ttft_ms: p50(300.0), ..Default::default() })
        .with("m/o", "bb", EndpointHealth { ttft_ms: p50(100.0), ..Default::default() })
        .with("m/o", "cc", EndpointHealth { ttft_ms: p50(900.0), ..Default::default() })
        .with("m/o", "deepinfra/fast", EndpointHealth { ttft_ms: p50(200.0), ..Default::default() });
    let p = ok(&c, &with_provider("m/o", r#""order": ["cc"], "sort": "latency""#), &h);
    assert_eq!(slugs(&c, &p), s(&["cc", "bb", "deepinfra/fast", "aa", "deepinfra/turbo"]));
    assert_eq!(p.strategy.to_string(), "order");
}

// allow_fallbacks false with `order`: only the order list is ever attempted, in order.
#[test]
fn allow_fallbacks_false_with_order_keeps_only_the_order_list() {
    let c = order_catalog();
    let b = with_provider("m/o", r#""order": ["cc", "mine", "aa"], "allow_fallbacks": false"#);
    assert_eq!(ranked(&c, &b, &NoHealthData), s(&["cc", "aa"]));
    let b = with_provider("m/o", r#""order": ["deepinfra"], "allow_fallbacks": false, "sort": "price""#);
    assert_eq!(ranked(&c, &b, &NoHealthData), s(&["deepinfra/fast", "deepinfra/turbo"]));
    // None of the order slugs serves the model: nothing may be attempted.
    let e = fails(&c, &with_provider("m/o", r#""order": ["mine"], "allow_fallbacks": false"#));
    assert_no_endpoints(&e, "m/o", "order");
}

// allow_fallbacks false without `order`: only the primary (first-ranked) endpoint.
#[test]
fn allow_fallbacks_false_without_order_keeps_only_the_primary() {
    let c = order_catalog();
    assert_eq!(ranked(&c, &with_provider("m/o", r#""allow_fallbacks": false"#), &NoHealthData), s(&["aa"]));
    assert_eq!(
        ranked(&c, &priced("m/o", r#", "allow_fallbacks": false, "ignore": ["aa"]"#), &NoHealthData),
        s(&["deepinfra/fast"])
    );
}

/// `m/p1`: aa $3, bb $1. `m/p2`: cc $2, dd $4.
fn two_model_catalog() -> Catalog {
    catalog(&[model("m/p1", &[ep("aa", 3.0), ep("bb", 1.0)]), model("m/p2", &[ep("cc", 2.0), ep("dd", 4.0)])])
}

// `models`: each model's endpoints in turn, model by model, in priority order; a model repeated
// in `models` is tried once.
#[test]
fn models_array_tries_models_in_priority_order() {
    let c = two_model_catalog();
    let p = ok(&c, &body("m/p1", r#", "models": ["m/p1", "m/p2"]"#), &NoHealthData);
    assert_eq!(labels(&c, &p), s(&["m/p1@bb", "m/p1@aa", "m/p2@cc", "m/p2@dd"]));
    let p = ok(&c, &body("m/p2", r#", "models": ["m/p1"]"#), &NoHealthData);
    assert_eq!(labels(&c, &p), s(&["m/p2@cc", "m/p2@dd", "m/p1@bb", "m/p1@aa"]));
}

// Reaching a later model means every planned endpoint of the earlier ones failed: that model's
// endpoints at providers that just failed (any variant) go after the others, cheapest-first
// order kept inside each group; an explicit `order` is left alone.
#[test]
fn later_models_try_providers_that_have_not_failed_this_request_first() {
    let c = catalog(&[
        model("m/f1", &[ep("aa", 1.0), ep("deepinfra/turbo", 2.0)]),
        model("m/f2", &[ep("aa", 1.0), ep("deepinfra/fast", 2.0), ep("cc", 3.0), ep("dd", 4.0)]),
    ]);
    let sorted = r#", "models": ["m/f2"], "provider": {"sort": "price"}"#;
    let p = ok(&c, &body("m/f1", sorted), &NoHealthData);
    assert_eq!(
        labels(&c, &p),
        s(&["m/f1@aa", "m/f1@deepinfra/turbo", "m/f2@cc", "m/f2@dd", "m/f2@aa", "m/f2@deepinfra/fast"])
    );
    let ordered = r#", "models": ["m/f2"], "provider": {"order": ["aa", "cc"]}"#;
    let p = ok(&c, &body("m/f1", ordered), &NoHealthData);
    assert_eq!(labels(&c, &p)[2..4], s(&["m/f2@aa", "m/f2@cc"]));
}

// allow_fallbacks false with `models`: provider fallbacks off, model fallbacks on (each model
// keeps its first endpoint); with `order`, each model keeps its order-listed endpoints.
#[test]
fn allow_fallbacks_false_with_models_keeps_each_models_first() {
    let c = two_model_catalog();
    let p = ok(&c, &body("m/p1", r#", "models": ["m/p2"], "provider": {"allow_fallbacks": false}"#), &NoHealthData);
    assert_eq!(labels(&c, &p), s(&["m/p1@bb", "m/p2@cc"]));
    let p = ok(
        &c,
        &body("m/p1", r#", "models": ["m/p2"], "provider": {"allow_fallbacks": false, "sort": "price"}"#),
        &NoHealthData,
    );
    assert_eq!(labels(&c, &p), s(&["m/p1@bb", "m/p2@cc"]));
    let p = ok(
        &c,
        &body("m/p1", r#", "models": ["m/p2"], "provider": {"allow_fallbacks": false, "order": ["dd", "aa"]}"#),
        &NoHealthData,
    );
    assert_eq!(labels(&c, &p), s(&["m/p1@aa", "m/p2@dd"]));
}

// ---------------------------------------------------------------------------------------------
// Explicit sorts (SPEC section 5)
// ---------------------------------------------------------------------------------------------

// Price sort ranks by the estimated cost of THIS request: prompt estimate x prompt price +
// expected completion (max_tokens, else routing.expected_completion_tokens) x completion price +
// request price. The score is that cost in USD.
#[test]
fn sort_price_uses_the_estimated_cost_of_this_request() {
    let models = [r#""m/c": {"endpoints": [
        {"provider": "aa", "pricing": {"prompt": 10, "completion": 1}},
        {"provider": "bb", "pricing": {"prompt": 1, "completion": 10}},
        {"provider": "cc", "pricing": {"prompt": 1, "completion": 1, "request": 0.01}}
    ]}"#
    .to_string()];
    let c = catalog(&models);
    // Short prompt, long completion: completion price dominates.
    let short = body("m/c", r#", "max_tokens": 1000, "provider": {"sort": "price"}"#);
    let p = ok(&c, &short, &NoHealthData);
    assert_eq!(slugs(&c, &p), s(&["aa", "bb", "cc"]));
    assert_eq!(p.strategy.to_string(), "sort:price");
    let pt = ChatRequest::parse(short.as_bytes()).map(|r| r.prompt_tokens as f64).unwrap_or(f64::NAN);
    let expect = [pt * 10.0 / 1e6 + 1000.0 / 1e6, pt / 1e6 + 1000.0 * 10.0 / 1e6, pt / 1e6 + 1000.0 / 1e6 + 0.01];
    for (a, want) in p.attempts.iter().zip(expect) {
        assert!((a.score - want).abs() < 1e-12, "score {} != {want}", a.score);
    }
    // Long prompt (~1000 tokens), one completion token: prompt price dominates.
    let long = format!(
        r#"{{"model": "m/c", "prompt": "{}", "max_tokens": 1, "provider": {{"sort": "price"}}}}"#,
        "x".repeat(4000)
    );
    assert_eq!(ranked(&c, &long, &NoHealthData), s(&["bb", "aa", "cc"]));
    // Without max_tokens the configured completion estimate is used (default 256).
    assert_eq!(ranked(&c, &priced("m/c", ""), &NoHealthData), s(&["aa", "bb", "cc"]));
    let c0 = catalog_routing(&models, r#"{"expected_completion_tokens": 0}"#);
    assert_eq!(ranked(&c0, &priced("m/c", ""), &NoHealthData), s(&["bb", "aa", "cc"]));
}

// Price ties: higher uptime, then lower error rate, then slug. Unknown uptime counts as 1 and
// unknown error rate as 0; a cheaper endpoint wins whatever its health.
#[test]
fn sort_price_ties_higher_uptime_then_lower_error_rate_then_slug() {
    let c = catalog(&[model(
        "m/t",
        &[ep("aa", 1.0), ep("bb", 1.0), ep("cc", 1.0), ep("dd", 1.0), ep("ee", 1.0), ep("zz", 0.5)],
    )]);
    let h = Stats::default()
        .with("m/t", "zz", EndpointHealth { uptime: Some(0.5), error_rate: Some(0.5), ..Default::default() })
        .with("m/t", "aa", EndpointHealth { uptime: Some(0.90), ..Default::default() })
        .with("m/t", "bb", EndpointHealth { uptime: Some(0.99), error_rate: Some(0.05), ..Default::default() })
        .with("m/t", "cc", EndpointHealth { uptime: Some(0.99), error_rate: Some(0.01), ..Default::default() })
        .with("m/t", "dd", EndpointHealth { uptime: Some(0.99), error_rate: Some(0.01), ..Default::default() });
    assert_eq!(ranked(&c, &priced("m/t", ""), &h), s(&["zz", "ee", "cc", "dd", "bb", "aa"]));
}

/// Equal prices for the measured endpoints so only the SPEC tie-breaks decide; ff ($1.5) and
/// ee ($2) are never measured.
fn sort_catalog() -> Catalog {
    catalog(&[model(
        "m/t",
        &[
            ep("aa", 1.0),
            ep("bb", 1.0),
            ep("cc", 1.0),
            ep("dd", 1.0),
            ep("yy", 1.0),
            ep("zz", 1.0),
            ep("ee", 2.0),
            ep("ff", 1.5),
        ],
    )])
}

fn perf(ttft: Option<f64>, tps: Option<f64>, uptime: Option<f64>) -> EndpointHealth {
    EndpointHealth {
        ttft_ms: Percentiles { p50: ttft, ..Default::default() },
        throughput_tps: Percentiles { p50: tps, ..Default::default() },
        uptime,
        ..Default::default()
    }
}

// Latency: lowest p50 TTFT; ties by higher throughput, higher uptime, slug; unmeasured after
// the measured ones, cheapest first. Score = p50 TTFT (NaN without data).
#[test]
fn sort_latency_ties_higher_throughput_then_uptime_then_slug() {
    let c = sort_catalog();
    let h = Stats::default()
        .with("m/t", "zz", perf(Some(100.0), None, None))
        .with("m/t", "dd", perf(Some(200.0), Some(80.0), Some(1.0)))
        .with("m/t", "cc", perf(Some(200.0), Some(80.0), Some(0.9)))
        .with("m/t", "bb", perf(Some(200.0), Some(80.0), Some(0.9)))
        .with("m/t", "aa", perf(Some(200.0), Some(50.0), None))
        .with("m/t", "yy", perf(Some(250.0), Some(999.0), None));
    let p = ok(&c, &with_provider("m/t", r#""sort": "latency""#), &h);
    assert_eq!(slugs(&c, &p), s(&["zz", "dd", "bb", "cc", "aa", "yy", "ff", "ee"]));
    assert_eq!(p.strategy.to_string(), "sort:latency");
    assert_eq!(p.attempts[0].score, 100.0);
    assert!(p.attempts[7].score.is_nan());
}

// Throughput: highest p50 tokens/s; ties by lower TTFT, higher uptime, slug; unmeasured after,
// cheapest first. Score = p50 tokens/s.
#[test]
fn sort_throughput_ties_lower_ttft_then_uptime_then_slug() {
    let c = sort_catalog();
    let h = Stats::default()
        .with("m/t", "zz", perf(None, Some(200.0), None))
        .with("m/t", "dd", perf(Some(50.0), Some(100.0), None))
        .with("m/t", "cc", perf(Some(80.0), Some(100.0), Some(1.0)))
        .with("m/t", "aa", perf(Some(80.0), Some(100.0), Some(0.9)))
        .with("m/t", "bb", perf(Some(80.0), Some(100.0), Some(0.9)))
        .with("m/t", "yy", perf(Some(1.0), Some(10.0), None));
    let p = ok(&c, &with_provider("m/t", r#""sort": "throughput""#), &h);
    assert_eq!(slugs(&c, &p), s(&["zz", "dd", "cc", "aa", "bb", "yy", "ff", "ee"]));
    assert_eq!(p.strategy.to_string(), "sort:throughput");
    assert_eq!(p.attempts[0].score, 200.0);
}

// No measurements at all: latency/throughput sorts fall back to cheapest first, then slug; a
// single measured endpoint goes before every unmeasured one whatever its price.
#[test]
fn sort_latency_and_throughput_without_data_measured_first_then_cheapest() {
    let c = catalog(&[model("m/n", &[ep("aa", 3.0), ep("bb", 1.0), ep("cc", 2.0), ep("dd", 1.0)])]);
    for by in ["latency", "throughput"] {
        let b = with_provider("m/n", &format!(r#""sort": "{by}""#));
        assert_eq!(ranked(&c, &b, &NoHealthData), s(&["bb", "dd", "cc", "aa"]), "{by}");
        let h = Stats::default().with("m/n", "aa", perf(Some(5000.0), Some(1.0), None));
        assert_eq!(ranked(&c, &b, &h), s(&["aa", "bb", "dd", "cc"]), "{by}");
    }
}

// SPEC 5: latency ties are broken by "higher throughput, higher uptime, slug" - price is not in
// the chain. The README's "cheapest first" rule is only for endpoints WITHOUT data.
#[test]
fn sort_latency_full_tie_is_broken_by_slug_not_price() {
    let c = catalog(&[model("m/t", &[ep("aa", 2.0), ep("bb", 1.0)])]);
    let h = Stats::default().with("m/t", "aa", perf(Some(200.0), Some(80.0), Some(0.9))).with(
        "m/t",
        "bb",
        perf(Some(200.0), Some(80.0), Some(0.9)),
    );
    assert_eq!(ranked(&c, &with_provider("m/t", r#""sort": "latency""#), &h), s(&["aa", "bb"]));
}

// SPEC 5: throughput ties are broken by "lower TTFT, higher uptime, slug" - price is not in it.
#[test]
fn sort_throughput_full_tie_is_broken_by_slug_not_price() {
    let c = catalog(&[model("m/t", &[ep("aa", 2.0), ep("bb", 1.0)])]);
    let h = Stats::default().with("m/t", "aa", perf(Some(200.0), Some(80.0), Some(0.9))).with(
        "m/t",
        "bb",
        perf(Some(200.0), Some(80.0), Some(0.9)),
    );
    assert_eq!(ranked(&c, &with_provider("m/t", r#""sort": "throughput""#), &h), s(&["aa", "bb"]));
}

// ---------------------------------------------------------------------------------------------
// Model suffixes and strategy names
// ---------------------------------------------------------------------------------------------

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

// `:nitro` = sort throughput, `:floor` = sort price, `:exacto` = lowest measured malformed
// tool-call rate first (unmeasured after), then price.
#[test]
fn nitro_floor_exacto_suffixes_map_to_orderings() {
    let (c, h) = suffix_catalog();
    let p = ok(&c, &body("m/s:nitro", ""), &h);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["bb", "cc", "aa"]), "sort:throughput"));
    let p = ok(&c, &body("m/s:floor", ""), &h);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["aa", "bb", "cc"]), "sort:price"));
    let p = ok(&c, &body("m/s:exacto", ""), &h);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["cc", "bb", "aa"]), "exacto"));
    assert!((p.attempts[0].score - 0.05).abs() < 1e-12);
}

// An explicit `provider.sort` wins over the suffix (string and object forms).
#[test]
fn explicit_sort_wins_over_suffix() {
    let (c, h) = suffix_catalog();
    let p = ok(&c, &with_provider("m/s:nitro", r#""sort": "price""#), &h);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["aa", "bb", "cc"]), "sort:price"));
    let p = ok(&c, &with_provider("m/s:floor", r#""sort": {"by": "throughput"}"#), &h);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["bb", "cc", "aa"]), "sort:throughput"));
    let p = ok(&c, &with_provider("m/s:exacto", r#""sort": "throughput""#), &h);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["bb", "cc", "aa"]), "sort:throughput"));
}

// An unknown suffix is a 400 invalid_parameter naming the field and the suffix.
#[test]
fn unknown_suffix_is_400_naming_the_field() {
    let (c, _) = suffix_catalog();
    let e = fails(&c, &body("m/s:turbo", ""));
    assert_eq!((e.status, e.code, e.param.as_deref()), (400, "invalid_parameter", Some("model")));
    assert!(e.message.contains(":turbo"), "{}", e.message);
    let e = fails(&c, &body("m/s", r#", "models": ["m/s2:bogus"]"#));
    assert_eq!((e.status, e.param.as_deref()), (400, Some("models[0]")));
}

// A catalog id containing a colon is matched whole (not split as a suffix); a real suffix after
// it still works.
#[test]
fn catalog_ids_with_a_colon_are_not_split() {
    let (c, _) = suffix_catalog();
    let p = ok(&c, &body("v/llama3:8b", ""), &NoHealthData);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["bb", "aa"]), "price_weighted"));
    let p = ok(&c, &body("v/llama3:8b:floor", ""), &NoHealthData);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["bb", "aa"]), "sort:price"));
}

// Each model of `models` is ordered by its own suffix; the strategy header names the primary's.
#[test]
fn each_model_in_models_keeps_its_own_suffix() {
    let (c, h) = suffix_catalog();
    let p = ok(&c, &body("m/s:floor", r#", "models": ["m/s2:nitro"]"#), &h);
    assert_eq!(labels(&c, &p), s(&["m/s@aa", "m/s@bb", "m/s@cc", "m/s2@ee", "m/s2@dd"]));
    assert_eq!(p.strategy.to_string(), "sort:price");
}

// The `x-switchyard-strategy` value for each way an order can be decided.
#[test]
fn strategy_strings() {
    let (c, h) = suffix_catalog();
    let cases = [
        (body("m/s", ""), "price_weighted"),
        (body("m/s", TOOLS), "price_weighted+tool_tiers"),
        (body("m/s", r#", "tool_choice": "auto""#), "price_weighted+tool_tiers"),
        (with_provider("m/s", r#""sort": "price""#), "sort:price"),
        (with_provider("m/s", r#""sort": "latency""#), "sort:latency"),
        (with_provider("m/s", r#""sort": {"by": "throughput", "partition": "none"}"#), "sort:throughput"),
        (body("m/s:nitro", TOOLS), "sort:throughput"),
        (body("m/s:exacto", ""), "exacto"),
        (with_provider("m/s", r#""order": ["bb"]"#), "order"),
        (with_provider("m/s:floor", r#""order": ["bb"], "sort": "price""#), "order"),
        (body("aa/m/s", ""), "pinned"),
        (body("aa/m/s:nitro", ""), "pinned"),
    ];
    for (b, want) in cases {
        assert_eq!(ok(&c, &b, &h).strategy.to_string(), want, "{b}");
    }
    let both = Strategy::Default { policy: DefaultPolicy::RoutingCost, sticky: true, tool_tiers: true };
    assert_eq!(both.to_string(), "routing_cost+sticky+tool_tiers");
}

// ---------------------------------------------------------------------------------------------
// Default policy A: price_weighted
// ---------------------------------------------------------------------------------------------

/// `m/pw`: aa $1, bb $2, cc $3 (same token mix).
fn pw_catalog() -> Catalog {
    catalog(&[model("m/pw", &[ep("cc", 3.0), ep("aa", 1.0), ep("bb", 2.0)])])
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

// A at $1 vs C at $3: weight 1/price^2, so A is drawn first about 9x as often as C (B at $2 about
// 2.25x as often as C). Whoever is drawn, the rest follow by ascending price.
#[test]
fn price_weighted_draws_first_with_inverse_square_price_weight() {
    let c = pw_catalog();
    let firsts = draws(&c, &body("m/pw", ""), &NoHealthData, 20_000, &mut |order| {
        let rest: Vec<String> = s(&["aa", "bb", "cc"]).into_iter().filter(|x| *x != order[0]).collect();
        assert_eq!(order[1..], rest[..], "rest must follow by ascending price");
    });
    let (a, b, cc) = (firsts["aa"] as f64, firsts["bb"] as f64, firsts["cc"] as f64);
    assert_eq!(a + b + cc, 20_000.0);
    let ratio = a / cc;
    assert!((7.5..=10.5).contains(&ratio), "A/C first-pick ratio {ratio} (A {a}, C {cc})");
    let ratio_b = b / cc;
    assert!((1.8..=2.8).contains(&ratio_b), "B/C first-pick ratio {ratio_b}");
}

// The debug score under price_weighted is the probability of being drawn first: weights
// 1 : 1/4 : 1/9 normalised (36/49, 9/49, 4/49), summing to 1.
#[test]
fn price_weighted_scores_are_first_pick_probabilities() {
    let c = pw_catalog();
    let p = ok(&c, &body("m/pw", ""), &NoHealthData);
    assert_eq!(slugs(&c, &p), s(&["aa", "bb", "cc"]));
    assert_eq!(p.strategy.to_string(), "price_weighted");
    let scores: Vec<f64> = p.attempts.iter().map(|a| a.score).collect();
    for (got, want) in scores.iter().zip([36.0 / 49.0, 9.0 / 49.0, 4.0 / 49.0]) {
        assert!((got - want).abs() < 1e-9, "{scores:?}");
    }
    assert!((scores.iter().sum::<f64>() - 1.0).abs() < 1e-9);
}

/// An endpoint whose last attempts all failed (5 of 5 in the outage window).
fn dead() -> EndpointHealth {
    EndpointHealth { recent_attempts: 5, recent_failures: 5, failure_run: 5, ..Default::default() }
}

/// An endpoint measured healthy (5 of 5 succeeded).
fn healthy() -> EndpointHealth {
    EndpointHealth { recent_attempts: 5, ..Default::default() }
}

// An endpoint in a significant outage goes to the back: never first while a stable one
// exists, score 0, and the stable ones' scores still sum to 1.
#[test]
fn price_weighted_recent_outage_goes_to_the_back() {
    let c = pw_catalog();
    let h = Stats::default().with("m/pw", "aa", dead());
    let firsts = draws(&c, &body("m/pw", ""), &h, 2_000, &mut |order| {
        assert_eq!(order.last().map(String::as_str), Some("aa"), "{order:?}");
    });
    assert!(!firsts.contains_key("aa"));
    assert!(firsts["bb"] > firsts["cc"]);
    let p = ok(&c, &body("m/pw", ""), &h);
    assert_eq!(slugs(&c, &p), s(&["bb", "cc", "aa"]));
    let sc: Vec<f64> = p.attempts.iter().map(|a| a.score).collect();
    assert!((sc[0] - 9.0 / 13.0).abs() < 1e-9 && (sc[1] - 4.0 / 13.0).abs() < 1e-9 && sc[2] == 0.0, "{sc:?}");
    // Two in outage beside a healthy peer: they follow it, by ascending price.
    let h2 = h.with("m/pw", "bb", dead()).with("m/pw", "cc", healthy());
    assert_eq!(ranked(&c, &body("m/pw", ""), &h2), s(&["cc", "aa", "bb"]));
}

// Every endpoint failing alike: none is singled out (the outage is judged against peers), so
// the ordinary weighted draw applies and nothing is dropped.
#[test]
fn price_weighted_all_failing_alike_singles_none_out() {
    let c = pw_catalog();
    let h = Stats::default().with("m/pw", "aa", dead()).with("m/pw", "bb", dead()).with("m/pw", "cc", dead());
    let p = run_with(&c, &body("m/pw", ""), &h, &mut || 0.9).unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(p.attempts.len(), 3);
    assert!((p.attempts.iter().map(|a| a.score).sum::<f64>() - 1.0).abs() < 1e-9, "{:?}", p.attempts);
    let firsts = draws(&c, &body("m/pw", ""), &h, 2_000, &mut |_| {});
    assert!(firsts["aa"] > firsts["bb"] && firsts["bb"] > firsts["cc"], "{firsts:?}");
}

// Free endpoints (cost 0) have infinite weight: they share the first pick evenly, paid ones are
// never first (score 0) and follow by price.
#[test]
fn price_weighted_free_endpoints_share_the_first_pick() {
    let c = catalog(&[model("m/free", &[ep("aa", 1.0), ep("ee", 0.0), ep("ff", 0.0)])]);
    let firsts = draws(&c, &body("m/free", ""), &NoHealthData, 4_000, &mut |order| {
        assert_eq!(order[2], "aa", "{order:?}");
    });
    assert!(!firsts.contains_key("aa"));
    let share = firsts["ee"] as f64 / 4_000.0;
    assert!((0.45..=0.55).contains(&share), "ee share {share}");
    let p = ok(&c, &body("m/free", ""), &NoHealthData);
    let sc: Vec<f64> = p.attempts.iter().map(|a| a.score).collect();
    assert_eq!((slugs(&c, &p), sc), (s(&["ee", "ff", "aa"]), vec![0.5, 0.5, 0.0]));
}

// ---------------------------------------------------------------------------------------------
// Soft preferences
// ---------------------------------------------------------------------------------------------

/// `m/soft`: aa $1, bb $2, cc $3, dd $4 (sorted by price in these tests).
fn soft_catalog() -> Catalog {
    catalog(&[model("m/soft", &[ep("aa", 1.0), ep("bb", 2.0), ep("cc", 3.0), ep("dd", 4.0)])])
}

fn ttft(p50: Option<f64>, p90: Option<f64>) -> EndpointHealth {
    EndpointHealth { ttft_ms: Percentiles { p50, p90, ..Default::default() }, ..Default::default() }
}

// preferred_max_latency as a number is a p50 TTFT cutoff in SECONDS (health is in ms); misses
// move to the end keeping their order; unmeasured endpoints are not penalised.
#[test]
fn preferred_max_latency_number_is_p50_seconds() {
    let c = soft_catalog();
    let h = Stats::default()
        .with("m/soft", "aa", ttft(Some(1500.0), None))
        .with("m/soft", "bb", ttft(Some(500.0), Some(5000.0)))
        .with("m/soft", "dd", ttft(Some(2000.0), None));
    assert_eq!(ranked(&c, &priced("m/soft", r#", "preferred_max_latency": 1"#), &h), s(&["bb", "cc", "aa", "dd"]));
    // 1.5 s exactly is not a miss.
    assert_eq!(ranked(&c, &priced("m/soft", r#", "preferred_max_latency": 1.5"#), &h), s(&["aa", "bb", "cc", "dd"]));
}

// preferred_max_latency as an object checks only the listed percentiles.
#[test]
fn preferred_max_latency_percentile_object_checks_only_listed() {
    let c = soft_catalog();
    let h = Stats::default()
        .with("m/soft", "aa", ttft(Some(500.0), Some(3000.0)))
        .with("m/soft", "bb", ttft(Some(1500.0), Some(1800.0)))
        .with("m/soft", "cc", ttft(Some(5000.0), None))
        .with("m/soft", "dd", ttft(None, Some(2500.0)));
    assert_eq!(
        ranked(&c, &priced("m/soft", r#", "preferred_max_latency": {"p90": 2}"#), &h),
        s(&["bb", "cc", "aa", "dd"])
    );
    // Listing p50 as well: cc (p50 5 s) now misses too; bb passes both.
    assert_eq!(
        ranked(&c, &priced("m/soft", r#", "preferred_max_latency": {"p50": 2, "p90": 2}"#), &h),
        s(&["bb", "aa", "cc", "dd"])
    );
}

// preferred_min_throughput: a number is a p50 tokens/s floor; an object checks each listed
// percentile; misses move to the end in order; unmeasured endpoints are not penalised.
#[test]
fn preferred_min_throughput_number_and_object() {
    let c = soft_catalog();
    let tps = |p50: Option<f64>, p75: Option<f64>, p99: Option<f64>| EndpointHealth {
        throughput_tps: Percentiles { p50, p75, p99, ..Default::default() },
        ..Default::default()
    };
    let h = Stats::default()
        .with("m/soft", "aa", tps(Some(30.0), Some(50.0), Some(5.0)))
        .with("m/soft", "bb", tps(Some(60.0), Some(45.0), Some(20.0)))
        .with("m/soft", "dd", tps(Some(10.0), None, None));
    assert_eq!(ranked(&c, &priced("m/soft", r#", "preferred_min_throughput": 50"#), &h), s(&["bb", "cc", "aa", "dd"]));
    let h = h.with("m/soft", "cc", tps(None, Some(30.0), None));
    assert_eq!(
        ranked(&c, &priced("m/soft", r#", "preferred_min_throughput": {"p75": 40, "p99": 10}"#), &h),
        s(&["bb", "dd", "aa", "cc"])
    );
}

// Soft preferences apply after `order`: an order-listed endpoint that misses moves to the end.
#[test]
fn soft_preferences_apply_after_order() {
    let c = soft_catalog();
    let h = Stats::default().with("m/soft", "aa", ttft(Some(3000.0), None));
    let b = with_provider("m/soft", r#""order": ["aa", "bb"], "preferred_max_latency": 1"#);
    assert_eq!(ranked(&c, &b, &h), s(&["bb", "cc", "dd", "aa"]));
}

// ---------------------------------------------------------------------------------------------
// BYOK
// ---------------------------------------------------------------------------------------------

/// `m/byok`: aa $1, bb $2, mine2 $3 (BYOK), mine $5 (BYOK).
fn byok_catalog() -> Catalog {
    catalog(&[model("m/byok", &[ep("aa", 1.0), ep("mine", 5.0), ep("bb", 2.0), ep("mine2", 3.0)])])
}

// BYOK endpoints go before all others (stable): the ordering still applies among the BYOK ones
// and among the rest; with allow_fallbacks false the kept endpoint is a BYOK one.
#[test]
fn byok_endpoints_go_first_and_sort_applies_among_them() {
    let c = byok_catalog();
    assert_eq!(ranked(&c, &priced("m/byok", ""), &NoHealthData), s(&["mine2", "mine", "aa", "bb"]));
    assert_eq!(ranked(&c, &body("m/byok", ""), &NoHealthData), s(&["mine2", "mine", "aa", "bb"]));
    let h = Stats::default()
        .with("m/byok", "mine", perf(Some(100.0), None, None))
        .with("m/byok", "mine2", perf(Some(300.0), None, None))
        .with("m/byok", "aa", perf(Some(50.0), None, None))
        .with("m/byok", "bb", perf(Some(60.0), None, None));
    assert_eq!(ranked(&c, &with_provider("m/byok", r#""sort": "latency""#), &h), s(&["mine", "mine2", "aa", "bb"]));
    assert_eq!(ranked(&c, &priced("m/byok", r#", "allow_fallbacks": false"#), &NoHealthData), s(&["mine2"]));
}

// BYOK-first comes after soft preferences: a BYOK endpoint that misses a preference still goes
// before every non-BYOK endpoint (but after the BYOK ones that do not miss).
#[test]
fn byok_first_even_when_missing_a_soft_preference() {
    let c = byok_catalog();
    let h = Stats::default().with("m/byok", "mine2", perf(Some(3000.0), None, None));
    assert_eq!(ranked(&c, &priced("m/byok", r#", "preferred_max_latency": 1"#), &h), s(&["mine", "mine2", "aa", "bb"]));
}

// ---------------------------------------------------------------------------------------------
// Requests with tools
// ---------------------------------------------------------------------------------------------

/// `m/t`: ee $0.5 (no tools support), aa $1, bb $2, cc $3, dd $4 (all support tools).
/// Malformed tool-call rates: aa 30 % (tier 2), bb 10 % (tier 1), cc 1 % (tier 0), dd and ee
/// unmeasured (tier 0).
fn tools_catalog() -> (Catalog, Stats) {
    let t = r#", "supported_parameters": ["tools", "tool_choice"]"#;
    let c = catalog(&[model(
        "m/t",
        &[ep("ee", 0.5), ep_x("aa", 1.0, t), ep_x("bb", 2.0, t), ep_x("cc", 3.0, t), ep_x("dd", 4.0, t)],
    )]);
    let te = |r: f64| EndpointHealth { tool_error_rate: Some(r), ..Default::default() };
    let h = Stats::default().with("m/t", "aa", te(0.30)).with("m/t", "bb", te(0.10)).with("m/t", "cc", te(0.01));
    (c, h)
}

// Default policy with tools: tiers by tool-call quality (default order kept inside each tier),
// then endpoints not supporting `tools` move to the end.
#[test]
fn tools_tier_by_malformed_tool_call_rate_then_supports_tools() {
    let (c, h) = tools_catalog();
    let p = ok(&c, &body("m/t", TOOLS), &h);
    assert_eq!(slugs(&c, &p), s(&["cc", "dd", "bb", "aa", "ee"]));
    assert_eq!(p.strategy.to_string(), "price_weighted+tool_tiers");
    // Without tools nothing of this applies: plain price-weighted order.
    let p = ok(&c, &body("m/t", ""), &h);
    assert_eq!(
        (slugs(&c, &p), p.strategy.to_string().as_str()),
        (s(&["ee", "aa", "bb", "cc", "dd"]), "price_weighted")
    );
}

// Tier boundaries: < 5 % best, < 20 % middle, the rest last.
#[test]
fn tool_tier_boundaries_are_5_and_20_percent() {
    let (c, _) = tools_catalog();
    let te = |r: f64| EndpointHealth { tool_error_rate: Some(r), ..Default::default() };
    let h = Stats::default()
        .with("m/t", "aa", te(0.20))
        .with("m/t", "bb", te(0.05))
        .with("m/t", "cc", te(0.0499))
        .with("m/t", "dd", te(0.1999));
    assert_eq!(
        ranked(&c, &body("m/t", &format!(r#"{TOOLS}, "provider": {{"ignore": ["ee"]}}"#)), &h),
        s(&["cc", "bb", "dd", "aa"])
    );
}

// `tool_choice` alone also marks a tool request; `tools: []` / null does not.
#[test]
fn tool_choice_alone_triggers_tool_routing_but_empty_tools_does_not() {
    let (c, h) = tools_catalog();
    assert_eq!(ranked(&c, &body("m/t", r#", "tool_choice": "auto""#), &h), s(&["cc", "dd", "bb", "aa", "ee"]));
    let p = ok(&c, &body("m/t", r#", "tools": [], "tool_choice": null"#), &h);
    assert_eq!(
        (slugs(&c, &p), p.strategy.to_string().as_str()),
        (s(&["ee", "aa", "bb", "cc", "dd"]), "price_weighted")
    );
}

// `sort: price` or `:floor` turn tool tiers off (pure price order); the supports-tools preference
// still applies ("even when require_parameters is false, tools prefers endpoints that support tools").
#[test]
fn sort_price_and_floor_turn_tool_tiers_off() {
    let (c, h) = tools_catalog();
    let ignore_ee = format!(r#"{TOOLS}, "provider": {{"sort": "price", "ignore": ["ee"]}}"#);
    assert_eq!(ranked(&c, &body("m/t", &ignore_ee), &h), s(&["aa", "bb", "cc", "dd"]));
    let floor = format!(r#"{TOOLS}, "provider": {{"ignore": ["ee"]}}"#);
    let p = ok(&c, &body("m/t:floor", &floor), &h);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["aa", "bb", "cc", "dd"]), "sort:price"));
    assert_eq!(
        ranked(&c, &body("m/t", &format!(r#"{TOOLS}, "provider": {{"sort": "price"}}"#)), &h),
        s(&["aa", "bb", "cc", "dd", "ee"])
    );
}

// With require_parameters the endpoint without `tools` support is removed instead of demoted.
#[test]
fn require_parameters_with_tools_removes_non_supporting() {
    let (c, h) = tools_catalog();
    let b = body("m/t", &format!(r#"{TOOLS}, "provider": {{"require_parameters": true}}"#));
    assert_eq!(ranked(&c, &b, &h), s(&["cc", "dd", "bb", "aa"]));
}

// ---------------------------------------------------------------------------------------------
// sort partition
// ---------------------------------------------------------------------------------------------

// partition "model" (the default, also for the string form) sorts within each model of `models`.
#[test]
fn sort_partition_model_sorts_within_each_model() {
    let c = two_model_catalog();
    for sort in [r#""price""#, r#"{"by": "price"}"#, r#"{"by": "price", "partition": "model"}"#] {
        let p =
            ok(&c, &body("m/p1", &format!(r#", "models": ["m/p2"], "provider": {{"sort": {sort}}}"#)), &NoHealthData);
        assert_eq!(labels(&c, &p), s(&["m/p1@bb", "m/p1@aa", "m/p2@cc", "m/p2@dd"]), "{sort}");
    }
}

// partition "none" sorts the endpoints of all models together; with allow_fallbacks false each
// model still keeps only its first.
#[test]
fn sort_partition_none_merges_models() {
    let c = two_model_catalog();
    let b = body("m/p1", r#", "models": ["m/p2"], "provider": {"sort": {"by": "price", "partition": "none"}}"#);
    assert_eq!(labels(&c, &ok(&c, &b, &NoHealthData)), s(&["m/p1@bb", "m/p2@cc", "m/p1@aa", "m/p2@dd"]));
    let b = body(
        "m/p1",
        r#", "models": ["m/p2"], "provider": {"sort": {"by": "price", "partition": "none"}, "allow_fallbacks": false}"#,
    );
    assert_eq!(labels(&c, &ok(&c, &b, &NoHealthData)), s(&["m/p1@bb", "m/p2@cc"]));
}

// ---------------------------------------------------------------------------------------------
// Provider-pinned model ids
// ---------------------------------------------------------------------------------------------

fn pin_catalog() -> Catalog {
    catalog(&[
        model("m/s", &[ep("aa", 1.0), ep("bb", 2.0), ep("cc", 3.0)]),
        model("m/o", &[ep("aa", 1.0), ep("deepinfra/turbo", 2.5), ep("deepinfra/fast", 1.5)]),
        model("alpha/chat", &[ep("beta", 2.0), ep("gamma", 1.0)]),
        model("v/llama3:8b", &[ep("aa", 2.0), ep("bb", 1.0)]),
    ])
}

// `provider/vendor/model` routes `vendor/model` on that provider only (no fallback to others),
// strategy "pinned"; a suffix still applies.
#[test]
fn provider_prefixed_model_id_pins_that_provider() {
    let c = pin_catalog();
    let p = ok(&c, &body("bb/m/s", ""), &NoHealthData);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["bb"]), "pinned"));
    assert_eq!(c.models[c.endpoints[p.attempts[0].endpoint].model].id, "m/s");
    let p = ok(&c, &body("cc/m/s:floor", ""), &NoHealthData);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["cc"]), "pinned"));
}

// A pinned base slug keeps every variant of that provider; a pin on a provider that does not
// serve the model is a 404; a first segment that is not a provider is an unknown model.
#[test]
fn pinned_base_slug_keeps_variants_and_unserved_pin_is_404() {
    let c = pin_catalog();
    assert_eq!(ranked(&c, &body("deepinfra/m/o", ""), &NoHealthData), s(&["deepinfra/fast", "deepinfra/turbo"]));
    let e = fails(&c, &body("mine/m/s", ""));
    assert_no_endpoints(&e, "mine/m/s", "model");
    let e = fails(&c, &body("nobody/m/s", ""));
    assert_eq!((e.status, e.code, e.param.as_deref()), (400, "model_not_found", Some("model")));
}

// A vendor/model id whose first segment happens to equal a provider name, but which is itself a
// catalog model, is that model - not a pin.
#[test]
fn catalog_model_whose_vendor_equals_a_provider_is_not_pinned() {
    let c = pin_catalog();
    let p = ok(&c, &body("alpha/chat", ""), &NoHealthData);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["gamma", "beta"]), "price_weighted"));
}

// SPEC 3: `provider/<catalog model id>` pins that provider for ANY catalog model, including ids
// that contain a colon (`:free`/`:8b`-style ids the catalog lists whole).
#[test]
fn pinned_id_of_a_colon_model_is_routed() {
    let c = pin_catalog();
    let p = ok(&c, &body("aa/v/llama3:8b", ""), &NoHealthData);
    assert_eq!((slugs(&c, &p), p.strategy.to_string().as_str()), (s(&["aa"]), "pinned"));
}

// ---------------------------------------------------------------------------------------------
// decision: the first attempt's upstream request
// ---------------------------------------------------------------------------------------------

fn decision_catalog() -> Catalog {
    decision_catalog_routing("{}")
}

fn decision_catalog_routing(routing: &str) -> Catalog {
    catalog_routing(
        &[model(
        "m/dec",
        &[
            r#"{"provider": "alpha", "upstream_model": "alpha-model-v1", "pricing": {"prompt": 1, "completion": 1}}"#
                .to_string(),
            r#"{"provider": "beta", "upstream_model": "beta/m", "pricing": {"prompt": 2, "completion": 2}}"#
                .to_string(),
        ],
    )],
        routing,
    )
}

const DEC_BODY: &str = r#"{"route": "fallback", "model": "m/dec", "temperature": 0.70, "messages": [{"role": "user", "content": "h\u00e9"}], "provider": {"sort": "price"}, "models": ["m/dec"], "plugins": [], "stream": true}"#;

// decide: the body goes to the first-ranked endpoint with `model` replaced by its upstream id and
// first, routing fields removed, everything else byte-for-byte in order.
#[test]
fn decide_rewrites_body_for_the_first_endpoint() {
    let c = decision_catalog();
    let d = decide(&c, DEC_BODY.as_bytes(), &NoHealthData, &mut || 0.0).unwrap_or_else(|e| panic!("{}", e.body()));
    assert!(d.stream);
    assert_eq!(d.plan.strategy.to_string(), "sort:price");
    assert_eq!(slugs(&c, &d.plan), s(&["alpha", "beta"]));
    assert_eq!(d.model, "m/dec");
    assert_eq!(
        String::from_utf8_lossy(&d.body),
        r#"{"model":"alpha-model-v1","temperature":0.70,"messages":[{"role": "user", "content": "h\u00e9"}],"stream":true,"stream_options":{"include_usage":true}}"#
    );
    assert!(!d.hide_usage_chunk, "asked for the caller, who gets it though it did not ask (OpenRouter)");
}

// Only OpenAI chat and completions streams are asked for their usage (the Responses API always
// reports it and refuses `include_usage`); a caller who asked sees the usage chunk.
#[test]
fn only_chat_and_completions_streams_ask_for_their_usage() {
    let c = decision_catalog();
    let run = |surface: &Surface, body: &str| {
        crate::routing::decision::decide_for(
            &c,
            None,
            &crate::routing::presets::NO_PRESETS,
            surface,
            None,
            body.as_bytes(),
            &NoHealthData,
            &mut || 0.0,
        )
        .unwrap_or_else(|e| panic!("{}", e.body()))
    };
    let d = run(&Surface::OPENAI_RESPONSES, DEC_BODY);
    assert!(!String::from_utf8_lossy(&d.body).contains("stream_options") && !d.hide_usage_chunk);
    let unstreamed = DEC_BODY.replace(r#""stream": true"#, r#""stream": false"#);
    let d = run(&Surface::OPENAI, &unstreamed);
    assert!(!String::from_utf8_lossy(&d.body).contains("stream_options") && !d.hide_usage_chunk);
    let asked = DEC_BODY.replace(r#""stream": true"#, r#""stream": true, "stream_options": {"include_usage": true}"#);
    let d = run(&Surface::OPENAI, &asked);
    assert!(String::from_utf8_lossy(&d.body).ends_with(r#""stream_options":{"include_usage":true}}"#));
    assert!(!d.hide_usage_chunk, "the caller asked: it gets the usage chunk");
}

// `routing.stream_usage`: by default (OpenRouter's rule) every chat or completions stream shows
// the caller its usage chunk, even one that said `include_usage: false`; under `when_asked`
// (OpenAI's rule) only a caller who asked sees it. The provider is asked for it either way.
#[test]
fn the_usage_chunk_reaches_every_stream_unless_the_operator_keeps_openais_rule() {
    let always = r#"{"stream_usage": "always"}"#;
    let when_asked = r#"{"stream_usage": "when_asked"}"#;
    for (routing, include_usage, hidden) in [
        ("{}", None, false),
        ("{}", Some(false), false),
        ("{}", Some(true), false),
        (always, None, false),
        (always, Some(false), false),
        (when_asked, None, true),
        (when_asked, Some(false), true),
        (when_asked, Some(true), false),
    ] {
        let c = decision_catalog_routing(routing);
        let body = match include_usage {
            None => DEC_BODY.to_string(),
            Some(asked) => DEC_BODY.replace(
                r#""stream": true"#,
                &format!(r#""stream": true, "stream_options": {{"include_usage": {asked}}}"#),
            ),
        };
        let d = decide(&c, body.as_bytes(), &NoHealthData, &mut || 0.0).unwrap_or_else(|e| panic!("{}", e.body()));
        assert_eq!(d.hide_usage_chunk, hidden, "routing {routing}, include_usage {include_usage:?}");
        let sent = String::from_utf8_lossy(&d.body);
        assert!(sent.ends_with(r#""stream_options":{"include_usage":true}}"#), "the provider is asked: {sent}");
    }
}

// Each OpenAI request body loses the OpenRouter fields its own API lacks: chat completions
// takes `reasoning` as `reasoning_effort`, the Responses API takes `reasoning` itself, the
// legacy completions neither (nor `prompt_cache_key`). OpenRouter's own fields reach none.
#[test]
fn each_openai_body_loses_the_openrouter_fields_its_api_lacks() {
    let c = decision_catalog();
    let run = |surface: &Surface, body: &str| {
        let d = crate::routing::decision::decide_for(
            &c,
            None,
            &crate::routing::presets::NO_PRESETS,
            surface,
            None,
            body.as_bytes(),
            &NoHealthData,
            &mut || 0.0,
        )
        .unwrap_or_else(|e| panic!("{}", e.body()));
        String::from_utf8(d.body).unwrap_or_default()
    };
    let extra =
        r#""usage": {"include": true}, "transforms": [], "reasoning": {"effort": "low"}, "prompt_cache_key": "k", "#;
    let chat = DEC_BODY.replacen('{', &format!("{{{extra}"), 1);
    let completions = chat.replace(r#""messages""#, r#""prompt": "hi", "ignored""#);
    assert_eq!(
        run(&Surface::OPENAI, &chat),
        r#"{"model":"alpha-model-v1","reasoning_effort":"low","prompt_cache_key":"k","temperature":0.70,"messages":[{"role": "user", "content": "h\u00e9"}],"stream":true,"stream_options":{"include_usage":true}}"#
    );
    let responses = run(&Surface::OPENAI_RESPONSES, &chat);
    assert!(
        responses.starts_with(r#"{"model":"alpha-model-v1","reasoning":{"effort": "low"},"prompt_cache_key":"k","#),
        "{responses}"
    );
    let completions = run(&Surface::OPENAI, &completions);
    assert!(completions.starts_with(r#"{"model":"alpha-model-v1","temperature":0.70,"prompt":"hi","#), "{completions}");
}

// A later attempt splices its own upstream id over the body's model prefix (here beta: path
// prefix `/openai/v1`, custom credential header); the result is the same body the first
// attempt got with only `model` changed. Past the end of the plan there is no attempt.
#[test]
fn later_attempts_splice_their_model_into_the_decided_body() {
    let c = decision_catalog();
    let d = decide(&c, DEC_BODY.as_bytes(), &NoHealthData, &mut || 0.0).unwrap_or_else(|e| panic!("{}", e.body()));
    // The plan the downstream filter really hands over (not one rebuilt here).
    let plan = hand_off(&c, 1, &d, "/v1/responses").plan;
    assert_eq!(plan.prefix_len as usize, model_prefix("alpha-model-v1").len());
    let second = attempt_rewrite(&c, 1, &plan, 2, "c_beta").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(second.authority, "beta.example");
    assert_eq!(second.path, "/openai/v1/responses");
    assert_eq!(second.credential, Some(("x-api-key".to_string(), "beta-secret".to_string())));
    let prefix = second.new_prefix.clone().unwrap_or_else(|| panic!("beta needs its own model id"));
    let mut body = prefix;
    body.extend_from_slice(&d.body[plan.prefix_len as usize..]);
    assert_eq!(body.len(), second.content_length);
    assert_eq!(
        String::from_utf8_lossy(&body),
        r#"{"model":"beta/m","temperature":0.70,"messages":[{"role": "user", "content": "h\u00e9"}],"stream":true,"stream_options":{"include_usage":true}}"#
    );
    assert!(attempt_rewrite(&c, 1, &plan, 3, "c_beta").is_err());
}

// hand_off: the plan is cut to the attempt budget; clusters, endpoint names and the retry count
// follow the ranked order; every planned attempt's own cluster is accepted, any other refused.
#[test]
fn hand_off_cuts_the_plan_to_the_budget_and_names_each_attempt() {
    let eps: Vec<String> =
        ["aa", "bb", "cc", "dd", "ee", "ff"].iter().enumerate().map(|(i, p)| ep(p, (i + 1) as f64)).collect();
    let c = catalog_routing(&[model("m/six", &eps)], r#"{"max_attempts": 3}"#);
    let b = body("m/six", r#", "provider": {"sort": "price"}"#);
    let d = decide(&c, b.as_bytes(), &NoHealthData, &mut || 0.0).unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(d.plan.attempts.len(), 6, "the ranking itself is not cut");
    let h = hand_off(&c, 7, &d, "/v1/chat/completions?x=1");
    assert_eq!(h.clusters, s(&["c_aa", "c_bb", "c_cc"]));
    assert_eq!(h.max_retries(), 2);
    assert_eq!(h.plan.catalog_id, 7);
    assert_eq!(h.plan.body_len as usize, d.body.len());
    assert_eq!(h.plan.path, "/v1/chat/completions?x=1");
    let names: Vec<(&str, &str)> = h.plan.refs.iter().map(|r| (r.model.as_str(), r.slug.as_str())).collect();
    assert_eq!(names, vec![("m/six", "aa"), ("m/six", "bb"), ("m/six", "cc")]);
    for (k, cluster) in h.clusters.iter().enumerate() {
        assert!(attempt_rewrite(&c, 7, &h.plan, k + 1, cluster).is_ok(), "attempt {}", k + 1);
        assert!(attempt_rewrite(&c, 7, &h.plan, k + 1, "c_ff").is_err(), "attempt {} to an unplanned cluster", k + 1);
    }
    assert!(attempt_rewrite(&c, 7, &h.plan, 4, "c_dd").is_err(), "past the budget");
    // The plan survives its wire encoding.
    assert_eq!(AttemptPlan::decode(&h.plan.encode()), Some(h.plan.clone()));
    // A budget of one: no retries.
    let c1 = catalog_routing(&[model("m/six", &eps)], r#"{"max_attempts": 1}"#);
    let d1 = decide(&c1, b.as_bytes(), &NoHealthData, &mut || 0.0).unwrap_or_else(|e| panic!("{}", e.body()));
    let h1 = hand_off(&c1, 7, &d1, "/v1/chat/completions");
    assert_eq!((h1.clusters.len(), h1.max_retries()), (1, 0));
}

// hand_off with first-attempt clusters: a single-model plan's first attempt goes to its
// provider's first-attempt cluster (no per-attempt Wasm) and the plan says so; later attempts
// keep the regular clusters; a plan that may fall back to another model keeps the per-attempt
// filter on attempt 1 (a refusal there must become a retry); so does a provider without one.
#[test]
fn hand_off_sends_a_single_model_first_attempt_to_the_first_attempt_cluster() {
    let c = catalog_json(
        r#"{"providers": {
          "aa": {"cluster": "c_aa", "first_attempt_cluster": "c_aa-first", "authority": "aa.example"},
          "bb": {"cluster": "c_bb", "first_attempt_cluster": "c_bb-first", "authority": "bb.example"},
          "cc": {"cluster": "c_cc", "authority": "cc.example"}},
          "models": {
            "m/one": {"endpoints": [{"provider": "aa", "pricing": {"prompt": 1, "completion": 1}},
                                    {"provider": "bb", "pricing": {"prompt": 2, "completion": 2}},
                                    {"provider": "cc", "pricing": {"prompt": 3, "completion": 3}}]},
            "m/two": {"endpoints": [{"provider": "bb", "pricing": {"prompt": 1, "completion": 1}}]}},
          "routing": {"default_policy": "price_weighted"}}"#,
    );
    let hand = |b: String| {
        let d = decide(&c, b.as_bytes(), &NoHealthData, &mut || 0.0).unwrap_or_else(|e| panic!("{}", e.body()));
        hand_off(&c, 7, &d, "/v1/chat/completions")
    };
    let h = hand(body("m/one", r#", "provider": {"sort": "price"}"#));
    assert_eq!(h.clusters, s(&["c_aa-first", "c_bb", "c_cc"]));
    assert!(h.plan.first_prepared);
    // Attempts after the first check their regular cluster as before.
    assert!(attempt_rewrite(&c, 7, &h.plan, 2, "c_bb").is_ok());
    assert!(attempt_rewrite(&c, 7, &h.plan, 2, "c_bb-first").is_err());
    let h = hand(body("m/one", r#", "provider": {"order": ["cc", "aa"]}"#));
    assert_eq!(h.clusters[0], "c_cc", "a provider without a first-attempt cluster");
    assert!(!h.plan.first_prepared);
    let h = hand(body("m/one", r#", "models": ["m/two"], "provider": {"sort": "price"}"#));
    assert_eq!(h.clusters.first().map(String::as_str), Some("c_aa"), "a fallback model is planned");
    assert!(!h.plan.first_prepared);
    let e = Catalog::from_json(
        br#"{"providers": {"aa": {"cluster": "c_aa", "first_attempt_cluster": "c_aa", "authority": "a"}},
            "models": {"m/x": {"endpoints": [{"provider": "aa", "pricing": {"prompt": 1, "completion": 1}}]}}}"#,
        &|_| None,
    )
    .err()
    .unwrap_or_else(|| panic!("a first-attempt cluster equal to the cluster must be refused"));
    assert_eq!(e.field, "providers[\"aa\"].first_attempt_cluster", "{e}");
}

// decide propagates routing errors unchanged (400 bad JSON, 404 no_endpoints).
#[test]
fn decide_propagates_errors() {
    let c = decision_catalog();
    let e = decide(&c, b"not json", &NoHealthData, &mut || 0.0).err().unwrap_or_else(|| panic!("should fail"));
    assert_eq!((e.status, e.code), (400, "invalid_json"));
    let b = body("m/dec", r#", "provider": {"only": ["gamma"]}"#);
    let e = decide(&c, b.as_bytes(), &NoHealthData, &mut || 0.0).err().unwrap_or_else(|| panic!("should fail"));
    assert_no_endpoints(&e, "m/dec", "only");
}

// The debug candidate list is the ranked order with each score and the statistics the
// decision saw; a score or statistic without data is null.
#[test]
fn candidates_json_lists_ranked_scores_null_without_data() {
    let (c, h) = suffix_catalog();
    let p = ok(&c, &body("m/s:nitro", r#", "provider": {"ignore": ["cc"]}"#), &h);
    let v: Value = serde_json::from_str(&candidates_json(&c, &p, &h)).unwrap_or_else(|e| panic!("{e}"));
    let ends: Vec<(&str, f64)> =
        v.as_array().unwrap().iter().map(|x| (x["endpoint"].as_str().unwrap(), x["score"].as_f64().unwrap())).collect();
    assert_eq!(ends, vec![("bb", 100.0), ("aa", 10.0)]);
    assert_eq!(v[0]["health"]["throughput_p50_tps"], 100.0);
    assert_eq!(v[0]["model"], "m/s");
    let p = ok(&c, &with_provider("m/s2", r#""sort": "latency""#), &NoHealthData);
    let v: Value = serde_json::from_str(&candidates_json(&c, &p, &NoHealthData)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v[0]["endpoint"], "dd");
    assert_eq!(v[1]["endpoint"], "ee");
    assert!(v[0]["score"].is_null() && v[1]["score"].is_null());
    assert_eq!(v[0]["health"]["attempts"], 0);
    assert!(v[0]["health"]["ttft_p50_ms"].is_null());
}

// An endpoint cooling down after a Retry-After goes after every other endpoint, whatever the
// strategy (order, explicit sort, default), BYOK included; it stays in the list as a last resort.
#[test]
fn cooling_down_endpoints_go_last_for_every_strategy() {
    let c = byok_catalog();
    let cool = EndpointHealth { cooling_down: true, ..Default::default() };
    let h = Stats::default().with("m/byok", "aa", cool).with("m/byok", "mine2", cool);
    assert_eq!(ranked(&c, &priced("m/byok", ""), &h), s(&["mine", "bb", "mine2", "aa"]));
    assert_eq!(ranked(&c, &body("m/byok", ""), &h), s(&["mine", "bb", "mine2", "aa"]));
    assert_eq!(ranked(&c, &with_provider("m/byok", r#""order": ["aa", "bb"]"#), &h), s(&["mine", "bb", "mine2", "aa"]));
    // With fallbacks off and only the cooling endpoint approved, it is still attempted.
    assert_eq!(ranked(&c, &with_provider("m/byok", r#""order": ["aa"], "allow_fallbacks": false"#), &h), s(&["aa"]));
}

// Nothing in the request path may panic: thousands of mutated bodies (byte flips, truncations,
// spliced fragments of valid requests) through parse + plan + rewrite must each end in a plan
// or an OpenAI-style error.
#[test]
fn mutated_bodies_never_panic() {
    let c = filter_catalog();
    let seeds = [
        r#"{"model":"m/x","messages":[{"role":"user","content":"hi"}],"provider":{"order":["alpha"],"sort":{"by":"price","partition":"none"},"max_price":{"prompt":1},"preferred_max_latency":{"p90":2}},"models":["m/d:nitro"],"max_tokens":10,"tools":[{"type":"function"}]}"#,
        r#"{"model":"alpha/m/x:exacto","stream":true,"provider":{"quantizations":["fp8"],"data_collection":"deny","zdr":true,"require_parameters":true,"only":["deepinfra/turbo"],"ignore":["x"]}}"#,
        r#"{"models":["m/x","m/unsafe"],"provider":{"preferred_min_throughput":5,"allow_fallbacks":false,"enforce_distillable_text":true}}"#,
    ];
    let fragments = [
        "{",
        "}",
        "[",
        "]",
        "\"",
        ":",
        ",",
        "null",
        "-1",
        "1e999",
        "\"\\u0000\"",
        "\"provider\"",
        "{\"sort\":[]}",
        "\u{e9}",
    ];
    let mut rng = Lcg(0x5eed);
    let mut outcomes = (0usize, 0usize);
    for i in 0..30_000 {
        let seed = seeds[i % seeds.len()].as_bytes();
        let mut b = seed.to_vec();
        mutate(&mut b, &fragments, &mut rng);
        match decide(&c, &b, &NoHealthData, &mut || rng.next()) {
            Ok(d) => {
                assert!(!d.plan.attempts.is_empty());
                assert!(serde_json::from_slice::<Value>(&d.body).is_ok(), "rewritten body must stay valid JSON");
                outcomes.0 += 1;
            }
            Err(e) => {
                assert!(matches!(e.status, 400 | 404), "{}", e.body());
                assert!(serde_json::from_str::<Value>(&e.body()).is_ok());
                outcomes.1 += 1;
            }
        }
    }
    assert!(outcomes.0 > 100 && outcomes.1 > 100, "{outcomes:?}");
}

// ---------------------------------------------------------------------------------------------
// routing_cost (the default policy) and sticky conversations
// ---------------------------------------------------------------------------------------------

/// A live view with one sticky conversation entry and a session header.
struct StickyView {
    stats: Stats,
    conversation: Option<(u64, String, String)>,
    header: Option<String>,
}

impl HealthView for StickyView {
    fn endpoint(&self, model: &str, slug: &str) -> EndpointHealth {
        self.stats.endpoint(model, slug)
    }
    fn sticky(&self, conversation: u64) -> Option<(String, String)> {
        self.conversation.as_ref().filter(|c| c.0 == conversation).map(|c| (c.1.clone(), c.2.clone()))
    }
    fn session_header(&self) -> Option<&str> {
        self.header.as_deref()
    }
}

fn cost_models() -> Vec<String> {
    vec![model("m/rc", &[ep("aa", 1.0), ep("bb", 1.1), ep("cc", 3.0)])]
}

// routing_cost is the default: its terms are in the plan, scores are shares summing to 1, and
// close competitors share the first pick while a far pricier one is rarely first.
#[test]
fn routing_cost_is_the_default_and_shares_traffic_by_cost() {
    let c = cost_catalog(&cost_models());
    let p = ok(&c, &body("m/rc", ""), &NoHealthData);
    assert_eq!(p.strategy.to_string(), "routing_cost");
    assert_eq!(p.cost_terms.len(), 3);
    assert!((p.attempts.iter().map(|a| a.score).sum::<f64>() - 1.0).abs() < 1e-9);
    assert!(p.conversation.is_some(), "a routed conversation is remembered");
    let firsts = draws(&c, &body("m/rc", ""), &NoHealthData, 3_000, &mut |_| {});
    let (aa, bb, cc) = (firsts["aa"], firsts["bb"], *firsts.get("cc").unwrap_or(&0));
    assert!(aa > bb && bb > cc && bb > 600 && cc < 150, "{firsts:?}");
}

// `order` bypasses routing_cost (its remainder stays price_weighted), as do explicit sorts and
// suffixes; only/ignore filter first and routing_cost picks among the rest.
#[test]
fn routing_cost_is_bypassed_by_order_and_sort_and_runs_after_only_and_ignore() {
    let c = cost_catalog(&cost_models());
    let p = ok(&c, &with_provider("m/rc", r#""order": ["cc"]"#), &NoHealthData);
    assert_eq!((p.strategy.to_string().as_str(), p.cost_terms.len(), p.conversation), ("order", 0, None));
    assert_eq!(slugs(&c, &p)[0], "cc");
    let p = ok(&c, &with_provider("m/rc", r#""sort": "price""#), &NoHealthData);
    assert_eq!((p.strategy.to_string().as_str(), p.cost_terms.len()), ("sort:price", 0));
    let p = ok(&c, &body("m/rc:floor", ""), &NoHealthData);
    assert_eq!(p.strategy.to_string(), "sort:price");
    let p = ok(&c, &with_provider("m/rc", r#""ignore": ["aa"]"#), &NoHealthData);
    assert_eq!(p.strategy.to_string(), "routing_cost");
    assert_eq!(p.cost_terms.len(), 2);
    assert!(!slugs(&c, &p).contains(&"aa".to_string()));
}

// A later turn of a conversation stays on the endpoint that served it, on every worker (the
// entry is shared), unless that endpoint is in an outage; `order` ignores stickiness.
/// `m/rc` with cache reads at a tenth of the prompt price on every endpoint.
fn cached_cost_models() -> Vec<String> {
    let ep = |slug: &str, price: f64| {
        format!(
            r#"{{"provider": "{slug}", "pricing": {{"prompt": {price}, "completion": {price}, "cached_prompt": {}}}}}"#,
            price / 10.0
        )
    };
    vec![model("m/rc", &[ep("aa", 1.0), ep("bb", 1.1), ep("cc", 3.0)])]
}

#[test]
fn sticky_conversations_stay_on_their_endpoint_while_it_is_healthy() {
    let c = cost_catalog(&cached_cost_models());
    let turn1 = r#"{"model": "m/rc", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]}"#;
    let turn2 = r#"{"model": "m/rc", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]}"#;
    let conv = ok(&c, turn1, &NoHealthData).conversation.unwrap();
    let view =
        |stats: Stats| StickyView { stats, conversation: Some((conv, "m/rc".into(), "cc".into())), header: None };
    for r in [0.0, 0.5, 0.99] {
        let p = run_with(&c, turn2, &view(Stats::default()), &mut || r).unwrap();
        assert_eq!(slugs(&c, &p)[0], "cc", "rand {r}");
        assert_eq!(p.strategy.to_string(), "routing_cost+sticky");
        assert_eq!(p.conversation, Some(conv), "the later turn has the same key");
    }
    // The sticky endpoint fails: the conversation moves (and re-sticks where it is served).
    let sick = EndpointHealth { recent_attempts: 5, recent_failures: 5, failure_run: 5, ..Default::default() };
    let p = run_with(&c, turn2, &view(Stats::default().with("m/rc", "cc", sick)), &mut || 0.0).unwrap();
    assert_ne!(slugs(&c, &p)[0], "cc");
    assert_eq!(p.strategy.to_string(), "routing_cost");
    // Another conversation is not affected; an explicit order bypasses stickiness.
    let other = r#"{"model": "m/rc", "messages": [{"role": "user", "content": "something else"}]}"#;
    assert_eq!(run_with(&c, other, &view(Stats::default()), &mut || 0.0).unwrap().strategy.to_string(), "routing_cost");
    let ordered = r#"{"model": "m/rc", "provider": {"order": ["aa"]}, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]}"#;
    assert_eq!(slugs(&c, &run_with(&c, ordered, &view(Stats::default()), &mut || 0.0).unwrap())[0], "aa");
    // Cache reads no cheaper than the prompt (no `cached_prompt`, or one at the prompt price):
    // nothing to keep warm, no stickiness.
    let uncached = cost_catalog(&cost_models());
    let p = run_with(&uncached, turn2, &view(Stats::default()), &mut || 0.99).unwrap();
    assert_eq!(p.strategy.to_string(), "routing_cost");
    let same_price = cost_catalog(&[model(
        "m/rc",
        &[
            r#"{"provider": "aa", "pricing": {"prompt": 1, "completion": 1, "cached_prompt": 1}}"#.to_string(),
            r#"{"provider": "cc", "pricing": {"prompt": 3, "completion": 3, "cached_prompt": 3}}"#.to_string(),
        ],
    )]);
    let p = run_with(&same_price, turn2, &view(Stats::default()), &mut || 0.99).unwrap();
    assert_eq!(p.strategy.to_string(), "routing_cost");
}

#[test]
fn conversation_keys_come_from_the_header_the_session_id_or_the_first_messages() {
    let key = |body: &str, header: Option<&str>| {
        let req = ChatRequest::parse(body.as_bytes()).unwrap();
        crate::routing::router::conversation_key(&req, header, 0)
    };
    let a = r#"{"model": "m", "messages": [{"role": "user", "content": "q1"}]}"#;
    let a2 = r#"{"model": "m", "messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "q2"}]}"#;
    let b = r#"{"model": "m", "messages": [{"role": "user", "content": "q2"}]}"#;
    assert_eq!(key(a, None), key(a2, None));
    assert_ne!(key(a, None), key(b, None));
    assert_eq!(key(a, Some("s-1")), key(b, Some("s-1")), "the header names the conversation");
    let s = r#"{"model": "m", "session_id": "s-1", "messages": [{"role": "user", "content": "zz"}]}"#;
    assert_eq!(key(s, None), key(b, Some("s-1")));
    assert_eq!(key(r#"{"model": "m", "messages": []}"#, None), None);
    let req = ChatRequest::parse(a.as_bytes()).unwrap();
    assert_ne!(
        crate::routing::router::conversation_key(&req, None, 1),
        crate::routing::router::conversation_key(&req, None, 2),
        "callers with the same first messages are separate conversations"
    );
}

// ---------------------------------------------------------------------------------------------
// Attempt budget, strategy header, slug warnings
// ---------------------------------------------------------------------------------------------

// A first model with as many endpoints as the budget still leaves one attempt to each fallback
// model (SPEC section 3): budget 4, L has 4 endpoints, D and E one each -> L gets 2.
#[test]
fn budget_keeps_one_attempt_per_fallback_model() {
    let c = catalog_routing(
        &[
            model("m/l", &[ep("aa", 1.0), ep("bb", 2.0), ep("cc", 3.0), ep("dd", 4.0)]),
            model("m/d", &[ep("ee", 1.0), ep("ff", 2.0)]),
            model("m/e", &[ep("yy", 1.0)]),
        ],
        r#"{"max_attempts": 4}"#,
    );
    // The plan handed to Envoy (hand_off), as `model@slug`.
    let cut = |b: &str| -> Vec<String> {
        let d = decide(&c, b.as_bytes(), &NoHealthData, &mut || 0.0).unwrap_or_else(|e| panic!("{}", e.body()));
        hand_off(&c, 1, &d, "/v1/chat/completions")
            .plan
            .refs
            .iter()
            .map(|r| format!("{}@{}", r.model, r.slug))
            .collect()
    };
    assert_eq!(
        cut(&body("m/l", r#", "models": ["m/d", "m/e"], "provider": {"sort": "price"}"#)),
        s(&["m/l@aa", "m/l@bb", "m/d@ee", "m/e@yy"])
    );
    // One fallback model: L keeps budget - 1.
    assert_eq!(
        cut(&body("m/l", r#", "models": ["m/d"], "provider": {"sort": "price"}"#)),
        s(&["m/l@aa", "m/l@bb", "m/l@cc", "m/d@ee"])
    );
    // Without fallback models the whole budget is L's.
    assert_eq!(cut(&priced("m/l", "")), s(&["m/l@aa", "m/l@bb", "m/l@cc", "m/l@dd"]));
}

#[test]
fn budget_with_more_models_than_attempts_keeps_the_first_models() {
    let ids = |a: &[Attempt]| a.iter().map(|x| x.endpoint).collect::<Vec<_>>();
    let att = |e: &[usize]| e.iter().map(|&endpoint| Attempt { endpoint, score: 0.0 }).collect::<Vec<_>>();
    // endpoint i belongs to model i / 10
    let model_of = |i: usize| i / 10;
    assert_eq!(ids(&cut_to_budget(att(&[0, 1, 10, 20, 30]), 2, &model_of)), vec![0, 10]);
    assert_eq!(ids(&cut_to_budget(att(&[0, 1, 2, 10, 11]), 3, &model_of)), vec![0, 1, 10]);
    assert_eq!(ids(&cut_to_budget(att(&[0, 1]), 3, &model_of)), vec![0, 1]);
    // partition none interleaves models: still one reserved per model, rest in rank order
    assert_eq!(ids(&cut_to_budget(att(&[0, 10, 1, 2, 11, 20]), 4, &model_of)), vec![0, 10, 1, 20]);
    assert_eq!(ids(&cut_to_budget(att(&[0, 1]), 0, &model_of)), vec![0]);
}

// `order` is reported only when an order slug served the first attempt.
#[test]
fn strategy_names_order_only_when_order_decided() {
    let c = catalog(&[model("m/s", &[ep("aa", 1.0), ep("bb", 2.0)])]);
    let p = ok(&c, &with_provider("m/s", r#""order": ["bb"]"#), &NoHealthData);
    assert_eq!(p.strategy.to_string(), "order");
    assert_eq!(slugs(&c, &p), s(&["bb", "aa"]));
    // `cc` is a configured provider that does not serve this model: the default policy decided.
    let p = ok(&c, &with_provider("m/s", r#""order": ["cc"]"#), &NoHealthData);
    assert_eq!(p.strategy.to_string(), "price_weighted");
    let p = ok(&c, &with_provider("m/s", r#""order": ["cc"], "sort": "price""#), &NoHealthData);
    assert_eq!(p.strategy.to_string(), "sort:price");
    assert_eq!(slugs(&c, &p), s(&["aa", "bb"]));
}

#[test]
fn unknown_slugs_warn_and_strict_mode_rejects() {
    let models = [model("m/w", &[ep("aa", 1.0), ep("deepinfra/turbo", 2.0)])];
    let c = catalog(&models);
    let p = ok(
        &c,
        &with_provider(
            "m/w",
            r#""order": ["aa", "deepinfra/turbo", "deepinfra/nope"], "only": ["aa", "deepinfra"], "ignore": ["togther"]"#,
        ),
        &NoHealthData,
    );
    assert_eq!(
        p.warnings,
        s(&[
            r#"provider.order[2] "deepinfra/nope" matches no provider"#,
            r#"provider.ignore[0] "togther" matches no provider"#
        ])
    );
    // Configured slugs that do not serve this model are not typos.
    let p = ok(&c, &with_provider("m/w", r#""ignore": ["zz", "bb"]"#), &NoHealthData);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    // Caller text is made header-safe.
    let p = ok(&c, &with_provider("m/w", r#""ignore": ["a\"b\r\nx: y"]"#), &NoHealthData);
    assert_eq!(p.warnings, s(&[r#"provider.ignore[0] "a'b??x: y" matches no provider"#]));

    // Thousands of unknown slugs: the header names four and counts the rest.
    let many: Vec<String> = (0..3000).map(|i| format!("\"x{i}\"")).collect();
    let p = ok(&c, &with_provider("m/w", &format!(r#""order": [{}]"#, many.join(","))), &NoHealthData);
    assert_eq!(p.warnings.len(), 5);
    assert_eq!(p.warnings[4], "2996 more slugs match no provider");

    let strict = catalog_routing(&models, r#"{"strict_provider_slugs": true}"#);
    let e = run(&strict, &with_provider("m/w", r#""only": ["aa"], "ignore": ["togther"]"#), &NoHealthData)
        .err()
        .unwrap_or_else(|| panic!("strict mode should reject"));
    assert_eq!((e.status, e.code, e.param.as_deref()), (400, "invalid_parameter", Some("provider.ignore[0]")));
    assert!(e.message.contains("togther"), "{}", e.message);
    assert!(ok(&strict, &with_provider("m/w", r#""ignore": ["deepinfra"]"#), &NoHealthData).warnings.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Surfaces: a request is routed only to endpoints speaking its API
// ---------------------------------------------------------------------------------------------

fn surfaces_catalog() -> Catalog {
    let json = r#"{"providers": {
        "oa": {"cluster": "c_oa", "authority": "oa", "credential": {"value": "k1"}},
        "an": {"cluster": "c_an", "authority": "an", "credential": {"value": "k2"}, "apis": {"anthropic": {}, "openai": {}}},
        "an2": {"cluster": "c_an2", "authority": "an2", "credential": {"value": "k3"}, "apis": {"anthropic": {}}},
        "go": {"cluster": "c_go", "authority": "go", "credential": {"value": "k4"}, "apis": {"google": {}}}},
      "models": {
        "m/claude": {"endpoints": [
            {"provider": "an", "upstream_model": "claude-a", "pricing": {"prompt": 3, "completion": 3}},
            {"provider": "an2", "upstream_model": "claude-b", "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "oa", "pricing": {"prompt": 0.1, "completion": 0.1}}]},
        "m/gem": {"endpoints": [{"provider": "go", "upstream_model": "gemini-x", "pricing": {"prompt": 1, "completion": 1}}]},
        "m/gpt": {"endpoints": [{"provider": "oa", "pricing": {"prompt": 1, "completion": 1}}]}},
      "routing": {"default_policy": "price_weighted"}}"#;
    Catalog::from_json(json.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("{e}"))
}

fn plan_for(cat: &Catalog, surface: &Surface, body: &str) -> Result<Plan, ApiError> {
    let req = ChatRequest::parse_for(body.as_bytes(), surface, None)?;
    plan(cat, &req, &NoHealthData, &mut || 0.0)
}

#[test]
fn chat_requests_of_every_api_reach_every_endpoint_other_requests_only_their_apis() {
    let c = surfaces_catalog();
    let anthropic = Surface::of(Api::Anthropic);
    let p = plan_for(&c, &anthropic, r#"{"model":"m/claude","max_tokens":10,"messages":[]}"#).unwrap();
    // The cheapest endpoint (oa) speaks only OpenAI: it serves the Anthropic caller translated.
    assert_eq!(slugs(&c, &p), vec!["oa", "an2", "an"]);
    let p = plan_for(&c, &Surface::OPENAI, r#"{"model":"m/claude","messages":[]}"#).unwrap();
    assert_eq!(slugs(&c, &p), vec!["oa", "an2", "an"]);
    // A legacy completions body (`prompt`) is not translated: only OpenAI speakers, and an
    // emptied set is a 404 naming the API.
    let p = plan_for(&c, &Surface::OPENAI, r#"{"model":"m/claude","prompt":"x"}"#).unwrap();
    assert_eq!(slugs(&c, &p), vec!["oa", "an"]);
    let e = plan_for(&c, &Surface::OPENAI, r#"{"model":"m/gem","prompt":"x"}"#).unwrap_err();
    assert_eq!((e.status, e.code), (404, "no_endpoints"));
    assert_eq!(e.metadata["constraint"], "api:openai");
    let google = Surface {
        path_model: Some("m/claude".into()),
        method: Some(GoogleMethod::Generate),
        ..Surface::of(Api::Google)
    };
    let d = crate::routing::decision::decide_for(
        &c,
        None,
        &crate::routing::presets::NO_PRESETS,
        &google,
        None,
        br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":5}}"#,
        &NoHealthData,
        &mut || 0.0,
    )
    .unwrap_or_else(|e| panic!("{}", e.body()));
    // The first endpoint (oa) speaks OpenAI: the written body is OpenAI's, with its model; the
    // Anthropic endpoints' body is stored for their attempts (an speaks OpenAI too: OpenAI's).
    assert_eq!((d.api, d.body_api), (Api::Google, Api::OpenAi));
    let v: Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(v["messages"], serde_json::json!([{"role": "user", "content": "hi"}]));
    assert_eq!(v["max_completion_tokens"], 5);
    assert!(d.body.starts_with(br#"{"model":"gpt"#) || v["model"].is_string(), "{v}");
    let stored: Vec<Api> = d.bodies.iter().map(|(a, _)| *a).collect();
    assert_eq!(stored, vec![Api::Anthropic]);
    let (prefix_len, body) = crate::protocol::plan::decode_body(&d.bodies[0].1).unwrap();
    assert!(body.starts_with(br#"{"model":"claude-b","#) && prefix_len == r#"{"model":"claude-b""#.len());
    // A field the endpoint's API cannot take leaves that API's endpoints out of the plan; if
    // none is left, it is a 400 naming the field in the caller's shape.
    let json_object = br#"{"contents":[],"generationConfig":{"responseMimeType":"application/json"}}"#;
    let gem_or_claude = Surface { path_model: Some("m/claude".into()), ..google.clone() };
    let d = crate::routing::decision::decide_for(
        &c,
        None,
        &crate::routing::presets::NO_PRESETS,
        &gem_or_claude,
        None,
        json_object,
        &NoHealthData,
        &mut || 0.0,
    )
    .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(slugs(&c, &d.plan), vec!["oa", "an"], "an2 (Anthropic only) cannot enforce a JSON object");
    assert!(
        d.plan.warnings.iter().any(|w| w.starts_with("anthropic endpoints left out: response_format")),
        "{:?}",
        d.plan.warnings
    );
    let anthropic_only = r#"{"model":"m/claude","max_tokens":5,"messages":[],"provider":{"only":["an2"]}}"#;
    let p = plan_for(&c, &anthropic, anthropic_only).unwrap();
    assert_eq!(slugs(&c, &p), vec!["an2"]);
    let e = crate::routing::decision::decide_for(
        &c,
        None,
        &crate::routing::presets::NO_PRESETS,
        &Surface::OPENAI,
        None,
        br#"{"model":"m/claude","messages":[],"response_format":{"type":"json_object"},"provider":{"only":["an2"]}}"#,
        &NoHealthData,
        &mut || 0.0,
    )
    .unwrap_err();
    assert_eq!((e.status, e.param.as_deref(), e.api), (400, Some("response_format"), Api::OpenAi));
    // require_parameters is judged on the translated request: an endpoint whose translation
    // drops a parameter (seed, for Anthropic) is out, though its catalog entry lists it.
    let json = r#"{"providers": {
        "oa": {"cluster": "c_oa", "authority": "oa"},
        "an": {"cluster": "c_an", "authority": "an", "apis": {"anthropic": {}}}},
      "models": {"m/x": {"endpoints": [
        {"provider": "an", "pricing": {"prompt": 1, "completion": 1}, "supported_parameters": ["seed"]},
        {"provider": "oa", "pricing": {"prompt": 2, "completion": 2}, "supported_parameters": ["seed"]}]}}}"#;
    let c = Catalog::from_json(json.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("{e}"));
    let decide = |body: &[u8]| {
        crate::routing::decision::decide_for(
            &c,
            None,
            &crate::routing::presets::NO_PRESETS,
            &Surface::OPENAI,
            None,
            body,
            &NoHealthData,
            &mut || 0.0,
        )
    };
    let d = decide(br#"{"model":"m/x","messages":[],"seed":1,"provider":{"require_parameters":true}}"#)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(slugs(&c, &d.plan), vec!["oa"]);
    let d = decide(br#"{"model":"m/x","messages":[],"seed":1}"#).unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(slugs(&c, &d.plan).len(), 2);
    let e = decide(br#"{"model":"m/x","messages":[],"seed":1,"provider":{"require_parameters":true,"only":["an"]}}"#)
        .unwrap_err();
    assert_eq!((e.status, e.metadata["constraint"].as_str()), (404, Some("require_parameters")));
}

#[test]
fn google_decision_hands_off_a_model_free_body_and_per_attempt_paths() {
    let c = surfaces_catalog();
    let google = Surface {
        path_model: Some("m/gem".into()),
        method: Some(GoogleMethod::StreamGenerate),
        ..Surface::of(Api::Google)
    };
    let body = br#"{"contents":[{"parts":[{"text":"x"}]}],"provider":{"sort":"price"}}"#;
    let d = crate::routing::decision::decide_for(
        &c,
        None,
        &crate::routing::presets::NO_PRESETS,
        &google,
        None,
        body,
        &NoHealthData,
        &mut || 0.0,
    )
    .unwrap();
    assert!(d.stream);
    assert_eq!(d.body, br#"{"contents":[{"parts":[{"text":"x"}]}]}"#);
    let h = hand_off(&c, 7, &d, "/v1beta/models/m%2Fgem:streamGenerateContent?alt=sse&key=CALLER");
    assert_eq!(h.plan.prefix_len, 0);
    assert_eq!(h.plan.path, "/v1beta/models/m%2Fgem:streamGenerateContent?alt=sse");
    let rw = attempt_rewrite(&c, 7, &h.plan, 1, "c_go").unwrap();
    assert_eq!(rw.path, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse");
    assert_eq!(rw.credential, Some(("x-goog-api-key".to_string(), "k4".to_string())));
    assert_eq!(rw.content_length, d.body.len());
}

// Sticky conversations on every surface: the key comes from the first user turn and the system
// prompt wherever the API puts them; a later turn of the same conversation has the same key.
#[test]
fn conversation_keys_on_the_anthropic_and_google_surfaces() {
    let key = |surface: &Surface, body: &str| {
        let req = ChatRequest::parse_for(body.as_bytes(), surface, None).unwrap_or_else(|e| panic!("{}", e.body()));
        conversation_key(&req, None, 7)
    };
    let a = Surface::of(Api::Anthropic);
    let first = key(&a, r#"{"model":"m","system":"S","messages":[{"role":"user","content":"hi"}]}"#);
    let later = key(
        &a,
        r#"{"model":"m","system":"S","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"more"}]}"#,
    );
    assert!(first.is_some());
    assert_eq!(first, later);
    assert_ne!(first, key(&a, r#"{"model":"m","system":"T","messages":[{"role":"user","content":"hi"}]}"#));
    let g = Surface { path_model: Some("m".into()), method: Some(GoogleMethod::Generate), ..Surface::of(Api::Google) };
    let gk = key(
        &g,
        r#"{"systemInstruction":{"parts":[{"text":"S"}]},"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
    );
    let gl = key(
        &g,
        r#"{"systemInstruction":{"parts":[{"text":"S"}]},"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"yo"}]}]}"#,
    );
    assert!(gk.is_some());
    assert_eq!(gk, gl);
    assert_ne!(gk, key(&g, r#"{"contents":[{"role":"user","parts":[{"text":"other"}]}]}"#));
}

// The key is read from the conversation's head only: the first user message and the system
// message before it. Later turns (even ones no parser of turns would accept) change nothing.
#[test]
fn conversation_key_reads_only_the_head_of_the_turns() {
    let key = |body: &str| {
        let req =
            ChatRequest::parse_for(body.as_bytes(), &Surface::OPENAI, None).unwrap_or_else(|e| panic!("{}", e.body()));
        conversation_key(&req, None, 7)
    };
    let head = key(r#"{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}"#);
    assert!(head.is_some());
    let later = key(
        r#"{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"system","content":"late"},42,{"role":7}]}"#,
    );
    assert_eq!(head, later);
    assert_ne!(
        head,
        key(r#"{"model":"m","messages":[{"role":"system","content":"T"},{"role":"user","content":"hi"}]}"#)
    );
    assert_ne!(head, key(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#));
    // No user turn: no conversation to name.
    assert_eq!(key(r#"{"model":"m","messages":[{"role":"system","content":"S"}]}"#), None);
}

// ---------------------------------------------------------------------------------------------
// Mesh-wide provider capacity
// ---------------------------------------------------------------------------------------------

/// A view where some providers are over their mesh-wide capacity.
struct Capped(Vec<(&'static str, u64)>);

impl HealthView for Capped {
    fn endpoint(&self, _model: &str, _slug: &str) -> EndpointHealth {
        EndpointHealth::default()
    }
    fn capped_for_s(&self, provider: &str) -> Option<u64> {
        self.0.iter().find(|(p, _)| *p == provider).map(|&(_, s)| s)
    }
}

#[test]
fn a_capped_provider_is_skipped_and_all_capped_is_a_429_with_retry_after() {
    let (c, _) = suffix_catalog();
    let b = with_provider("m/s", r#""sort": "price""#);
    assert_eq!(slugs(&c, &ok(&c, &b, &Capped(vec![]))), s(&["aa", "bb", "cc"]));
    // Not last: gone, even as a last resort.
    assert_eq!(slugs(&c, &ok(&c, &b, &Capped(vec![("aa", 20)]))), s(&["bb", "cc"]));
    let e = run(&c, &b, &Capped(vec![("aa", 20), ("bb", 7), ("cc", 40)])).unwrap_err();
    assert_eq!((e.status, e.code), (429, "capacity_exhausted"));
    assert!(e.headers.contains(&("retry-after".to_string(), "7".to_string())), "{:?}", e.headers);
    // A provider's capacity names nothing the request asked for: other filters still decide.
    let e = run(&c, &with_provider("m/s", r#""only": ["aa"]"#), &Capped(vec![("aa", 5)])).unwrap_err();
    assert_eq!(e.code, "capacity_exhausted");
}

// ---------------------------------------------------------------------------------------------
// BYOK "always use this key"
// ---------------------------------------------------------------------------------------------

fn byok_always_catalog(always: bool) -> Catalog {
    catalog_json(&format!(
        r#"{{"providers": {{
            "openai": {{"cluster": "c_oa", "authority": "oa.example"}},
            "openai/byok": {{"cluster": "c_oab", "authority": "oa.example", "byok": true, "byok_always": {always}}},
            "other": {{"cluster": "c_ot", "authority": "ot.example"}}}},
          "models": {{
            "m/both": {{"endpoints": [
                {{"provider": "openai", "pricing": {{"prompt": 0.5, "completion": 0.5}}}},
                {{"provider": "openai/byok", "pricing": {{"prompt": 1, "completion": 1}}}},
                {{"provider": "other", "pricing": {{"prompt": 2, "completion": 2}}}}]}},
            "m/shared": {{"endpoints": [{{"provider": "openai", "pricing": {{"prompt": 1, "completion": 1}}}}]}}}}}}"#
    ))
}

#[test]
fn byok_always_keeps_the_providers_traffic_on_the_byok_key() {
    // Without the flag the shared endpoint follows the BYOK one.
    let c = byok_always_catalog(false);
    assert_eq!(slugs(&c, &ok(&c, &priced("m/both", ""), &NoHealthData)), s(&["openai/byok", "openai", "other"]));
    // With it, the provider's shared endpoint is never planned (other providers still are).
    let c = byok_always_catalog(true);
    assert_eq!(slugs(&c, &ok(&c, &priced("m/both", ""), &NoHealthData)), s(&["openai/byok", "other"]));
    assert_eq!(slugs(&c, &ok(&c, &body("m/both", ""), &NoHealthData))[0], "openai/byok");
    // A model only the shared endpoint serves: nothing may serve it, and the 404 says why.
    let e = run(&c, &body("m/shared", ""), &NoHealthData).unwrap_err();
    assert_eq!(e.status, 404);
    assert_eq!(e.metadata.get("constraint").and_then(|v| v.as_str()), Some("byok_always"), "{}", e.body());
    // The flag needs a BYOK provider.
    let bad = r#"{"providers": {"p": {"cluster": "c", "authority": "a", "byok_always": true}},
                  "models": {"m/x": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 1}}]}}}"#;
    let e = Catalog::from_json(bad.as_bytes(), &|_| None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("providers[\"p\"].byok_always") && e.contains("byok: true"), "{e}");
}
