//! What a platform team watches, on a real Envoy: the usage metrics count what the answers'
//! `usage` says (tokens, cached tokens, `usage.cost`) per model, endpoint and caller, streams
//! included; the JSON access log has one parseable line per request with the decision, tokens
//! and cost; the traces reach a real OTLP receiver with the GenAI attributes, continuing the
//! caller's trace.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{launch, msg, test_catalog, Stack};
use serde_json::{json, Value};
use switchyard_integration::envoy::http_get;

/// A model id as real catalogs write them (`/`, `.`, `:`), served by an endpoint variant.
const EXACT_MODEL: &str = "vendor/obs-2.5:8b";
/// A model id with a `.`-part that is a label's name: its label value encodes it (`%6Bind`).
const LABEL_NAMED_MODEL: &str = "vendor/obs.kind";

/// The stack of this binary: the test catalog with a `caller` label, the JSON access log, and
/// `delta` speaking all three APIs for the exact-label and operation tests.
fn stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| {
        let mut catalog = test_catalog();
        catalog["telemetry"] = json!({"caller": {"header": "x-team",
                                                 "values": ["usage", "stream", "log", "traced", "exact", "ops"]}});
        catalog["providers"]["delta"]["apis"] = json!({"openai": {}, "anthropic": {}, "google": {}});
        for model in [EXACT_MODEL, LABEL_NAMED_MODEL] {
            catalog["models"][model] = json!({"endpoints": [
                {"provider": "delta/fast", "upstream_model": "delta-obs", "pricing": {"prompt": 1, "completion": 1}}
            ]});
        }
        launch("observability", catalog, |cfg| {
            cfg.access_log = switchyard_deploy::envoy::AccessLog::Json;
        })
    })
}

/// Sum of a Prometheus series' samples whose labels include all of `labels`.
fn sum(s: &Stack, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, prom) = http_get(s.admin, "/stats/prometheus").unwrap();
    prom.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// The `usage` object of an answer: the body's, or a stream's last event that has one.
fn usage_of(text: &str) -> Value {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return v["usage"].clone();
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v["usage"].is_object())
        .last()
        .map(|v| v["usage"].clone())
        .unwrap_or(Value::Null)
}

const TOKENS: &str = "switchyard_gen_ai_client_token_usage_tokens_total";
const CACHE_READ: &str = "switchyard_gen_ai_usage_cache_read_input_tokens_total";
const COST: &str = "switchyard_gen_ai_usage_cost_nano_usd_total";

#[tokio::test]
async fn usage_metrics_count_what_the_answers_report_by_caller_model_and_endpoint() {
    let s = stack();
    // A whole answer with cached prompt tokens, a failover (alpha fails, beta serves), and a
    // stream, all from the team `usage`.
    let team = [("x-team", "usage")];
    let mut answers = Vec::new();
    for (id, behavior, body) in [
        (
            "obs-json",
            "alpha=ok+cached3+ttft30",
            json!({"model": "test/basic", "provider": {"sort": "price"}, "messages": msg("count me")}),
        ),
        (
            "obs-fail",
            "alpha=503",
            json!({"model": "test/basic", "provider": {"sort": "price"}, "messages": msg("fail over")}),
        ),
        (
            "obs-sse",
            "alpha=ok+ttft30+interval5",
            json!({"model": "test/basic", "provider": {"sort": "price"}, "stream": true,
                   "stream_options": {"include_usage": true}, "messages": msg("stream me")}),
        ),
    ] {
        let headers = [team[0], ("x-mock-behavior", behavior)];
        let r = s.chat_with(id, &headers, body).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        let usage = usage_of(&r.text());
        assert!(usage["cost"].is_number(), "{id}: no usage.cost in {}", r.text());
        answers.push((r.header("x-switchyard-provider").unwrap_or_default().to_string(), usage));
    }
    assert_eq!(answers.iter().map(|a| a.0.as_str()).collect::<Vec<_>>(), ["alpha", "beta", "alpha"]);
    // The counters are read after the requests ended (the filter counts at the stream's end).
    let expect = |endpoint: &str, field: &str| -> f64 {
        answers.iter().filter(|a| a.0 == endpoint).map(|a| a.1[field].as_f64().unwrap_or(0.0)).sum()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    for endpoint in ["alpha", "beta"] {
        let labels = |t: &'static str| {
            vec![
                ("caller", "usage"),
                ("endpoint", endpoint),
                ("gen_ai_provider_name", endpoint),
                ("gen_ai_request_model", "test/basic"),
                ("gen_ai_response_model", "test/basic"),
                ("gen_ai_token_type", t),
            ]
        };
        let want_in = expect(endpoint, "prompt_tokens");
        while sum(s, TOKENS, &labels("input")) < want_in && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(sum(s, TOKENS, &labels("input")), want_in, "{endpoint} input tokens");
        assert_eq!(sum(s, TOKENS, &labels("output")), expect(endpoint, "completion_tokens"), "{endpoint} output");
        let without_type: Vec<_> = labels("input").into_iter().filter(|l| l.0 != "gen_ai_token_type").collect();
        // The cost counter is the answers' usage.cost in nano-USD (each rounded once).
        let cost = sum(s, COST, &without_type) / 1e9;
        assert!((cost - expect(endpoint, "cost")).abs() < 1e-8, "{endpoint}: {cost} vs {}", expect(endpoint, "cost"));
        let cached: f64 = answers
            .iter()
            .filter(|a| a.0 == endpoint)
            .map(|a| a.1["prompt_tokens_details"]["cached_tokens"].as_f64().unwrap_or(0.0))
            .sum();
        assert_eq!(sum(s, CACHE_READ, &without_type), cached, "{endpoint} cache reads");
    }
    // The failed attempt on alpha used nothing billable: alpha's counters hold only its two answers.
    assert!(expect("alpha", "prompt_tokens") > 0.0);
    // Requests by strategy, TTFT and tokens per second per endpoint, the operation's duration
    // (histograms reach /stats/prometheus at Envoy's next stats flush).
    assert!(sum(s, "switchyard_requests_by_strategy_total", &[("strategy", "sort:price")]) >= 3.0);
    for (name, labels, at_least) in [
        ("switchyard_gen_ai_server_time_to_first_token_milliseconds_count", [("endpoint", "alpha")], 2.0),
        ("switchyard_output_tokens_per_second_count", [("endpoint", "alpha")], 2.0),
        ("switchyard_gen_ai_client_operation_duration_milliseconds_count", [("caller", "usage")], 3.0),
    ] {
        let deadline = Instant::now() + Duration::from_secs(15);
        while sum(s, name, &labels) < at_least && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(sum(s, name, &labels) >= at_least, "{name}{labels:?}");
    }
}

// A stream whose caller did not ask for its usage (`stream_options.include_usage`): real
// providers then send none unless asked, so Switchyard asks, and the tokens and cost reach the
// usage metrics and the access log, the same as the caller's last chunk shows (OpenRouter's
// rule, the default). The mock, like OpenAI, reports usage only when asked: 5 prompt and 3
// completion tokens, at test/basic's alpha price ($1 per million each).
#[tokio::test]
async fn a_stream_that_did_not_ask_for_usage_is_counted_priced_and_logged() {
    let s = stack();
    let body = json!({"model": "test/basic", "provider": {"sort": "price"}, "stream": true,
                      "messages": msg("stream, no usage asked")});
    let headers = [("x-team", "stream"), ("x-request-id", "obs-unasked-rid")];
    let r = s.chat_with("obs-unasked", &headers, body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("alpha"));
    let shown = usage_of(&r.text());
    assert_eq!((shown["prompt_tokens"].as_u64(), shown["completion_tokens"].as_u64()), (Some(5), Some(3)), "{shown}");
    assert!((shown["cost"].as_f64().unwrap_or(-1.0) - 8e-6).abs() < 1e-12, "the caller's cost: {shown}");
    let labels = |t: &'static str| {
        vec![
            ("caller", "stream"),
            ("endpoint", "alpha"),
            ("gen_ai_request_model", "test/basic"),
            ("gen_ai_token_type", t),
        ]
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while sum(s, TOKENS, &labels("output")) < 3.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(sum(s, TOKENS, &labels("input")), 5.0, "input tokens");
    assert_eq!(sum(s, TOKENS, &labels("output")), 3.0, "output tokens");
    let cost = sum(s, COST, &[("caller", "stream"), ("endpoint", "alpha")]);
    assert_eq!(cost, 8_000.0, "8 tokens at $1 per million, in nano-USD");
    let path = s.log_dir.join("envoy.log");
    let line = loop {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let found = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["request_id"] == "obs-unasked-rid");
        if let Some(line) = found {
            break line;
        }
        assert!(Instant::now() < deadline, "no access-log line for obs-unasked-rid");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((line["input_tokens"].as_u64(), line["output_tokens"].as_u64()), (Some(5), Some(3)), "{line}");
    let logged = line["cost_usd"].as_f64().unwrap_or(-1.0);
    assert!((logged - 8e-6).abs() < 1e-12, "{line}");
}

#[tokio::test]
async fn unlisted_and_absent_callers_share_two_labels() {
    let s = stack();
    for (id, team) in [("obs-other", Some("billing")), ("obs-other2", Some("growth")), ("obs-none", None)] {
        let headers: Vec<(&str, &str)> = team.map(|t| ("x-team", t)).into_iter().collect();
        let r = s.chat_with(id, &headers, json!({"model": "test/distill", "messages": msg("who am i")})).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let count = |caller: &str| {
        sum(
            s,
            "switchyard_gen_ai_client_operation_duration_milliseconds_count",
            &[("caller", caller), ("gen_ai_request_model", "test/distill")],
        )
    };
    while count("none") < 1.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(count("other"), 2.0, "both unlisted teams are `other`");
    assert_eq!(count("none"), 1.0);
    let (_, prom) = http_get(s.admin, "/stats/prometheus").unwrap();
    assert!(!prom.contains("caller=\"billing\"") && !prom.contains("caller=\"growth\""), "caller text became a label");
}

#[tokio::test]
async fn the_json_access_log_has_one_parseable_line_per_request_with_decision_tokens_and_cost() {
    let s = stack();
    let r = s
        .chat_with(
            "obs-log",
            &[("x-team", "log"), ("x-request-id", "obs-log-rid"), ("x-mock-behavior", "alpha=503")],
            json!({"model": "test/basic", "provider": {"sort": "price"}, "messages": msg("log me")}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let usage = usage_of(&r.text());
    let refused = s
        .chat_with("obs-log-400", &[("x-request-id", "obs-log-400")], json!({"model": "no/such", "messages": msg("x")}))
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    let path = s.log_dir.join("envoy.log");
    let deadline = Instant::now() + Duration::from_secs(15);
    let find = |rid: &str| -> Option<Value> {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        log.lines()
            .filter(|l| l.starts_with('{'))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["request_id"] == rid)
    };
    let (line, refusal) = loop {
        if let (Some(a), Some(b)) = (find("obs-log-rid"), find("obs-log-400")) {
            break (a, b);
        }
        assert!(Instant::now() < deadline, "no JSON access-log lines in {}", path.display());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // One line per request: every JSON line parses, and each request id has exactly one
    // (a failover's two attempts are still one request).
    let log = std::fs::read_to_string(&path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().filter(|l| l.starts_with('{')).collect();
    let parsed: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("an access-log line is not JSON ({e}): {l}")))
        .collect();
    for rid in ["obs-log-rid", "obs-log-400"] {
        assert_eq!(parsed.iter().filter(|v| v["request_id"] == rid).count(), 1, "{rid}: {lines:#?}");
    }
    assert_eq!(line["status"], 200, "{line}");
    assert_eq!(line["method"], "POST", "{line}");
    assert_eq!(line["path"], "/v1/chat/completions", "{line}");
    assert_eq!(line["request_model"], "test/basic", "{line}");
    assert_eq!(line["response_model"], "test/basic", "{line}");
    assert_eq!(line["provider"], "beta", "{line}");
    assert_eq!(line["endpoint"], "beta", "{line}");
    assert_eq!(line["strategy"], "sort:price", "{line}");
    assert_eq!(line["attempt_log"], "alpha:503,beta:200", "{line}");
    assert_eq!(line["caller"], "log", "{line}");
    assert_eq!(line["operation"], "chat", "{line}");
    // Counts and money are JSON numbers, not strings: a log pipeline reads them as they are.
    assert_eq!(line["attempts"], json!(2), "{line}");
    assert_eq!(line["input_tokens"], usage["prompt_tokens"], "{line}");
    assert_eq!(line["output_tokens"], usage["completion_tokens"], "{line}");
    assert!(line["input_tokens"].is_u64() && line["output_tokens"].is_u64(), "{line}");
    assert_eq!(line["cache_read_tokens"], json!(0), "{line}");
    assert!(line["cost_usd"].is_f64(), "{line}");
    let cost = line["cost_usd"].as_f64().unwrap_or(-1.0);
    assert!((cost - usage["cost"].as_f64().unwrap()).abs() < 1e-9, "{line} vs {usage}");
    assert!(line["duration_ms"].is_number(), "{line}");
    // A refusal Switchyard answered: its error code, no provider.
    assert_eq!(refusal["status"], 400, "{refusal}");
    assert_eq!(refusal["error"], "model_not_found", "{refusal}");
    assert!(refusal["provider"].is_null() || refusal["provider"] == "", "{refusal}");
    // Nothing was used or attempted: absent numbers are `null`, never a string.
    for field in ["input_tokens", "output_tokens", "cost_usd"] {
        assert!(refusal[field].is_null(), "{field}: {refusal}");
    }
}

/// Every `switchyard_*` metric family `/stats/prometheus` shows: a label Envoy failed to extract
/// would stay in the name and make a family of its own.
fn families(prom: &str) -> Vec<String> {
    let mut names: Vec<String> = prom
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|n| n.starts_with("switchyard_"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Label values are the ids callers and the catalog write: a model id with `/`, `.` and `:`,
/// an endpoint variant `provider/variant`, on the usage, attempt and gauge series alike; a
/// `.`-part that is a label's name is percent-encoded (docs/metrics.md) and decodes back.
#[tokio::test]
async fn metric_labels_are_the_model_ids_and_endpoint_slugs_as_written() {
    let s = stack();
    for (id, model) in [("obs-exact", EXACT_MODEL), ("obs-exact-kind", LABEL_NAMED_MODEL)] {
        let r = s.chat_with(id, &[("x-team", "exact")], json!({"model": model, "messages": msg("exact")})).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("delta/fast"), "{id}");
    }
    let labels = |model: &'static str| {
        vec![
            ("caller", "exact"),
            ("gen_ai_request_model", model),
            ("gen_ai_response_model", model),
            ("gen_ai_provider_name", "delta"),
            ("endpoint", "delta/fast"),
            ("gen_ai_token_type", "input"),
        ]
    };
    // The one encoded id: `kind` is a label's name (docs/metrics.md, "Label values").
    let encoded = "vendor/obs.%6Bind";
    assert_eq!(switchyard::telemetry::label_id(encoded).as_deref(), Some(LABEL_NAMED_MODEL));
    let deadline = Instant::now() + Duration::from_secs(10);
    while (sum(s, TOKENS, &labels(EXACT_MODEL)) == 0.0 || sum(s, TOKENS, &labels(encoded)) == 0.0)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sum(s, TOKENS, &labels(EXACT_MODEL)) > 0.0, "no token series labelled {:?}", labels(EXACT_MODEL));
    assert!(sum(s, TOKENS, &labels(encoded)) > 0.0, "no token series labelled {:?}", labels(encoded));
    let attempts = [("model", EXACT_MODEL), ("endpoint", "delta/fast"), ("gen_ai_provider_name", "delta")];
    assert_eq!(
        sum(s, "switchyard_attempts_total", &[attempts[0], attempts[1], attempts[2], ("outcome", "success")]),
        1.0
    );
    // The cool-down gauge names every catalog endpoint (published every 5 s).
    let deadline = Instant::now() + Duration::from_secs(15);
    let gauge = |model| {
        let (_, prom) = http_get(s.admin, "/stats/prometheus").unwrap();
        prom.lines().any(|l| {
            l.starts_with("switchyard_endpoint_cooling_down{")
                && l.contains(&format!("model=\"{model}\""))
                && l.contains("endpoint=\"delta/fast\"")
        })
    };
    while !(gauge(EXACT_MODEL) && gauge(encoded)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gauge(EXACT_MODEL) && gauge(encoded), "no cool-down gauge of {EXACT_MODEL} / {encoded} on delta/fast");
    // Every label came out of the names: the families are exactly the documented ones, and no
    // series has a label the filter does not write (the `kind` inside the model id stayed in it).
    let (_, prom) = http_get(s.admin, "/stats/prometheus").unwrap();
    let documented = [
        "switchyard_attempt_duration_milliseconds",
        "switchyard_attempts_total",
        "switchyard_endpoint_cooling_down",
        "switchyard_failover_incomplete_total",
        "switchyard_fallbacks_total",
        "switchyard_gen_ai_client_operation_duration_milliseconds",
        "switchyard_gen_ai_client_token_usage_tokens_total",
        "switchyard_gen_ai_server_time_to_first_token_milliseconds",
        "switchyard_gen_ai_usage_cache_read_input_tokens_total",
        "switchyard_gen_ai_usage_cost_nano_usd_total",
        "switchyard_output_tokens_per_second",
        "switchyard_requests_by_strategy_total",
        "switchyard_requests_total",
    ];
    for family in families(&prom) {
        assert!(documented.contains(&family.as_str()), "{family}: a label stayed in the metric's name");
    }
    for l in prom.lines().filter(|l| l.starts_with(TOKENS)) {
        assert!(!l.contains("kind="), "{l}");
    }
}

/// `gen_ai.operation.name` is the caller's API's, per request (OpenTelemetry's names): OpenAI's
/// chat completions and Anthropic's Messages `chat`, OpenAI's completions `text_completion`,
/// Google's generateContent `generate_content`.
#[tokio::test]
async fn the_access_log_names_each_apis_genai_operation() {
    let s = stack();
    let ask = json!([{"role": "user", "content": "which operation"}]);
    let requests = [
        ("/v1/chat/completions", "obs-op-chat", json!({"model": EXACT_MODEL, "messages": ask}), "chat"),
        (
            "/v1/completions",
            "obs-op-text",
            json!({"model": EXACT_MODEL, "prompt": "which operation"}),
            "text_completion",
        ),
        ("/v1/messages", "obs-op-messages", json!({"model": EXACT_MODEL, "max_tokens": 16, "messages": ask}), "chat"),
        (
            "/v1beta/models/vendor/obs-2.5:8b:generateContent",
            "obs-op-google",
            json!({"contents": [{"role": "user", "parts": [{"text": "which operation"}]}]}),
            "generate_content",
        ),
    ];
    for (path, rid, body, _) in &requests {
        let headers =
            [("x-team", "ops"), ("x-request-id", *rid), ("x-test-id", *rid), ("anthropic-version", "2023-06-01")];
        let r = switchyard_integration::client::post_json(s.addr, path, &headers, body).await.unwrap();
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    let path = s.log_dir.join("envoy.log");
    let deadline = Instant::now() + Duration::from_secs(15);
    for (api_path, rid, _, operation) in requests {
        let line = loop {
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            let found =
                log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|v| v["request_id"] == rid);
            if let Some(line) = found {
                break line;
            }
            assert!(Instant::now() < deadline, "no access-log line for {rid}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(line["operation"], operation, "{api_path}: {line}");
        assert_eq!(line["request_model"], EXACT_MODEL, "{api_path}: {line}");
        assert_eq!(line["endpoint"], "delta/fast", "{api_path}: {line}");
        assert!(line["attempts"].is_u64() && line["input_tokens"].is_u64(), "{api_path}: {line}");
    }
}

/// The OTLP receiver the traced stack exports to (started before its Envoy).
fn receiver() -> &'static switchyard_integration::otlp::OtlpReceiver {
    static RECEIVER: OnceLock<switchyard_integration::otlp::OtlpReceiver> = OnceLock::new();
    RECEIVER.get_or_init(|| switchyard_integration::otlp::start().expect("OTLP receiver"))
}

/// A stack with Envoy's OpenTelemetry tracer exporting to `receiver()`, every request sampled.
fn traced_stack() -> &'static Stack {
    static STACK: OnceLock<Stack> = OnceLock::new();
    STACK.get_or_init(|| {
        receiver();
        let mut catalog = test_catalog();
        catalog["telemetry"] = json!({"caller": {"header": "x-team", "values": ["traced"]}});
        launch("observability-traced", catalog, |cfg| {
            let addr = receiver().addr();
            cfg.tracing = Some(switchyard_deploy::envoy::Tracing {
                collector: (addr.ip().to_string(), addr.port()),
                service_name: "switchyard-test".into(),
                sampling_percent: 100.0,
            });
        })
    })
}

const SPAN_KIND_SERVER: i32 = 2;
const SPAN_KIND_CLIENT: i32 = 3;

#[tokio::test]
async fn a_routed_request_is_traced_with_genai_attributes_continuing_the_callers_trace() {
    let s = traced_stack();
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let traceparent = format!("00-{trace}-{parent}-01");
    let r = s
        .chat_with(
            "obs-trace",
            &[
                ("traceparent", &traceparent),
                ("tracestate", "caller=opaque"),
                ("baggage", "user=alice,tenant=blue"),
                ("x-team", "traced"),
                ("x-mock-behavior", "alpha=503"),
            ],
            json!({"model": "test/basic", "provider": {"sort": "price"}, "messages": msg("trace me")}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let usage = usage_of(&r.text());
    let spans =
        receiver().wait_for(Duration::from_secs(20), |spans| spans.iter().filter(|s| s.trace_id == trace).count() >= 3);
    let ours: Vec<_> = spans.iter().filter(|s| s.trace_id == trace).collect();
    let server = ours
        .iter()
        .find(|s| s.kind == SPAN_KIND_SERVER)
        .unwrap_or_else(|| panic!("no server span in trace {trace}: {ours:#?}"));
    // The caller's trace is continued: its span is the parent, its trace id kept.
    assert_eq!(server.parent_span_id, parent, "{server:#?}");
    assert_eq!(server.service_name.as_deref(), Some("switchyard-test"));
    let a = &server.attributes;
    for (k, v) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.request.model", "test/basic"),
        ("gen_ai.response.model", "test/basic"),
        ("gen_ai.provider.name", "beta"),
        ("switchyard.endpoint", "beta"),
        ("switchyard.strategy", "sort:price"),
        ("switchyard.attempts", "2"),
        ("switchyard.attempt_log", "alpha:503,beta:200"),
        ("switchyard.caller", "traced"),
    ] {
        assert_eq!(a.get(k).map(String::as_str), Some(v), "{k} in {a:#?}");
    }
    assert_eq!(a.get("gen_ai.usage.input_tokens"), Some(&usage["prompt_tokens"].to_string()), "{a:#?}");
    assert_eq!(a.get("gen_ai.usage.output_tokens"), Some(&usage["completion_tokens"].to_string()), "{a:#?}");
    let cost: f64 = a.get("switchyard.cost_usd").and_then(|c| c.parse().ok()).unwrap_or(-1.0);
    assert!((cost - usage["cost"].as_f64().unwrap()).abs() < 1e-9, "{a:#?} vs {usage}");
    // Types: Envoy's tracer sets every custom tag (and its own attributes) as a string; the
    // GenAI conventions' int counts arrive as decimal strings (docs/observability.md says so).
    // A change of type on either side fails here.
    let kinds = &server.attribute_kinds;
    for k in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "switchyard.attempts", "switchyard.cost_usd"] {
        assert_eq!(kinds.get(k).copied(), Some("string"), "{k}: {kinds:?}");
    }
    for k in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "switchyard.attempts"] {
        assert!(a.get(k).and_then(|v| v.parse::<u64>().ok()).is_some(), "{k} is not a decimal integer: {a:#?}");
    }
    assert!(kinds.values().all(|k| *k == "string"), "{kinds:?}");
    // One upstream span per attempt, a child of the request's span, naming its provider's cluster.
    let mut upstream: Vec<_> = ours.iter().filter(|s| s.kind == SPAN_KIND_CLIENT).collect();
    upstream.sort_by_key(|s| s.name.contains("c_beta"));
    assert_eq!(upstream.len(), 2, "{ours:#?}");
    for (span, cluster) in upstream.iter().zip(["c_alpha", "c_beta"]) {
        assert_eq!(span.parent_span_id, server.span_id, "{span:#?}");
        assert!(
            span.name.contains(cluster) || span.attributes.get("upstream_cluster").is_some_and(|c| c == cluster),
            "{cluster}: {span:#?}"
        );
    }
    // What the providers saw of it: at most the W3C trace context Envoy's tracer propagates
    // (a traceparent of this trace naming Envoy's span, and the trace state with it), never
    // the caller's baggage nor any other tracing header.
    let received = s.received("obs-trace");
    assert_eq!(received.len(), 2, "{:?}", received.iter().map(|r| &r.0).collect::<Vec<_>>());
    for (provider, req) in &received {
        assert_eq!(req.header("baggage"), None, "{provider} got the caller's baggage");
        match req.header("traceparent") {
            Some(tp) => assert!(tp.contains(trace) && !tp.contains(parent), "{provider}: {tp}"),
            None => assert_eq!(req.header("tracestate"), None, "{provider}: trace state without its trace"),
        }
        let tracing_headers: Vec<_> = req
            .headers
            .iter()
            .filter(|(k, _)| {
                k.starts_with("x-b3") || k == "b3" || k.contains("trace") && k != "traceparent" && k != "tracestate"
            })
            .collect();
        assert!(tracing_headers.is_empty(), "{provider}: {tracing_headers:?}");
    }
}
