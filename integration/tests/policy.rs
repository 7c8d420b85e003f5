//! Operator policies (compliance routes) in real Envoy 1.40. Two stacks share the mock
//! providers' catalog:
//! - an mTLS listener (the test makes its own CA and client certificates whose URI SANs are
//!   SPIFFE ids) with route-labelled virtual hosts: policies selected by identity and by route;
//! - a plain listener with one route-labelled virtual host per policy, for a randomized check
//!   of a few hundred (policy, request, provider-failure) combinations against the providers'
//!   own logs.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::client::{post_json, post_json_tls, Reply, TlsClient};
use switchyard_integration::envoy::{keep_running, ClusterSpec, Envoy, JwtSpec, PolicyRoute, StackConfig, TlsSpec};
use switchyard_integration::mock::MockProvider;
use switchyard_integration::tls::TestCa;

const PROVIDERS: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

/// alpha: ZDR, keeps nothing, tags eu+contract, $1. beta: retains data, tag eu, $2. gamma: data
/// policy undeclared (counts as retains + trains), tag us, $3. delta: keeps nothing, not ZDR,
/// tags us+contract, $4. `pol/m` on all four; `pol/b` on beta, gamma, delta; `other/x` on alpha
/// and beta.
fn catalog() -> Value {
    let provider = |name: &str, data: Value, tags: Value| {
        json!({"cluster": format!("c_{name}"), "authority": format!("{name}.example"),
               "credential": {"value": format!("key-{name}")}, "data_policy": data, "tags": tags})
    };
    let eps = |suffix: &str, list: &[(&str, f64)]| -> Value {
        let v: Vec<Value> = list
            .iter()
            .map(|(p, price)| json!({"provider": p, "upstream_model": format!("{p}-{suffix}"), "pricing": {"prompt": price, "completion": price}}))
            .collect();
        json!({"endpoints": v})
    };
    json!({
        "providers": {
            "alpha": provider("alpha", json!({"retains_data": false, "trains_on_data": false, "zdr": true}), json!(["eu", "contract"])),
            "beta": provider("beta", json!({"retains_data": true, "trains_on_data": false}), json!(["eu"])),
            "gamma": provider("gamma", json!({}), json!(["us"])),
            "delta": provider("delta", json!({"retains_data": false, "trains_on_data": false}), json!(["us", "contract"]))
        },
        "models": {
            "pol/m": eps("m", &[("alpha", 1.0), ("beta", 2.0), ("gamma", 3.0), ("delta", 4.0)]),
            "pol/b": eps("b", &[("beta", 1.0), ("gamma", 2.0), ("delta", 3.0)]),
            "other/x": eps("x", &[("alpha", 1.0), ("beta", 1.0)])
        },
        "routing": {"max_attempts": 4}
    })
}

const REPORTS: &str = "spiffe://cluster.local/ns/finance/sa/reports";
const BATCH: &str = "spiffe://cluster.local/ns/finance/sa/batch";
const WEB: &str = "spiffe://cluster.local/ns/marketing/sa/web";
const DEV: &str = "spiffe://cluster.local/ns/dev/sa/notebook";

fn mtls_config() -> Value {
    let mut c = catalog();
    c["policies"] = json!({
        "finance": {"only": ["alpha", "delta"], "data_collection": "deny", "allowed_models": ["pol/*"], "allow_fallbacks": false},
        "reports": {"zdr": true, "allowed_models": ["pol/*"]},
        "marketing": {"ignore": ["alpha"], "max_attempts": 3},
        "eu": {"require_tags": ["eu"], "data_collection": "deny"},
        "partner": {"only": ["gamma"]},
        "open": {}
    });
    c["policy_selection"] = json!({
        "rules": [
            {"policy": "eu", "route": "eu"},
            {"policy": "partner", "jwt_claim": {"claim": ["org", "tier"], "value": "gold*"}},
            {"policy": "reports", "peer_uri_san": REPORTS},
            {"policy": "finance", "peer_uri_san": "spiffe://cluster.local/ns/finance/*"},
            {"policy": "marketing", "peer_uri_san": "spiffe://cluster.local/ns/marketing/*"},
            // Only behind a gateway that strips it from callers (here: the test is the gateway).
            {"policy": "partner", "header": {"name": "x-gateway-tenant", "value": "partner"}}
        ],
        "trusted_headers": ["x-gateway-tenant"],
        "default": "open"
    });
    c
}

struct Stack {
    addr: SocketAddr,
    admin: SocketAddr,
    providers: Vec<MockProvider>,
    log: PathBuf,
    /// Caller identities by SPIFFE id (mTLS stack only).
    clients: Vec<(String, TlsClient)>,
}

impl Stack {
    /// (provider, upstream model) of every attempt that reached a provider for this test id.
    fn received(&self, id: &str) -> Vec<(String, String)> {
        self.providers
            .iter()
            .flat_map(|p| {
                p.received_for(id)
                    .into_iter()
                    .map(move |r| (p.name.clone(), r.json()["model"].as_str().unwrap_or("").to_string()))
            })
            .collect()
    }

    fn receivers(&self, id: &str) -> BTreeSet<String> {
        self.received(id).into_iter().map(|(p, _)| p).collect()
    }

    async fn as_identity(&self, spiffe: &str, id: &str, headers: &[(&str, &str)], body: Value) -> Reply {
        let client = match self.clients.iter().find(|(s, _)| s == spiffe) {
            Some((_, c)) => c,
            None => panic!("no identity {spiffe}"),
        };
        let mut h: Vec<(&str, &str)> = vec![("x-test-id", id)];
        h.extend_from_slice(headers);
        match post_json_tls(self.addr, "localhost", client, "/v1/chat/completions", &h, &body).await {
            Ok(r) => r,
            Err(e) => panic!("{id}: {e}"),
        }
    }

    async fn plain(&self, id: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
        let mut h: Vec<(&str, &str)> = vec![("x-test-id", id)];
        h.extend_from_slice(headers);
        match post_json(self.addr, "/v1/chat/completions", &h, body).await {
            Ok(r) => r,
            Err(e) => panic!("{id}: {e}"),
        }
    }
}

/// Starts the providers and one Envoy on a thread that lives as long as the test binary (Envoy
/// dies with it: PR_SET_PDEATHSIG).
fn start(tag: &'static str, make: fn(&[MockProvider]) -> (StackConfig, Vec<(String, TlsClient)>)) -> Stack {
    keep_running(tag, PROVIDERS.iter().map(|p| p.to_string()).collect(), move |providers| {
        let (mut cfg, clients) = make(&providers);
        cfg.per_try_idle_timeout_ms = 1_000;
        cfg.access_log = switchyard_deploy::envoy::AccessLog::Text;
        let envoy = match Envoy::start(&cfg, tag) {
            Ok(e) => e,
            Err(e) => panic!("envoy: {e}"),
        };
        let stack =
            Stack { addr: envoy.addr(), admin: envoy.admin, providers, log: envoy.dir.join("envoy.log"), clients };
        (envoy, stack)
    })
}

fn clusters(providers: &[MockProvider]) -> Vec<ClusterSpec> {
    providers.iter().map(|p| ClusterSpec { name: format!("c_{}", p.name), port: p.addr.port() }).collect()
}

static MTLS: OnceLock<Stack> = OnceLock::new();

/// The mTLS stack: Envoy requires a client certificate from the test CA; policies by SPIFFE id,
/// and the `eu.policy.test` virtual host labelled `eu`.
fn mtls() -> &'static Stack {
    MTLS.get_or_init(|| {
        start("policy-mtls", |providers| {
            let dir = switchyard_integration::envoy::repo_root()
                .join(".work")
                .join(format!("policy-pki-{}", std::process::id()));
            if let Err(e) = std::fs::create_dir_all(&dir) {
                panic!("{e}");
            }
            let ca = TestCa::new("Switchyard policy test CA").unwrap_or_else(|e| panic!("{e}"));
            let server = ca.issue("localhost").unwrap_or_else(|e| panic!("{e}"));
            let write = |name: &str, text: &str| {
                let p = dir.join(name);
                std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
                p
            };
            let tls = TlsSpec {
                cert_chain: write("server.pem", &server.cert_pem),
                private_key: write("server.key", &server.key_pem),
                client_ca: write("ca.pem", &ca.pem()),
            };
            let clients = [REPORTS, BATCH, WEB, DEV]
                .iter()
                .map(|spiffe| {
                    let id = ca.issue_client(spiffe).unwrap_or_else(|e| panic!("{e}"));
                    (spiffe.to_string(), TlsClient { ca_der: ca.der(), cert_der: id.cert_der, key_der: id.key_der })
                })
                .collect();
            let mut cfg = StackConfig::new(mtls_config(), clusters(providers), None);
            cfg.tls = Some(tls);
            let jwks = json!({"keys": [{"kty": "oct", "alg": "HS256", "kid": "k1", "k": b64url(JWT_SECRET)}]});
            cfg.jwt = Some(JwtSpec { issuer: JWT_ISSUER.into(), jwks: jwks.to_string() });
            cfg.policy_routes = vec![PolicyRoute { domain: "eu.policy.test".into(), policy: "eu".into() }];
            (cfg, clients)
        })
    })
}

const JWT_ISSUER: &str = "https://idp.switchyard.test";
const JWT_SECRET: &[u8] = b"switchyard-policy-test-hmac-secret-0123456789";

fn b64url(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(msg).finalize();
    Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize().to_vec()
}

/// An HS256 JWT with these claims, signed with `secret`.
fn jwt(claims: Value, secret: &[u8]) -> String {
    let head = b64url(json!({"alg": "HS256", "typ": "JWT", "kid": "k1"}).to_string().as_bytes());
    let body = b64url(claims.to_string().as_bytes());
    let signed = format!("{head}.{body}");
    format!("{signed}.{}", b64url(&hmac_sha256(secret, signed.as_bytes())))
}

fn msg() -> Value {
    json!([{"role": "user", "content": "hello"}])
}

const ALL_FAIL: (&str, &str) = ("x-mock-behavior", "alpha=503,beta=503,gamma=503,delta=503");

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn same_body_from_two_identities_reaches_different_allowed_sets() {
    let s = mtls();
    let body = json!({"model": "pol/m", "messages": msg()});
    // Every provider failing: the attempts show each caller's whole allowed set.
    let r = s.as_identity(WEB, "pol-sets-web", &[ALL_FAIL], body.clone()).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("x-switchyard-policy"), Some("marketing"));
    assert_eq!(s.receivers("pol-sets-web"), set(&["beta", "gamma", "delta"]), "marketing: everything but alpha");
    assert_eq!(s.received("pol-sets-web").len(), 3, "marketing's max_attempts is 3");
    let r = s.as_identity(REPORTS, "pol-sets-reports", &[ALL_FAIL], body.clone()).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("x-switchyard-policy"), Some("reports"));
    assert_eq!(s.receivers("pol-sets-reports"), set(&["alpha"]), "reports: ZDR only");
    let r = s.as_identity(BATCH, "pol-sets-batch", &[ALL_FAIL], body.clone()).await;
    assert_eq!(r.header("x-switchyard-policy"), Some("finance"));
    let got = s.received("pol-sets-batch");
    assert_eq!(got.len(), 1, "finance forces allow_fallbacks: false: {got:?}");
    assert!(got.iter().all(|(p, _)| p == "alpha" || p == "delta"), "{got:?}");
    let r = s.as_identity(DEV, "pol-sets-dev", &[ALL_FAIL], body.clone()).await;
    assert_eq!(r.header("x-switchyard-policy"), Some("open"), "the default policy");
    assert_eq!(s.receivers("pol-sets-dev"), set(&["alpha", "beta", "gamma", "delta"]));
    // Healthy providers: the same cheapest-first request lands on different endpoints.
    let cheapest = json!({"model": "pol/m", "messages": msg(), "provider": {"sort": "price"}});
    let r = s.as_identity(REPORTS, "pol-ok-reports", &[], cheapest.clone()).await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("alpha")), "{}", r.text());
    let r = s.as_identity(WEB, "pol-ok-web", &[], cheapest.clone()).await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("beta")), "{}", r.text());
    assert_eq!(s.received("pol-ok-web"), vec![("beta".to_string(), "beta-m".to_string())]);
}

#[tokio::test]
async fn widening_attempts_are_held_to_the_policy() {
    let s = mtls();
    let ask = |provider: Value| json!({"model": "pol/m", "messages": msg(), "provider": provider});
    // `order` outside the ceiling: skipped; an allowed endpoint serves.
    let r = s.as_identity(BATCH, "pol-w-order", &[], ask(json!({"order": ["beta", "gamma"]}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        matches!(r.header("x-switchyard-provider"), Some("alpha" | "delta")),
        "{:?}",
        r.header("x-switchyard-provider")
    );
    assert!(s.receivers("pol-w-order").is_subset(&set(&["alpha", "delta"])));
    // `only` outside the ceiling: 404 naming the policy's field; nobody is contacted.
    let r = s.as_identity(BATCH, "pol-w-only", &[], ask(json!({"only": ["beta", "gamma"]}))).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "no_endpoints");
    assert_eq!(r.json()["error"]["metadata"]["constraint"], "policy:finance.only");
    assert_eq!(r.json()["error"]["metadata"]["policy"], "finance");
    assert_eq!(r.header("x-switchyard-policy"), Some("finance"));
    assert!(s.received("pol-w-only").is_empty());
    // `allow_fallbacks: true` under a forced false: one attempt, no failover.
    let r = s
        .as_identity(BATCH, "pol-w-fb", &[ALL_FAIL], ask(json!({"allow_fallbacks": true, "data_collection": "allow"})))
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(s.received("pol-w-fb").len(), 1, "{:?}", s.received("pol-w-fb"));
    // A provider-prefixed id outside the ceiling; inside it, the pin holds.
    let pinned = |m: &str| json!({"model": m, "messages": msg()});
    let r = s.as_identity(BATCH, "pol-w-pin", &[], pinned("gamma/pol/m")).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["metadata"]["constraint"], "policy:finance.only");
    assert!(s.received("pol-w-pin").is_empty());
    let r = s.as_identity(BATCH, "pol-w-pin-ok", &[], pinned("delta/pol/m")).await;
    assert_eq!((r.status, r.header("x-switchyard-provider")), (200, Some("delta")), "{}", r.text());
    // `models` fallback to a model outside allowed_models: 403 before anything is sent.
    let r = s
        .as_identity(
            BATCH,
            "pol-w-models",
            &[ALL_FAIL],
            json!({"model": "pol/m", "models": ["other/x"], "messages": msg()}),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!((e["code"].as_str(), e["param"].as_str()), (Some("policy_denied"), Some("models[0]")));
    assert_eq!(e["metadata"]["constraint"], "policy:finance.allowed_models");
    assert!(s.received("pol-w-models").is_empty());
    // The same fallback is fine for a caller whose policy allows it (and it is used).
    let r = s
        .as_identity(
            DEV,
            "pol-w-models-dev",
            &[("x-mock-behavior", "alpha=503,beta=503,gamma=503,delta=503")],
            json!({"model": "pol/b", "models": ["other/x"], "messages": msg(), "provider": {"only": ["beta", "alpha"]}}),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        s.received("pol-w-models-dev").iter().any(|(_, m)| m.ends_with("-x")),
        "{:?}",
        s.received("pol-w-models-dev")
    );
    // The route's policy (first rule) wins over the caller's identity; data_collection stays
    // denied whatever the request says: of the EU providers only alpha keeps nothing.
    let r = s
        .as_identity(
            BATCH,
            "pol-w-eu",
            &[("host", "eu.policy.test")],
            ask(json!({"order": ["beta"], "data_collection": "allow"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-policy"), Some("eu"));
    assert_eq!(s.received("pol-w-eu"), vec![("alpha".to_string(), "alpha-m".to_string())]);
    let r = s
        .as_identity(BATCH, "pol-w-eu-b", &[("host", "eu.policy.test")], json!({"model": "pol/b", "messages": msg()}))
        .await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["metadata"]["constraint"], "policy:eu.require_tags");
}

#[tokio::test]
async fn a_claim_jwt_authn_verified_selects_the_policy() {
    let s = mtls();
    let body = json!({"model": "pol/m", "messages": msg()});
    let gold =
        format!("Bearer {}", jwt(json!({"iss": JWT_ISSUER, "sub": "svc", "org": {"tier": "gold-2026"}}), JWT_SECRET));
    // The rule (before the identity rules) matches the nested claim: partner's ceiling is gamma.
    for (who, id) in [(DEV, "pol-jwt-dev"), (BATCH, "pol-jwt-batch")] {
        let r = s.as_identity(who, id, &[("authorization", &gold)], body.clone()).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.header("x-switchyard-policy"), Some("partner"), "{id}");
        assert_eq!(s.receivers(id), set(&["gamma"]), "{id}");
    }
    // Another tier does not match: the caller's identity decides.
    let silver = format!("Bearer {}", jwt(json!({"iss": JWT_ISSUER, "org": {"tier": "silver"}}), JWT_SECRET));
    let r = s.as_identity(BATCH, "pol-jwt-silver", &[("authorization", &silver)], body.clone()).await;
    assert_eq!(r.header("x-switchyard-policy"), Some("finance"), "{}", r.text());
    // A token the caller signed itself is refused by jwt_authn: its claims never count.
    let forged = format!(
        "Bearer {}",
        jwt(json!({"iss": JWT_ISSUER, "org": {"tier": "gold"}}), b"not-the-operator-secret-0123456789abcdef")
    );
    let r = s.as_identity(DEV, "pol-jwt-forged", &[("authorization", &forged)], body.clone()).await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(s.received("pol-jwt-forged").is_empty());
}

#[tokio::test]
async fn a_trusted_header_selects_only_after_the_identity_rules() {
    let s = mtls();
    let body = json!({"model": "pol/m", "messages": msg()});
    let tenant = ("x-gateway-tenant", "partner");
    let r = s.as_identity(DEV, "pol-hdr-dev", &[tenant], body.clone()).await;
    assert_eq!((r.status, r.header("x-switchyard-policy")), (200, Some("partner")), "{}", r.text());
    assert_eq!(s.receivers("pol-hdr-dev"), set(&["gamma"]));
    let seen = s.providers.iter().flat_map(|p| p.received_for("pol-hdr-dev")).collect::<Vec<_>>();
    assert!(seen.iter().all(|r| r.header("x-gateway-tenant").is_none()), "the selection header reached a provider");
    // An identity rule earlier in the list wins over the header.
    let r = s.as_identity(REPORTS, "pol-hdr-reports", &[tenant], body.clone()).await;
    assert_eq!(r.header("x-switchyard-policy"), Some("reports"), "{}", r.text());
    assert_eq!(s.receivers("pol-hdr-reports"), set(&["alpha"]));
}

#[tokio::test]
async fn decision_is_in_the_access_log_and_metrics_count_per_policy() {
    let s = mtls();
    let r = s.as_identity(REPORTS, "pol-audit", &[], json!({"model": "pol/m", "messages": msg()})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.as_identity(BATCH, "pol-audit-deny", &[], json!({"model": "other/x", "messages": msg()})).await;
    assert_eq!(r.status, 403, "{}", r.text());
    // Envoy flushes the access log on its own schedule: wait for both lines.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (served, denied) = loop {
        let log = std::fs::read_to_string(&s.log).unwrap_or_default();
        let line = |needle: &str| log.lines().find(|l| l.contains(needle)).map(str::to_string);
        let served = line(r#""policy":"reports","selected_by":"peer_uri_san""#);
        let denied = line(r#""error":"policy_denied""#);
        if let (Some(a), Some(b)) = (&served, &denied) {
            break (a.clone(), b.clone());
        }
        if Instant::now() > deadline {
            panic!("audit lines not in the access log:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let record = |line: &str| -> Value {
        let json = line.split_once("switchyard=").map(|x| x.1).unwrap_or("");
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let a = record(&served);
    assert_eq!((a["endpoint"].as_str(), a["model"].as_str()), (Some("alpha"), Some("pol/m")), "{served}");
    assert_eq!((a["attempts"].as_u64(), a["status"].as_u64()), (Some(1), Some(200)), "{served}");
    let d = record(&denied);
    assert_eq!(d["policy"], "finance", "{denied}");
    assert_eq!(d["constraint"], "policy:finance.allowed_models", "{denied}");
    assert_eq!(d["status"], 403);
    // Metrics: requests and denials per policy, with the policy as a label.
    let stats = switchyard_integration::envoy::http_get(s.admin, "/stats/prometheus").map(|x| x.1).unwrap_or_default();
    let value = |prefix: &str| -> f64 {
        stats.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    assert!(value(r#"switchyard_policy_requests_total{policy="reports"}"#) >= 1.0, "{stats}");
    assert!(value(r#"switchyard_policy_denials_total{code="policy_denied",policy="finance"}"#) >= 1.0, "{stats}");
}

// ---------------------------------------------------------------------------------------------
// Randomized: a few hundred (policy, request, failure pattern) combinations
// ---------------------------------------------------------------------------------------------

/// A small deterministic generator (the seed is printed on failure).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    fn subset(&mut self, items: &[&str]) -> Vec<String> {
        items.iter().filter(|_| self.chance(50)).map(|s| s.to_string()).collect()
    }
}

/// The policies of the randomized stack, by name (selected by virtual host `<name>.rand.test`).
fn random_policies() -> Value {
    json!({
        "ceiling": {"only": ["alpha", "delta"]},
        "floor": {"ignore": ["beta", "gamma"], "max_attempts": 2},
        "private": {"data_collection": "deny", "allow_fallbacks": false},
        "zdr": {"zdr": true, "allowed_models": ["pol/*"]},
        "cheap": {"max_price": {"prompt": 2.5}, "request_provider": "narrow_only"},
        "tagged": {"require_tags": ["us"], "request_provider": "ignore"},
        "models": {"allowed_models": ["pol/m", "other/*"], "only": ["beta", "gamma", "alpha"]}
    })
}

fn random_config() -> Value {
    let mut c = catalog();
    let policies = random_policies();
    let rules: Vec<Value> =
        policies.as_object().map(|m| m.keys().map(|k| json!({"policy": k, "route": k})).collect()).unwrap_or_default();
    c["policies"] = policies;
    c["policy_selection"] = json!({"rules": rules});
    c
}

static RANDOM: OnceLock<Stack> = OnceLock::new();

fn random_stack() -> &'static Stack {
    RANDOM.get_or_init(|| {
        start("policy-random", |providers| {
            let mut cfg = StackConfig::new(random_config(), clusters(providers), None);
            cfg.policy_routes = random_policies()
                .as_object()
                .map(|m| {
                    m.keys().map(|k| PolicyRoute { domain: format!("{k}.rand.test"), policy: k.clone() }).collect()
                })
                .unwrap_or_default();
            (cfg, Vec::new())
        })
    })
}

/// The test's own reading of a policy (independent of the filter's code): may `provider`
/// serve `model` under it?
fn allowed(policy: &Value, provider: &str, model: &str) -> bool {
    let cat = catalog();
    let p = &cat["providers"][provider];
    let data = &p["data_policy"];
    let retains = data["retains_data"].as_bool().unwrap_or(true) || data["trains_on_data"].as_bool().unwrap_or(true);
    let zdr = data["zdr"].as_bool().unwrap_or(false);
    let tags: Vec<&str> =
        p["tags"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let list = |k: &str| -> Option<Vec<String>> {
        policy[k].as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
    };
    let price = cat["models"][model]["endpoints"]
        .as_array()
        .and_then(|eps| eps.iter().find(|e| e["provider"] == provider))
        .and_then(|e| e["pricing"]["prompt"].as_f64());
    let Some(price) = price else { return false };
    let model_ok = list("allowed_models").is_none_or(|pats| {
        pats.iter().any(|pat| match pat.strip_suffix('*') {
            Some(prefix) => model.starts_with(prefix),
            None => pat == model,
        })
    });
    model_ok
        && list("only").is_none_or(|o| o.iter().any(|x| x == provider))
        && !list("ignore").unwrap_or_default().iter().any(|x| x == provider)
        && !(policy["data_collection"] == "deny" && retains)
        && !(policy["zdr"] == true && !zdr)
        && list("require_tags").unwrap_or_default().iter().all(|t| tags.contains(&t.as_str()))
        && policy["max_price"]["prompt"].as_f64().is_none_or(|limit| price <= limit)
}

const DOCUMENTED: [(u16, &str); 7] = [
    (400, "invalid_parameter"),
    (400, "model_not_found"),
    (403, "policy_denied"),
    (404, "no_endpoints"),
    (429, "capacity_exhausted"),
    (502, "all_endpoints_failed"),
    (503, "no_endpoint_available"),
];

#[tokio::test]
async fn randomized_requests_and_failures_never_leave_the_policy() {
    let s = random_stack();
    let policies = random_policies();
    let names: Vec<String> = policies.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    let seed = std::env::var("SY_POLICY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_6006_u64);
    let mut rng = Lcg(seed);
    let models = ["pol/m", "pol/b", "other/x", "alpha/pol/m", "beta/pol/b", "gamma/pol/m", "delta/other/x"];
    let outcomes = ["ok", "ok", "503", "429", "reset", "500", "400"];
    let (mut served, mut refused, mut failed) = (0, 0, 0);
    for i in 0..300 {
        let name = &names[rng.below(names.len())];
        let policy = &policies[name.as_str()];
        let mut provider = serde_json::Map::new();
        if rng.chance(40) {
            provider.insert("order".into(), json!(rng.subset(&PROVIDERS)));
        }
        if rng.chance(30) {
            provider.insert("only".into(), json!(rng.subset(&PROVIDERS)));
        }
        if rng.chance(20) {
            provider.insert("ignore".into(), json!(rng.subset(&PROVIDERS)));
        }
        if rng.chance(40) {
            provider.insert("allow_fallbacks".into(), json!(rng.chance(70)));
        }
        if rng.chance(30) {
            provider.insert("data_collection".into(), json!(rng.pick(&["allow", "deny"])));
        }
        if rng.chance(20) {
            provider.insert("zdr".into(), json!(rng.chance(50)));
        }
        if rng.chance(30) {
            provider.insert("sort".into(), json!(rng.pick(&["price", "latency", "throughput"])));
        }
        if rng.chance(15) {
            provider.insert("max_price".into(), json!({"prompt": rng.below(5)}));
        }
        let mut body = json!({"model": rng.pick(&models), "messages": msg(), "provider": provider});
        if rng.chance(35) {
            body["models"] = json!(rng.subset(&["pol/b", "other/x", "pol/m"]));
        }
        let behavior: Vec<String> = PROVIDERS.iter().map(|p| format!("{p}={}", rng.pick(&outcomes))).collect();
        let behavior = behavior.join(",");
        let host = format!("{name}.rand.test");
        let id = format!("pol-rand-{i}");
        let r = s.plain(&id, &[("host", &host), ("x-mock-behavior", &behavior)], &body).await;
        let ctx = format!(
            "seed {seed} #{i} policy {name} {policy} body {body} behavior {behavior}: {} {}",
            r.status,
            r.text()
        );
        let got = s.received(&id);
        // Every attempt, first or retried, reached only an endpoint the policy allows.
        for (provider, upstream_model) in &got {
            let model = match upstream_model.rsplit_once('-').map(|x| x.1) {
                Some("m") => "pol/m",
                Some("b") => "pol/b",
                Some("x") => "other/x",
                _ => panic!("unexpected upstream model {upstream_model}: {ctx}"),
            };
            assert!(allowed(policy, provider, model), "{provider} served {model} outside the policy: {ctx}");
        }
        if let Some(limit) = policy["max_attempts"].as_u64() {
            assert!(got.len() as u64 <= limit, "{} attempts over max_attempts {limit}: {ctx}", got.len());
        }
        if policy["allow_fallbacks"] == false {
            let per_model: BTreeSet<&String> = got.iter().map(|(_, m)| m).collect();
            assert_eq!(per_model.len(), got.len(), "a provider fallback under allow_fallbacks: false: {ctx}");
        }
        assert_eq!(r.header("x-switchyard-policy"), Some(name.as_str()), "{ctx}");
        // Each answer is a success from an allowed endpoint, a provider's own 4xx, or a
        // documented error.
        if r.status < 300 {
            let p = r.header("x-switchyard-provider").unwrap_or("");
            assert!(got.iter().any(|g| g.0 == p), "the serving endpoint was attempted: {ctx}");
            served += 1;
        } else if r.status == 400 && r.text().contains("mock failure") {
            assert!(!got.is_empty(), "{ctx}");
            failed += 1;
        } else {
            let e = &r.json()["error"];
            let code = e["code"].as_str().unwrap_or("");
            assert!(DOCUMENTED.contains(&(r.status, code)), "undocumented answer: {ctx}");
            if matches!(r.status, 400 | 403 | 404) {
                assert!(got.is_empty(), "a refused request reached a provider: {ctx}");
                refused += 1;
            } else {
                assert!(!got.is_empty(), "{ctx}");
                failed += 1;
            }
        }
    }
    eprintln!("randomized policy check (seed {seed}): {served} served, {refused} refused, {failed} failed");
    // The sample exercises every kind of answer.
    assert!(served > 30 && refused > 30 && failed > 30, "served {served}, refused {refused}, failed {failed}");
}
