//! Switchyard on a listener it shares with other services (real Envoy): the decision filter acts
//! only on its own routes (the route mark), and a provider key enters a request only on its
//! provider's cluster. A request for another virtual host reaches its own upstream exactly as
//! the caller sent it, with no provider key and no Switchyard header, whatever its path.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use serde_json::{json, Value};
use switchyard_integration::client::{send, Reply};
use switchyard_integration::envoy::{http_get, keep_running, AccessLog, ClusterSpec, Envoy, OtherHost, StackConfig};
use switchyard_integration::mock::{received_by, MockProvider, Received};

const KEYS: [&str; 3] = ["key-alpha", "key-beta-env", "key-delta"];

struct Stack {
    addr: SocketAddr,
    admin: SocketAddr,
    providers: Vec<MockProvider>,
}

impl Stack {
    fn mock(&self, name: &str) -> &MockProvider {
        self.providers.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no mock {name}"))
    }

    fn received(&self, test_id: &str) -> Vec<(String, Received)> {
        received_by(&self.providers, test_id)
    }
}

fn catalog() -> Value {
    let ep = |p: &str, price: f64| json!({"provider": p, "upstream_model": format!("{p}-up"), "pricing": {"prompt": price, "completion": price}});
    json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
            // An environment key with the default `Bearer ` prefix: the first-attempt cluster's
            // injector reads the variable and puts the prefix before it.
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"env": "SY_SHARED_BETA_KEY"}},
            "delta": {"cluster": "c_delta", "authority": "delta.example",
                      "credential": {"header": "x-api-key", "prefix": "", "value": "key-delta"}}
        },
        "models": {
            "m/one": {"endpoints": [ep("alpha", 1.0), ep("beta", 2.0), ep("delta", 3.0)]},
            "m/env": {"endpoints": [ep("beta", 1.0), ep("alpha", 2.0)]},
            "m/xkey": {"endpoints": [ep("delta", 1.0)]}
        },
        "routing": {"default_policy": "price_weighted"}
    })
}

static STACK: OnceLock<Stack> = OnceLock::new();

fn stack() -> &'static Stack {
    STACK.get_or_init(|| {
        let names = ["alpha", "beta", "delta", "vllm"].map(String::from).to_vec();
        keep_running("shared-listener", names, |providers| {
            let port = |n: &str| providers.iter().find(|p| p.name == n).map(|p| p.addr.port()).unwrap_or(0);
            let clusters = ["alpha", "beta", "delta"]
                .iter()
                .map(|n| ClusterSpec { name: format!("c_{n}"), port: port(n) })
                .collect();
            let mut cfg = StackConfig::new(catalog(), clusters, None);
            cfg.env_keys = vec!["SY_SHARED_BETA_KEY".into()];
            cfg.per_try_idle_timeout_ms = 1_000;
            let vllm = OtherHost {
                domain: "vllm.internal".into(),
                cluster: ClusterSpec { name: "vllm".into(), port: port("vllm") },
            };
            let env = [("SY_SHARED_BETA_KEY", "key-beta-env")];
            let envoy =
                Envoy::start_edited(&cfg, "shared-listener", &env, &[vllm]).unwrap_or_else(|e| panic!("envoy: {e}"));
            let stack = Stack { addr: envoy.addr(), admin: envoy.admin, providers };
            (envoy, stack)
        })
    })
}

fn stat(s: &Stack, name: &str) -> u64 {
    let (_, body) = http_get(s.admin, &format!("/stats?filter=^{}$", name.replace('.', "\\."))).unwrap();
    body.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Headers Envoy itself adds to any proxied request (none of them Switchyard's).
/// What plain Envoy's router adds to any request: Switchyard changes no router setting of the
/// listener, so another host's requests get exactly these.
const ENVOY_ADDS: [&str; 3] = ["x-forwarded-proto", "x-request-id", "x-envoy-expected-rq-timeout-ms"];

fn assert_no_switchyard_headers(r: &Reply) {
    for (k, _) in &r.headers {
        assert!(!k.starts_with("x-switchyard"), "answer carries {k}");
    }
}

#[tokio::test]
async fn another_hosts_requests_reach_it_untouched_on_every_path() {
    let s = stack();
    let chat =
        json!({"model": "m/one", "messages": [{"role": "user", "content": "hi"}], "provider": {"order": ["alpha"]}})
            .to_string();
    let cases: Vec<(&str, &str, &str, Vec<(&str, &str)>, Vec<u8>)> = vec![
        // Switchyard's own path, with the caller's key and without one.
        (
            "other-chat-key",
            "POST",
            "/v1/chat/completions",
            vec![("authorization", "Bearer caller-own"), ("content-type", "application/json")],
            chat.clone().into_bytes(),
        ),
        (
            "other-chat-nokey",
            "POST",
            "/v1/chat/completions",
            vec![("content-type", "application/json")],
            chat.clone().into_bytes(),
        ),
        // What Switchyard would answer itself on its own host (listing, 404, 405).
        ("other-models", "GET", "/v1/models", vec![("authorization", "Bearer caller-own")], Vec::new()),
        ("other-generate", "POST", "/generate", vec![("x-api-key", "caller-x")], b"{\"prompt\":\"x\"}".to_vec()),
        ("other-get-chat", "GET", "/v1/chat/completions", vec![], Vec::new()),
        // Internal headers a caller made up are the other service's business, passed as sent.
        (
            "other-forged",
            "POST",
            "/v1/chat/completions",
            vec![
                ("x-switchyard-slot-1", "ad5b8c3e9c0a6d7f"),
                ("x-switchyard-groups", "e30="),
                ("x-switchyard-debug", "1"),
            ],
            chat.into_bytes(),
        ),
    ];
    for (id, method, path, headers, body) in cases {
        let mut sent: Vec<(&str, &str)> = vec![("host", "vllm.internal"), ("x-test-id", id)];
        sent.extend(headers.iter().copied());
        let r = send(s.addr, method, path, &sent, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_no_switchyard_headers(&r);
        // The caller gets the other service's answer as it gave it: the same request sent to it
        // directly (under another test id) gets the same status, type and body (an OpenAI-style
        // answer's `id` names the mock's request count: left out).
        let direct_id = format!("{id}-direct");
        let direct_headers: Vec<(&str, &str)> =
            sent.iter().map(|&(k, v)| if k == "x-test-id" { (k, direct_id.as_str()) } else { (k, v) }).collect();
        let direct = send(s.mock("vllm").addr, method, path, &direct_headers, &body).await.unwrap();
        assert_eq!((r.status, r.header("content-type")), (direct.status, direct.header("content-type")), "{id}");
        assert_eq!(without_id(&r.body), without_id(&direct.body), "{id}: {}", r.text());
        let got = s.received(id);
        assert_eq!(got.len(), 1, "{id}: {:?}", got.iter().map(|g| &g.0).collect::<Vec<_>>());
        let (who, req) = &got[0];
        assert_eq!(who, "vllm", "{id} reached {who}");
        // Exactly as sent: nothing added (no x-switchyard-* header above all) but Envoy's own,
        // nothing removed, no provider key.
        assert_eq!(req.differs_from_sent(method, path, &sent, &body, &ENVOY_ADDS, &KEYS), None, "{id}");
    }
}

#[tokio::test]
async fn switchyard_host_requests_are_routed_each_provider_seeing_only_its_key() {
    let s = stack();
    let chat = |model: &str, extra: Value| {
        let mut b = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                b[k] = v.clone();
            }
        }
        b.to_string().into_bytes()
    };
    let post = |id: &'static str, body: Vec<u8>, extra: Vec<(&'static str, &'static str)>| async move {
        let mut h: Vec<(&str, &str)> =
            vec![("x-test-id", id), ("authorization", "Bearer caller-own"), ("content-type", "application/json")];
        h.extend(extra);
        send(stack().addr, "POST", "/v1/chat/completions", &h, &body).await.unwrap()
    };
    // First attempts through each provider's first-attempt cluster: its own injector adds its
    // key (inline, from the environment with the prefix, in another header).
    for (id, model, provider, header, key) in [
        ("own-alpha", "m/one", "alpha", "authorization", "Bearer key-alpha"),
        ("own-beta", "m/env", "beta", "authorization", "Bearer key-beta-env"),
        ("own-delta", "m/xkey", "delta", "x-api-key", "key-delta"),
    ] {
        let r = post(id, chat(model, json!({"provider": {"order": [provider]}})), vec![]).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some(provider));
        let got = s.received(id);
        assert_eq!(got.len(), 1, "{id}");
        let (who, req) = &got[0];
        assert_eq!(who, provider);
        assert_eq!(req.header(header), Some(key), "{id}: {:?}", req.headers);
        assert_one_key(req, key);
        assert_eq!(req.header("host"), Some(format!("{provider}.example").as_str()));
    }
    assert!(stat(s, "cluster.c_alpha-first.upstream_rq_total") >= 1);
    assert!(stat(s, "cluster.c_beta-first.upstream_rq_total") >= 1);
    assert!(stat(s, "cluster.c_delta-first.upstream_rq_total") >= 1);
    // A failover: the first attempt (alpha's twin) fails, the retries go through the regular
    // clusters' per-attempt filter; every attempt carries exactly its own provider's key.
    let r = post(
        "own-failover",
        chat("m/one", json!({"provider": {"order": ["alpha", "beta", "delta"]}})),
        vec![("x-mock-behavior", "alpha=503,beta=500")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("delta"));
    let mut got = s.received("own-failover");
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let who: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(who, ["alpha", "beta", "delta"]);
    assert_one_key(&got[0].1, "Bearer key-alpha");
    assert_one_key(&got[1].1, "Bearer key-beta-env");
    assert_one_key(&got[2].1, "key-delta");
    assert_eq!(got[2].1.header("x-api-key"), Some("key-delta"));
    assert_eq!(got[2].1.header("authorization"), None, "delta got another provider's header");
    // Unrouted paths on Switchyard's host keep today's answers.
    let r = send(s.addr, "GET", "/v1/chat/completions", &[("x-test-id", "own-405")], b"").await.unwrap();
    assert_eq!(r.status, 405, "{}", r.text());
    let r = send(s.addr, "POST", "/generate", &[("x-test-id", "own-404")], b"{}").await.unwrap();
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "not_found", "{}", r.text());
    assert!(s.received("own-405").is_empty() && s.received("own-404").is_empty());
    assert!(s.mock("vllm").received_for("own-failover").is_empty());
}

/// A JSON answer without its top-level `id`; any other body as its bytes.
fn without_id(body: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut o)) => {
            o.remove("id");
            Value::Object(o)
        }
        _ => Value::String(String::from_utf8_lossy(body).into_owned()),
    }
}

/// The request carries `key` and no other provider's key or the caller's, in any header.
fn assert_one_key(req: &Received, key: &str) {
    let mut carried = 0;
    for (k, v) in &req.headers {
        assert!(!v.contains("caller-own"), "the caller's key reached a provider in {k}");
        for other in KEYS {
            if v.contains(other) {
                assert!(key.contains(other), "{k}: {v} is another provider's key");
                carried += 1;
            }
        }
    }
    assert_eq!(carried, 1, "exactly one key header: {:?}", req.headers);
}

/// Another service's Envoy-generated errors on Switchyard's listener (its upstream refusing the
/// connection, or resetting it) are exactly what plain Envoy answers for it: Switchyard's JSON
/// mappers apply to Switchyard's hosts only, and it changes no router or listener setting another
/// host would see.
#[tokio::test]
async fn another_hosts_envoy_errors_are_byte_identical_with_and_without_switchyard() {
    let vllm = MockProvider::start("vllm-errors", 0, Default::default()).await.unwrap();
    let down = common::closed_port();
    let others = vec![
        OtherHost { domain: "down.internal".into(), cluster: ClusterSpec { name: "down".into(), port: down } },
        OtherHost {
            domain: "vllm.internal".into(),
            cluster: ClusterSpec { name: "vllm".into(), port: vllm.addr.port() },
        },
    ];
    let unused = |n: &str| ClusterSpec { name: format!("c_{n}"), port: down };
    let mut cfg = StackConfig::new(catalog(), vec![unused("alpha"), unused("beta"), unused("delta")], None);
    cfg.env_keys = vec!["SY_SHARED_BETA_KEY".into()];
    let with = Envoy::start_edited(&cfg, "shared-errors", &[("SY_SHARED_BETA_KEY", "k")], &others).unwrap();
    // The same services on plain Envoy: one virtual host each, the router, nothing else.
    let vhosts: Vec<Value> = others
        .iter()
        .map(|o| {
            json!({"name": o.domain, "domains": [o.domain],
            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": o.cluster.name, "timeout": "30s"}}]})
        })
        .collect();
    let clusters: Vec<Value> = others
        .iter()
        .map(|o| {
            json!({"name": o.cluster.name, "type": "STATIC", "connect_timeout": "1s",
            "load_assignment": {"cluster_name": o.cluster.name, "endpoints": [{"lb_endpoints": [{"endpoint":
                {"address": {"socket_address": {"address": "127.0.0.1", "port_value": o.cluster.port}}}}]}]}})
        })
        .collect();
    let plain = json!({
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {
            "listeners": [{"name": "plain", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                "enable_reuse_port": false,
                "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": "plain", "route_config": {"name": "plain", "virtual_hosts": vhosts},
                    "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}]}]}],
            "clusters": clusters
        }
    });
    let without = Envoy::start_bootstrap(&plain, "shared-errors-plain", &[], 1).unwrap();
    let cases: [(&str, &str, &[(&str, &str)]); 4] = [
        ("refused", "down.internal", &[]),
        ("refused-anthropic-path", "down.internal", &[]),
        ("reset", "vllm.internal", &[("x-mock-behavior", "vllm-errors=reset")]),
        ("503", "vllm.internal", &[("x-mock-behavior", "vllm-errors=503")]),
    ];
    for (case, host, extra) in cases {
        let path = if case.contains("anthropic") { "/v1/messages" } else { "/v1/chat/completions" };
        // The other service's own key (the mock wants one before it misbehaves as asked).
        let mut h: Vec<(&str, &str)> = vec![("host", host), ("x-test-id", case), ("authorization", "Bearer vllm-own")];
        h.extend_from_slice(extra);
        let a = send(with.addr(), "POST", path, &h, b"{}").await.unwrap();
        let b = send(without.addr(), "POST", path, &h, b"{}").await.unwrap();
        assert!(a.status >= 500, "{case}: {}", a.status);
        assert_eq!(
            (a.status, a.header("content-type"), a.text()),
            (b.status, b.header("content-type"), b.text()),
            "{case}: with Switchyard vs plain Envoy"
        );
    }
}

/// A virtual host an operator adds by hand to the rendered configuration, declared nowhere in
/// Switchyard's, its service down: every reply Envoy makes for it is Envoy's own text/plain 503,
/// untouched by anything Switchyard adds to the listener (no JSON mapper, no compressor, no
/// `vary`, no access-log line), whether or not the caller accepts gzip and whatever API its path
/// looks like. On the same listener, Switchyard's marked routes (here its pass-through route,
/// whose cluster is down too) still get Envoy's errors as JSON in the caller's API shape (any
/// path under `/v1/messages` is Anthropic's, any under `/v1beta/` Google's), gzipped when asked.
#[tokio::test]
async fn a_host_added_by_hand_keeps_envoys_own_errors_and_switchyard_routes_keep_theirs() {
    let down = common::closed_port();
    let unused = |n: &str| ClusterSpec { name: format!("c_{n}"), port: down };
    let mut cfg = StackConfig::new(
        catalog(),
        vec![unused("alpha"), unused("beta"), unused("delta")],
        Some(ClusterSpec { name: "passthrough".into(), port: down }),
    );
    cfg.env_keys = vec!["SY_SHARED_BETA_KEY".into()];
    cfg.access_log = AccessLog::Text;
    let neighbour =
        OtherHost { domain: "down.internal".into(), cluster: ClusterSpec { name: "down".into(), port: down } };
    let envoy = Envoy::start_edited(&cfg, "shared-by-hand", &[("SY_SHARED_BETA_KEY", "k")], &[neighbour]).unwrap();
    let gzip: &[(&str, &str)] = &[("accept-encoding", "gzip")];
    let mut switchyard_requests = 0;
    for accept in [&[][..], gzip] {
        for path in ["/v1/chat/completions", "/v1/messages", "/v1beta/models/m/one:generateContent", "/generate"] {
            let mut h = vec![("host", "down.internal"), ("content-type", "application/json")];
            h.extend_from_slice(accept);
            let r = send(envoy.addr(), "POST", path, &h, b"{}").await.unwrap();
            let what = format!("neighbour {path} {accept:?}");
            assert_eq!((r.status, r.header("content-type")), (503, Some("text/plain")), "{what}: {:?}", r.headers);
            assert_eq!((r.header("vary"), r.header("content-encoding")), (None, None), "{what}: {:?}", r.headers);
            assert!(r.text().starts_with("upstream connect error"), "{what}: {}", r.text());
            assert_no_switchyard_headers(&r);
        }
        // Switchyard's pass-through route (marked): its cluster refuses the connection.
        for (path, api) in [
            ("/v1/files", "openai"),
            // An Anthropic and a Google path the filter leaves to the pass-through route.
            ("/v1/messages/batches", "anthropic"),
            ("/v1beta/models/m/one:countTokens", "google"),
        ] {
            let mut h = vec![("host", "llm.example"), ("content-type", "application/json")];
            h.extend_from_slice(accept);
            let r = send(envoy.addr(), "POST", path, &h, b"{}").await.unwrap();
            switchyard_requests += 1;
            let what = format!("switchyard {path} {accept:?}");
            assert_eq!(
                (r.status, r.header("content-type")),
                (503, Some("application/json")),
                "{what}: {:?}",
                r.headers
            );
            let body = if accept.is_empty() {
                assert_eq!(r.header("content-encoding"), None, "{what}");
                r.body.to_vec()
            } else {
                assert_eq!(r.header("content-encoding"), Some("gzip"), "{what}: {:?}", r.headers);
                assert!(r.header("vary").is_some_and(|v| v.contains("Accept-Encoding")), "{what}: {:?}", r.headers);
                gunzip(&r.body)
            };
            let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{what}: {e}"));
            match api {
                "anthropic" => assert_eq!(
                    (v["type"].as_str(), v["error"]["type"].as_str()),
                    (Some("error"), Some("api_error")),
                    "{what}: {v}"
                ),
                "google" => assert_eq!(
                    (v["error"]["code"].as_u64(), v["error"]["status"].as_str()),
                    (Some(503), Some("UNAVAILABLE")),
                    "{what}: {v}"
                ),
                _ => assert!(v["error"]["type"].is_string() && v.get("type").is_none(), "{what}: {v}"),
            }
            assert!(
                v["error"]["message"].as_str().is_some_and(|m| m.starts_with("upstream connect error")),
                "{what}: {v}"
            );
        }
    }
    // The access log: one line per request of Switchyard's routes, none for the neighbour's.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let lines = loop {
        let log = std::fs::read_to_string(envoy.dir.join("envoy.log")).unwrap_or_default();
        let lines = log.lines().filter(|l| l.contains(" switchyard=")).count();
        if lines >= switchyard_requests || std::time::Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let log = std::fs::read_to_string(envoy.dir.join("envoy.log")).unwrap_or_default();
    assert_eq!(lines, switchyard_requests, "{log}");
    assert_eq!(log.lines().filter(|l| l.contains(" switchyard=")).count(), switchyard_requests, "{log}");
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b).read_to_end(&mut out).unwrap_or_else(|e| panic!("not gzip: {e}"));
    out
}
