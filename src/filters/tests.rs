//! The two filters' own logic, driven through their callbacks against the mock host: one
//! `MockHost` is one request (its headers, filter state and answer), as Envoy shares them
//! between the decision filter and each attempt's filter.

use std::rc::Rc;

use serde_json::Value;

use super::downstream::Stream;
use super::host::Action;
use super::mock::MockHost;
use super::upstream::Attempt;
use super::{configure, role_of, Configured, Filter, Role, Unconfigured};
use crate::protocol::plan::{AttemptPlan, PLAN_PROPERTY};
use crate::protocol::scope::route_mark_path;
use crate::protocol::slots::{encode_slots, next_state_property, slot_token, NEXT_CLUSTER_HEADER, SLOTS_PROPERTY};
use crate::wiring::{ATTEMPTS_HEADER, OWN_REPLY_HEADER};

/// Two endpoints of one model: alpha (cheaper, `authorization`) and beta (`x-api-key`).
const CONFIG: &str = r#"{
  "providers": {
    "alpha": {"cluster": "c_alpha", "authority": "alpha.example",
              "credential": {"value": "alpha-secret"}},
    "beta": {"cluster": "c_beta", "authority": "beta.example",
             "credential": {"header": "x-api-key", "prefix": "", "value": "beta-secret"}}
  },
  "models": {"m": {"endpoints": [
    {"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}},
    {"provider": "beta", "pricing": {"prompt": 2, "completion": 2}}
  ]}},
  "routing": {"default_policy": "price_weighted"}
}"#;

/// As `CONFIG`, alpha with a first-attempt cluster (its key injected by that cluster).
const FIRST_ATTEMPT_CONFIG: &str = r#"{
  "providers": {
    "alpha": {"cluster": "c_alpha", "first_attempt_cluster": "c_alpha_first",
              "authority": "alpha.example", "credential": {"injected": true}},
    "beta": {"cluster": "c_beta", "authority": "beta.example",
             "credential": {"header": "x-api-key", "prefix": "", "value": "beta-secret"}}
  },
  "models": {"m": {"endpoints": [
    {"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}},
    {"provider": "beta", "pricing": {"prompt": 2, "completion": 2}}
  ]}},
  "routing": {"default_policy": "price_weighted"}
}"#;

/// Sorted by price: alpha first whatever the random draw.
const BODY: &str = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}}"#;

const ANSWER: &str = r#"{"id": "x", "model": "m-upstream", "choices": [{"message": {"role": "assistant", "content": "hello"}}], "usage": {"prompt_tokens": 1000000, "completion_tokens": 0}}"#;

pub(super) fn configured(json: &str) -> Rc<Configured> {
    Rc::new(configure(json.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("test config rejected: {e}")))
}

/// A request on one of Switchyard's routes, from a caller with its own key.
fn routed_request(host: &MockHost) {
    host.set_prop(&route_mark_path(), b"llm");
    host.with_request_headers(&[
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway"),
        ("authorization", "Bearer caller-secret"),
        ("content-type", "application/json"),
        ("x-switchyard-slot-1", "forged"),
    ]);
    host.state().request_body = BODY.as_bytes().to_vec();
}

/// Runs the decision filter over a routed request, as Envoy would up to the router.
fn decide(host: &MockHost, config: &Rc<Configured>) -> Stream<MockHost> {
    routed_request(host);
    let mut stream = Stream::new(host.clone(), Rc::clone(config));
    assert_eq!(stream.on_request_headers(false), Action::Pause, "waits for the body");
    assert_eq!(stream.on_request_body(BODY.len(), true), Action::Continue);
    stream
}

/// Attempt `k` on `cluster`, as the router starts it: a fresh per-attempt filter.
fn attempt(host: &MockHost, config: &Rc<Configured>, k: u64, cluster: &str) -> Attempt<MockHost> {
    host.set_prop(&["upstream", "request_attempt_count"], &k.to_le_bytes());
    host.set_prop(&["xds", "cluster_name"], cluster.as_bytes());
    let mut a = Attempt::new(host.clone(), Rc::clone(config));
    assert_eq!(a.on_request_headers(false), Action::Continue, "attempt {k} is sent");
    a
}

fn answer(host: &MockHost, status: &str, body: &str) {
    host.with_response_headers(&[
        (":status", status),
        ("content-type", "application/json"),
        ("content-length", &body.len().to_string()),
    ]);
    host.state().response_body = body.as_bytes().to_vec();
}

pub(super) fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

#[test]
fn the_decision_hands_the_ranked_clusters_to_envoy_and_removes_the_callers_key() {
    let config = configured(CONFIG);
    let host = MockHost::new();
    decide(&host, &config);
    // By filter state (the default): nothing on the request names a cluster.
    assert_eq!(host.request_header_value(NEXT_CLUSTER_HEADER), None);
    assert_eq!(host.prop(&[&next_state_property(1)]), Some(slot_token("c_alpha").into_bytes()));
    assert_eq!(host.prop(&[SLOTS_PROPERTY]), Some(encode_slots(&["c_alpha", "c_beta"], None).into_bytes()));
    assert_eq!(host.request_header_value("x-envoy-max-retries").as_deref(), Some("1"));
    assert_eq!(host.request_header_value("accept-encoding").as_deref(), Some("identity"));
    assert_eq!(host.request_header_value("authorization"), None, "the caller's key reaches no provider");
    let plan = host.prop(&[PLAN_PROPERTY]).and_then(|b| AttemptPlan::decode(&b)).expect("a plan in filter state");
    assert_eq!(plan.endpoints.len(), 2);
    assert_eq!(plan.catalog_id, config.id);
    let body = json(&host.state().request_body);
    assert_eq!(body["model"], "m");
    assert_eq!(host.request_header_value("content-length"), Some(host.state().request_body.len().to_string()));
    assert!(host.state().reply.is_none());
}

#[test]
fn a_request_on_another_route_gets_no_host_call_but_the_route_mark_read() {
    let config = configured(CONFIG);
    let host = MockHost::new();
    host.with_request_headers(&[(":method", "POST"), (":path", "/v1/chat/completions"), ("authorization", "Bearer x")]);
    let mut stream = Stream::new(host.clone(), config);
    assert_eq!(stream.on_request_headers(false), Action::Continue);
    assert_eq!(stream.on_request_body(10, true), Action::Continue);
    answer(&host, "200", "{}");
    assert_eq!(stream.on_response_headers(false), Action::Continue);
    assert_eq!(stream.on_response_body(2, true), Action::Continue);
    stream.on_log();
    assert_eq!(host.take_calls(), vec![format!("property {}", route_mark_path().join("/"))]);
}

#[test]
fn a_failover_gives_each_attempt_only_its_own_key_and_the_caller_the_second_answer() {
    let config = configured(CONFIG);
    let host = MockHost::new();
    let mut stream = decide(&host, &config);

    let mut first = attempt(&host, &config, 1, "c_alpha");
    assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer alpha-secret"));
    assert_eq!(host.request_header_value(":authority").as_deref(), Some("alpha.example"));
    answer(&host, "503", r#"{"error": "busy"}"#);
    assert_eq!(first.on_response_headers(false), Action::Continue);
    first.on_done();

    let mut second = attempt(&host, &config, 2, "c_beta");
    assert_eq!(host.request_header_value("authorization"), None, "alpha's key is not sent to beta");
    assert_eq!(host.request_header_value("x-api-key").as_deref(), Some("beta-secret"));
    assert_eq!(host.request_header_value(":authority").as_deref(), Some("beta.example"));
    answer(&host, "200", ANSWER);
    assert_eq!(second.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value(ATTEMPTS_HEADER).as_deref(), Some("2"));
    assert_eq!(second.on_response_body(ANSWER.len(), true), Action::Continue);
    second.on_done();

    // The decision filter holds the answer to rewrite it whole.
    assert_eq!(stream.on_response_headers(false), Action::Pause);
    let log = host.response_header_value("x-switchyard-attempt-log").expect("attempt log");
    assert!(log.contains("alpha") && log.contains("503") && log.contains("beta"), "{log}");
    assert_eq!(host.response_header_value("x-switchyard-provider").as_deref(), Some("beta"));
    assert_eq!(stream.on_response_body(ANSWER.len(), true), Action::Continue);
    let body = json(&host.state().response_body);
    assert_eq!(body["provider"], "beta");
    assert_eq!(body["model"], "m", "the catalog's model id, not the provider's");
    // 1M prompt tokens at beta's $2 per million.
    assert_eq!(body["usage"]["cost"].as_f64(), Some(2.0));
    assert_eq!(host.response_header_value("content-length"), Some(host.state().response_body.len().to_string()));
    stream.on_log();
    assert!(host.state().refused_writes.is_empty(), "{:?}", host.state().refused_writes);

    // Outcomes: one failure on alpha, one success on beta, counted in the metrics.
    let attempts = "switchyard.attempts_total.model.m.endpoint";
    assert_eq!(host.counter(&format!("{attempts}.alpha.gen_ai_provider_name.alpha.outcome.server_error")), 1);
    assert_eq!(host.counter(&format!("{attempts}.beta.gen_ai_provider_name.beta.outcome.success")), 1);
    assert_eq!(host.counter("switchyard.fallbacks_total.kind.provider"), 1);
    assert_eq!(host.counter("switchyard.requests_total.result.served"), 1);
    // The served attempt's usage, the numbers behind the body's usage.cost (2 USD in nano-USD),
    // by the model asked for and the endpoint that served; the failed attempt used nothing.
    let labels = "gen_ai_request_model.m.gen_ai_response_model.m.gen_ai_provider_name.beta.endpoint.beta";
    let tokens = "switchyard.gen_ai_client_token_usage_tokens_total.gen_ai_token_type";
    assert_eq!(host.counter(&format!("{tokens}.input.{labels}")), 1_000_000);
    assert_eq!(host.counter(&format!("{tokens}.output.{labels}")), 0);
    assert_eq!(host.counter(&format!("switchyard.gen_ai_usage_cost_nano_usd_total.{labels}")), 2_000_000_000);
    assert_eq!(host.counter(&format!("{tokens}.input.{}", labels.replace("beta", "alpha"))), 0);
    assert_eq!(host.counter("switchyard.requests_by_strategy_total.strategy.sort:price"), 1);
    assert!(host.state().shared.contains_key("sy/h/m|alpha") && host.state().shared.contains_key("sy/h/m|beta"));
}

#[test]
fn when_every_attempt_fails_the_caller_gets_one_error_in_its_shape() {
    let config = configured(CONFIG);
    let host = MockHost::new();
    let mut stream = decide(&host, &config);
    for (k, cluster) in [(1, "c_alpha"), (2, "c_beta")] {
        let mut a = attempt(&host, &config, k, cluster);
        answer(&host, "503", "upstream busy");
        a.on_response_headers(false);
        a.on_response_body(13, true);
        a.on_done();
    }
    host.with_response_headers(&[(":status", "503"), ("content-type", "text/plain"), ("x-leftover", "1")]);
    host.state().response_body = b"upstream busy".to_vec();
    assert_eq!(stream.on_response_headers(false), Action::Pause, "held until the body is replaced");
    assert_eq!(host.response_header_value("x-leftover"), None, "only the filter's own headers");
    assert_eq!(host.response_header_value(ATTEMPTS_HEADER).as_deref(), Some("2"));
    assert_eq!(host.response_header_value("content-type").as_deref(), Some("application/json"));
    let status: u32 = host.response_header_value(":status").and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(status >= 500, "{status}");
    assert_eq!(stream.on_response_body(13, true), Action::Continue);
    let body = json(&host.state().response_body);
    assert!(body["error"]["message"].is_string(), "{body}");
    stream.on_log();
    assert_eq!(host.counter("switchyard.requests_total.result.failed"), 1);
}

#[test]
fn a_prepared_first_attempt_carries_no_key_and_is_recorded_by_the_decision_filter() {
    let config = configured(FIRST_ATTEMPT_CONFIG);
    let host = MockHost::new();
    let mut stream = decide(&host, &config);
    assert_eq!(host.prop(&[&next_state_property(1)]), Some(slot_token("c_alpha_first").into_bytes()));
    assert_eq!(host.prop(&[SLOTS_PROPERTY]), Some(encode_slots(&["c_alpha_first", "c_beta"], None).into_bytes()));
    let plan = host.prop(&[PLAN_PROPERTY]).and_then(|b| AttemptPlan::decode(&b)).expect("plan");
    assert!(plan.first_prepared);
    // The downstream request never holds a provider key: the first-attempt cluster adds it.
    let headers = host.state().request_headers.clone();
    for (k, v) in &headers {
        assert!(!v.contains("secret"), "{k}: {v}");
    }
    // The cluster's hook names attempt 1; no per-attempt filter ran.
    answer(&host, "200", ANSWER);
    host.state().response_headers.push((ATTEMPTS_HEADER.to_string(), "1".to_string()));
    assert_eq!(stream.on_response_headers(false), Action::Pause);
    assert_eq!(host.response_header_value("x-switchyard-provider").as_deref(), Some("alpha"));
    assert_eq!(stream.on_response_body(ANSWER.len(), true), Action::Continue);
    assert_eq!(json(&host.state().response_body)["provider"], "alpha");
    stream.on_log();
    assert_eq!(
        host.counter("switchyard.attempts_total.model.m.endpoint.alpha.gen_ai_provider_name.alpha.outcome.success"),
        1
    );
    // The prepared first attempt's own watch read the usage.
    let labels = "gen_ai_request_model.m.gen_ai_response_model.m.gen_ai_provider_name.alpha.endpoint.alpha";
    assert_eq!(host.counter(&format!("switchyard.gen_ai_usage_cost_nano_usd_total.{labels}")), 1_000_000_000);
}

#[test]
fn an_attempt_without_a_plan_is_refused_with_a_shaped_reply() {
    let config = configured(CONFIG);
    let host = MockHost::new();
    host.with_request_headers(&[(":method", "POST"), (":path", "/v1/chat/completions")]);
    let mut a = Attempt::new(host.clone(), config);
    assert_eq!(a.on_request_headers(false), Action::Pause);
    assert_eq!(
        host.take_calls(),
        vec![
            format!("property {PLAN_PROPERTY}"),
            format!("set_req_header {OWN_REPLY_HEADER}=1"),
            "reply 403".to_string(),
        ]
    );
    let reply = host.state().reply.clone().expect("a local reply");
    assert_eq!(json(&reply.body)["error"]["code"], "attempt_not_sent");
}

#[test]
fn a_bad_body_is_refused_with_a_400_that_keeps_the_connection() {
    let config = configured(CONFIG);
    let host = MockHost::new();
    routed_request(&host);
    host.state().request_body = b"{not json".to_vec();
    let mut stream = Stream::new(host.clone(), config);
    assert_eq!(stream.on_request_headers(false), Action::Pause);
    assert_eq!(stream.on_request_body(9, true), Action::Pause);
    let reply = host.state().reply.clone().expect("a local reply");
    // Sent with the carrier status (Envoy drains HTTP/1 connections after a local 400)...
    assert_ne!(reply.status, 400);
    assert_eq!(json(&reply.body)["error"]["type"], "invalid_request_error");
    // ...and set back to 400 on the way out.
    host.with_response_headers(&[(":status", &reply.status.to_string())]);
    stream.on_response_headers(false);
    assert_eq!(host.response_header_value(":status").as_deref(), Some("400"));
    assert!(host.state().shared.is_empty(), "a refused request touches no statistics");
}

#[test]
fn where_the_reply_skips_the_filter_a_late_400_is_sent_as_400() {
    let config = configured(CONFIG);
    let host = MockHost::new();
    host.state().reply_skips_filter = true;
    routed_request(&host);
    host.state().request_body = b"{not json".to_vec();
    let mut stream = Stream::new(host.clone(), config);
    stream.on_request_headers(false);
    assert_eq!(stream.on_request_body(9, true), Action::Pause);
    let reply = host.state().reply.clone().expect("a local reply");
    assert_eq!(reply.status, 400, "no response callback would set a carrier back");
    assert_eq!(json(&reply.body)["error"]["type"], "invalid_request_error");
}

#[test]
fn without_a_configuration_every_request_gets_a_503_in_its_api_shape() {
    let host = MockHost::new();
    host.with_request_headers(&[(":path", "/v1/messages")]);
    let mut f = Unconfigured { host: host.clone() };
    assert_eq!(f.on_request_headers(false), Action::Pause);
    let reply = host.state().reply.clone().expect("a local reply");
    assert_eq!(reply.status, 503);
    assert_eq!(json(&reply.body)["type"], "error", "Anthropic's error shape");
}

#[test]
fn the_removed_clear_role_is_refused_and_other_root_ids_decide() {
    assert!(role_of("switchyard_clear").is_err());
    assert_eq!(role_of("switchyard_upstream"), Ok(Role::Upstream));
    assert_eq!(role_of("switchyard_first"), Ok(Role::FirstAttempt));
    assert_eq!(role_of("switchyard"), Ok(Role::Downstream));
    assert_eq!(role_of(""), Ok(Role::Downstream));
}

// ---------------------------------------------------------------------------------------------
// Mesh-wide limits
// ---------------------------------------------------------------------------------------------

/// As `CONFIG`, with a request limit and a token limit on every routed request.
fn limited_config(failure_mode: &str) -> String {
    CONFIG.replacen(
        r#""routing": {"default_policy": "price_weighted"}"#,
        &format!(
            r#""routing": {{"default_policy": "price_weighted"}},
  "rate_limits": {{"service": {{"cluster": "rls", "timeout_ms": 30, "failure_mode": "{failure_mode}"}},
    "limits": {{"rpm": {{"requests": 10, "window": "minute"}}, "tpm": {{"tokens": 100, "window": "minute"}}}}}}"#
        ),
        1,
    )
}

fn rls_answer(host: &MockHost, r: &crate::limits::rls::Response) -> usize {
    let b = crate::limits::rls::encode_response(r);
    host.state().grpc_answer = b.clone();
    b.len()
}

#[test]
fn no_limits_means_no_rate_limit_call() {
    let host = MockHost::default();
    let _ = decide(&host, &configured(CONFIG));
    assert!(host.state().grpc_calls.is_empty());
    assert!(!host.take_calls().iter().any(|c| c.starts_with("grpc_call")));
}

/// What a call the filter made asked: its descriptors' limit names and its hits.
fn rls_call(host: &MockHost, i: usize) -> (Vec<String>, u32) {
    let (_, _, message) = host.state().grpc_calls[i].clone();
    let (_, descriptors, hits) = crate::limits::rls::decode_request(&message).unwrap();
    (descriptors.iter().map(|d| d[0].1.clone()).collect(), hits)
}

/// BODY's estimate: its messages' 36 bytes / 4, plus `routing.expected_completion_tokens` (256).
const BODY_ESTIMATE: u32 = 9 + 256;

#[test]
fn admission_is_asked_at_the_headers_and_holds_the_routed_request_until_it_answers() {
    use crate::limits::rls::{decode_request, Code, Response, Status};
    let host = MockHost::default();
    let config = configured(&limited_config("open"));
    routed_request(&host);
    let mut stream = Stream::new(host.clone(), Rc::clone(&config));
    assert_eq!(stream.on_request_headers(false), Action::Pause);
    let (cluster, method, message) = host.state().grpc_calls[0].clone();
    assert_eq!(
        (cluster, method.as_str()),
        (crate::limits::grpc_target("rls"), "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
    );
    // The request limit at the headers, one unit.
    let (domain, descriptors, hits) = decode_request(&message).unwrap();
    assert_eq!((domain.as_str(), hits, descriptors.len()), ("switchyard", 1, 1));
    assert_eq!(
        descriptors[0],
        vec![("switchyard_limit".to_string(), "rpm".to_string()), ("subject".to_string(), "all".to_string())]
    );
    // The body completes before the answer: routed, the token limit reserves the estimate,
    // held until both answer.
    assert_eq!(stream.on_request_body(BODY.len(), true), Action::Pause);
    assert!(host.prop(&[&next_state_property(1)]).is_some(), "routed while held");
    assert_eq!(rls_call(&host, 1), (vec!["tpm".to_string()], BODY_ESTIMATE));
    let ok = Response { overall: Code::Ok, statuses: vec![Status { code: Code::Ok, remaining: 9, reset_s: None }] };
    let n = rls_answer(&host, &ok);
    stream.on_grpc_response(1, 0, n);
    assert_eq!(host.state().resumed, 0, "the reservation has not answered");
    stream.on_grpc_response(2, 0, n);
    assert_eq!(host.state().resumed, 1);
    assert!(host.state().reply.is_none());
    // An answer to an unknown token changes nothing.
    stream.on_grpc_response(99, 0, n);
    assert_eq!(host.state().resumed, 1);
}

#[test]
fn over_a_limit_is_a_429_in_the_callers_shape_with_retry_after_and_no_provider() {
    use crate::limits::rls::{Code, Response, Status};
    let over = Response {
        overall: Code::OverLimit,
        statuses: vec![Status { code: Code::OverLimit, remaining: 0, reset_s: Some(17) }],
    };
    // The request limit answers before the body ends: refused at once, the body never routed.
    let host = MockHost::default();
    let config = configured(&limited_config("open"));
    routed_request(&host);
    let mut stream = Stream::new(host.clone(), Rc::clone(&config));
    stream.on_request_headers(false);
    let n = rls_answer(&host, &over);
    stream.on_grpc_response(1, 0, n);
    let reply = host.state().reply.clone().expect("a local reply");
    assert_eq!(reply.status, 429);
    assert!(reply.headers.contains(&("retry-after".to_string(), "17".to_string())), "{:?}", reply.headers);
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(body["error"]["metadata"]["limit"], "rpm");
    assert_eq!(stream.on_request_body(BODY.len(), true), Action::Continue);
    assert!(host.prop(&[&next_state_property(1)]).is_none(), "no attempt planned");
    assert_eq!(host.state().grpc_calls.len(), 1, "nothing reserved");

    // The token limit refuses the routed request's reservation: refused, never resumed.
    let host = MockHost::default();
    routed_request(&host);
    let mut stream = Stream::new(host.clone(), Rc::clone(&config));
    stream.on_request_headers(false);
    assert_eq!(stream.on_request_body(BODY.len(), true), Action::Pause);
    let n = rls_answer(&host, &over);
    stream.on_grpc_response(2, 0, n);
    let reply = host.state().reply.clone().expect("a local reply");
    assert_eq!(reply.status, 429);
    assert!(reply.headers.contains(&("retry-after".to_string(), "17".to_string())), "{:?}", reply.headers);
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(body["error"]["metadata"]["limit"], "tpm");
    assert_eq!(host.state().resumed, 0);
}

#[test]
fn the_service_failing_follows_each_failure_mode() {
    for (mode, refused) in [("open", false), ("closed", true)] {
        let host = MockHost::default();
        let config = configured(&limited_config(mode));
        routed_request(&host);
        let mut stream = Stream::new(host.clone(), Rc::clone(&config));
        stream.on_request_headers(false);
        assert_eq!(stream.on_request_body(BODY.len(), true), Action::Pause);
        // gRPC status 4: the call's own timeout (the request never waits longer).
        stream.on_grpc_response(1, 4, 0);
        let reply = host.state().reply.clone();
        assert_eq!(reply.as_ref().map(|r| r.status), refused.then_some(503), "{mode}");
        assert_eq!(host.state().resumed, u32::from(!refused), "{mode}");
        if let Some(r) = reply {
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(body["error"]["code"], "rate_limit_unavailable");
        }
    }
    // The host refusing the call (an unknown cluster) is a failure too, decided at once.
    let host = MockHost::default();
    host.state().grpc_refused = true;
    routed_request(&host);
    let mut stream = Stream::new(host.clone(), configured(&limited_config("closed")));
    assert_eq!(stream.on_request_headers(false), Action::Pause);
    assert_eq!(host.state().reply.as_ref().map(|r| r.status), Some(503));
}

/// Admits a routed BODY under `limited_config` (both calls answered OK, the token limit's
/// window resetting in 60 s) and serves it with `answer`.
fn serve_limited(host: &MockHost, config: &Rc<Configured>, answer: &str) -> Stream<MockHost> {
    use crate::limits::rls::{Code, Response, Status};
    let ok = Response { overall: Code::Ok, statuses: vec![Status { code: Code::Ok, remaining: 9, reset_s: Some(60) }] };
    serve_limited_answered(host, config, answer, &ok)
}

/// `serve_limited` with the rate limit service answering `ok` to both admission calls.
fn serve_limited_answered(
    host: &MockHost,
    config: &Rc<Configured>,
    answer: &str,
    ok: &crate::limits::rls::Response,
) -> Stream<MockHost> {
    routed_request(host);
    let mut stream = Stream::new(host.clone(), Rc::clone(config));
    let first = host.state().grpc_calls.len() as u32 + 1;
    stream.on_request_headers(false);
    let n = rls_answer(host, ok);
    stream.on_grpc_response(first, 0, n);
    assert_eq!(stream.on_request_body(BODY.len(), true), Action::Pause, "held for the reservation");
    stream.on_grpc_response(first + 1, 0, n);
    // alpha answers (as its attempt filter would name it).
    host.with_response_headers(&[
        (":status", "200"),
        ("content-type", "application/json"),
        ("x-switchyard-provider", "alpha"),
        ("x-switchyard-model", "m"),
        (ATTEMPTS_HEADER, "1"),
    ]);
    host.state().response_body = answer.as_bytes().to_vec();
    stream.on_response_headers(false);
    stream.on_response_body(answer.len(), true);
    stream
}

#[test]
fn a_served_answer_settles_what_it_used_beyond_its_reservation() {
    let host = MockHost::default();
    let config = configured(&limited_config("open"));
    // 1,000,000 prompt tokens.
    let mut stream = serve_limited(&host, &config, ANSWER);
    // Settled when the answer ended, before the log: one detached call, the token limit, the
    // answer's tokens less the reservation (the request limit is not settled).
    assert_eq!(host.state().grpc_calls.len(), 3);
    stream.on_log();
    assert_eq!(host.state().grpc_calls.len(), 3, "settled once");
    assert_eq!(rls_call(&host, 2), (vec!["tpm".to_string()], 1_000_000 - BODY_ESTIMATE));
    assert_eq!(host.counter("switchyard.rate_limit.charged_total.limit.tpm.kind.tokens"), 1_000_000);
    assert_eq!(
        host.take_calls().iter().rfind(|c| c.starts_with("grpc_call")).map(String::as_str),
        Some(format!("grpc_call {} ShouldRateLimit 30ms", crate::limits::grpc_target("rls")).as_str())
    );
}

#[test]
fn a_reservation_not_used_up_is_reused_by_the_next_request_on_the_worker() {
    let host = MockHost::default();
    let config = configured(&limited_config("open"));
    let small = ANSWER.replace(
        "\"prompt_tokens\": 1000000, \"completion_tokens\": 0",
        "\"prompt_tokens\": 10, \"completion_tokens\": 5",
    );
    let mut stream = serve_limited(&host, &config, &small);
    stream.on_log();
    assert_eq!(host.state().grpc_calls.len(), 2, "nothing to charge: 15 of 265 used");
    // The next request reserves 265 again, 250 of them the first one's credit.
    let mut next = serve_limited(&host, &config, &small);
    next.on_log();
    assert_eq!(rls_call(&host, 3), (vec!["tpm".to_string()], 15));
    assert_eq!(host.state().grpc_calls.len(), 4);
}

/// Limitador's service answers without per-descriptor statuses, so without the time its window
/// resets: the unused reservation is still a credit (for the limit's window), or every
/// reservation would stay counted and a budget would run out at a fraction of its use.
#[test]
fn a_reservation_is_reused_when_the_service_says_no_reset_time() {
    use crate::limits::rls::{Code, Response};
    let host = MockHost::default();
    let config = configured(&limited_config("open"));
    let small = ANSWER.replace(
        "\"prompt_tokens\": 1000000, \"completion_tokens\": 0",
        "\"prompt_tokens\": 10, \"completion_tokens\": 5",
    );
    let bare = Response { overall: Code::Ok, statuses: Vec::new() };
    serve_limited_answered(&host, &config, &small, &bare).on_log();
    serve_limited_answered(&host, &config, &small, &bare).on_log();
    assert_eq!(rls_call(&host, 3), (vec!["tpm".to_string()], 15), "250 of the 265 reserved came back");
}

// A shared endpoint of a provider whose BYOK key is `byok_always` is never planned, so the
// endpoints listing leaves it out too.
#[test]
fn the_listing_leaves_out_endpoints_a_byok_always_key_shadows() {
    let config = configured(
        r#"{"providers": {
              "openai": {"cluster": "c_oa", "authority": "oa.example", "credential": {"value": "shared"}},
              "openai/byok": {"cluster": "c_oab", "authority": "oa.example", "credential": {"value": "mine"},
                              "byok": true, "byok_always": true}},
            "models": {"m": {"endpoints": [
              {"provider": "openai", "pricing": {"prompt": 1, "completion": 1}},
              {"provider": "openai/byok", "pricing": {"prompt": 2, "completion": 2}}]}}}"#,
    );
    let host = MockHost::new();
    host.set_prop(&route_mark_path(), b"llm");
    host.with_request_headers(&[(":method", "GET"), (":path", "/v1/models/m/endpoints"), (":authority", "gateway")]);
    let mut stream = Stream::new(host.clone(), Rc::clone(&config));
    stream.on_request_headers(true);
    let reply = host.state().reply.clone().expect("the listing is answered locally");
    let v = json(&reply.body);
    let slugs: Vec<&str> =
        v["data"]["endpoints"].as_array().map_or(vec![], |a| a.iter().filter_map(|e| e["tag"].as_str()).collect());
    assert_eq!(slugs, vec!["openai/byok"], "{v}");
}

/// Two Google endpoints of one model: alpha (cheaper) and beta.
const GOOGLE_CONFIG: &str = r#"{
  "providers": {
    "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "alpha-secret"},
              "apis": {"google": {}}},
    "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"value": "beta-secret"},
             "apis": {"google": {}}}
  },
  "models": {"g": {"endpoints": [
    {"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}},
    {"provider": "beta", "pricing": {"prompt": 2, "completion": 2}}
  ]}},
  "routing": {"default_policy": "price_weighted"}
}"#;

const GEMINI_429: &str = r#"{"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]}}"#;

// Gemini reports its delay only in the error body (google.rpc.RetryInfo). Envoy resets an attempt
// it retries at its headers, so only the 429 it passes on shows its body: that attempt's record
// gets the delay, its endpoint cools down for exactly that long, and the caller's Retry-After
// (set when the body ends, the answer's headers held until then) names it.
#[test]
fn a_gemini_429_cools_its_endpoint_for_the_delay_in_its_body() {
    let config = configured(GOOGLE_CONFIG);
    let host = MockHost::new();
    host.set_prop(&route_mark_path(), b"llm");
    host.with_request_headers(&[
        (":method", "POST"),
        (":path", "/v1beta/models/g:generateContent"),
        (":authority", "gateway"),
        ("content-type", "application/json"),
        ("x-switchyard-routing", r#"{"provider": {"sort": "price"}}"#),
    ]);
    let body = r#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}"#;
    host.state().request_body = body.as_bytes().to_vec();
    host.state().now_ms = 1_000_000;
    let mut stream = Stream::new(host.clone(), Rc::clone(&config));
    assert_eq!(stream.on_request_headers(false), Action::Pause);
    assert_eq!(stream.on_request_body(body.len(), true), Action::Continue);
    // alpha's 429 is retried: Envoy resets it after its headers, its body never arrives.
    let mut first = attempt(&host, &config, 1, "c_alpha");
    answer(&host, "429", GEMINI_429);
    assert_eq!(first.on_response_headers(false), Action::Continue);
    first.on_done();
    // beta's 429 is the last: Envoy passes it on, headers first through both filters, then its
    // body in two pieces, each through the attempt's filter and then the decision filter.
    let mut last = attempt(&host, &config, 2, "c_beta");
    answer(&host, "429", GEMINI_429);
    assert_eq!(last.on_response_headers(false), Action::Continue);
    assert_eq!(stream.on_response_headers(false), Action::Pause, "held until the body is replaced");
    assert_eq!(host.response_header_value(":status").as_deref(), Some("429"));
    assert_eq!(host.response_header_value("retry-after"), None, "not known at the headers");
    let (a, b) = GEMINI_429.split_at(40);
    host.state().response_body = a.as_bytes().to_vec();
    assert_eq!(last.on_response_body(a.len(), false), Action::Continue);
    assert_eq!(stream.on_response_body(a.len(), false), Action::Pause);
    host.state().response_body = b.as_bytes().to_vec();
    assert_eq!(last.on_response_body(b.len(), true), Action::Continue);
    assert_eq!(stream.on_response_body(b.len(), true), Action::Continue);
    last.on_done();
    assert_eq!(host.response_header_value("retry-after").as_deref(), Some("7"), "the caller is told the delay");
    let record = |k: usize| super::attempts::read_record(&host, k).map(|r| (r.status, r.retry_after_s));
    assert_eq!((record(1), record(2)), (Some((429, None)), Some((429, Some(7)))));
    let stats = |slug: &str| {
        let bytes = host.state().shared.get(&format!("sy/h/g|{slug}")).map(|(b, _)| b.clone()).expect("stats");
        crate::routing::stats::EndpointStats::decode(&bytes)
    };
    for (at, cooling) in [(1_006_999, true), (1_007_000, false)] {
        assert_eq!(stats("beta").view(at, 30_000).cooling_down, cooling, "beta at {at}");
    }
    assert!(!stats("alpha").view(1_000_001, 30_000).cooling_down, "alpha's delay was never seen");
    let body = json(&host.state().response_body);
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED", "{body}");
}

// A Google-only provider's first attempt on its first-attempt cluster (no per-attempt filter) is
// the plan's only one: its Gemini 429 reaches the decision filter, which reads the delay from
// the body it holds for the final error, cools the endpoint down and names it in Retry-After.
#[test]
fn a_prepared_first_attempts_gemini_429_is_read_by_the_decision_filter() {
    let config = configured(
        r#"{"providers": {"delta": {"cluster": "c_delta", "first_attempt_cluster": "c_delta_first",
              "authority": "delta.example", "credential": {"injected": true}, "apis": {"google": {}}}},
            "models": {"g": {"endpoints": [{"provider": "delta", "pricing": {"prompt": 1, "completion": 1}}]}},
            "routing": {"default_policy": "price_weighted"}}"#,
    );
    let host = MockHost::new();
    host.set_prop(&route_mark_path(), b"llm");
    host.with_request_headers(&[(":method", "POST"), (":path", "/v1beta/models/g:generateContent")]);
    let body = r#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}"#;
    host.state().request_body = body.as_bytes().to_vec();
    host.state().now_ms = 2_000_000;
    let mut stream = Stream::new(host.clone(), Rc::clone(&config));
    assert_eq!(stream.on_request_headers(false), Action::Pause);
    assert_eq!(stream.on_request_body(body.len(), true), Action::Continue);
    let plan = host.prop(&[PLAN_PROPERTY]).and_then(|b| AttemptPlan::decode(&b)).expect("plan");
    assert!(plan.first_prepared && plan.endpoints.len() == 1);
    answer(&host, "429", GEMINI_429);
    host.state().response_headers.push((ATTEMPTS_HEADER.to_string(), "1".to_string()));
    assert_eq!(stream.on_response_headers(false), Action::Pause);
    assert_eq!(host.response_header_value("retry-after"), None);
    assert_eq!(stream.on_response_body(GEMINI_429.len(), true), Action::Continue);
    assert_eq!(host.response_header_value("retry-after").as_deref(), Some("7"));
    let bytes = host.state().shared.get("sy/h/g|delta").map(|(b, _)| b.clone()).expect("stats");
    let stats = crate::routing::stats::EndpointStats::decode(&bytes);
    assert!(stats.view(2_006_999, 30_000).cooling_down && !stats.view(2_007_000, 30_000).cooling_down);
}

const STREAM_BODY: &str =
    r#"{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}}"#;

/// A stream as OpenAI sends it when asked for its usage: content, the finish reason, the usage
/// alone in a chunk without choices, `[DONE]`.
const ASKED_STREAM: &str = "data: {\"model\":\"m-up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"model\":\"m-up\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
data: {\"model\":\"m-up\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":500,\"total_tokens\":1500}}\n\n\
data: [DONE]\n\n";

// A caller's stream without `stream_options.include_usage`: the provider is asked for its usage,
// which is counted, priced and charged to the token limit as reported (not the prompt estimate)
// whatever the caller sees: by default (`routing.stream_usage: always`, OpenRouter's rule) the
// usage-only chunk with its `cost`, under `when_asked` (OpenAI's rule) no such chunk.
#[test]
fn a_stream_that_did_not_ask_for_usage_is_still_counted_priced_and_charged() {
    use crate::limits::rls::{Code, Response};
    for stream_usage in [None, Some("always"), Some("when_asked")] {
        let host = MockHost::default();
        let mut raw = limited_config("open");
        if let Some(mode) = stream_usage {
            let routing = format!(r#""price_weighted", "stream_usage": "{mode}"}}"#);
            raw = raw.replacen(r#""price_weighted"}"#, &routing, 1);
        }
        let config = configured(&raw);
        routed_request(&host);
        host.state().request_body = STREAM_BODY.as_bytes().to_vec();
        let mut stream = Stream::new(host.clone(), Rc::clone(&config));
        stream.on_request_headers(false);
        let n = rls_answer(&host, &Response { overall: Code::Ok, statuses: vec![] });
        stream.on_grpc_response(1, 0, n);
        assert_eq!(stream.on_request_body(STREAM_BODY.len(), true), Action::Pause, "held for the reservation");
        stream.on_grpc_response(2, 0, n);
        let sent = json(&host.state().request_body);
        assert_eq!(sent["stream_options"], serde_json::json!({"include_usage": true}), "asked on the caller's behalf");
        let mut a = attempt(&host, &config, 1, "c_alpha");
        host.with_response_headers(&[(":status", "200"), ("content-type", "text/event-stream")]);
        host.state().response_body = ASKED_STREAM.as_bytes().to_vec();
        a.on_response_headers(false);
        a.on_response_body(ASKED_STREAM.len(), true);
        a.on_done();
        stream.on_response_headers(false);
        stream.on_response_body(ASKED_STREAM.len(), true);
        let shown = String::from_utf8(host.state().response_body.clone()).unwrap();
        assert!(shown.contains("\"finish_reason\":\"stop\"") && shown.ends_with("data: [DONE]\n\n"), "{shown}");
        let last = shown.split("\n\n").filter_map(|e| e.strip_prefix("data: {")).last().unwrap();
        let last = json(format!("{{{last}").as_bytes());
        if stream_usage == Some("when_asked") {
            assert!(!shown.contains("\"choices\":[]") && !shown.contains("prompt_tokens"), "{shown}");
        } else {
            // The usage chunk as OpenAI's include_usage sends it, priced: 1500 tokens at $1 per million.
            assert_eq!(last["choices"], serde_json::json!([]), "{shown}");
            assert_eq!((last["provider"].as_str(), last["model"].as_str()), (Some("alpha"), Some("m")), "{shown}");
            assert_eq!(last["usage"]["prompt_tokens"], 1000, "{shown}");
            assert_eq!(last["usage"]["cost"].as_f64(), Some(0.0015), "{shown}");
        }
        stream.on_log();
        let labels = "gen_ai_request_model.m.gen_ai_response_model.m.gen_ai_provider_name.alpha.endpoint.alpha";
        let tokens = "switchyard.gen_ai_client_token_usage_tokens_total.gen_ai_token_type";
        assert_eq!(host.counter(&format!("{tokens}.input.{labels}")), 1000);
        assert_eq!(host.counter(&format!("{tokens}.output.{labels}")), 500);
        // 1500 tokens at alpha's $1 per million.
        assert_eq!(host.counter(&format!("switchyard.gen_ai_usage_cost_nano_usd_total.{labels}")), 1_500_000);
        let reserved = rls_call(&host, 1).1;
        assert_eq!(
            rls_call(&host, 2),
            (vec!["tpm".to_string()], 1500 - reserved),
            "the reported 1500 less the reservation"
        );
    }
}

/// alpha speaks OpenAI; beta only Anthropic's Messages API (the request is translated for it).
const CROSS_API_CONFIG: &str = r#"{
  "providers": {
    "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "alpha-secret"}},
    "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"value": "beta-secret"},
             "apis": {"anthropic": {}}}
  },
  "models": {"m": {"endpoints": [
    {"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}},
    {"provider": "beta", "upstream_model": "claude-m", "pricing": {"prompt": 2, "completion": 2}}
  ]}},
  "routing": {"default_policy": "price_weighted"}
}"#;

#[test]
fn a_failover_to_an_endpoint_of_another_api_sends_its_body_and_translates_its_answer() {
    let config = configured(CROSS_API_CONFIG);
    let host = MockHost::new();
    let mut stream = decide(&host, &config);
    let stored = host.prop(&["switchyard_body_anthropic"]).expect("the Anthropic body, stored for its attempts");
    assert!(stored.len() > 4);

    let mut first = attempt(&host, &config, 1, "c_alpha");
    assert_eq!(host.request_header_value(":path").as_deref(), Some("/v1/chat/completions"));
    assert_eq!(first.on_request_body(BODY.len(), true), Action::Continue);
    answer(&host, "503", r#"{"error": "busy"}"#);
    assert_eq!(first.on_response_headers(false), Action::Continue);
    first.on_done();

    let mut second = attempt(&host, &config, 2, "c_beta");
    assert_eq!(host.request_header_value(":path").as_deref(), Some("/v1/messages"));
    assert_eq!(host.request_header_value("x-api-key").as_deref(), Some("beta-secret"));
    assert_eq!(host.request_header_value("authorization"), None);
    assert_eq!(host.request_header_value("anthropic-version").as_deref(), Some("2023-06-01"));
    assert_eq!(second.on_request_body(BODY.len(), false), Action::Pause, "held until whole");
    assert_eq!(second.on_request_body(BODY.len(), true), Action::Continue);
    let sent = json(&host.state().request_body);
    assert_eq!(sent["model"], "claude-m");
    assert_eq!(sent["messages"], serde_json::json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]));
    assert_eq!(sent["max_tokens"], crate::translate::anthropic::DEFAULT_MAX_TOKENS);
    assert_eq!(host.request_header_value("content-length"), Some(host.state().request_body.len().to_string()));

    let anthropic_answer = r#"{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-m",
        "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 600000, "cache_read_input_tokens": 400000, "output_tokens": 0}}"#;
    answer(&host, "200", anthropic_answer);
    assert_eq!(second.on_response_headers(false), Action::Continue);
    assert_eq!(second.on_response_body(anthropic_answer.len(), true), Action::Continue);
    second.on_done();

    assert_eq!(stream.on_response_headers(false), Action::Pause);
    assert_eq!(stream.on_response_body(anthropic_answer.len(), true), Action::Continue);
    let body = json(&host.state().response_body);
    assert_eq!(body["object"], "chat.completion", "the caller's shape: {body}");
    assert_eq!((body["provider"].as_str(), body["model"].as_str()), (Some("beta"), Some("m")));
    assert_eq!(body["choices"][0]["message"]["content"], "hello");
    assert_eq!(body["usage"]["prompt_tokens"], 1_000_000);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 400_000);
    // 1M prompt tokens at beta's $2 per million (no cached price: cached tokens at the prompt's).
    assert_eq!(body["usage"]["cost"].as_f64(), Some(2.0));
    stream.on_log();
    assert_eq!(host.counter("switchyard.requests_total.result.served"), 1);
    // The metrics read the usage in the endpoint's own shape (Anthropic's input excludes the
    // cache reads): the same totals.
    let labels = "gen_ai_request_model.m.gen_ai_response_model.m.gen_ai_provider_name.beta.endpoint.beta";
    let tokens = "switchyard.gen_ai_client_token_usage_tokens_total.gen_ai_token_type";
    assert_eq!(host.counter(&format!("{tokens}.input.{labels}")), 1_000_000);
    assert_eq!(host.counter(&format!("switchyard.gen_ai_usage_cost_nano_usd_total.{labels}")), 2_000_000_000);
}

#[test]
fn a_provider_refusing_its_key_fails_over_but_a_caller_error_does_not() {
    let config = configured(CONFIG);
    for (status, sent_on) in [("401", "503"), ("403", "503"), ("400", "400")] {
        let host = MockHost::new();
        let _stream = decide(&host, &config);
        let mut first = attempt(&host, &config, 1, "c_alpha");
        answer(&host, status, r#"{"error": {"code": "401", "message": "Access denied"}}"#);
        assert_eq!(first.on_response_headers(false), Action::Continue);
        assert_eq!(host.response_header_value(":status").as_deref(), Some(sent_on), "{status}");
        // The last attempt's refusal is the caller's answer.
        let mut last = attempt(&host, &config, 2, "c_beta");
        answer(&host, status, r#"{"error": {"code": "401", "message": "Access denied"}}"#);
        assert_eq!(last.on_response_headers(false), Action::Continue);
        assert_eq!(host.response_header_value(":status").as_deref(), Some(status), "{status}");
    }
}
