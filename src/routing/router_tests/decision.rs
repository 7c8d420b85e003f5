//! The decision: the first attempt's upstream request.

use super::*;

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

#[test]
fn a_body_that_is_not_utf8_is_malformed_json_even_in_a_field_never_read() {
    let mut body = br#"{"model": "m/dec", "messages": [{"role": "user", "content": "hi"}], "unread": ""#.to_vec();
    body.extend_from_slice(b"\xff\"}");
    let e = ChatRequest::parse(&body).err().unwrap_or_else(|| panic!("a body that is not UTF-8 was parsed"));
    assert_eq!((e.status, e.code), (400, "invalid_json"), "{}", e.body());
    assert!(e.message.contains("invalid UTF-8 at byte"), "{}", e.message);
    // The same body in UTF-8 parses.
    let fine = br#"{"model": "m/dec", "messages": [{"role": "user", "content": "hi"}], "unread": "\u00ff"}"#;
    assert!(ChatRequest::parse(fine).is_ok());
}
