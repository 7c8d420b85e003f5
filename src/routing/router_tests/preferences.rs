//! Soft preferences, BYOK, tools, the sort partition, provider-pinned model ids.

use super::*;

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
