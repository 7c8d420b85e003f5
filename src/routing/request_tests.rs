use super::*;

fn parse(s: &str) -> Result<ChatRequest<'_>, ApiError> {
    ChatRequest::parse(s.as_bytes())
}

fn parse_err(s: &str) -> ApiError {
    match parse(s) {
        Ok(_) => panic!("should fail: {s}"),
        Err(e) => e,
    }
}

#[test]
fn parses_core_fields() {
    let r = parse(
        r#"{"model":"a/b:nitro","models":["c/d"],"stream":true,"max_tokens":100,
        "messages":[{"role":"user","content":"hello there"}],"temperature":0.2,"tools":[{"type":"function"}]}"#,
    )
    .unwrap();
    assert_eq!(r.model.as_deref(), Some("a/b:nitro"));
    assert_eq!(r.models, vec!["c/d"]);
    assert!(r.stream);
    assert_eq!(r.max_tokens, Some(100));
    assert!(r.has_tools);
    // Bytes of the raw `messages` value / 4, rounded up.
    let messages = r#"[{"role":"user","content":"hello there"}]"#;
    assert_eq!(r.prompt_tokens, (messages.len() as u64).div_ceil(4));
    assert_eq!(r.prompt_tokens, 11);
    assert_eq!(r.parameters, vec!["max_tokens", "temperature", "tools"]);
    assert_eq!(r.model_sequence().len(), 2);
}

// OpenRouter's own fields ask nothing of an endpoint: under `require_parameters` they must not
// leave out every endpoint that does not list them (no provider's API has them).
#[test]
fn openrouter_only_fields_are_not_parameters() {
    let body = br#"{"model":"a/b","messages":[],"usage":{"include":true},"transforms":["middle-out"],
        "debug":{"echo_upstream_body":true},"trace":{"trace_id":"t"},"session_id":"s","seed":1}"#;
    for surface in [Surface::OPENAI, Surface::of(Api::Anthropic)] {
        let r = ChatRequest::parse_for(body, &surface, None).unwrap();
        assert_eq!(r.parameters, vec!["seed"], "{:?}", surface.api);
    }
}

#[test]
fn parses_full_provider_object() {
    let r = parse(
        r#"{"model":"a/b","provider":{"order":["x","y/z"],"allow_fallbacks":false,"only":["x"],
      "ignore":["q"],"sort":{"by":"latency","partition":"none"},"quantizations":["fp8","bf16"],
      "data_collection":"deny","zdr":true,"enforce_distillable_text":true,"require_parameters":true,
      "max_price":{"prompt":1,"completion":2.5,"request":0.01,"image":0.1},
      "preferred_min_throughput":{"p50":100,"p90":50},"preferred_max_latency":2}}"#,
    )
    .unwrap();
    let p = r.provider;
    assert_eq!(p.order, vec!["x", "y/z"]);
    assert!(!p.allow_fallbacks);
    assert_eq!(p.only, Some(vec!["x".to_string()]));
    assert_eq!(p.ignore, vec!["q"]);
    assert_eq!(p.sort, Some(Sort { by: SortBy::Latency, partition: Partition::None }));
    assert_eq!(p.quantizations, Some(vec![Quantization::Fp8, Quantization::Bf16]));
    assert!(p.data_collection_deny && p.zdr && p.enforce_distillable_text && p.require_parameters);
    assert_eq!(
        p.max_price,
        MaxPrice { prompt: Some(1.0), completion: Some(2.5), request: Some(0.01), image: Some(0.1) }
    );
    assert_eq!(p.preferred_min_throughput, Some(Cutoffs { p50: Some(100.0), p90: Some(50.0), ..Cutoffs::default() }));
    assert_eq!(p.preferred_max_latency, Some(Cutoffs { p50: Some(2.0), ..Cutoffs::default() }));
}

#[test]
fn sort_string_defaults_to_model_partition_and_nulls_are_unset() {
    let r = parse(r#"{"model":"a/b","provider":{"sort":"price","order":null,"zdr":null}}"#).unwrap();
    assert_eq!(r.provider.sort, Some(Sort { by: SortBy::Price, partition: Partition::Model }));
    assert!(r.provider.order.is_empty());
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (r#"{"model":"a","provider":{"colour":1}}"#, "provider.colour"),
        (r#"{"model":"a","provider":{"order":"x"}}"#, "provider.order"),
        (r#"{"model":"a","provider":{"order":[1]}}"#, "provider.order"),
        (r#"{"model":"a","provider":{"allow_fallbacks":"no"}}"#, "provider.allow_fallbacks"),
        (r#"{"model":"a","provider":{"sort":"cheap"}}"#, "provider.sort"),
        (r#"{"model":"a","provider":{"sort":{"by":"price","partition":"x"}}}"#, "provider.sort.partition"),
        (r#"{"model":"a","provider":{"sort":{"partition":"none"}}}"#, "provider.sort.by"),
        (r#"{"model":"a","provider":{"quantizations":["fp9"]}}"#, "provider.quantizations"),
        (r#"{"model":"a","provider":{"data_collection":"maybe"}}"#, "provider.data_collection"),
        (r#"{"model":"a","provider":{"zdr":1}}"#, "provider.zdr"),
        (r#"{"model":"a","provider":{"max_price":{"tokens":1}}}"#, "provider.max_price.tokens"),
        (r#"{"model":"a","provider":{"max_price":{"prompt":-1}}}"#, "provider.max_price.prompt"),
        (r#"{"model":"a","provider":{"preferred_max_latency":{"p42":1}}}"#, "provider.preferred_max_latency.p42"),
        (r#"{"model":"a","provider":{"preferred_min_throughput":"fast"}}"#, "provider.preferred_min_throughput"),
        (r#"{"model":"a","provider":[]}"#, "provider"),
        (r#"{"model":5}"#, "model"),
        (r#"{"messages":[]}"#, "model"),
        (r#"{"model":"a","stream":"yes"}"#, "stream"),
        (r#"{"model":"a","max_tokens":-3}"#, "max_tokens"),
        (r#"{"model":"a","models":"b"}"#, "models"),
        (r#"{"model":"a","models":["1","2","3","4","5","6","7","8","9"]}"#, "models"),
    ];
    for (body, param) in cases {
        let e = parse_err(body);
        assert_eq!(e.status, 400, "{body}");
        assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        assert!(e.message.contains(param.split('.').next_back().unwrap_or(param)), "{body}: {}", e.message);
    }
}

#[test]
fn malformed_json_is_400_invalid_json() {
    for body in ["{", "[]", "not json", r#"{"model":"a","model":"b"}"#] {
        let e = parse_err(body);
        assert_eq!(e.status, 400);
        assert_eq!(e.code, "invalid_json", "{body}");
    }
}

// Regression (worker stall): the duplicate-key check compared every key with every earlier
// one, so ~90k distinct keys in 1 MiB cost seconds (minutes in a debug build). Linear now;
// the last key duplicating the first must still be found.
#[test]
fn many_distinct_keys_parse_and_a_late_duplicate_is_found() {
    let mut body = String::from(r#"{"model":"a""#);
    let mut i = 0u32;
    while body.len() < 1024 * 1024 - 16 {
        body.push_str(&format!(r#","k{i}":0"#));
        i += 1;
    }
    body.push('}');
    assert!(i > 90_000, "{i} keys");
    let r = parse(&body).unwrap();
    assert_eq!(r.fields.0.len() as u32, i + 1);
    let dup = format!("{},\"k0\":1}}", body.trim_end_matches('}'));
    let e = parse_err(&dup);
    assert_eq!(e.code, "invalid_json");
    assert!(e.message.contains("duplicate field `k0`"), "{}", e.message);
}

// Duplicates are found by comparison up to 16 members and by a hash set past them: a duplicate
// of each earlier member is found at every count around the switch.
#[test]
fn a_duplicate_is_found_on_either_side_of_the_linear_check() {
    for members in 1..=20 {
        for dup_of in 0..members {
            let mut body = String::from(r#"{"model":"a""#);
            for i in 1..members {
                body.push_str(&format!(r#","k{i}":0"#));
            }
            let name = if dup_of == 0 { "model".to_string() } else { format!("k{dup_of}") };
            body.push_str(&format!(r#","{name}":1}}"#));
            let e = parse_err(&body);
            assert!(e.message.contains(&format!("duplicate field `{name}`")), "{body}: {}", e.message);
        }
    }
}

// Regression (compliance smuggling): duplicate keys inside `provider` took the last value
// (`"zdr":true,...,"zdr":false` routed as zdr:false). Duplicates are rejected at every depth,
// as at the top level.
#[test]
fn duplicate_keys_inside_routing_fields_are_rejected() {
    let cases = [
        (r#"{"model":"a","provider":{"zdr":true,"order":["x"],"zdr":false}}"#, "provider", "zdr"),
        (
            r#"{"model":"a","provider":{"data_collection":"deny","data_collection":"allow"}}"#,
            "provider",
            "data_collection",
        ),
        (r#"{"model":"a","provider":{"sort":{"by":"price","by":"latency"}}}"#, "provider", "by"),
        (r#"{"model":"a","provider":{"max_price":{"prompt":1,"prompt":100}}}"#, "provider", "prompt"),
        (r#"{"model":"a","provider":{"preferred_max_latency":{"p50":1,"p50":9}}}"#, "provider", "p50"),
        (r#"{"model":"a","provider":{"only":["x"],"\u006fnly":["y"]}}"#, "provider", "only"),
    ];
    for (body, param, key) in cases {
        let e = parse_err(body);
        assert_eq!((e.status, e.code), (400, "invalid_parameter"), "{body}");
        assert_eq!(e.param.as_deref(), Some(param), "{body}");
        assert!(e.message.contains(&format!("duplicate field `{key}`")), "{body}: {}", e.message);
    }
    // Same key in different objects is fine.
    let r = parse(r#"{"model":"a","provider":{"max_price":{"prompt":1},"sort":{"by":"price"}}}"#).unwrap();
    assert_eq!(r.provider.max_price.prompt, Some(1.0));
}

// Numbers out of range are a 400, never a panic or a wrapped value.
#[test]
fn out_of_range_numbers_are_rejected() {
    for (body, param) in [
        (r#"{"model":"a","max_tokens":18446744073709551616}"#, "max_tokens"),
        (r#"{"model":"a","max_tokens":1e400}"#, "max_tokens"),
        (r#"{"model":"a","max_tokens":1.5}"#, "max_tokens"),
        (r#"{"model":"a","provider":{"max_price":{"prompt":1e999}}}"#, "provider"),
    ] {
        let e = parse_err(body);
        assert_eq!(e.status, 400, "{body}");
        assert!(e.code == "invalid_json" || e.param.as_deref() == Some(param), "{body}: {:?} {}", e.param, e.message);
    }
    assert_eq!(parse(r#"{"model":"a","max_tokens":18446744073709551615}"#).unwrap().max_tokens, Some(u64::MAX));
}

#[test]
fn variant_suffixes() {
    let known = |m: &str| m == "ollama/llama3:8b";
    assert_eq!(split_variant("a/b:nitro", &known, "model").unwrap(), ("a/b", Some(Variant::Nitro)));
    assert_eq!(split_variant("a/b:floor", &known, "model").unwrap(), ("a/b", Some(Variant::Floor)));
    assert_eq!(split_variant("a/b:exacto", &known, "model").unwrap(), ("a/b", Some(Variant::Exacto)));
    assert_eq!(split_variant("a/b", &known, "model").unwrap(), ("a/b", None));
    assert_eq!(split_variant("ollama/llama3:8b", &known, "model").unwrap(), ("ollama/llama3:8b", None));
    let e = split_variant("a/b:turbo", &known, "models[1]").unwrap_err();
    assert_eq!(e.status, 400);
    assert_eq!(e.param.as_deref(), Some("models[1]"));
    assert!(e.message.contains(":turbo"));
}

#[test]
fn top_level_keeps_raw_values_and_order() {
    let body = br#"{"b": {"x" : 1}, "a\u0041":[1, 2]}"#;
    let t = TopLevel::parse(body).unwrap();
    assert_eq!(t.0.len(), 2);
    assert_eq!(t.0[0].0, "b");
    assert_eq!(t.0[0].1.get(), r#"{"x" : 1}"#);
    assert_eq!(t.0[1].0, "aA");
    assert_eq!(t.get("aA").unwrap().get(), "[1, 2]");
}

fn google(model: &str, stream: bool) -> Surface {
    let method = if stream { GoogleMethod::StreamGenerate } else { GoogleMethod::Generate };
    Surface { path_model: Some(model.into()), method: Some(method), ..Surface::of(Api::Google) }
}

#[test]
fn anthropic_bodies_parse_like_openai_ones() {
    let body = br#"{"model":"a/b","max_tokens":300,"system":"be brief","stream":true,
        "messages":[{"role":"user","content":"hi"}],"tools":[{"name":"t","input_schema":{}}],
        "stop_sequences":["x"],"thinking":{"type":"enabled"},"metadata":{"user_id":"u"},
        "provider":{"sort":"price"},"models":["c/d"]}"#;
    let r = ChatRequest::parse_for(body, &Surface::of(Api::Anthropic), None).unwrap();
    assert_eq!(r.api, Api::Anthropic);
    assert_eq!((r.model.as_deref(), r.stream, r.max_tokens, r.has_tools), (Some("a/b"), true, Some(300), true));
    assert_eq!(r.models, vec!["c/d"]);
    assert_eq!(r.provider.sort.map(|s| s.by), Some(SortBy::Price));
    let prompt = r#""be brief""#.len() + r#"[{"role":"user","content":"hi"}]"#.len();
    assert_eq!(r.prompt_tokens, (prompt as u64).div_ceil(4));
    assert_eq!(r.parameters, vec!["max_tokens", "tools", "stop", "reasoning"]);
    let e = ChatRequest::parse_for(br#"{"max_tokens":1}"#, &Surface::of(Api::Anthropic), None).err().unwrap();
    assert_eq!((e.status, e.param.as_deref(), e.api), (400, Some("model"), Api::Anthropic));
}

// OpenRouter's Messages endpoint names the fallback list `fallbacks`, one `{"model"}` per
// entry: the same list as `models`, tried in order, never a parameter.
#[test]
fn anthropic_fallbacks_are_the_models_list() {
    let anthropic = Surface::of(Api::Anthropic);
    fn parse<'a>(b: &'a str, s: &Surface) -> Result<ChatRequest<'a>, ApiError> {
        ChatRequest::parse_for(b.as_bytes(), s, None)
    }
    let r = parse(
        r#"{"model":"a/b","max_tokens":5,"messages":[],"fallbacks":[{"model":"c/d"},{"model":"e/f"}]}"#,
        &anthropic,
    )
    .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(r.models, vec!["c/d", "e/f"]);
    assert_eq!(r.parameters, vec!["max_tokens"]);
    assert_eq!(
        r.model_sequence(),
        vec![
            ("a/b".into(), "model".into()),
            ("c/d".into(), "fallbacks[0]".into()),
            ("e/f".into(), "fallbacks[1]".into())
        ]
    );
    let err = |b: &str| parse(b, &anthropic).err().map(|e| (e.status, e.param.unwrap_or_default(), e.message));
    let (status, param, message) = err(r#"{"model":"a","fallbacks":[{"model":"c","max_tokens":9}]}"#).unwrap();
    assert_eq!((status, param.as_str()), (400, "fallbacks[0].max_tokens"));
    assert!(message.contains("only `model`"), "{message}");
    assert_eq!(err(r#"{"model":"a","fallbacks":[{"model":""}]}"#).map(|e| e.1), Some("fallbacks[0].model".into()));
    assert_eq!(err(r#"{"model":"a","fallbacks":["c"]}"#).map(|e| e.1), Some("fallbacks[0]".into()));
    assert_eq!(err(r#"{"model":"a","fallbacks":{"model":"c"}}"#).map(|e| e.1), Some("fallbacks".into()));
    assert_eq!(
        err(r#"{"model":"a","models":["b"],"fallbacks":[{"model":"c"}]}"#).map(|e| e.1),
        Some("fallbacks".into())
    );
    assert_eq!(err(r#"{"model":"a","fallbacks":[{"model":"c"}],"models":["b"]}"#).map(|e| e.1), Some("models".into()));
    let header = ChatRequest::parse_for(
        br#"{"model":"a","fallbacks":[{"model":"c"}]}"#,
        &anthropic,
        Some(r#"{"models":["b"]}"#),
    );
    assert_eq!(header.err().and_then(|e| e.param), Some("models".into()));
    let many: Vec<String> = (0..=MAX_MODELS).map(|i| format!(r#"{{"model":"m{i}"}}"#)).collect();
    assert_eq!(
        err(&format!(r#"{{"model":"a","fallbacks":[{}]}}"#, many.join(","))).map(|e| e.1),
        Some("fallbacks".into())
    );
    // Not a routing field on the OpenAI surface: a parameter like any other.
    let o = ChatRequest::parse_for(br#"{"model":"a","fallbacks":[{"model":"c"}]}"#, &Surface::OPENAI, None).unwrap();
    assert!(o.models.is_empty());
    assert_eq!(o.parameters, vec!["fallbacks"]);
}

#[test]
fn google_takes_model_and_stream_from_the_path() {
    let body = br#"{"contents":[{"role":"user","parts":[{"text":"hello"}]}],
        "systemInstruction":{"parts":[{"text":"sys"}]},"tools":[{"functionDeclarations":[]}],
        "generationConfig":{"maxOutputTokens":77,"temperature":0.1,"topP":0.5,"responseMimeType":"application/json"},
        "safetySettings":[],"stream":false}"#;
    let r = ChatRequest::parse_for(body, &google("g/flash", true), None).unwrap();
    assert_eq!((r.model.as_deref(), r.stream, r.max_tokens, r.has_tools), (Some("g/flash"), true, Some(77), true));
    assert_eq!(r.parameters, vec!["tools", "max_tokens", "response_format", "temperature", "top_p"]);
    // Bytes of the raw `contents` and `systemInstruction` values / 4, rounded up.
    let prompt = r#"[{"role":"user","parts":[{"text":"hello"}]}]"#.len() + r#"{"parts":[{"text":"sys"}]}"#.len();
    assert_eq!(r.prompt_tokens, (prompt as u64).div_ceil(4));
    assert!(!ChatRequest::parse_for(br#"{"contents":[]}"#, &google("g", false), None).unwrap().stream);
    let e = ChatRequest::parse_for(br#"{"model":"x","contents":[]}"#, &google("g", false), None).err().unwrap();
    assert_eq!((e.param.as_deref(), e.api), (Some("model"), Api::Google));
    let e = ChatRequest::parse_for(br#"{"generationConfig":{"maxOutputTokens":-1}}"#, &google("g", false), None)
        .err()
        .unwrap();
    assert_eq!(e.param.as_deref(), Some("generationConfig.maxOutputTokens"));
}

#[test]
fn routing_fields_from_the_header() {
    let h = r#"{"models":["x/y"],"provider":{"only":["p"],"sort":"latency"}}"#;
    let r = ChatRequest::parse_for(br#"{"contents":[]}"#, &google("g", false), Some(h)).unwrap();
    assert_eq!(r.models, vec!["x/y"]);
    assert_eq!(r.provider.only, Some(vec!["p".to_string()]));
    // On every surface; OpenAI too.
    let r = ChatRequest::parse_for(br#"{"model":"a"}"#, &Surface::OPENAI, Some(h)).unwrap();
    assert_eq!(r.models, vec!["x/y"]);
    // Errors name the field; a field in both places is ambiguous.
    for (body, header, param) in [
        (r#"{"contents":[]}"#, "not json", ROUTING_HEADER),
        (r#"{"contents":[]}"#, r#"{"route":"x"}"#, "x-switchyard-routing.route"),
        (r#"{"contents":[]}"#, r#"{"provider":{"sort":"cheap"}}"#, "provider.sort"),
        (r#"{"contents":[],"provider":{}}"#, r#"{"provider":{}}"#, "provider"),
    ] {
        let e = ChatRequest::parse_for(body.as_bytes(), &google("g", false), Some(header)).err().unwrap();
        assert_eq!((e.status, e.param.as_deref(), e.api), (400, Some(param), Api::Google), "{header}");
    }
}
