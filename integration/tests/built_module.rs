//! The shipped module (`make wasm`'s output), run in an interpreter against a logging proxy-wasm
//! host: the host-call sequences of a routed request, a failover and a refusal. What the native
//! unit tests cannot show: the exported ABI, the SDK's dispatch, the module's own memory
//! handling, and that no call traps.

use switchyard::protocol::scope::route_mark_path;
use switchyard::protocol::slots::slot_token;
use switchyard::wiring::{ATTEMPTS_HEADER, OWN_REPLY_HEADER};
use switchyard_deploy::envoy::wasm_path;
use switchyard_integration::wasm_host::{Context, Role, Vm};

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

/// Sorted by price: alpha first whatever the random draw.
const BODY: &str = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}}"#;
const ANSWER: &str = r#"{"id": "x", "model": "m", "choices": [{"message": {"role": "assistant", "content": "hello"}}], "usage": {"prompt_tokens": 10, "completion_tokens": 2}}"#;

const CONTINUE: i32 = 0;
const STOP: i32 = 1;

fn vm() -> Vm {
    let path = wasm_path();
    assert!(path.exists(), "{} missing: run `make wasm` first", path.display());
    let mut vm = Vm::load(&path, CONFIG).unwrap_or_else(|e| panic!("module did not load: {e}"));
    vm.state().now_ns = 1_700_000_000_000_000_000;
    vm
}

fn strings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// `expected` occur in `calls` in this order (each a prefix of one call), others between them.
fn assert_in_order(calls: &[String], expected: &[&str]) {
    let mut at = 0;
    for e in expected {
        match calls[at..].iter().position(|c| c.starts_with(e)) {
            Some(p) => at += p + 1,
            None => panic!("`{e}` not found in order in:\n{}", calls.join("\n")),
        }
    }
}

/// The decision filter's request callbacks for a routed request; returns its context.
fn decide(vm: &mut Vm) -> Context {
    let route_mark = route_mark_path().join("/");
    vm.state().properties.insert(route_mark, b"llm".to_vec());
    vm.state().request_headers = strings(&[
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway"),
        ("authorization", "Bearer caller-secret"),
        ("x-switchyard-next", "forged"),
    ]);
    vm.state().request_body = BODY.as_bytes().to_vec();
    let ctx = vm.context(Role::Downstream).unwrap();
    assert_eq!(vm.on(ctx, "proxy_on_request_headers", &[5, 0]).unwrap(), STOP, "waits for the body");
    assert_eq!(vm.on(ctx, "proxy_on_request_body", &[BODY.len() as i32, 1]).unwrap(), CONTINUE);
    ctx
}

/// Attempt `k` on `cluster`: a fresh per-attempt context, its request headers, then `status`.
fn attempt(vm: &mut Vm, k: u64, cluster: &str, status: &str, body: &str) -> Vec<String> {
    vm.state().properties.insert("upstream/request_attempt_count".into(), k.to_le_bytes().to_vec());
    vm.state().properties.insert("xds/cluster_name".into(), cluster.as_bytes().to_vec());
    let ctx = vm.context(Role::Upstream).unwrap();
    vm.take_calls();
    assert_eq!(vm.on(ctx, "proxy_on_request_headers", &[5, 0]).unwrap(), CONTINUE);
    let sent = vm.take_calls();
    vm.state().response_headers = strings(&[
        (":status", status),
        ("content-type", "application/json"),
        ("content-length", &body.len().to_string()),
    ]);
    vm.state().response_body = body.as_bytes().to_vec();
    assert_eq!(vm.on(ctx, "proxy_on_response_headers", &[3, 0]).unwrap(), CONTINUE);
    assert_eq!(vm.on(ctx, "proxy_on_response_body", &[body.len() as i32, 1]).unwrap(), CONTINUE);
    vm.on(ctx, "proxy_on_done", &[]).unwrap();
    vm.on(ctx, "proxy_on_delete", &[]).unwrap();
    sent
}

#[test]
fn a_routed_request_reads_once_and_hands_envoy_the_plan() {
    let mut vm = vm();
    decide(&mut vm);
    let calls = vm.take_calls();
    let mark = format!("get_property {}", route_mark_path().join("/"));
    assert_eq!(calls.first().map(String::as_str), Some(mark.as_str()), "{calls:#?}");
    assert_eq!(calls.iter().filter(|c| *c == "req_headers").count(), 1, "headers read in one call");
    assert_eq!(calls.iter().filter(|c| *c == "get_req_body").count(), 1, "body read once");
    assert_in_order(
        &calls,
        &[
            &mark,
            "req_headers",
            "remove_req_header x-switchyard-next",
            "get_req_body",
            "remove_req_header authorization",
            "set_property switchyard_plan",
            "set_property switchyard_next_1",
            "set_property switchyard_slots",
            "set_req_header x-envoy-max-retries=1",
            "set_req_header accept-encoding=identity",
            "set_req_header content-length=",
            "set_req_body",
        ],
    );
    assert!(!calls.iter().any(|c| c.contains("secret")), "no key written by the decision filter: {calls:#?}");
    assert!(
        !calls.iter().any(|c| c.starts_with("set_req_header x-switchyard")),
        "no cluster on the request: {calls:#?}"
    );
    assert_eq!(vm.state().properties.get("switchyard_next_1"), Some(&slot_token("c_alpha").into_bytes()));
    assert!(vm.unimplemented().is_empty(), "{:?}", vm.unimplemented());
}

#[test]
fn a_failover_sends_each_provider_its_own_key_and_the_caller_one_rewritten_answer() {
    let mut vm = vm();
    let stream = decide(&mut vm);
    let first = attempt(&mut vm, 1, "c_alpha", "503", r#"{"error": "busy"}"#);
    assert_in_order(
        &first,
        &[
            "get_property switchyard_plan",
            "get_property upstream/request_attempt_count",
            "get_property xds/cluster_name",
            "req_headers",
            "set_req_header authorization=Bearer alpha-secret",
            "set_req_header :authority=alpha.example",
            "set_property switchyard_attempt_1",
        ],
    );
    let second = attempt(&mut vm, 2, "c_beta", "200", ANSWER);
    assert_in_order(
        &second,
        &[
            "req_headers",
            "remove_req_header authorization",
            "set_req_header x-api-key=beta-secret",
            "set_req_header :authority=beta.example",
            "set_property switchyard_attempt_2",
        ],
    );
    assert!(!second.iter().any(|c| c.contains("alpha-secret")), "{second:#?}");
    assert_eq!(header(&vm.state().request_headers, "authorization"), None);
    assert_eq!(header(&vm.state().response_headers, ATTEMPTS_HEADER), Some("2"));

    vm.take_calls();
    assert_eq!(vm.on(stream, "proxy_on_response_headers", &[4, 0]).unwrap(), STOP, "held to rewrite");
    assert_eq!(vm.on(stream, "proxy_on_response_body", &[ANSWER.len() as i32, 1]).unwrap(), CONTINUE);
    vm.on(stream, "proxy_on_log", &[]).unwrap();
    let calls = vm.take_calls();
    assert_in_order(
        &calls,
        &[
            "resp_headers",
            "get_property switchyard_attempt_1",
            "get_property switchyard_attempt_2",
            "set_resp_header x-switchyard-attempt-log=",
            "get_resp_body",
            "set_resp_body",
            "set_resp_header content-length=",
            "count switchyard.requests_total.result.served",
        ],
    );
    let body: serde_json::Value = serde_json::from_slice(&vm.state().response_body).unwrap();
    assert_eq!(body["provider"], "beta");
    assert!(body["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{body}");
    assert_eq!(vm.state().counters.get("switchyard.fallbacks_total.kind.provider"), Some(&1));
    assert!(vm.unimplemented().is_empty(), "{:?}", vm.unimplemented());
}

#[test]
fn an_attempt_without_a_plan_is_refused_in_three_host_calls() {
    let mut vm = vm();
    vm.state().request_headers = strings(&[(":method", "POST"), (":path", "/v1/chat/completions")]);
    let ctx = vm.context(Role::Upstream).unwrap();
    vm.take_calls();
    assert_eq!(vm.on(ctx, "proxy_on_request_headers", &[2, 0]).unwrap(), STOP);
    assert_eq!(
        vm.take_calls(),
        vec![
            "get_property switchyard_plan".to_string(),
            format!("set_req_header {OWN_REPLY_HEADER}=1"),
            "reply 403".to_string(),
        ]
    );
    let (status, headers, body) = vm.state().reply.clone().unwrap();
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["code"], "attempt_not_sent");
}

#[test]
fn a_request_on_another_route_costs_one_host_call() {
    let mut vm = vm();
    vm.state().request_headers = strings(&[(":method", "POST"), (":path", "/v1/chat/completions")]);
    let ctx = vm.context(Role::Downstream).unwrap();
    vm.take_calls();
    assert_eq!(vm.on(ctx, "proxy_on_request_headers", &[2, 0]).unwrap(), CONTINUE);
    assert_eq!(vm.on(ctx, "proxy_on_request_body", &[10, 1]).unwrap(), CONTINUE);
    assert_eq!(vm.on(ctx, "proxy_on_response_headers", &[2, 0]).unwrap(), CONTINUE);
    assert_eq!(vm.on(ctx, "proxy_on_response_body", &[10, 1]).unwrap(), CONTINUE);
    vm.on(ctx, "proxy_on_log", &[]).unwrap();
    assert_eq!(vm.take_calls(), vec![format!("get_property {}", route_mark_path().join("/"))]);
}

#[test]
fn a_configuration_error_is_refused_at_load_with_the_field_named() {
    let path = wasm_path();
    let err = match Vm::load(&path, r#"{"providers": {}, "models": {"m": {"endpoints": []}}}"#) {
        Ok(_) => panic!("an empty model was accepted"),
        Err(e) => e,
    };
    assert!(err.contains("providers: at least one provider is required"), "{err}");
}
