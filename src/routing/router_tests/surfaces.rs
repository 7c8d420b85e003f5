//! Surfaces, mesh-wide provider capacity, BYOK "always use this key".

use super::*;

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
