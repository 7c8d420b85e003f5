use super::models::QUANTIZATIONS;
use super::*;
use crate::api::{Api, ApiSet};

#[test]
fn every_quantization_parses_from_its_own_name_and_the_error_lists_them_all() {
    for (name, q) in QUANTIZATIONS {
        assert_eq!((Quantization::parse(name), q.name()), (Some(q), name));
    }
    assert_eq!(Quantization::parse("fp9"), None);
    assert_eq!(
        Quantization::unknown("fp9"),
        "unknown quantization \"fp9\" (int4, int8, fp4, fp6, fp8, fp16, bf16, fp32, unknown)"
    );
}

fn no_env(_: &str) -> Option<String> {
    None
}

pub(crate) fn sample() -> &'static str {
    r#"{
      "providers": {
        "deepinfra": {"cluster": "c_deepinfra", "authority": "api.deepinfra.com",
                      "credential": {"value": "di-key"},
                      "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
        "together": {"cluster": "c_together", "authority": "api.together.xyz",
                     "credential": {"header": "x-api-key", "prefix": "", "env": "TOGETHER_KEY"}}
      },
      "models": {
        "meta-llama/llama-4-maverick": {
          "distillable": true,
          "endpoints": [
            {"provider": "deepinfra/turbo", "upstream_model": "llama-4-turbo", "pricing": {"prompt": 1, "completion": 2},
             "quantization": "fp8", "context_length": 8192, "supported_parameters": ["tools"]},
            {"provider": "together", "pricing": {"prompt": 2, "completion": 2}}
          ]
        }
      }
    }"#
}

#[test]
fn compiles_sample_with_env_credential_and_variant() {
    let env = |k: &str| (k == "TOGETHER_KEY").then(|| "tk".to_string());
    let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
    let m = c.model("meta-llama/llama-4-maverick").unwrap();
    assert_eq!(m.endpoints.len(), 2);
    let e0 = c.endpoint(m.endpoints[0]).unwrap();
    assert_eq!(e0.slug, "deepinfra/turbo");
    assert_eq!(e0.base_slug(), "deepinfra");
    assert_eq!(c.provider_of(e0).unwrap().cluster, "c_deepinfra");
    assert_eq!(e0.quantization, Quantization::Fp8);
    let e1 = c.endpoint(m.endpoints[1]).unwrap();
    assert_eq!(e1.upstream_model, "meta-llama/llama-4-maverick");
    assert_eq!(e1.quantization, Quantization::Unknown);
    let p1 = c.provider_of(e1).unwrap();
    assert_eq!(p1.credential.as_ref().unwrap().value, "tk");
    assert_eq!(p1.credential.as_ref().unwrap().header, "x-api-key");
    assert!(p1.retains_data && p1.trains_on_data && !p1.zdr, "undeclared data policy is assumed unsafe");
    assert_eq!(c.credential_headers, vec!["authorization", "x-api-key", "x-goog-api-key"]);
    assert_eq!(c.routing.default_policy, DefaultPolicy::RoutingCost);
    assert_eq!(c.routing.outage_window_s, 30);
    assert!(c.is_provider_base("deepinfra"));
    assert!(!c.is_provider_base("deepinfra/turbo"));
}

#[test]
fn slug_matching_base_and_variant() {
    let env = |_: &str| Some("k".to_string());
    let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
    let e0 = &c.endpoints[0];
    assert!(e0.matches_slug("deepinfra"));
    assert!(e0.matches_slug("deepinfra/turbo"));
    assert!(!e0.matches_slug("deepinfra/fast"));
    assert!(!e0.matches_slug("deep"));
}

fn expect_err(json: &str) -> ConfigError {
    let env = |_: &str| Some("k".to_string());
    match Catalog::from_json(json.as_bytes(), &env) {
        Ok(_) => panic!("config should be rejected: {json}"),
        Err(e) => e,
    }
}

#[test]
fn errors_name_the_field() {
    let e = expect_err(&sample().replace("\"fp8\"", "\"fp9\""));
    assert_eq!(e.field, "models[\"meta-llama/llama-4-maverick\"].endpoints[0].quantization");
    let e = expect_err(&sample().replace("\"provider\": \"together\"", "\"provider\": \"nobody\""));
    assert_eq!(e.field, "models[\"meta-llama/llama-4-maverick\"].endpoints[1].provider");
    assert!(e.reason.contains("unknown provider"));
    let e = expect_err(&sample().replace("\"prompt\": 2", "\"prompt\": -2"));
    assert_eq!(e.field, "models[\"meta-llama/llama-4-maverick\"].endpoints[1].pricing.prompt");
    let e = expect_err(&sample().replace("\"cluster\": \"c_together\"", "\"cluster\": \"\""));
    assert_eq!(e.field, "providers[\"together\"].cluster");
    let e = expect_err(&sample().replace("\"header\": \"x-api-key\"", "\"header\": \"x api\""));
    assert_eq!(e.field, "providers[\"together\"].credential.header");
    let e = expect_err(&sample().replace("\"value\": \"di-key\"", "\"value\": \"a\", \"env\": \"B\""));
    assert_eq!(e.field, "providers[\"deepinfra\"].credential");
    let e = expect_err(&sample().replace("\"distillable\": true,", "\"distillable\": true, \"colour\": 1,"));
    assert!(e.reason.contains("unknown field `colour`"), "{e}");
    let e = expect_err(&sample().replace("\"deepinfra/turbo\"", "\"together\""));
    assert!(e.reason.contains("duplicate endpoint"), "{e}");
    let e = expect_err(&format!(
        "{}, \"routing\": {{\"default_policy\": \"magic\"}}}}",
        sample().trim_end().trim_end_matches('}')
    ));
    assert_eq!(e.field, "routing.default_policy");
    let e = expect_err(r#"{"providers": {}, "models": {}}"#);
    assert_eq!(e.field, "providers");
}

// `routing.stream_usage`: OpenRouter's rule unless the operator keeps OpenAI's; anything else is
// refused, naming the field.
#[test]
fn stream_usage_defaults_to_always_and_names_itself_when_wrong() {
    let env = |_: &str| Some("k".to_string());
    let with = |routing: &str| format!("{}, \"routing\": {routing}}}", sample().trim_end().trim_end_matches('}'));
    let usage = |json: &str| Catalog::from_json(json.as_bytes(), &env).map(|c| c.routing.stream_usage);
    assert_eq!(usage(sample()), Ok(StreamUsage::Always));
    assert_eq!(usage(&with(r#"{"stream_usage": "always"}"#)), Ok(StreamUsage::Always));
    assert_eq!(usage(&with(r#"{"stream_usage": "when_asked"}"#)), Ok(StreamUsage::WhenAsked));
    for bad in ["never", "Always", "when-asked", ""] {
        let e = expect_err(&with(&format!(r#"{{"stream_usage": "{bad}"}}"#)));
        assert_eq!(e.field, "routing.stream_usage", "{bad}: {e}");
    }
    let e = expect_err(&with(r#"{"stream_usage": "never"}"#));
    assert_eq!(
        (e.field.as_str(), e.reason.as_str()),
        ("routing.stream_usage", "unknown value \"never\" (always, when_asked)")
    );
}

#[test]
fn missing_env_var_is_rejected() {
    let e = Catalog::from_json(sample().as_bytes(), &no_env).unwrap_err();
    assert_eq!(e.field, "providers[\"together\"].credential.env");
    assert!(e.reason.contains("TOGETHER_KEY"));
}

// Regression: `Credential` derived Debug, so `{:?}` of a provider or the catalog printed keys.
#[test]
fn debug_output_never_shows_a_secret() {
    let env = |k: &str| (k == "TOGETHER_KEY").then(|| "tk-env-secret".to_string());
    let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
    let shown = format!("{c:?}");
    assert!(shown.contains("x-api-key"), "the header name is still shown");
    for secret in ["di-key", "tk-env-secret"] {
        assert!(!shown.contains(secret), "{secret} leaked into Debug output");
    }
}

// Regression: a CR/LF in `credential.prefix` reached every upstream request (header injection).
#[test]
fn control_characters_in_credentials_are_rejected() {
    for prefix in ["Bearer\\r\\nx-evil: 1 ", "a\\nb", "\\u0000", "x\\u007f"] {
        let e = expect_err(&sample().replace("\"prefix\": \"\"", &format!("\"prefix\": \"{prefix}\"")));
        assert_eq!(e.field, "providers[\"together\"].credential.prefix", "{prefix}");
    }
    let e = expect_err(&sample().replace("\"value\": \"di-key\"", "\"value\": \"di\\u0007key\""));
    assert_eq!(e.field, "providers[\"deepinfra\"].credential");
    // A tab is legal in a header value.
    let ok = sample().replace("\"prefix\": \"\"", "\"prefix\": \"Key\\t\"");
    assert!(Catalog::from_json(ok.as_bytes(), &|_| Some("k".into())).is_ok());
}

// Regression: `outage_window_s` had no upper bound and is multiplied into milliseconds;
// `max_retry_after_s` is bounded the same way.
#[test]
fn durations_are_bounded() {
    let with_routing = |r: &str| format!("{}, \"routing\": {r}}}", sample().trim_end().trim_end_matches('}'));
    let e = expect_err(&with_routing(r#"{"outage_window_s": 18446744073709551615}"#));
    assert_eq!(e.field, "routing.outage_window_s");
    let e = expect_err(&with_routing(r#"{"outage_window_s": 3601}"#));
    assert_eq!(e.field, "routing.outage_window_s");
    let e = expect_err(&with_routing(r#"{"max_retry_after_s": 86401}"#));
    assert_eq!(e.field, "routing.max_retry_after_s");
    let env = |_: &str| Some("k".to_string());
    let c = Catalog::from_json(with_routing(r#"{"outage_window_s": 3600, "max_retry_after_s": 0}"#).as_bytes(), &env)
        .unwrap();
    assert_eq!((c.routing.outage_window_s, c.routing.max_retry_after_s), (3600, 0));
    let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
    assert_eq!(c.routing.max_retry_after_s, 300);
}

#[test]
fn a_header_handoff_needs_its_key_and_a_filter_state_one_takes_none() {
    use crate::protocol::slots::Handoff;
    let with_routing = |r: &str| format!("{}, \"routing\": {r}}}", sample().trim_end().trim_end_matches('}'));
    let env = |_: &str| Some("k".to_string());
    let c = Catalog::from_json(sample().as_bytes(), &env).unwrap();
    assert_eq!((c.routing.handoff, c.routing.handoff_key), (Handoff::FilterState, None));
    let key = r#""handoff_key": "000102030405060708090a0b0c0d0e0f""#;
    let c = Catalog::from_json(with_routing(&format!(r#"{{"handoff": "header", {key}}}"#)).as_bytes(), &env).unwrap();
    assert_eq!(c.routing.handoff, Handoff::Header);
    assert_eq!(c.routing.handoff_key, Some(std::array::from_fn(|i| i as u8)));
    for (routing, field) in [
        (r#"{"handoff": "header"}"#.to_string(), "routing.handoff_key"),
        (format!(r#"{{"handoff": "filter_state", {key}}}"#), "routing.handoff_key"),
        (format!(r#"{{{key}}}"#), "routing.handoff_key"),
        (r#"{"handoff": "header", "handoff_key": "0001"}"#.to_string(), "routing.handoff_key"),
        (r#"{"handoff": "metadata"}"#.to_string(), "routing.handoff"),
    ] {
        assert_eq!(expect_err(&with_routing(&routing)).field, field, "{routing}");
    }
}

#[test]
fn providers_declare_their_apis_and_endpoints_may_narrow_them() {
    let c = Catalog::from_json(
        br#"{"providers": {
            "p": {"cluster": "c_p", "authority": "p", "path_prefix": "/o/v1"},
            "q": {"cluster": "c_q", "authority": "q", "credential": {"value": "s"},
                  "apis": {"anthropic": {}, "google": {}, "openai": {"path_prefix": "/compat/"}, "openai_responses": {}}}},
          "models": {"m": {"endpoints": [
            {"provider": "p", "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "q", "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "q/cheap", "apis": ["google"], "pricing": {"prompt": 1, "completion": 1}}]}}}"#,
        &no_env,
    )
    .unwrap();
    let p = &c.providers[0];
    assert_eq!((p.apis, p.prefix(Api::OpenAi), p.prefix(Api::Anthropic)), (ApiSet::OPENAI, "/o/v1", ""));
    let q = &c.providers[1];
    assert!(Api::ALL.iter().all(|a| q.apis.has(*a)));
    assert_eq!((q.prefix(Api::OpenAi), q.prefix(Api::Anthropic), q.prefix(Api::Google)), ("/compat", "/v1", ""));
    assert_eq!(q.credential_for(Api::OpenAi), Some(("authorization", "Bearer s")));
    assert_eq!(q.credential_for(Api::Anthropic), Some(("x-api-key", "s")));
    assert_eq!(q.credential_for(Api::Google), Some(("x-goog-api-key", "s")));
    // The Responses API at OpenAI's prefix and key.
    assert_eq!(
        (q.prefix(Api::Responses), q.credential_for(Api::Responses)),
        ("/compat", Some(("authorization", "Bearer s")))
    );
    let apis: Vec<ApiSet> = c.endpoints.iter().map(|e| e.apis).collect();
    assert_eq!(apis[0], ApiSet::OPENAI);
    assert_eq!(apis[1], q.apis);
    assert_eq!(apis[2].iter().collect::<Vec<_>>(), vec![Api::Google]);
}

// `openai_responses` only beside `openai` (an endpoint serving the Responses API serves chat
// completions too, so no other caller is ever sent a Responses body); errors name the field.
#[test]
fn the_responses_api_is_served_only_beside_openai() {
    let with = |apis: &str, endpoint_apis: &str| {
        format!(
            r#"{{"providers": {{"p": {{"cluster": "c", "authority": "a", "apis": {apis}}}}},
                "models": {{"m": {{"endpoints": [{{"provider": "p", {endpoint_apis} "pricing": {{"prompt": 1, "completion": 1}}}}]}}}}}}"#
        )
    };
    let e = expect_err(&with(r#"{"openai_responses": {}, "anthropic": {}}"#, ""));
    assert_eq!(e.field, r#"providers["p"].apis.openai_responses"#, "{e}");
    let e = expect_err(&with(r#"{"openai_responses": {}, "openai": {}}"#, r#""apis": ["openai_responses"],"#));
    assert_eq!(e.field, r#"models["m"].endpoints[0].apis"#, "{e}");
    let c = Catalog::from_json(
        with(r#"{"openai_responses": {"path_prefix": "/r"}, "openai": {}}"#, "").as_bytes(),
        &no_env,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((c.providers[0].prefix(Api::OpenAi), c.providers[0].prefix(Api::Responses)), ("/v1", "/r"));
    // It shares OpenAI's key header: a first-attempt cluster (one injected key) may serve both.
    let first = with(
        r#"{"openai_responses": {}, "openai": {}}, "first_attempt_cluster": "c-first", "credential": {"value": "k"}"#,
        "",
    );
    assert!(Catalog::from_json(first.as_bytes(), &no_env).is_ok(), "{first}");
}

#[test]
fn a_first_attempt_cluster_serves_one_api_with_one_key() {
    let with = |providers: &str| {
        format!(
            r#"{{"providers": {{{providers}}},
                "models": {{"m": {{"endpoints": [{{"provider": "p", "pricing": {{"prompt": 1, "completion": 1}}}}]}}}}}}"#
        )
    };
    let one =
        r#""p": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {"value": "k"}}"#;
    assert!(Catalog::from_json(with(one).as_bytes(), &no_env).is_ok());
    // Two providers on one first-attempt cluster: fine with the same key, refused otherwise.
    let same = format!(
        r#"{one}, "p/fast": {{"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {{"value": "k"}}}}"#
    );
    assert!(Catalog::from_json(with(&same).as_bytes(), &no_env).is_ok());
    let field = r#"providers["q"].first_attempt_cluster"#;
    for other in [
        r#""q": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {"value": "k2"}}"#,
        r#""q": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a"}"#,
        r#""q": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {"value": "k"},
                 "apis": {"anthropic": {}}}"#,
    ] {
        let e = expect_err(&with(&format!("{one}, {other}")));
        assert_eq!(e.field, field, "{other}");
        assert!(e.reason.contains("provider p's first-attempt cluster"), "{}", e.reason);
    }
    // One key header per cluster: a provider serving two APIs cannot have one.
    let two = r#""p": {"cluster": "c", "first_attempt_cluster": "c-first", "authority": "a", "credential": {"value": "k"},
                    "apis": {"openai": {}, "anthropic": {}}}"#;
    let e = expect_err(&with(two));
    assert_eq!(e.field, r#"providers["p"].first_attempt_cluster"#);
    assert!(e.reason.contains("exactly one API"), "{}", e.reason);
}

#[test]
fn api_errors_name_the_field() {
    let with = |provider: &str, endpoint: &str| {
        format!(
            r#"{{"providers": {{"p": {{"cluster": "c", "authority": "a"{provider}}}}},
                "models": {{"m": {{"endpoints": [{{"provider": "p"{endpoint}, "pricing": {{"prompt": 1, "completion": 1}}}}]}}}}}}"#
        )
    };
    for (json, field) in [
        (with(r#", "apis": {}"#, ""), r#"providers["p"].apis"#),
        (with(r#", "apis": {"cohere": {}}"#, ""), r#"providers["p"].apis.cohere"#),
        (with(r#", "apis": {"google": {"path_prefix": "v1beta"}}"#, ""), r#"providers["p"].apis.google.path_prefix"#),
        (with(r#", "apis": {"google": {"prefix": "/x"}}"#, ""), "<root>"),
        (with("", r#", "apis": ["anthropic"]"#), r#"models["m"].endpoints[0].apis[0]"#),
        (with("", r#", "apis": ["grpc"]"#), r#"models["m"].endpoints[0].apis[0]"#),
        (with("", r#", "apis": []"#), r#"models["m"].endpoints[0].apis"#),
    ] {
        assert_eq!(expect_err(&json).field, field, "{json}");
    }
}
