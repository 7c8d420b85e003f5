//! routing_cost, sticky conversations, the attempt budget, strategy header, slug warnings.

use super::*;

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
