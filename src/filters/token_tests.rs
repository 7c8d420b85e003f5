//! Providers whose attempts carry an access token (`credential.google_metadata`, and Azure
//! OpenAI with `credential.azure_managed_identity`), through the root's fetcher and the two
//! filters (mock host): one fetch for all workers, the token on each attempt, an attempt without
//! one failed over at once and counted.

use std::rc::Rc;

use super::downstream::Stream;
use super::host::Action;
use super::mock::MockHost;
use super::tokens::{fetch_metric, missing_metric, TokenFetcher};
use super::upstream::Attempt;
use super::{configure, Configured, Filter};
use crate::protocol::scope::route_mark_path;
use crate::tokens::TokenRecord;

/// One model from a keyed provider (cheaper: tried first) and from one with a Google token.
const CONFIG: &str = r#"{
  "providers": {
    "keyed": {"cluster": "c_keyed", "authority": "keyed.example", "credential": {"value": "keyed-secret"}},
    "vertexish": {"cluster": "c_vertex", "authority": "vertex.example",
                  "credential": {"google_metadata": {"cluster": "gcp_metadata"}}}
  },
  "models": {"m/chat": {"endpoints": [
    {"provider": "keyed", "upstream_model": "chat", "pricing": {"prompt": 1, "completion": 1}},
    {"provider": "vertexish", "upstream_model": "chat-v", "pricing": {"prompt": 2, "completion": 2}}
  ]}},
  "routing": {"default_policy": "price_weighted"}
}"#;

const KEY: &str = "sy/token/gcp_metadata/default/https://www.googleapis.com/auth/cloud-platform";

fn configured() -> Rc<Configured> {
    Rc::new(configure(CONFIG.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("test config rejected: {e}")))
}

fn answer(token: &str, expires_in: u64) -> Vec<u8> {
    format!(r#"{{"access_token":"{token}","expires_in":{expires_in},"token_type":"Bearer"}}"#).into_bytes()
}

fn record(host: &MockHost) -> TokenRecord {
    let bytes = host.state().shared.get(KEY).map(|(v, _)| v.clone()).expect("a record");
    TokenRecord::decode(&bytes).expect("a readable record")
}

#[test]
fn one_worker_fetches_for_all_and_the_token_is_refreshed_before_it_expires() {
    let config = configured();
    let host = MockHost::new(); // shared data is the state every "worker" sees
    let (mut w1, mut w2) = (TokenFetcher::default(), TokenFetcher::default());
    host.state().now_ms = 1_000_000;
    // The first tick creates the record (see `TokenFetcher::tick`); one lease, one fetch.
    w1.tick(&host, &config.catalog, 1_000_000);
    assert!(host.state().http_calls.is_empty());
    w2.tick(&host, &config.catalog, 1_000_000);
    w1.tick(&host, &config.catalog, 1_000_100);
    w2.tick(&host, &config.catalog, 1_000_100);
    w1.tick(&host, &config.catalog, 1_000_200);
    w2.tick(&host, &config.catalog, 1_000_200);
    let calls = host.state().http_calls.clone();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (cluster, headers) = &calls[0];
    assert_eq!(cluster, "gcp_metadata");
    assert!(headers.contains(&("metadata-flavor".into(), "Google".into())));
    assert!(headers.iter().any(|(k, v)| k == ":path"
        && v == "/computeMetadata/v1/instance/service-accounts/default/token?scopes=https://www.googleapis.com/auth/cloud-platform"));
    // The answer goes to the worker that asked (another worker's token is not its own).
    assert!(w2.owns(1) && !w1.owns(1));
    assert!(!w1.answered(&host, 1, 200, &answer("tok-1", 6), 1_000_300));
    assert!(w2.answered(&host, 1, 200, &answer("tok-1", 6), 1_000_300));
    assert_eq!(record(&host).usable(1_000_300), Some("tok-1"));
    assert_eq!(host.counter(&fetch_metric("ok")), 1);
    // Nothing more until half its life (3 s), then exactly one refresh, by whichever worker.
    for t in (1_000_400..1_003_300).step_by(100) {
        w1.tick(&host, &config.catalog, t);
        w2.tick(&host, &config.catalog, t);
    }
    assert_eq!(host.state().http_calls.len(), 1);
    w2.tick(&host, &config.catalog, 1_003_300);
    w1.tick(&host, &config.catalog, 1_003_300);
    assert_eq!(host.state().http_calls.len(), 2);
    assert!(w2.owns(2) && !w1.owns(2));
    // The metadata server fails: the old token stays usable until its time, a retry follows.
    assert!(w2.answered(&host, 2, 503, b"", 1_003_400));
    assert_eq!(host.counter(&fetch_metric("http_error")), 1);
    assert_eq!(record(&host).usable(1_004_000), Some("tok-1"));
    assert_eq!(record(&host).refresh_at_ms, 1_003_900);
    w1.tick(&host, &config.catalog, 1_003_900);
    assert!(w1.answered(&host, 3, 200, &answer("tok-2", 6), 1_004_000));
    assert_eq!(record(&host).usable(1_004_000), Some("tok-2"));
}

#[test]
fn a_fetch_the_host_refuses_is_a_failure_with_a_retry() {
    let config = configured();
    let host = MockHost::new();
    host.state().grpc_refused = true;
    let mut w = TokenFetcher::default();
    w.tick(&host, &config.catalog, 1_000);
    w.tick(&host, &config.catalog, 1_100);
    assert_eq!(host.counter(&fetch_metric("unreachable")), 1);
    let r = record(&host);
    assert_eq!((r.failures, r.refresh_at_ms, r.lease_until_ms), (1, 1_600, 0));
}

#[test]
fn an_answer_after_a_reload_is_stored_for_the_source_that_asked_and_a_lost_one_is_given_up() {
    let config = configured();
    let host = MockHost::new();
    let mut w = TokenFetcher::default();
    w.tick(&host, &config.catalog, 1_000);
    w.tick(&host, &config.catalog, 1_100);
    assert_eq!(host.state().http_calls.len(), 1);
    // Reloaded with another account: the answer still belongs to the first source's record.
    let other = CONFIG.replace(
        r#"{"cluster": "gcp_metadata"}"#,
        r#"{"cluster": "gcp_metadata", "service_account": "b@p.iam.gserviceaccount.com"}"#,
    );
    let reloaded = configure(other.as_bytes(), &|_| None).unwrap();
    assert_ne!(reloaded.catalog.token_sources[0].key(), KEY);
    assert!(w.answered(&host, 1, 200, &answer("tok-a", 3_600), 1_200));
    assert_eq!(record(&host).usable(1_200), Some("tok-a"));
    let other_key = reloaded.catalog.token_sources[0].key();
    assert!(host.state().shared.get(&other_key).is_none());
    // A fetch never answered is given up once its lease ends: the source is fetched again.
    w.tick(&host, &reloaded.catalog, 2_000); // creates the new source's record
    w.tick(&host, &reloaded.catalog, 2_100); // leases and fetches (call 2), never answered
    assert_eq!(host.state().http_calls.len(), 2);
    w.tick(&host, &reloaded.catalog, 2_100 + 5_000); // still leased
    assert_eq!(host.state().http_calls.len(), 2);
    w.tick(&host, &reloaded.catalog, 2_100 + 6_000);
    assert_eq!(host.state().http_calls.len(), 3);
}

/// Decides a request pinned to the token provider (then the keyed one).
fn decide(host: &MockHost, config: &Rc<Configured>) -> Stream<MockHost> {
    let (stream, action, reply) = decide_with(host, config, r#"{"order":["vertexish","keyed"]}"#);
    assert_eq!((action, reply), (Action::Continue, None));
    stream
}

fn start_attempt(host: &MockHost, config: &Rc<Configured>, k: u64, cluster: &str) -> Action {
    host.set_prop(&["upstream", "request_attempt_count"], &k.to_le_bytes());
    host.set_prop(&["xds", "cluster_name"], cluster.as_bytes());
    Attempt::new(host.clone(), Rc::clone(config)).on_request_headers(false)
}

#[test]
fn each_attempt_carries_its_own_provider_credential_only() {
    let config = configured();
    let host = MockHost::new();
    host.state().shared.insert(KEY.into(), (crate::tokens::fetched("tok-9".into(), 3_600, 0).encode(), 1));
    host.state().now_ms = 60_000;
    let _stream = decide(&host, &config);
    assert_eq!(start_attempt(&host, &config, 1, "c_vertex"), Action::Continue);
    assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer tok-9"));
    assert!(host.state().reply.is_none());
    // The failover to the keyed provider carries its key, never the token.
    assert_eq!(start_attempt(&host, &config, 2, "c_keyed"), Action::Continue);
    assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer keyed-secret"));
}

/// Decides a request with these `provider` preferences (the caller sends its own key): the
/// stream, what its body callback returned, and the local reply if it was refused.
fn decide_with(
    host: &MockHost,
    config: &Rc<Configured>,
    provider: &str,
) -> (Stream<MockHost>, Action, Option<(u32, String)>) {
    let body = format!(r#"{{"model":"m/chat","messages":[{{"role":"user","content":"hi"}}],"provider":{provider}}}"#);
    host.set_prop(&route_mark_path(), b"llm");
    host.with_request_headers(&[
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway"),
        ("content-type", "application/json"),
        ("authorization", "Bearer caller-own-key"),
    ]);
    host.state().request_body = body.as_bytes().to_vec();
    let mut stream = Stream::new(host.clone(), Rc::clone(config));
    assert_eq!(stream.on_request_headers(false), Action::Pause);
    let action = stream.on_request_body(body.len(), true);
    let reply = host.state().reply.clone();
    (stream, action, reply.map(|r| (r.status, String::from_utf8_lossy(&r.body).to_string())))
}

#[test]
fn without_a_usable_token_the_provider_is_skipped_at_once_and_counted() {
    let config = configured();
    // No token yet, and one past its margin (6 s token fetched at 0, decided at 5.5 s).
    for (stored, now) in [(None, 60_000), (Some(crate::tokens::fetched("old".into(), 6, 0)), 5_500)] {
        let host = MockHost::new();
        if let Some(r) = &stored {
            host.state().shared.insert(KEY.into(), (r.encode(), 1));
        }
        host.state().now_ms = now;
        // Ordered first, it is skipped: the first attempt goes to the keyed provider.
        assert_eq!(decide_with(&host, &config, r#"{"order":["vertexish","keyed"]}"#).2, None);
        assert_eq!(host.counter(&missing_metric("vertexish")), 1);
        let plan =
            crate::protocol::plan::AttemptPlan::decode(&host.prop(&[crate::protocol::plan::PLAN_PROPERTY]).unwrap())
                .unwrap();
        assert_eq!(plan.refs.iter().map(|r| r.slug.as_str()).collect::<Vec<_>>(), ["keyed"]);
        assert_eq!(start_attempt(&host, &config, 1, "c_keyed"), Action::Continue);
        assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer keyed-secret"));
        // Alone, the request gets a 503 it may retry, in its API's shape, without waiting.
        let host = MockHost::new();
        host.state().now_ms = now;
        if let Some(r) = &stored {
            host.state().shared.insert(KEY.into(), (r.encode(), 1));
        }
        let (status, body) = decide_with(&host, &config, r#"{"only":["vertexish"]}"#).2.expect("refused");
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("credential_unavailable"), "{body}");
        assert!(!body.contains("old"), "{body}");
    }
}

#[test]
fn a_token_that_lapsed_after_the_decision_refuses_the_attempt_unsent() {
    let config = configured();
    let host = MockHost::new();
    host.state().shared.insert(KEY.into(), (crate::tokens::fetched("tok".into(), 6, 0).encode(), 1));
    host.state().now_ms = 1_000;
    let _stream = decide(&host, &config);
    // Within the margin the planned attempt still sends it; once expired it is not sent.
    host.state().now_ms = 5_900;
    assert_eq!(start_attempt(&host, &config, 1, "c_vertex"), Action::Continue);
    assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer tok"));
    host.state().now_ms = 6_000;
    assert_eq!(start_attempt(&host, &config, 1, "c_vertex"), Action::Pause);
    let reply = host.state().reply.clone().expect("a local reply");
    assert_eq!(reply.status, 503);
    let body = String::from_utf8_lossy(&reply.body).to_string();
    assert!(body.contains("no access token for provider vertexish"), "{body}");
    assert!(!body.contains("tok\""), "{body}");
    assert_eq!(host.counter(&missing_metric("vertexish")), 1);
}

#[test]
fn google_metadata_is_refused_where_it_makes_no_sense() {
    let with = |cred: &str, extra: &str| {
        let c = format!(
            r#"{{"providers": {{"v": {{"cluster": "c_v", "authority": "v.example", "credential": {cred}{extra}}},
                 "k": {{"cluster": "c_k", "authority": "k.example", "credential": {{"value": "s"}}}}}},
               "models": {{"m": {{"endpoints": [{{"provider": "v", "upstream_model": "m", "pricing": {{"prompt": 1, "completion": 1}}}}]}}}},
               "routing": {{"passthrough_cluster": "c_pass"}}}}"#
        );
        crate::config::Catalog::from_json(c.as_bytes(), &|_| None).err().map(|e| (e.field.clone(), e.to_string()))
    };
    let gm = |inner: &str| format!(r#"{{"google_metadata": {{{inner}}}}}"#);
    assert_eq!(with(&gm(r#""cluster": "gcp""#), ""), None);
    let cases = [
        (
            gm(r#""cluster": "gcp""#),
            r#", "first_attempt_cluster": "c_v-first""#,
            r#"providers["v"].first_attempt_cluster"#,
        ),
        (gm(r#""cluster": "c_k""#), "", r#"providers["v"].credential.google_metadata.cluster"#),
        (gm(r#""cluster": "c_v""#), "", r#"providers["v"].credential.google_metadata.cluster"#),
        (gm(r#""cluster": "c_pass""#), "", r#"providers["v"].credential.google_metadata.cluster"#),
        (gm(r#""cluster": """#), "", r#"providers["v"].credential.google_metadata.cluster"#),
        (
            gm(r#""cluster": "gcp", "service_account": "../x""#),
            "",
            r#"providers["v"].credential.google_metadata.service_account"#,
        ),
        (gm(r#""cluster": "gcp", "scopes": []"#), "", r#"providers["v"].credential.google_metadata.scopes"#),
        (gm(r#""cluster": "gcp", "scopes": ["a&b"]"#), "", r#"providers["v"].credential.google_metadata.scopes[0]"#),
        (gm(r#""cluster": "gcp", "timeout_ms": 5"#), "", r#"providers["v"].credential.google_metadata.timeout_ms"#),
        (r#"{"value": "k", "google_metadata": {"cluster": "gcp"}}"#.to_string(), "", r#"providers["v"].credential"#),
        (
            r#"{"header": "x-key", "google_metadata": {"cluster": "gcp"}}"#.to_string(),
            "",
            r#"providers["v"].credential"#,
        ),
    ];
    for (cred, extra, field) in cases {
        let got = with(&cred, extra);
        assert_eq!(got.as_ref().map(|(f, _)| f.as_str()), Some(field), "{cred}{extra}: {got:?}");
    }
    // Unknown fields are named by serde.
    assert!(with(&gm(r#""cluster": "gcp", "audience": "x""#), "").is_some());
}

#[test]
fn the_catalog_has_one_source_per_record_and_debug_prints_no_token_source_secret() {
    let config = configured();
    assert_eq!(config.catalog.token_sources.len(), 1);
    assert_eq!(config.catalog.token_sources[0].key(), KEY);
    let p = config.catalog.provider_for_slug("vertexish").unwrap();
    assert!(p.needs_attempt_filter());
    assert_eq!(p.credential_for(crate::api::Api::OpenAi), None);
    assert!(!config.catalog.provider_for_slug("keyed").unwrap().needs_attempt_filter());
}

/// GPT on an Azure OpenAI deployment with an Entra token from IMDS
/// (`credential.azure_managed_identity`, a user-assigned identity by client id).
const AZURE_CONFIG: &str = r#"{
  "providers": {
    "keyed": {"cluster": "c_keyed", "authority": "keyed.example", "credential": {"value": "keyed-secret"}},
    "az": {"cluster": "c_az", "authority": "res.openai.azure.com", "kind": "azure",
           "credential": {"azure_managed_identity": {"cluster": "azure_imds",
                          "client_id": "11111111-2222-3333-4444-555555555555"}}}
  },
  "models": {"m/chat": {"endpoints": [
    {"provider": "keyed", "upstream_model": "chat", "pricing": {"prompt": 1, "completion": 1}},
    {"provider": "az", "upstream_model": "gpt-dep", "pricing": {"prompt": 2, "completion": 2}}
  ]}},
  "routing": {"default_policy": "price_weighted"}
}"#;

#[test]
fn an_azure_attempt_carries_the_imds_token_as_a_bearer_and_no_api_key() {
    let config = Rc::new(configure(AZURE_CONFIG.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("{e}")));
    let host = MockHost::new();
    let mut w = TokenFetcher::default();
    w.tick(&host, &config.catalog, 1_000); // creates the record
    w.tick(&host, &config.catalog, 1_100); // leases it and asks IMDS
    let calls = host.state().http_calls.clone();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (cluster, headers) = &calls[0];
    assert_eq!(cluster, "azure_imds");
    assert!(headers.contains(&("metadata".into(), "true".into())), "{headers:?}");
    assert!(headers.contains(&(
        ":path".into(),
        "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://cognitiveservices.azure.com&client_id=11111111-2222-3333-4444-555555555555".into()
    )));
    // IMDS's answer: the times as strings.
    let answer = br#"{"access_token":"eyJ0.entra.sig","refresh_token":"","expires_in":"3599","expires_on":"1765170000","not_before":"1765166100","resource":"https://cognitiveservices.azure.com","token_type":"Bearer"}"#;
    assert!(w.answered(&host, 1, 200, answer, 1_200));
    assert_eq!(host.counter(&fetch_metric("ok")), 1);
    host.state().now_ms = 1_300;
    // The caller sends an `api-key` of its own as well: it never reaches Azure.
    let body = r#"{"model":"m/chat","messages":[{"role":"user","content":"hi"}],"provider":{"order":["az","keyed"]}}"#;
    host.set_prop(&route_mark_path(), b"llm");
    host.with_request_headers(&[
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway"),
        ("content-type", "application/json"),
        ("authorization", "Bearer caller-own-key"),
        ("api-key", "caller-azure-key"),
    ]);
    host.state().request_body = body.as_bytes().to_vec();
    let mut stream = Stream::new(host.clone(), Rc::clone(&config));
    assert_eq!(stream.on_request_headers(false), Action::Pause);
    assert_eq!(stream.on_request_body(body.len(), true), Action::Continue);
    assert_eq!(start_attempt(&host, &config, 1, "c_az"), Action::Continue);
    assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer eyJ0.entra.sig"));
    assert_eq!(host.request_header_value("api-key"), None);
    assert_eq!(
        host.request_header_value(":path").as_deref(),
        Some("/openai/deployments/gpt-dep/chat/completions?api-version=2024-10-21")
    );
    // The failover to the keyed provider carries its key, never the token.
    assert_eq!(start_attempt(&host, &config, 2, "c_keyed"), Action::Continue);
    assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer keyed-secret"));
    assert_eq!(host.request_header_value("api-key"), None);
}

#[test]
fn azure_managed_identity_is_checked_naming_the_field() {
    let with = |cred: &str| {
        let c = format!(
            r#"{{"providers": {{"az": {{"cluster": "c_az", "authority": "r.openai.azure.com", "kind": "azure", "credential": {cred}}},
                 "k": {{"cluster": "c_k", "authority": "k.example", "credential": {{"value": "s"}}}}}},
               "models": {{"m": {{"endpoints": [{{"provider": "az", "upstream_model": "m", "pricing": {{"prompt": 1, "completion": 1}}}}]}}}}}}"#
        );
        crate::config::Catalog::from_json(c.as_bytes(), &|_| None).err().map(|e| (e.field.clone(), e.to_string()))
    };
    let mi = |inner: &str| format!(r#"{{"azure_managed_identity": {{{inner}}}}}"#);
    let f = |rest: &str| format!(r#"providers["az"].credential{rest}"#);
    assert_eq!(with(&mi(r#""cluster": "imds""#)), None);
    assert_eq!(with(&mi(r#""cluster": "imds", "object_id": "11111111-2222-3333-4444-555555555555""#)), None);
    let res = r#""msi_res_id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/u""#;
    assert_eq!(with(&mi(&format!(r#""cluster": "imds", {res}, "resource": "https://ai.azure.com""#))), None);
    let cases = [
        (mi(r#""cluster": """#), f(".azure_managed_identity.cluster")),
        (mi(r#""cluster": "c_k""#), f(".azure_managed_identity.cluster")),
        (mi(r#""cluster": "imds", "client_id": "nope""#), f(".azure_managed_identity.client_id")),
        (mi(r#""cluster": "imds", "object_id": "1&x=2""#), f(".azure_managed_identity.object_id")),
        (mi(r#""cluster": "imds", "msi_res_id": "rg/u""#), f(".azure_managed_identity.msi_res_id")),
        (
            mi(
                r#""cluster": "imds", "client_id": "11111111-2222-3333-4444-555555555555", "object_id": "11111111-2222-3333-4444-555555555555""#,
            ),
            f(".azure_managed_identity"),
        ),
        (mi(r#""cluster": "imds", "resource": "http://x""#), f(".azure_managed_identity.resource")),
        (mi(r#""cluster": "imds", "timeout_ms": 70000"#), f(".azure_managed_identity.timeout_ms")),
        (r#"{"env": "K", "azure_managed_identity": {"cluster": "imds"}}"#.to_string(), f("")),
        (r#"{"google_metadata": {"cluster": "g"}, "azure_managed_identity": {"cluster": "imds"}}"#.to_string(), f("")),
        (r#"{"prefix": "Bearer ", "azure_managed_identity": {"cluster": "imds"}}"#.to_string(), f("")),
    ];
    for (cred, field) in cases {
        let got = with(&cred);
        assert_eq!(got.as_ref().map(|(f, _)| f.as_str()), Some(field.as_str()), "{cred}: {got:?}");
    }
    // The reason is given, not only the field.
    let (_, why) = with(&mi(r#""cluster": "imds", "client_id": "nope""#)).unwrap();
    assert!(why.contains("GUID"), "{why}");
    assert!(with(&mi(r#""cluster": "imds", "tenant_id": "x""#)).is_some(), "unknown fields are refused");
}
