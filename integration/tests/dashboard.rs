//! The Grafana dashboard and the alert rules (`observability/`) against the real thing: a real
//! Prometheus (Debian's `prometheus`) scrapes a test Envoy under mixed traffic (teams, a
//! failing provider, failovers, streams, cached prompts, a policy denial, a model whose every
//! endpoint cools down, a budget spent, a failover cut short by the route timeout, the rate
//! limit service gone), and every dashboard query and every alert expression parses and shows
//! that traffic (a non-zero series, every grouping label set); Prometheus itself loads the rules and
//! finds every alert pending or firing; `promtool check rules` accepts the file. The range
//! results of the main panels go to `target/observability/panels.json` for the picture in
//! docs/observability.md (`make dashboard-picture`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_deploy::ratelimit::service_config;
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{repo_root, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::mesh::{RateLimitService, Redis};
use switchyard_integration::mock::{Behavior, MockProvider};
use switchyard_integration::prometheus::{binaries_present, promtool_check_rules, series_count, Prometheus};

fn plugin() -> Value {
    let ep = |p: &str, price: f64| json!({"provider": p, "upstream_model": format!("{p}-up"), "pricing": {"prompt": price, "completion": price, "cached_prompt": price / 10.0}});
    json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"value": "key-beta"}}
        },
        "models": {
            "m/chat": {"endpoints": [ep("alpha", 100.0), ep("beta", 200.0)]},
            "m/cool": {"endpoints": [ep("alpha", 1.0), ep("beta", 2.0)]}
        },
        "policies": {"search": {}, "ads": {}, "restricted": {"allowed_models": ["m/chat"]}},
        "policy_selection": {"trusted_headers": ["x-team"],
                             "rules": [{"policy": "ads", "header": {"name": "x-team", "value": "ads"}},
                                       {"policy": "restricted", "header": {"name": "x-team", "value": "restricted"}}],
                             "default": "search"},
        "routing": {"default_policy": "price_weighted"},
        "telemetry": {"caller": {"header": "x-team", "values": ["search", "ads", "restricted"]}},
        "rate_limits": {"service": {"cluster": "switchyard_ratelimit", "timeout_ms": 500},
                        "limits": {"ads-spend": {"policy": "ads", "per": "all", "spend_usd": 0.05, "window": "hour"}}}
    })
}

async fn chat(addr: SocketAddr, team: &str, behavior: &str, body: Value) -> Reply {
    let headers = [("x-team", team), ("x-mock-behavior", behavior)];
    tokio::time::timeout(Duration::from_secs(10), post_json(addr, "/v1/chat/completions", &headers, &body))
        .await
        .unwrap_or_else(|_| panic!("{team}: no answer within 10 s"))
        .unwrap_or_else(|e| panic!("{team}: {e}"))
}

fn ask(model: &str, stream: bool, text: &str) -> Value {
    let mut b = json!({"model": model, "messages": [{"role": "user", "content": text}]});
    if stream {
        b["stream"] = json!(true);
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

/// Grafana's interval variables as Prometheus sees them for a short test run.
fn concrete(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m").replace("$__range", "10m").replace("$__interval", "15s")
}

/// Every `expr` of the dashboard's panels (rows have none), with the panel's title.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        let title = p["title"].as_str().unwrap_or_default().to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push((title.clone(), e.to_string()));
            }
        }
    }
    out
}

/// (alert name, expr) of every rule in the rules file (a small YAML reader for its one shape:
/// `- alert: <name>` then `expr: <one line>` or `expr: |` and an indented block).
fn alert_rules(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    let mut name = String::new();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(n) = t.strip_prefix("- alert:") {
            name = n.trim().to_string();
        } else if let Some(e) = t.strip_prefix("expr:") {
            let e = e.trim();
            if e != "|" {
                out.push((name.clone(), e.to_string()));
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            let mut block = Vec::new();
            while let Some(next) = lines.peek() {
                let ni = next.len() - next.trim_start().len();
                if !next.trim().is_empty() && ni <= indent {
                    break;
                }
                block.push(next.trim().to_string());
                lines.next();
            }
            out.push((name.clone(), block.join(" ")));
        }
    }
    out
}

/// The labels a query groups by, from every `by (...)` clause (`le` is what
/// `histogram_quantile` consumes).
fn grouping_labels(expr: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = expr;
    while let Some((_, after)) = rest.split_once("by (") {
        let Some((list, tail)) = after.split_once(')') else { break };
        for l in list.split(',').map(str::trim).filter(|l| !l.is_empty() && *l != "le") {
            if !out.iter().any(|o| o == l) {
                out.push(l.to_string());
            }
        }
        rest = tail;
    }
    out
}

/// Why a query's answer does not show traffic (None: it does): no series, a series without a
/// label the query groups by (or with it empty), or no series with a non-zero, finite value.
fn lacks_data(expr: &str, data: &Value) -> Option<String> {
    if series_count(data) == 0 {
        return Some("no series".into());
    }
    let series = data["result"].as_array().cloned().unwrap_or_default();
    for label in grouping_labels(expr) {
        if let Some(s) = series.iter().find(|s| s["metric"][&label].as_str().is_none_or(str::is_empty)) {
            return Some(format!("a series without its `{label}` label: {s}"));
        }
    }
    let value = |s: &Value| s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok());
    let shows = series.iter().filter_map(value).any(|v| v.is_finite() && v != 0.0);
    (!shows).then(|| "only zero or NaN values".into())
}

#[test]
fn a_query_shows_traffic_only_with_a_non_zero_series_naming_its_labels() {
    let expr = "sum by (reason) (rate(x[1m])) / on (reason) sum by (reason, kind) (y)";
    assert_eq!(grouping_labels(expr), ["reason", "kind"]);
    assert_eq!(grouping_labels("histogram_quantile(0.5, sum by (le, endpoint) (rate(b[1m])))"), ["endpoint"]);
    let vector = |series: Value| json!({"resultType": "vector", "result": series});
    let shows = vector(json!([{"metric": {"reason": "timeout", "kind": "k"}, "value": [1, "0.5"]}]));
    assert_eq!(lacks_data(expr, &shows), None);
    for (why, data) in [
        ("no series", vector(json!([]))),
        ("zero", vector(json!([{"metric": {"reason": "timeout", "kind": "k"}, "value": [1, "0"]}]))),
        ("NaN", vector(json!([{"metric": {"reason": "timeout", "kind": "k"}, "value": [1, "NaN"]}]))),
        ("empty label", vector(json!([{"metric": {"reason": "", "kind": "k"}, "value": [1, "2"]}]))),
        ("missing label", vector(json!([{"metric": {"reason": "timeout"}, "value": [1, "2"]}]))),
    ] {
        assert!(lacks_data(expr, &data).is_some(), "{why} passed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_dashboard_query_and_alert_returns_data_from_a_real_prometheus() {
    assert!(binaries_present(), "prometheus and promtool are not installed (make observability-tools)");
    let root = repo_root();
    let rules_path = root.join("observability/prometheus-alerts.yaml");
    let rules_text = std::fs::read_to_string(&rules_path).unwrap();
    promtool_check_rules(&rules_path).unwrap_or_else(|e| panic!("promtool check rules: {e}"));
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("observability/grafana-dashboard.json")).unwrap())
            .unwrap();
    let queries = dashboard_queries(&dashboard);
    let alerts = alert_rules(&rules_text);
    assert!(queries.len() >= 15, "{queries:?}");
    assert_eq!(alerts.len(), 5, "{alerts:?}");

    // The stack: Redis, the rate limit service, two providers, one Envoy.
    let plugin = plugin();
    let redis = Redis::start("dashboard").expect("redis");
    let mut service =
        RateLimitService::start("dashboard", &redis.url(), &service_config(&plugin).expect("rate_limits"))
            .expect("rls");
    let alpha = MockProvider::start("alpha", 0, Behavior::default()).await.expect("alpha");
    let beta = MockProvider::start("beta", 0, Behavior::default()).await.expect("beta");
    let mut cfg = StackConfig::new(
        plugin,
        vec![
            ClusterSpec { name: "c_alpha".into(), port: alpha.addr.port() },
            ClusterSpec { name: "c_beta".into(), port: beta.addr.port() },
        ],
        None,
    );
    cfg.rate_limit_service = Some(("127.0.0.1".into(), service.addr.port()));
    // A route timeout shorter than an attempt's idle timeout: a stalled first attempt ends the
    // request before its failover (the failover-incomplete series).
    cfg.per_try_idle_timeout_ms = 5_000;
    cfg.route_timeout_ms = 3_000;
    let envoy = tokio::task::block_in_place(|| Envoy::start(&cfg, "dashboard").expect("envoy"));
    let prometheus = tokio::task::block_in_place(|| {
        Prometheus::start_with_rules(
            "dashboard",
            &[("switchyard".to_string(), envoy.admin, "/stats/prometheus".to_string())],
            1_000,
            &[rules_path.clone()],
        )
        .expect("prometheus")
    });
    // Scraped before the traffic starts: Prometheus sees every counter from its first value
    // (the rare-event counters exist at zero), so `increase` counts the whole run.
    tokio::task::block_in_place(|| prometheus.wait_for_scrapes("switchyard", 2, Duration::from_secs(30)))
        .expect("scrapes");
    let began = std::time::SystemTime::now();
    let addr = envoy.addr();

    // Mixed traffic for about 20 s: the search team with a flaky alpha (failovers), streams
    // and cached prompts; the ads team until its budget is spent; a denied model; a model
    // whose every endpoint answers 429 with a long Retry-After.
    let mut ads_refused = 0;
    for round in 0..40 {
        // Half of the search team's requests fail on alpha (its error share stays well over the
        // alert's 20 % with the ads team's successes on it too).
        let flaky = if round % 2 == 1 { "alpha=503" } else { "alpha=ok+ttft20+cached4" };
        let r = chat(addr, "search", flaky, ask("m/chat", round % 2 == 0, &format!("search {round}"))).await;
        assert_eq!(r.status, 200, "{}", r.text());
        // The ads team caps its answers (`max_tokens`), as an application does: its spend
        // limit reserves what a request may cost, and a $0.05 budget would otherwise hold
        // less than one reservation of the default completion at this model's prices.
        let mut ad = ask("m/chat", false, &format!("ads {round}"));
        ad["max_tokens"] = json!(16);
        let r = chat(addr, "ads", "alpha=ok+ttft10", ad).await;
        match r.status {
            200 => {}
            429 => {
                assert_eq!(r.json()["error"]["code"], "budget_exceeded", "{}", r.text());
                ads_refused += 1;
            }
            s => panic!("ads: {s} {}", r.text()),
        }
        if round == 5 {
            // A first rate-limited attempt on each endpoint of m/cool: its counters appear now,
            // so the later one below is an increase `rate` can see.
            let r = chat(addr, "search", "alpha=429/120,beta=429/120", ask("m/cool", false, "cool early")).await;
            assert_eq!(r.status, 429, "{}", r.text());
        }
        if round % 10 == 0 {
            let r = chat(addr, "restricted", "", ask("m/cool", false, "denied")).await;
            assert!(r.status == 403 || r.status == 404, "{} {}", r.status, r.text());
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert!(ads_refused > 0, "the ads budget was never spent");
    // alpha stalls past the route timeout on the first of two planned attempts: Envoy ends the
    // request before beta's turn.
    let mut stalled = ask("m/chat", false, "stalls");
    stalled["provider"] = json!({"order": ["alpha", "beta"]});
    let r = chat(addr, "search", "alpha=ttft4000", stalled).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (504, Some("failover_incomplete")), "{}", r.text());
    let r = chat(addr, "search", "alpha=429/120,beta=429/120", ask("m/cool", false, "cool")).await;
    assert_eq!(r.status, 429, "{}", r.text());
    // The rate limit service goes away: the ads admissions fail open.
    service.kill();
    for n in 0..3 {
        let r = chat(addr, "ads", "alpha=ok", ask("m/chat", false, &format!("open {n}"))).await;
        assert!(r.status == 200 || r.status == 429, "{} {}", r.status, r.text());
    }

    // Every query and alert expression shows the traffic once the scrapes, the stats flush and
    // the gauges' tick have caught up: polled until each does (at most 60 s). Showing it means
    // a series with a non-zero value, and every series naming each label the query groups by
    // (a zero series, or one whose `by` label is empty, is what a panel shows without traffic).
    let mut pending: Vec<(String, String)> = queries
        .iter()
        .map(|(t, e)| (format!("panel {t}"), concrete(e)))
        .chain(alerts.iter().map(|(n, e)| (format!("alert {n}"), e.clone())))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_errors = Vec::new();
    while !pending.is_empty() && Instant::now() < deadline {
        last_errors.clear();
        pending.retain(|(what, expr)| match prometheus.query(expr) {
            Ok(data) => match lacks_data(expr, &data) {
                None => false,
                Some(why) => {
                    last_errors.push(format!("{what}: {why} ({data})"));
                    true
                }
            },
            Err(e) => panic!("{what}: the query does not run: {e}\n{expr}"),
        });
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    assert!(pending.is_empty(), "not showing the traffic after 60 s:\n{}", last_errors.join("\n"));

    // The panels show the ids as the catalog writes them (`m/chat`, not `m_chat`): what a
    // dashboard filters on is what teams put in their requests and what the traces say.
    for (title, label, want) in [
        ("Spend by model and provider (USD/hour)", "gen_ai_response_model", "m/chat"),
        ("Endpoints cooling down", "model", "m/cool"),
    ] {
        let (_, expr) = queries.iter().find(|(t, _)| t == title).unwrap_or_else(|| panic!("no panel {title}"));
        let data = prometheus.query(&concrete(expr)).expect("query");
        let values: Vec<&str> =
            data["result"].as_array().into_iter().flatten().filter_map(|r| r["metric"][label].as_str()).collect();
        assert!(values.contains(&want), "{title}: {label} values {values:?}, want {want}");
        assert!(values.iter().all(|v| v.starts_with("m/")), "{title}: {label} values {values:?}");
    }

    // Prometheus evaluates the rules itself: every rule healthy, every alert pending or firing.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rules = prometheus.rules().expect("rules");
        let mut states = std::collections::BTreeMap::new();
        for g in rules["groups"].as_array().into_iter().flatten() {
            for r in g["rules"].as_array().into_iter().flatten() {
                assert_eq!(r["health"], "ok", "{r}");
                states.insert(r["name"].as_str().unwrap_or_default().to_string(), r["state"].clone());
            }
        }
        let active = states.values().filter(|s| *s == "pending" || *s == "firing").count();
        if active == alerts.len() {
            break;
        }
        assert!(Instant::now() < deadline, "alerts not all active: {states:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // The main panels' series over the run, for the picture.
    let elapsed = began.elapsed().unwrap_or_default().as_secs().max(30);
    let mut picture = serde_json::Map::new();
    for title in [
        "Attempts by provider and outcome",
        "Spend by model and provider (USD/hour)",
        "Tokens by team and type (tokens/s)",
        "Time to first token by provider (p50, p95)",
        "Endpoints cooling down",
        "Spend by team over the range (USD)",
    ] {
        let exprs: Vec<&str> = queries.iter().filter(|(t, _)| t == title).map(|(_, e)| e.as_str()).collect();
        assert!(!exprs.is_empty(), "no panel {title}");
        let mut results = Vec::new();
        for e in exprs {
            let e = concrete(e).replace("[1m]", "[20s]").replace("[10m]", &format!("[{elapsed}s]"));
            results.push(json!({"expr": e, "result": prometheus.query_range(&e, elapsed, 2).expect("range")}));
        }
        picture.insert(title.to_string(), Value::Array(results));
    }
    let out = root.join("target/observability");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("panels.json"), serde_json::to_string_pretty(&Value::Object(picture)).unwrap()).unwrap();
    drop(prometheus);
    drop(envoy);
    drop(redis);
}
