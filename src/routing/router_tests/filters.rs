//! Hard filters, `order` and `allow_fallbacks`.

use super::*;

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
