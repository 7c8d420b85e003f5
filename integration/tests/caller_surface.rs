//! What a caller of the endpoint sees, through real Envoy 1.40: the model list and endpoints
//! listing, the response `model` and `usage.cost` (plain and streamed), gzip-accepting callers,
//! multi-megabyte chunked answers, clean final errors, wrapped non-JSON provider errors, kept-alive
//! connections after filter errors, the model-fallback budget, the attempt log, the strategy
//! header, slug warnings and the access-log line.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::{msg, stack};
use serde_json::{json, Value};
use switchyard_integration::client::{post_json, send, send_on_one_connection, Reply};

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b).read_to_end(&mut out).unwrap_or_else(|e| panic!("not gzip: {e}"));
    out
}

async fn get(path: &str) -> Reply {
    send(stack().addr, "GET", path, &[("x-test-id", "sy-get")], b"").await.unwrap()
}

/// SSE `data:` payloads that are JSON objects.
fn events(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

fn cost(prompt: u64, cached: u64, completion: u64) -> f64 {
    // sy/cost: $2 / $10 per million, cached prompt $0.5, $0.001 per request.
    let c = (prompt - cached) as f64 * 2.0 / 1e6 + cached as f64 * 0.5 / 1e6 + completion as f64 * 10.0 / 1e6 + 0.001;
    (c * 1e12).round() / 1e12
}

#[tokio::test]
async fn model_list_is_openai_shaped_and_answered_locally() {
    let r = get("/v1/models").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().unwrap();
    assert!(data.len() >= 20, "every catalog model is listed: {}", data.len());
    let basic = data.iter().find(|m| m["id"] == "test/basic").unwrap();
    assert_eq!(basic["object"], "model");
    assert_eq!(basic["owned_by"], "test");
    // Cheapest endpoint's price (alpha, $1 per million), OpenRouter's per-token string.
    assert_eq!(basic["pricing"]["prompt"], "0.000001");
    assert!(basic["context_length"].is_null(), "delta has no limit");
    assert_eq!(basic["supported_parameters"], json!(["max_tokens", "response_format", "temperature", "tools"]));
    let one = get("/v1/models/sy/cost").await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["pricing"]["input_cache_read"], "0.0000005");
    let missing = get("/v1/models/nope/nope").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["code"], "model_not_found");
    assert!(stack().received("sy-get").is_empty(), "listings never reach a provider");
}

#[tokio::test]
async fn endpoints_listing_shows_prices_policy_and_live_statistics() {
    let s = stack();
    for _ in 0..3 {
        let r = s.chat("sy-ep", json!({"model": "sy/one", "messages": msg("hi")})).await;
        assert_eq!(r.status, 200);
    }
    let r = get("/v1/models/sy/one/endpoints").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["data"]["id"], "sy/one");
    let eps = v["data"]["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 1);
    let e = &eps[0];
    assert_eq!(e["tag"], "alpha");
    assert_eq!(e["pricing"]["completion"], "0.000001");
    assert_eq!(e["data_policy"], json!({"retains_data": false, "trains_on_data": false, "zdr": true}));
    assert!(e["stats"]["attempts"].as_u64().unwrap() >= 3, "{e}");
    assert_eq!(e["stats"]["uptime"], 1.0);
    assert!(e["stats"]["ttft_ms"]["p50"].is_number(), "{e}");
    assert_eq!(e["stats"]["cooling_down"], false);
    // A model id with a colon, percent-encoded as clients do.
    let r = get("/v1/models/vendor/colon%3A8b/endpoints").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["data"]["endpoints"][0]["model_id"], "colon-8b");
}

#[tokio::test]
async fn response_names_catalog_model_provider_and_cost() {
    let s = stack();
    let r = s
        .chat_with(
            "sy-cost",
            &[("x-mock-behavior", "alpha=cached7")],
            json!({"model": "sy/cost", "messages": msg("hi")}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model"], "sy/cost", "not the provider's alpha-internal-cost-id");
    assert_eq!(v["provider"], "alpha");
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(v["usage"]["cost"].as_f64(), Some(cost(prompt, 7, 4)));
    assert_eq!(r.header("content-length"), Some(r.body.len().to_string().as_str()));
    let (_, got) = s.only_receiver("sy-cost");
    assert_eq!(got.json()["model"], "alpha-internal-cost-id");
}

#[tokio::test]
async fn streamed_chunks_name_the_catalog_model_and_the_usage_chunk_has_cost() {
    let s = stack();
    let body =
        json!({"model": "sy/cost", "stream": true, "stream_options": {"include_usage": true}, "messages": msg("hi")});
    let r = s.chat("sy-stream", body).await;
    assert_eq!(r.status, 200);
    let ev = events(&r.body);
    assert_eq!(ev.len(), 5, "3 content chunks, the finish chunk, the usage chunk: {}", r.text());
    for e in &ev {
        assert_eq!(e["model"], "sy/cost", "{e}");
        assert_eq!(e["provider"], "alpha");
    }
    assert_eq!(ev[4]["choices"], json!([]), "the usage alone, as OpenAI sends it");
    let usage = &ev[4]["usage"];
    assert_eq!(usage["cost"].as_f64(), Some(cost(5, 0, 3)), "{usage}");
    assert!(r.text().ends_with("data: [DONE]\n\n"));
}

// A caller that did not ask for the usage chunk, or said `include_usage: false`: as on
// OpenRouter, its stream ends with the usage chunk all the same, priced (the provider is asked
// for it on the caller's behalf). `routing.stream_usage: "when_asked"` keeps OpenAI's rule:
// tests/stream_usage.rs.
#[tokio::test]
async fn a_stream_that_did_not_ask_for_usage_ends_with_it_priced() {
    let s = stack();
    for (id, options) in [("sy-stream-unasked", None), ("sy-stream-refused", Some(json!({"include_usage": false})))] {
        let mut body = json!({"model": "sy/cost", "stream": true, "messages": msg("hi")});
        if let Some(o) = options {
            body["stream_options"] = o;
        }
        let r = s.chat(id, body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let ev = events(&r.body);
        assert_eq!(ev.len(), 5, "3 content chunks, the finish chunk, the usage chunk: {}", r.text());
        assert!(ev[..4].iter().all(|e| e["choices"][0].is_object() && e["usage"].is_null()), "{}", r.text());
        assert_eq!(ev[4]["choices"], json!([]), "the usage alone, as OpenAI sends it: {}", r.text());
        assert_eq!(ev[4]["usage"]["cost"].as_f64(), Some(cost(5, 0, 3)), "{}", r.text());
        assert!(r.text().ends_with("data: [DONE]\n\n"));
        let (_, got) = s.only_receiver(id);
        assert_eq!(got.json()["stream_options"], json!({"include_usage": true}), "{}", got.json());
    }
}

#[tokio::test]
async fn gzip_accepting_callers_get_the_rewritten_answer_compressed() {
    let s = stack();
    let r = s
        .chat_with("sy-gzip", &[("accept-encoding", "gzip")], json!({"model": "sy/cost", "messages": msg("hi")}))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"), "{:?}", r.headers);
    let v: Value = serde_json::from_slice(&gunzip(&r.body)).unwrap();
    assert_eq!(v["provider"], "alpha");
    assert_eq!(v["model"], "sy/cost");
    assert!(v["usage"]["cost"].is_number());
    let (_, got) = s.only_receiver("sy-gzip");
    assert_eq!(got.header("accept-encoding"), Some("identity"), "providers are asked for unencoded answers");

    // Streaming, gzip accepted: the provider still streams plain SSE, rewritten event by event.
    let body = json!({"model": "sy/cost", "stream": true, "messages": msg("hi")});
    let r = s.chat_with("sy-gzip-stream", &[("accept-encoding", "gzip, deflate")], body).await;
    assert_eq!(r.status, 200);
    let raw = if r.header("content-encoding") == Some("gzip") { gunzip(&r.body) } else { r.body.to_vec() };
    let ev = events(&raw);
    assert_eq!(ev.len(), 5, "3 content chunks, the finish chunk, the usage chunk: {}", String::from_utf8_lossy(&raw));
    assert!(ev.iter().all(|e| e["model"] == "sy/cost" && e["provider"] == "alpha"));
    assert!(ev[4]["usage"]["cost"].is_number(), "{}", String::from_utf8_lossy(&raw));
    let (_, got) = s.only_receiver("sy-gzip-stream");
    assert_eq!(got.header("accept-encoding"), Some("identity"));
}

// A provider that compresses its answer although asked for `identity`: Switchyard cannot rewrite
// bytes it cannot read, so the answer goes on exactly as the provider sent it (still gzip, the
// caller's client decodes it), the headers name the endpoint and model, and the warning header
// says why the body carries no `provider` or `usage.cost`. Streams too.
#[tokio::test]
async fn an_answer_compressed_against_identity_is_passed_on_intact_and_said_so() {
    let s = stack();
    let r = s
        .chat_with(
            "sy-forced-gzip",
            &[("x-mock-behavior", "alpha=gzip")],
            json!({"model": "sy/cost", "messages": msg("hi")}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-encoding"), Some("gzip"), "{:?}", r.headers);
    let v: Value = serde_json::from_slice(&gunzip(&r.body)).unwrap_or_else(|e| panic!("intact gzip JSON: {e}"));
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
    assert!(v.get("provider").is_none() && v["usage"].get("cost").is_none(), "not rewritten: {v}");
    assert_eq!(r.header("x-switchyard-provider"), Some("alpha"));
    assert_eq!(r.header("x-switchyard-model"), Some("sy/cost"));
    let warning = r.header("x-switchyard-warning").unwrap_or_default();
    assert!(warning.contains("content-encoding gzip") && warning.contains("unrewritten"), "{warning}");
    let (_, got) = s.only_receiver("sy-forced-gzip");
    assert_eq!(got.header("accept-encoding"), Some("identity"));

    let body = json!({"model": "sy/cost", "stream": true, "messages": msg("hi")});
    let r = s.chat_with("sy-forced-gzip-stream", &[("x-mock-behavior", "alpha=gzip")], body).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"), "{:?}", r.headers);
    let raw = gunzip(&r.body);
    let ev = events(&raw);
    assert!(!ev.is_empty() && ev.iter().all(|e| e.get("provider").is_none()), "{}", String::from_utf8_lossy(&raw));
    assert!(r.header("x-switchyard-warning").is_some_and(|w| w.contains("content-encoding gzip")));
}

#[tokio::test]
async fn multi_megabyte_chunked_answers_are_rewritten_whole() {
    let s = stack();
    // 3 MB in 16 KiB chunks, no content-length; Envoy's buffer limit in this stack is 1 MiB.
    let r = s
        .chat_with(
            "sy-big",
            &[("x-mock-behavior", "alpha=big3000000")],
            json!({"model": "sy/cost", "messages": msg("hi")}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", &r.text()[..r.text().len().min(300)]);
    let v = r.json();
    assert_eq!(v["provider"], "alpha");
    assert_eq!(v["model"], "sy/cost");
    assert_eq!(v["choices"][0]["message"]["content"].as_str().map(str::len), Some(3_000_000));
    assert!(v["usage"]["cost"].is_number());
}

#[tokio::test]
async fn final_errors_carry_only_their_own_headers() {
    let s = stack();
    let r = s
        .chat_with(
            "sy-fail",
            &[("x-mock-behavior", "alpha=503,beta=500")],
            json!({"model": "sy/fail", "provider": {"sort": "price"}, "messages": msg("hi")}),
        )
        .await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "all_endpoints_failed");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-switchyard-attempt-log"), Some("alpha:503,beta:500"));
    for leftover in ["x-mock-provider", "x-ratelimit-remaining-requests", "x-switchyard-provider", "x-switchyard-model"]
    {
        assert!(r.header(leftover).is_none(), "{leftover} left over from the last attempt: {:?}", r.headers);
    }
    assert_eq!(r.header("content-length"), Some(r.body.len().to_string().as_str()));
}

#[tokio::test]
async fn non_json_provider_errors_are_wrapped() {
    let s = stack();
    let r = s
        .chat_with(
            "sy-html",
            &[("x-mock-behavior", "alpha=403+html")],
            json!({"model": "sy/one", "messages": msg("hi")}),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["error"]["type"], "permission_error");
    assert_eq!(v["error"]["code"], "provider_error");
    assert_eq!(v["error"]["metadata"]["provider"], "alpha");
    assert!(v["error"]["metadata"]["raw"].as_str().unwrap().contains("gateway error"), "{v}");
    // A JSON error body is returned as the provider sent it.
    let r = s
        .chat_with("sy-json4xx", &[("x-mock-behavior", "alpha=400")], json!({"model": "sy/one", "messages": msg("hi")}))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["message"], "alpha: mock failure");
}

#[tokio::test]
async fn filter_errors_keep_the_connection_alive() {
    let s = stack();
    let h = || vec![("content-type", "application/json"), ("x-test-id", "sy-keepalive")];
    let good = json!({"model": "sy/one", "messages": msg("hi")}).to_string().into_bytes();
    let requests = vec![
        ("POST", "/v1/chat/completions", h(), b"{not json".to_vec()),
        ("POST", "/v1/chat/completions", h(), json!({"model": "no/such", "messages": []}).to_string().into_bytes()),
        (
            "POST",
            "/v1/chat/completions",
            h(),
            json!({"model": "sy/one", "provider": {"only": ["beta"]}}).to_string().into_bytes(),
        ),
        ("GET", "/v1/models", h(), Vec::new()),
        ("POST", "/v1/chat/completions", h(), good),
    ];
    let replies = send_on_one_connection(s.addr, &requests).await.unwrap();
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![400, 400, 404, 200, 200]);
    for r in &replies {
        assert_ne!(r.header("connection"), Some("close"), "{:?}", r.headers);
    }
    assert_eq!(replies[4].json()["provider"], "alpha");
}

#[tokio::test]
async fn a_budget_sized_first_model_still_leaves_its_fallback_an_attempt() {
    let s = stack();
    // sy/budget-l has 4 endpoints = routing.max_attempts; all fail (dead refuses connections).
    let body = json!({"model": "sy/budget-l", "models": ["sy/budget-d"], "provider": {"sort": "price"}, "messages": msg("hi")});
    let r = s.chat_with("sy-budget", &[("x-mock-behavior", "alpha=503,beta=503,delta=503")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-model"), Some("sy/budget-d"));
    assert_eq!(r.header("x-switchyard-provider"), Some("gamma"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("4"));
    assert_eq!(r.header("x-switchyard-attempt-log"), Some("alpha:503,beta:503,delta:503,gamma:200"));
    assert_eq!(r.json()["model"], "sy/budget-d");
    let got: Vec<String> = s.received("sy-budget").into_iter().map(|(p, _)| p).collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got.contains(&"gamma".to_string()));
}

#[tokio::test]
async fn strategy_header_and_slug_warnings() {
    let s = stack();
    // gamma is configured but does not serve test/basic: `order` decided nothing.
    let body =
        json!({"model": "test/basic", "messages": msg("hi"), "provider": {"order": ["gamma"], "ignore": ["togther"]}});
    let r = s.chat("sy-warn", body).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-switchyard-strategy"), Some("price_weighted"));
    assert_eq!(r.header("x-switchyard-warning"), Some(r#"provider.ignore[0] "togther" matches no provider"#));
    let body = json!({"model": "test/basic", "messages": msg("hi"), "provider": {"order": ["beta"]}});
    let r = s.chat("sy-order", body).await;
    assert_eq!(r.header("x-switchyard-strategy"), Some("order"));
    assert_eq!(r.header("x-switchyard-attempt-log"), Some("beta:200"));
    assert!(r.header("x-switchyard-warning").is_none());
}

#[test]
fn strict_provider_slugs_reject_unknown_slugs() {
    use switchyard_integration::envoy::{ClusterSpec, Envoy, StackConfig};
    let catalog = json!({
        "providers": {"alpha": {"cluster": "c_alpha", "authority": "alpha.example"}},
        "models": {"m/x": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}},
        "routing": {"strict_provider_slugs": true}
    });
    let port = common::closed_port();
    let cfg = StackConfig::new(catalog, vec![ClusterSpec { name: "c_alpha".into(), port }], None);
    let envoy = Envoy::start(&cfg, "strict-slugs").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let body = json!({"model": "m/x", "messages": msg("hi"), "provider": {"ignore": ["alpha", "togther"]}});
    let r = rt.block_on(post_json(envoy.addr(), "/v1/chat/completions", &[], &body)).unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "provider.ignore[1]");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("togther"));
}

#[tokio::test]
async fn access_log_line_names_model_endpoint_attempts_status_and_ttft() {
    let s = stack();
    let r = s
        .chat_with(
            "sy-log",
            &[("x-mock-behavior", "alpha=503")],
            json!({"model": "sy/fail", "provider": {"sort": "price"}, "messages": msg("hi")}),
        )
        .await;
    assert_eq!(r.status, 200);
    // Envoy's access log goes to its stdout (envoy.log in the stack's work directory).
    let path = s.log_dir.join("envoy.log");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let found = log.lines().find_map(|l| {
            let record: Value = serde_json::from_str(l.split_once("switchyard=")?.1).ok()?;
            (record["model"] == "sy/fail" && record["strategy"] == "sort:price").then(|| (l.to_string(), record))
        });
        if let Some((line, record)) = found {
            assert!(line.contains(" POST 200 "), "{line}");
            assert_eq!(record["path"], "/v1/chat/completions", "{line}");
            assert_eq!(record["endpoint"], "beta", "{line}");
            assert_eq!(record["attempts"], 2, "{line}");
            assert_eq!(record["status"], 200, "{line}");
            assert!(record["ttft_ms"].is_u64(), "{line}");
            assert!(record["policy"].is_null(), "{line}");
            break;
        }
        assert!(Instant::now() < deadline, "no access-log line for the request in {}", path.display());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
