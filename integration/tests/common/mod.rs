//! One Envoy + mock-provider stack shared by the tests of a binary. Tests tag their requests
//! with `x-test-id` and read back exactly what each provider received for that id.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::OnceLock;

use serde_json::{json, Value};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{keep_running, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::mock::{received_by, MockProvider, Received};

pub const PROVIDERS: [&str; 5] = ["alpha", "beta", "gamma", "delta", "origin"];

/// AWS credentials in Envoy's environment, which its credential chain reads first; no instance
/// metadata (the Bedrock tests).
pub const AWS_ENV: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", switchyard_integration::mock::bedrock::ACCESS_KEY),
    ("AWS_SECRET_ACCESS_KEY", switchyard_integration::mock::bedrock::SECRET_KEY),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

/// Catalog exercising every field: data policies, a BYOK provider, an env credential, a
/// variant slug, a path prefix, quantizations, context lengths and supported parameters.
pub fn test_catalog() -> Value {
    let mut catalog = json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"},
                      "apis": {"openai": {}, "openai_responses": {}},
                      "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
            "beta": {"cluster": "c_beta", "authority": "beta.example",
                     "credential": {"header": "x-api-key", "prefix": "", "env": "SY_TEST_BETA_KEY"},
                     "data_policy": {"retains_data": true, "trains_on_data": false, "zdr": false}},
            "gamma": {"cluster": "c_gamma", "authority": "gamma.example", "path_prefix": "/openai/v1",
                      "credential": {"value": "key-gamma"}, "byok": true},
            "delta": {"cluster": "c_delta", "authority": "delta.example", "credential": {"value": "key-delta"},
                      "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": false}}
        },
        "models": {
            "test/basic": {"endpoints": [
                {"provider": "alpha", "upstream_model": "alpha-basic", "pricing": {"prompt": 1, "completion": 1},
                 "quantization": "fp8", "context_length": 4000, "supported_parameters": ["max_tokens", "temperature", "tools"]},
                {"provider": "beta", "upstream_model": "beta-basic", "pricing": {"prompt": 2, "completion": 2},
                 "quantization": "fp16", "context_length": 100000, "supported_parameters": ["max_tokens", "temperature", "response_format"]},
                {"provider": "delta", "upstream_model": "delta-basic", "pricing": {"prompt": 3, "completion": 3},
                 "quantization": "bf16", "supported_parameters": ["max_tokens", "tools"]},
                {"provider": "delta/fast", "upstream_model": "delta-basic-fast", "pricing": {"prompt": 4, "completion": 4, "request": 0.01},
                 "quantization": "int4"}
            ]},
            "test/distill": {"distillable": true, "endpoints": [
                {"provider": "beta", "upstream_model": "beta-distill", "pricing": {"prompt": 1, "completion": 1}}
            ]},
            "test/byok": {"endpoints": [
                {"provider": "alpha", "upstream_model": "alpha-byok", "pricing": {"prompt": 1, "completion": 1}},
                {"provider": "gamma", "upstream_model": "gamma-byok", "pricing": {"prompt": 5, "completion": 5}}
            ]},
            // Only used by tests that need endpoints without any measurements.
            "test/nodata": {"endpoints": [
                {"provider": "alpha", "upstream_model": "alpha-nodata", "pricing": {"prompt": 1, "completion": 1}},
                {"provider": "beta", "upstream_model": "beta-nodata", "pricing": {"prompt": 2, "completion": 2}}
            ]},
            "vendor/colon:8b": {"endpoints": [
                {"provider": "alpha", "upstream_model": "colon-8b", "pricing": {"prompt": 1, "completion": 1}}
            ]},
            "anthropic/claude-test": {"endpoints": [
                {"provider": "alpha", "upstream_model": "claude-alpha", "pricing": {"prompt": 1, "completion": 1}},
                {"provider": "delta", "upstream_model": "claude-delta", "pricing": {"prompt": 3, "completion": 3}}
            ]}
        },
        "routing": {"max_body_bytes": 65536, "debug_header": true, "default_policy": "price_weighted"}
    });
    // Failover tests: one model per test so live statistics never leak between tests.
    let failover_models: [(&str, &[(&str, f64)]); 22] = [
        ("fo/order", &[("alpha", 1.0), ("beta", 2.0), ("delta", 3.0)]),
        ("fo/reset", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/dead", &[("dead", 1.0), ("alpha", 2.0)]),
        ("fo/4xx", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/nofb", &[("alpha", 1.0), ("beta", 2.0), ("delta", 3.0)]),
        ("fo/429", &[("alpha", 1.0), ("beta", 2.0), ("delta", 3.0)]),
        ("fo/mixed", &[("alpha", 1.0), ("beta", 2.0), ("delta", 3.0)]),
        ("fo/stream", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/m1", &[("alpha", 1.0), ("delta", 2.0)]),
        ("fo/m2", &[("beta", 1.0)]),
        ("fo/p1", &[("alpha", 5.0)]),
        ("fo/p2", &[("beta", 1.0)]),
        ("fo/cd", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/stats", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/out", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/lat", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/tps", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/inflight", &[("alpha", 1.0)]),
        ("fo/load", &[("alpha", 1.0), ("beta", 2.0), ("delta", 3.0)]),
        ("fo/cut", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/abort", &[("alpha", 1.0), ("beta", 2.0)]),
        ("fo/short", &[("alpha", 1.0), ("beta", 2.0), ("delta", 3.0)]),
    ];
    for (model, endpoints) in failover_models {
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(p, price)| json!({"provider": p, "upstream_model": format!("{p}-{}", model.trim_start_matches("fo/")), "pricing": {"prompt": price, "completion": price}}))
            .collect();
        catalog["models"][model] = json!({"endpoints": eps});
    }
    catalog["providers"]["dead"] =
        json!({"cluster": "c_dead", "authority": "dead.example", "credential": {"value": "key-dead"}});
    add_auto_router(&mut catalog);
    add_caller_surface_models(&mut catalog);
    catalog
}

/// The auto router's models and `auto` section (used by tests/auto.rs). Models of their own so
/// their live statistics never mix with other tests'; `fail/*` and `health/*` are only
/// reachable with `cost_tier: max` and `allowed_models` naming them.
fn add_auto_router(catalog: &mut Value) {
    let ep = |provider: &str, upstream: &str, price: f64, ctx: u64, tools: bool| {
        let params = if tools { json!(["max_tokens", "tools"]) } else { json!(["max_tokens"]) };
        json!({"provider": provider, "upstream_model": upstream, "pricing": {"prompt": price, "completion": price},
               "context_length": ctx, "supported_parameters": params})
    };
    let models = [
        ("auto/coder", json!({"cost_tier": "high", "endpoints": [ep("alpha", "alpha-coder", 3.0, 16_000, true)]})),
        ("auto/chat-mini", json!({"cost_tier": "low", "endpoints": [ep("beta", "beta-chat-mini", 0.2, 8_000, false)]})),
        (
            "auto/chat-pro",
            json!({"cost_tier": "medium", "input_modalities": ["text", "image"],
                   "endpoints": [ep("delta", "delta-chat-pro", 1.0, 8_000, true)]}),
        ),
        ("auto/long", json!({"cost_tier": "medium", "endpoints": [ep("gamma", "gamma-long", 1.0, 1_000_000, false)]})),
        (
            "fail/primary",
            json!({"cost_tier": "xhigh", "endpoints": [ep("alpha", "alpha-fail-primary", 1.0, 16_000, false)]}),
        ),
        (
            "fail/second",
            json!({"cost_tier": "xhigh", "endpoints": [ep("beta", "beta-fail-second", 1.0, 16_000, false)]}),
        ),
        ("health/a", json!({"cost_tier": "xhigh", "endpoints": [ep("alpha", "alpha-health-a", 1.0, 16_000, false)]})),
        ("health/b", json!({"cost_tier": "xhigh", "endpoints": [ep("beta", "beta-health-b", 1.0, 16_000, false)]})),
    ];
    for (id, m) in models {
        catalog["models"][id] = m;
    }
    catalog["auto"] = json!({
        "default_cost_tier": "high",
        "max_models": 2,
        "long_context_tokens": 8000,
        "tasks": {
            "code": {"auto/coder": 1.0, "auto/chat-pro": 0.7, "fail/primary": 0.5, "fail/second": 0.4,
                     "health/a": 0.3, "health/b": 0.2},
            "long_context": {"auto/long": 1.0},
            "chat": {"auto/chat-mini": 0.9, "auto/chat-pro": 0.8}
        }
    });
}

/// Models of the caller-surface tests (`tests/caller_surface.rs`).
fn add_caller_surface_models(catalog: &mut Value) {
    let flat = |p: &str, up: &str, price: f64| json!({"provider": p, "upstream_model": up, "pricing": {"prompt": price, "completion": price}});
    // A first model with as many endpoints as the attempt budget (4), and its fallback.
    catalog["models"]["sy/budget-l"] = json!({"endpoints": [
        flat("alpha", "alpha-bl", 1.0), flat("beta", "beta-bl", 2.0), flat("delta", "delta-bl", 3.0), flat("dead", "dead-bl", 4.0)]});
    catalog["models"]["sy/budget-d"] = json!({"endpoints": [flat("gamma", "gamma-bd", 1.0)]});
    // Priced for usage.cost: $2 / $10 per million, $0.001 per request, cached prompt $0.5.
    catalog["models"]["sy/cost"] = json!({"endpoints": [
        {"provider": "alpha", "upstream_model": "alpha-internal-cost-id",
         "pricing": {"prompt": 2, "completion": 10, "request": 0.001, "cached_prompt": 0.5}}]});
    catalog["models"]["sy/one"] = json!({"endpoints": [flat("alpha", "alpha-one", 1.0)]});
    catalog["models"]["sy/fail"] =
        json!({"endpoints": [flat("alpha", "alpha-fail", 1.0), flat("beta", "beta-fail", 2.0)]});
}

/// A catalog of one API per provider: alpha OpenAI (chat completions and Responses), beta only
/// Anthropic, gamma only Google, delta only chat completions (an OpenAI-compatible host); each
/// of `models` on its `(provider, price)` endpoints (upstream id `<provider>-<model>`), priced by
/// `pricing(price)` (the cross-API tests: `responses`, `translation`).
pub fn one_api_per_provider(models: &[(&str, &[(&str, f64)])], pricing: impl Fn(f64) -> Value) -> Value {
    let mut c = json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"},
                      "apis": {"openai": {}, "openai_responses": {}}},
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"value": "key-beta"},
                     "apis": {"anthropic": {}}},
            "gamma": {"cluster": "c_gamma", "authority": "gamma.example", "credential": {"value": "key-gamma"},
                      "apis": {"google": {}}},
            "delta": {"cluster": "c_delta", "authority": "delta.example", "credential": {"value": "key-delta"}}
        },
        "models": {},
        "routing": {"default_policy": "price_weighted"}
    });
    for (model, endpoints) in models {
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(p, price)| {
                json!({"provider": p, "upstream_model": format!("{p}-{}", model.replace('/', "-")),
                       "pricing": pricing(*price)})
            })
            .collect();
        c["models"][*model] = json!({"endpoints": eps});
    }
    c
}

/// A loopback port with nothing listening (connect failures).
///
/// The port stays reserved by a socket that is bound but never listens (kept open for the
/// life of the test process): connections to it are refused, and no listener started later
/// (a mock provider, an Envoy listener or admin on port 0) can be handed the same port.
pub fn closed_port() -> u16 {
    // SAFETY: plain socket calls on a local sockaddr_in; the fd is deliberately never closed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            panic!("socket: {}", std::io::Error::last_os_error());
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, &addr as *const libc::sockaddr_in as *const libc::sockaddr, len) != 0 {
            panic!("bind: {}", std::io::Error::last_os_error());
        }
        let mut got = len;
        libc::getsockname(fd, &mut addr as *mut libc::sockaddr_in as *mut libc::sockaddr, &mut got);
        u16::from_be(addr.sin_port)
    }
}

pub struct Stack {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub providers: Vec<MockProvider>,
    pub log_dir: std::path::PathBuf,
    /// The Envoy process (for what /proc says about it).
    pub pid: u32,
}

impl Stack {
    pub fn provider(&self, name: &str) -> &MockProvider {
        match self.providers.iter().find(|p| p.name == name) {
            Some(p) => p,
            None => panic!("no mock provider {name}"),
        }
    }

    /// Every (provider name, request) received for this test id.
    pub fn received(&self, test_id: &str) -> Vec<(String, Received)> {
        received_by(&self.providers, test_id)
    }

    /// The single provider that received this test id's single request.
    pub fn only_receiver(&self, test_id: &str) -> (String, Received) {
        let mut got = self.received(test_id);
        assert_eq!(
            got.len(),
            1,
            "expected exactly one upstream request for {test_id}, got {:?}",
            got.iter().map(|g| &g.0).collect::<Vec<_>>()
        );
        got.remove(0)
    }

    /// POSTs `body` to `path` with the test id and the `extra` headers.
    pub async fn post(&self, path: &str, test_id: &str, extra: &[(&str, &str)], body: Value) -> Reply {
        let mut h = vec![("x-test-id", test_id)];
        h.extend_from_slice(extra);
        post_json(self.addr, path, &h, &body).await.unwrap_or_else(|e| panic!("{test_id}: {e}"))
    }

    /// An OpenAI chat completions caller (its own key, never forwarded).
    pub async fn openai(&self, test_id: &str, extra: &[(&str, &str)], body: Value) -> Reply {
        let mut h = vec![("authorization", "Bearer caller-key")];
        h.extend_from_slice(extra);
        self.post("/v1/chat/completions", test_id, &h, body).await
    }

    /// An Anthropic Messages caller (its own key, never forwarded).
    pub async fn anthropic(&self, test_id: &str, extra: &[(&str, &str)], body: Value) -> Reply {
        let mut h = vec![("x-api-key", "caller-key"), ("anthropic-version", "2023-06-01")];
        h.extend_from_slice(extra);
        self.post("/v1/messages", test_id, &h, body).await
    }

    pub async fn chat(&self, test_id: &str, body: Value) -> Reply {
        self.chat_with(test_id, &[], body).await
    }

    pub async fn chat_with(&self, test_id: &str, headers: &[(&str, &str)], body: Value) -> Reply {
        let mut h: Vec<(&str, &str)> = vec![("x-test-id", test_id)];
        h.extend_from_slice(headers);
        match post_json(self.addr, "/v1/chat/completions", &h, &body).await {
            Ok(r) => r,
            Err(e) => panic!("{test_id}: request failed: {e}"),
        }
    }
}

static STACK: OnceLock<Stack> = OnceLock::new();

/// The shared stack of a test binary: the test catalog, providers alpha..delta, a dead cluster.
pub fn stack() -> &'static Stack {
    STACK.get_or_init(|| {
        launch("routing-tests", test_catalog(), |cfg| {
            cfg.per_try_idle_timeout_ms = 1_000;
            cfg.access_log = switchyard_deploy::envoy::AccessLog::Text;
        })
    })
}

/// Starts the mock providers and an Envoy with `catalog` on a dedicated thread that lives as
/// long as the process, so Envoy (PR_SET_PDEATHSIG) dies with the test binary. `tweak` adjusts
/// the generated Envoy configuration (timeouts, circuit breakers).
pub fn launch(tag: &'static str, catalog: Value, tweak: fn(&mut StackConfig)) -> Stack {
    launch_with_env(tag, catalog, tweak, &[])
}

/// As `launch`, with `env` in Envoy's environment beside beta's key (e.g. AWS credentials).
pub fn launch_with_env(
    tag: &'static str,
    catalog: Value,
    tweak: impl FnOnce(&mut StackConfig) + Send + 'static,
    env: &'static [(&'static str, &'static str)],
) -> Stack {
    keep_running(tag, PROVIDERS.iter().map(|p| p.to_string()).collect(), move |providers| {
        let port = |n: &str| providers.iter().find(|p| p.name == n).map(|p| p.addr.port()).unwrap_or(0);
        let clusters = ["alpha", "beta", "gamma", "delta"]
            .iter()
            .map(|n| ClusterSpec { name: format!("c_{n}"), port: port(n) })
            .chain(std::iter::once(ClusterSpec { name: "c_dead".into(), port: closed_port() }))
            .collect();
        let mut cfg =
            StackConfig::new(catalog, clusters, Some(ClusterSpec { name: "c_origin".into(), port: port("origin") }));
        cfg.env_keys = vec!["SY_TEST_BETA_KEY".into()];
        tweak(&mut cfg);
        let env: Vec<(&str, &str)> =
            std::iter::once(("SY_TEST_BETA_KEY", "key-beta-from-env")).chain(env.iter().copied()).collect();
        let envoy = match Envoy::start_with_env(&cfg, tag, &env) {
            Ok(e) => e,
            Err(e) => panic!("envoy: {e}"),
        };
        let stack =
            Stack { addr: envoy.addr(), admin: envoy.admin, providers, log_dir: envoy.dir.clone(), pid: envoy.pid() };
        (envoy, stack)
    })
}

pub fn msg(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// Runs the futures concurrently (each on its own task) and returns their outputs in order.
pub async fn join_all<F: std::future::Future + Send + 'static>(tasks: Vec<F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
