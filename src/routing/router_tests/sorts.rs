//! Explicit sorts, model suffixes and strategy names, the default price_weighted policy.

use super::*;

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
