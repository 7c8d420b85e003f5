//! The stack the token-credential tests share (`google_tokens`, `google_key_file`,
//! `azure_tokens`): a token source (a mock metadata server, IMDS or OAuth2 token endpoint), a
//! provider that takes only that source's tokens (`cloud`), an ordinary keyed provider to fail
//! over to (`keyed`, key `key-keyed`), and Envoy in front, on a thread of their own that lives
//! as long as the test binary (the tests' runtimes come and go; the stack must not).

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::client::{post_json, Reply};
use crate::envoy::{prometheus_sum, Build, ClusterSpec, Envoy, StackConfig};
use crate::mock::{Behavior, MockProvider};

pub struct TokenStack<S> {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// The token source: its fetch count, its up and down switch.
    pub source: S,
    /// The provider that takes only the source's tokens (cluster `c_<its name>`).
    pub cloud: MockProvider,
    /// The keyed provider (cluster `c_keyed`).
    pub keyed: MockProvider,
}

/// Starts a stack: `source` starts the token source and names the cloud mock's behaviour (the
/// source's issuer, so it accepts only live tokens from it); `configure` points the
/// configuration at the source and returns the environment Envoy needs (a key file).
pub fn start<S, F, Fut, C>(
    tag: &'static str,
    build: Build,
    catalog: Value,
    cloud: &'static str,
    source: F,
    configure: C,
) -> TokenStack<S>
where
    S: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (S, Behavior)>,
    C: FnOnce(&S, &mut StackConfig) -> Vec<(&'static str, String)> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let (source, cloud_mock, keyed) = rt.block_on(async {
            let (source, behavior) = source().await;
            let cloud_mock = MockProvider::start(cloud, 0, behavior).await.expect("cloud provider");
            let keyed = MockProvider::start("keyed", 0, Behavior::default()).await.expect("keyed provider");
            (source, cloud_mock, keyed)
        });
        let clusters = vec![
            ClusterSpec { name: format!("c_{cloud}"), port: cloud_mock.addr.port() },
            ClusterSpec { name: "c_keyed".into(), port: keyed.addr.port() },
        ];
        let mut cfg = StackConfig::new(catalog, clusters, None);
        cfg.build = build;
        let env = configure(&source, &mut cfg);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let envoy = Envoy::start_with_env(&cfg, tag, &env).unwrap_or_else(|e| panic!("envoy: {e}"));
        let _ = tx.send(TokenStack { addr: envoy.addr(), admin: envoy.admin, source, cloud: cloud_mock, keyed });
        let _keep = (envoy, rt);
        loop {
            std::thread::park();
        }
    });
    rx.recv().expect("stack started")
}

impl<S> TokenStack<S> {
    /// The sum of a Prometheus metric's series whose labels contain `label`.
    pub fn stat(&self, metric: &str, label: &str) -> u64 {
        prometheus_sum(self.admin, metric, label)
    }

    /// Asks (every 100 ms, up to `within`) until `provider` serves the answer; every answer
    /// meanwhile must be a 200 (the fallback serves while the token is missing).
    pub async fn until_served_by<A, Fut>(&self, provider: &str, within: Duration, mut ask: A)
    where
        A: FnMut() -> Fut,
        Fut: Future<Output = Reply>,
    {
        let t0 = Instant::now();
        loop {
            let r = ask().await;
            assert_eq!(r.status, 200, "{}", r.text());
            if r.header("x-switchyard-provider") == Some(provider) {
                return;
            }
            assert!(t0.elapsed() < within, "{provider} never served: no token after {within:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The Google tests' catalog: `g/chat` on Claude on Vertex AI (`gcloud`, fed by `credential`;
/// the mock's Vertex takes only a live token its source issued and checks Vertex's path,
/// project and body as well), then `keyed`.
pub fn claude_on_vertex_catalog(credential: Value) -> Value {
    json!({
        "providers": {
            "gcloud": {"cluster": "c_gcloud", "authority": "us-east5-aiplatform.googleapis.com", "kind": "vertex",
                       "kind_options": {"project": crate::mock::vertex::PROJECT, "location": "us-east5"},
                       "apis": {"anthropic": {}},
                       "credential": credential},
            "keyed": {"cluster": "c_keyed", "authority": "keyed.example", "credential": {"value": "key-keyed"}}
        },
        "models": {"g/chat": {"endpoints": [
            {"provider": "gcloud", "upstream_model": "claude-sonnet-4-5@20250929", "apis": ["anthropic"],
             "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "keyed", "upstream_model": "k-chat", "pricing": {"prompt": 2, "completion": 2}}
        ]}},
        "routing": {"default_policy": "price_weighted"}
    })
}

/// A `g/chat` request with the caller's own key (`caller-key`) and provider preferences.
pub async fn chat_g(addr: SocketAddr, id: &str, provider: Value) -> Reply {
    let body = json!({"model": "g/chat", "messages": [{"role": "user", "content": "hi"}], "provider": provider});
    post_json(addr, "/v1/chat/completions", &[("x-test-id", id), ("authorization", "Bearer caller-key")], &body)
        .await
        .unwrap_or_else(|e| panic!("{id}: {e}"))
}

/// Asks `g/chat` gcloud-first until gcloud serves it (up to `within`).
pub async fn until_gcloud_serves<S>(stack: &TokenStack<S>, id: &str, within: Duration) {
    stack.until_served_by("gcloud", within, || chat_g(stack.addr, id, json!({"order": ["gcloud", "keyed"]}))).await;
}
