//! Tests of the protocol between the two filters: the plan codec, the per-attempt rewrite,
//! outcome records and the final error.

use serde_json::Value;

use crate::api::Api;
use crate::config::Catalog;

use super::outcome::*;
use super::plan::*;
use super::rewrite::*;

// Regression: an unbounded Retry-After put an endpoint in cool-down for up to 136 years.
#[test]
fn retry_after_is_capped() {
    assert_eq!(parse_retry_after("7", 300), Some(7));
    assert_eq!(parse_retry_after(" 300 ", 300), Some(300));
    assert_eq!(parse_retry_after("301", 300), Some(300));
    assert_eq!(parse_retry_after("4294967295", 300), Some(300));
    assert_eq!(parse_retry_after("99999999999999999999999", 300), Some(300));
    assert_eq!(parse_retry_after("5", 0), Some(0));
    for bad in ["", "-1", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "+5", "5s"] {
        assert_eq!(parse_retry_after(bad, 300), None, "{bad}");
    }
}

// Gemini reports its delay in the error body (google.rpc.RetryInfo), not in Retry-After.
#[test]
fn gemini_retry_delay_comes_from_the_error_body() {
    let body = |delay: &str| {
        format!(
            r#"{{"error":{{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[
            {{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[]}},
            {{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"{delay}"}}]}}}}"#
        )
    };
    assert_eq!(parse_google_retry_delay(body("7s").as_bytes(), 300), Some(7));
    assert_eq!(parse_google_retry_delay(body("0.2s").as_bytes(), 300), Some(1), "a fraction rounds up");
    assert_eq!(parse_google_retry_delay(body("12.000s").as_bytes(), 300), Some(12));
    assert_eq!(parse_google_retry_delay(body("0s").as_bytes(), 300), Some(0));
    assert_eq!(parse_google_retry_delay(body("4000s").as_bytes(), 300), Some(300), "capped");
    assert_eq!(parse_google_retry_delay(body("99999999999s").as_bytes(), 300), Some(300));
    for bad in ["7", "-7s", "s", "1m", "1.5.2s", ".5s"] {
        assert_eq!(parse_google_retry_delay(body(bad).as_bytes(), 300), None, "{bad}");
    }
    for other in [r#"{"error":{"code":429,"message":"quota"}}"#, "not json", r#"{"error":"x"}"#, "[]"] {
        assert_eq!(parse_google_retry_delay(other.as_bytes(), 300), None, "{other}");
    }
}

#[test]
fn plan_round_trips() {
    let p = AttemptPlan {
        catalog_id: 42,
        stream: true,
        body_len: 1000,
        prefix_len: 20,
        path: "/v1/chat/completions?x=1".into(),
        endpoints: vec![3, 0, 7],
        refs: vec![
            EndpointRef { model: "m/x".into(), slug: "a".into(), upstream_model: "x-a".into() },
            EndpointRef { model: "m/é".into(), slug: "b/fast".into(), upstream_model: "".into() },
        ],
        first_prepared: false,
        body_api: None,
    };
    assert_eq!(AttemptPlan::decode(&p.encode()), Some(p.clone()));
    let prepared = AttemptPlan { first_prepared: true, ..p.clone() };
    assert_eq!(AttemptPlan::decode(&prepared.encode()), Some(prepared.clone()));
    for api in crate::api::Api::ALL {
        let translated = AttemptPlan { body_api: Some(api), ..prepared.clone() };
        assert_eq!(AttemptPlan::decode(&translated.encode()), Some(translated.clone()));
    }
    // A plan of the previous version (no flag) still decodes, never as prepared.
    let mut v2 = prepared.encode();
    v2[0] = PLAN_VERSION_2;
    assert_eq!(AttemptPlan::decode(&v2), Some(p.clone()));
    assert_eq!(AttemptPlan::decode(&p.encode()[..10]), None);
    assert_eq!(AttemptPlan::decode(b""), None);
}

// The routed route matches the plan's filter state by this prefix: every plan the decision
// filter writes must start with it, or no routed request would reach a provider.
#[test]
fn every_plan_starts_with_the_prefix_the_route_matches() {
    let p = AttemptPlan {
        catalog_id: u64::MAX,
        stream: false,
        body_len: 0,
        prefix_len: 0,
        path: String::new(),
        endpoints: vec![],
        refs: vec![],
        first_prepared: true,
        body_api: None,
    };
    let prefix = plan_state_prefix();
    assert_eq!(prefix.len(), 1);
    assert!(p.encode().starts_with(prefix.as_bytes()));
    assert_eq!(PLAN_STATE_KEY, format!("wasm.{PLAN_PROPERTY}"));
}

#[test]
fn records_round_trip() {
    let r = vec![
        AttemptRecord { endpoint: 1, status: 429, retry_after_s: Some(7) },
        AttemptRecord { endpoint: 2, status: 0, retry_after_s: None },
    ];
    assert_eq!(decode_records(&encode_records(&r)), r);
}

#[test]
fn retryable_statuses() {
    for s in [408, 429, 500, 502, 503, 504] {
        assert!(is_retryable_status(s), "{s}");
    }
    for s in [200, 400, 401, 404, 413, 422] {
        assert!(!is_retryable_status(s), "{s}");
    }
    assert_eq!(Outcome::of(0), Outcome::NoResponse);
    assert_eq!(Outcome::of(429), Outcome::RateLimited);
    assert_eq!(Outcome::of(400), Outcome::ClientError);
}

fn catalog() -> Catalog {
    let json = r#"{"providers": {
        "a": {"cluster": "c_a", "authority": "a.example", "credential": {"value": "ka"}},
        "b": {"cluster": "c_b", "authority": "b.example", "path_prefix": "/openai/v1", "credential": {"header": "x-api-key", "prefix": "", "value": "kb"}}},
      "models": {"m/one": {"endpoints": [
        {"provider": "a", "upstream_model": "one-a", "pricing": {"prompt": 1, "completion": 1}},
        {"provider": "b", "upstream_model": "one-b-longer", "pricing": {"prompt": 2, "completion": 2}}]}}}"#;
    Catalog::from_json(json.as_bytes(), &|_| None).unwrap()
}

#[test]
fn attempt_rewrite_per_provider() {
    let c = catalog();
    let prefix = model_prefix("one-a");
    let plan = AttemptPlan {
        catalog_id: 9,
        stream: false,
        body_len: 100,
        prefix_len: prefix.len() as u32,
        path: "/v1/chat/completions".into(),
        endpoints: vec![0, 1],
        refs: Vec::new(),
        first_prepared: false,
        body_api: None,
    };
    let a1 = attempt_rewrite(&c, 9, &plan, 1, "c_a").unwrap();
    assert_eq!(a1.authority, "a.example");
    assert_eq!(a1.credential, Some(("authorization".into(), "Bearer ka".into())));
    assert_eq!(a1.content_length, 100);
    assert_eq!(a1.new_prefix, None);
    assert_eq!(a1.path, "/v1/chat/completions");
    let a2 = attempt_rewrite(&c, 9, &plan, 2, "c_b").unwrap();
    assert_eq!(a2.authority, "b.example");
    assert_eq!(a2.credential, Some(("x-api-key".into(), "kb".into())));
    assert_eq!(a2.new_prefix.as_deref(), Some(&br#"{"model":"one-b-longer""#[..]));
    assert_eq!(a2.content_length, 100 - prefix.len() + a2.new_prefix.as_ref().unwrap().len());
    assert_eq!(a2.path, "/openai/v1/chat/completions");
    assert_eq!(attempt_rewrite(&c, 9, &plan, 3, "c_b"), Err(AttemptError::PlanExhausted));
    assert_eq!(attempt_rewrite(&c, 8, &plan, 1, "c_a"), Err(AttemptError::StalePlan));
    assert!(matches!(attempt_rewrite(&c, 9, &plan, 2, "c_a"), Err(AttemptError::WrongCluster { .. })));
}

// A reload between the decision and an attempt: the endpoints are found by (model, slug) in
// the new catalog (other indices), a removed one is never tried, the record keeps the
// planner's index, and the model prefix is always spliced.
#[test]
fn plan_survives_a_configuration_reload() {
    let old = catalog();
    let json = r#"{"providers": {
        "b": {"cluster": "c_b", "authority": "b2.example", "credential": {"value": "kb2"}},
        "c": {"cluster": "c_c", "authority": "c.example", "credential": {"value": "kc"}}},
      "models": {"m/zero": {"endpoints": [{"provider": "c", "pricing": {"prompt": 1, "completion": 1}}]},
                 "m/one": {"endpoints": [
        {"provider": "b", "upstream_model": "one-b-new", "pricing": {"prompt": 2, "completion": 2}},
        {"provider": "c", "upstream_model": "one-c", "pricing": {"prompt": 1, "completion": 1}}]}}}"#;
    let new = Catalog::from_json(json.as_bytes(), &|_| None).unwrap();
    let prefix = model_prefix("one-a");
    let refs = |c: &Catalog, i: u16| {
        let e = c.endpoint(i as usize).unwrap();
        EndpointRef {
            model: c.models[e.model].id.clone(),
            slug: e.slug.clone(),
            upstream_model: e.upstream_model.clone(),
        }
    };
    let plan = AttemptPlan {
        catalog_id: 1,
        stream: false,
        body_len: 100,
        prefix_len: prefix.len() as u32,
        path: "/v1/chat/completions".into(),
        endpoints: vec![1, 0],
        refs: vec![refs(&old, 1), refs(&old, 0)],
        first_prepared: false,
        body_api: None,
    };
    assert_eq!(plan.local_endpoints(&new, 2), vec![new.find_endpoint("m/one", "b"), None]);
    let b = attempt_rewrite(&new, 2, &plan, 1, "c_b").unwrap();
    assert_eq!(b.endpoint, new.find_endpoint("m/one", "b"));
    assert_ne!(b.endpoint, Some(1), "the new catalog indexes it differently");
    assert_eq!((b.model.as_str(), b.slug.as_str()), ("m/one", "b"));
    assert_eq!(b.planned, 1);
    assert_eq!(b.authority, "b2.example");
    assert_eq!(b.credential, Some(("authorization".into(), "Bearer kb2".into())));
    assert_eq!(b.new_prefix.as_deref(), Some(&br#"{"model":"one-b-new""#[..]));
    // Provider `a` is gone from the new configuration (and its key): that attempt is refused.
    assert_eq!(attempt_rewrite(&new, 2, &plan, 2, "c_a"), Err(AttemptError::StalePlan));
    // An endpoint the new catalog dropped while keeping its provider: still tried, with the
    // planned upstream model, the provider's current settings.
    let dropped = AttemptPlan {
        endpoints: vec![0],
        refs: vec![EndpointRef { model: "m/gone".into(), slug: "c".into(), upstream_model: "gone-c".into() }],
        ..plan.clone()
    };
    let c = attempt_rewrite(&new, 2, &dropped, 1, "c_c").unwrap();
    assert_eq!(c.endpoint, None);
    assert_eq!(c.authority, "c.example");
    assert_eq!(c.new_prefix.as_deref(), Some(&br#"{"model":"gone-c""#[..]));
    // Without names a plan from another configuration is refused.
    let bare = AttemptPlan { refs: Vec::new(), ..plan };
    assert_eq!(attempt_rewrite(&new, 2, &bare, 1, "c_b"), Err(AttemptError::StalePlan));
}

#[test]
fn final_error_shapes() {
    let c = catalog();
    let r = |endpoint, status, ra| AttemptRecord { endpoint, status, retry_after_s: ra };
    let e = final_error(&c, &[r(0, 429, Some(30)), r(1, 429, Some(5))], None);
    assert_eq!((e.status, e.code), (429, "capacity_exhausted"));
    assert_eq!(e.headers, vec![("retry-after".to_string(), "5".to_string())]);
    let e = final_error(&c, &[r(0, 429, None), r(1, 429, None)], None);
    assert!(e.headers.is_empty());
    let e = final_error(&c, &[r(0, 503, None), r(1, 0, None)], None);
    assert_eq!((e.status, e.code), (503, "no_endpoint_available"));
    let e = final_error(&c, &[r(0, 500, None), r(1, 429, Some(1))], None);
    assert_eq!((e.status, e.code), (502, "all_endpoints_failed"));
    let v: Value = serde_json::from_str(&e.body()).unwrap();
    let attempts = v["error"]["metadata"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["endpoint"], "a");
    assert_eq!(attempts[0]["status"], 500);
    assert_eq!(attempts[1]["endpoint"], "b");
    assert_eq!(attempts[1]["outcome"], "rate_limited");
    assert_eq!(attempts[0]["model"], "m/one");
}

#[test]
fn a_cut_short_failover_never_claims_every_endpoint_failed() {
    let c = catalog();
    let r = |endpoint, status, ra| AttemptRecord { endpoint, status, retry_after_s: ra };
    // One 429 while three attempts were planned: not "every endpoint is rate limited".
    let cut = CutShort { planned: 3, reason: StopReason::RetryLimit };
    let e = final_error(&c, &[r(0, 429, Some(7))], Some(cut));
    assert_eq!((e.status, e.code), (503, "failover_incomplete"));
    assert!(e.message.contains("1 of 3 planned attempts"), "{}", e.message);
    assert!(e.message.contains("circuit breaker"), "{}", e.message);
    assert!(!e.message.contains("every allowed endpoint"), "{}", e.message);
    assert_eq!(e.metadata["reason"], "retry_limit");
    assert_eq!(e.metadata["planned_attempts"], 3);
    assert_eq!(e.metadata["attempts"].as_array().map(Vec::len), Some(1));
    assert_eq!(e.headers, vec![("retry-after".to_string(), "7".to_string())]);
    let timeout = CutShort { planned: 4, reason: StopReason::Timeout };
    let e = final_error(&c, &[r(0, 0, None), r(1, 0, None)], Some(timeout));
    assert_eq!((e.status, e.code), (504, "failover_incomplete"));
    assert_eq!(e.metadata["reason"], "timeout");
}

#[test]
fn stop_reason_from_envoy_response_flags() {
    assert_eq!(StopReason::from_response_flags(FLAG_UPSTREAM_OVERFLOW), StopReason::RetryLimit);
    assert_eq!(StopReason::from_response_flags(FLAG_UPSTREAM_REQUEST_TIMEOUT), StopReason::Timeout);
    assert_eq!(StopReason::from_response_flags(FLAG_UPSTREAM_OVERFLOW | 1), StopReason::RetryLimit);
    assert_eq!(StopReason::from_response_flags(0), StopReason::Other);
}

fn multi_api_catalog() -> Catalog {
    let json = r#"{"providers": {
        "oa": {"cluster": "c_oa", "authority": "oa.example", "credential": {"value": "k-oa"}},
        "an": {"cluster": "c_an", "authority": "an.example", "credential": {"value": "k-an"},
               "apis": {"anthropic": {}, "openai": {"path_prefix": "/compat/v1"}}},
        "go": {"cluster": "c_go", "authority": "go.example", "credential": {"value": "k-go"},
               "apis": {"google": {"path_prefix": "/gl"}}}},
      "models": {"m/one": {"endpoints": [
        {"provider": "an", "upstream_model": "claude-x", "pricing": {"prompt": 1, "completion": 1}},
        {"provider": "go", "upstream_model": "gemini-x", "pricing": {"prompt": 1, "completion": 1}},
        {"provider": "oa", "upstream_model": "gpt-x", "pricing": {"prompt": 1, "completion": 1}}]}}}"#;
    Catalog::from_json(json.as_bytes(), &|_| None).unwrap()
}

// Each API's own credential header and path; the same provider speaks OpenAI with its
// Bearer key at its OpenAI prefix.
#[test]
fn attempt_rewrite_per_api() {
    let c = multi_api_catalog();
    let plan = |path: &str, endpoints: Vec<u16>, prefix_len: u32| AttemptPlan {
        catalog_id: 1,
        stream: false,
        body_len: 50,
        prefix_len,
        path: path.into(),
        endpoints,
        refs: Vec::new(),
        first_prepared: false,
        body_api: None,
    };
    let an = attempt_rewrite(&c, 1, &plan("/v1/messages", vec![0], 20), 1, "c_an").unwrap();
    assert_eq!(an.credential, Some(("x-api-key".into(), "k-an".into())));
    assert_eq!(an.path, "/v1/messages");
    let oa = attempt_rewrite(&c, 1, &plan("/v1/chat/completions?x=1", vec![0], 20), 1, "c_an").unwrap();
    assert_eq!(oa.credential, Some(("authorization".into(), "Bearer k-an".into())));
    assert_eq!(oa.path, "/compat/v1/chat/completions?x=1");
    let p = plan("/v1beta/models/m%2Fone:streamGenerateContent?alt=sse", vec![1], 0);
    let go = attempt_rewrite(&c, 1, &p, 1, "c_go").unwrap();
    assert_eq!(go.credential, Some(("x-goog-api-key".into(), "k-go".into())));
    assert_eq!(go.path, "/gl/v1beta/models/gemini-x:streamGenerateContent?alt=sse");
    // Google bodies carry no model: never spliced, length unchanged, on any attempt.
    assert_eq!((go.new_prefix, go.content_length), (None, 50));
    let p = plan("/v1beta/models/m%2Fone:generateContent", vec![1, 1], 0);
    let second = attempt_rewrite(&c, 1, &p, 2, "c_go").unwrap();
    assert_eq!((second.new_prefix, second.content_length), (None, 50));
    // An endpoint that does not speak the caller's API serves it translated: the path and key
    // of its own API, the body stored for that API.
    let p = plan("/v1/messages", vec![2], 20);
    let oa = attempt_rewrite(&c, 1, &p, 1, "c_oa").unwrap();
    assert_eq!((oa.api, oa.foreign_body, oa.path.as_str()), (Api::OpenAi, true, "/v1/chat/completions"));
    assert_eq!(oa.credential, Some(("authorization".into(), "Bearer k-oa".into())));
    // `an` speaks OpenAI too, but serves an Anthropic caller in Anthropic.
    let an = attempt_rewrite(&c, 1, &plan("/v1/messages", vec![0, 2], 20), 1, "c_an").unwrap();
    assert_eq!((an.api, an.foreign_body), (Api::Anthropic, false));
    // The written body is the first attempt's API's: an OpenAI caller whose first endpoint is
    // Google's; the second attempt (an, OpenAI) takes the stored caller's body.
    let p = AttemptPlan { body_api: Some(Api::Google), ..plan("/v1/chat/completions", vec![1, 0], 0) };
    let go = attempt_rewrite(&c, 1, &p, 1, "c_go").unwrap();
    assert_eq!((go.api, go.foreign_body, go.new_prefix.clone()), (Api::Google, false, None));
    assert_eq!(go.path, "/gl/v1beta/models/gemini-x:generateContent");
    let stream = AttemptPlan { stream: true, ..p.clone() };
    let go = attempt_rewrite(&c, 1, &stream, 1, "c_go").unwrap();
    assert_eq!(go.path, "/gl/v1beta/models/gemini-x:streamGenerateContent?alt=sse");
    let an = attempt_rewrite(&c, 1, &p, 2, "c_an").unwrap();
    assert_eq!((an.api, an.foreign_body, an.path.as_str()), (Api::OpenAi, true, "/compat/v1/chat/completions"));
    let stored = crate::protocol::plan::encode_body(16, br#"{"model":"first","messages":[]}"#);
    let body = crate::protocol::rewrite::foreign_body(Api::OpenAi, &stored, "claude-x").unwrap();
    assert_eq!(body, br#"{"model":"claude-x","messages":[]}"#);
    assert_eq!(crate::protocol::rewrite::foreign_body(Api::Google, &stored, "g").unwrap(), &stored[4..]);
    assert_eq!(crate::protocol::rewrite::foreign_body(Api::OpenAi, &[1, 0], "g"), None);
}

// Azure OpenAI (`kind: azure`): the deployment in the path with the api-version, the bare key
// in `api-key`, the Responses API at the v1 path, a translated caller's attempt at chat
// completions; an injected key is kept in `api-key`.
#[test]
fn attempt_rewrite_for_azure_deployments() {
    let json = r#"{"providers": {
        "openai": {"cluster": "c_oa", "authority": "api.openai.com", "credential": {"value": "sk-oa"}},
        "azure": {"cluster": "c_az", "authority": "res.openai.azure.com", "kind": "azure",
                  "kind_options": {"api_version": "2024-10-21"}, "credential": {"value": "az-key"}},
        "azure/v1": {"cluster": "c_az1", "authority": "res2.openai.azure.com", "kind": "azure",
                  "kind_options": {"path": "v1"}, "credential": {"injected": true}}},
      "models": {"openai/gpt-4.1": {"endpoints": [
        {"provider": "openai", "upstream_model": "gpt-4.1", "pricing": {"prompt": 2, "completion": 8}},
        {"provider": "azure", "upstream_model": "gpt-41-prod", "pricing": {"prompt": 2, "completion": 8}},
        {"provider": "azure/v1", "upstream_model": "gpt-41-se", "pricing": {"prompt": 2, "completion": 8}}]}}}"#;
    let c = Catalog::from_json(json.as_bytes(), &|_| None).unwrap();
    let plan = |path: &str| AttemptPlan {
        catalog_id: 1,
        stream: false,
        body_len: 100,
        prefix_len: model_prefix("gpt-4.1").len() as u32,
        path: path.into(),
        endpoints: vec![0, 1, 2],
        refs: Vec::new(),
        first_prepared: false,
        body_api: None,
    };
    let chat = plan("/v1/chat/completions?x=1");
    let oa = attempt_rewrite(&c, 1, &chat, 1, "c_oa").unwrap();
    assert_eq!(
        (oa.path.as_str(), oa.credential),
        ("/v1/chat/completions?x=1", Some(("authorization".into(), "Bearer sk-oa".into())))
    );
    let az = attempt_rewrite(&c, 1, &chat, 2, "c_az").unwrap();
    assert_eq!(az.path, "/openai/deployments/gpt-41-prod/chat/completions?api-version=2024-10-21");
    assert_eq!(az.credential, Some(("api-key".into(), "az-key".into())));
    assert_eq!(az.new_prefix.as_deref(), Some(&br#"{"model":"gpt-41-prod""#[..]));
    assert_eq!(az.authority, "res.openai.azure.com");
    let v1 = attempt_rewrite(&c, 1, &chat, 3, "c_az1").unwrap();
    assert_eq!((v1.path.as_str(), v1.credential.as_ref()), ("/openai/v1/chat/completions", None));
    assert_eq!(v1.injected_header.as_deref(), Some("api-key"));
    assert_eq!(v1.new_prefix.as_deref(), Some(&br#"{"model":"gpt-41-se""#[..]));
    // A Responses caller reaches the deployment translated into chat completions: an Azure
    // provider serves only the `openai` API (Responses natively is not mapped yet).
    let responses = AttemptPlan { body_api: Some(Api::Responses), ..plan("/v1/responses") };
    let r = attempt_rewrite(&c, 1, &responses, 2, "c_az").unwrap();
    assert_eq!((r.api, r.foreign_body), (Api::OpenAi, true));
    assert_eq!(r.path, "/openai/deployments/gpt-41-prod/chat/completions?api-version=2024-10-21");
    // An Anthropic caller reaches the deployment translated, at chat completions.
    let messages = AttemptPlan { body_api: Some(Api::Anthropic), ..plan("/v1/messages") };
    let t = attempt_rewrite(&c, 1, &messages, 2, "c_az").unwrap();
    assert_eq!((t.api, t.foreign_body), (Api::OpenAi, true));
    assert_eq!(t.path, "/openai/deployments/gpt-41-prod/chat/completions?api-version=2024-10-21");
    assert_eq!(t.credential, Some(("api-key".into(), "az-key".into())));
    // Azure serves only the OpenAI API; its key header is stripped from every other attempt.
    assert!(c.credential_headers.contains(&"api-key".to_string()));
    let bad = json
        .replace(r#""kind_options": {"path": "v1"},"#, r#""kind_options": {"path": "v1"}, "apis": {"anthropic": {}},"#);
    let e = Catalog::from_json(bad.as_bytes(), &|_| None).unwrap_err();
    assert_eq!(e.field, r#"providers["azure/v1"].apis.anthropic"#, "{e}");
}

// Azure's `retry-after-ms` counts as `Retry-After` (rounded up to whole seconds) when the
// answer has no `Retry-After`.
#[test]
fn retry_after_ms_stands_in_for_retry_after() {
    let of = |ra: Option<&str>, ms: Option<&str>| retry_after_of(ra, ms).map(|c| c.into_owned());
    assert_eq!(of(Some("7"), Some("100")).as_deref(), Some("7"));
    assert_eq!(of(None, Some("1500")).as_deref(), Some("2"));
    assert_eq!(of(None, Some("1000")).as_deref(), Some("1"));
    assert_eq!(of(None, Some(" 0 ")).as_deref(), Some("0"));
    assert_eq!(parse_retry_after(&of(None, Some("99999999999999999999999")).unwrap(), 300), Some(300));
    for bad in [None, Some(""), Some("1.5"), Some("-3")] {
        assert_eq!(of(None, bad), None, "{bad:?}");
    }
}
