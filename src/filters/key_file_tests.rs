//! A provider whose token comes from a service-account key file
//! (`credential.google_service_account`), through the root's fetcher (mock host): the key file
//! from the VM environment, the assertion signed in the tick with the host's clock and POSTed
//! to the token endpoint, the answer's token on each attempt; and the load-time checks.

use std::rc::Rc;

use super::mock::MockHost;
use super::tokens::{fetch_metric, TokenFetcher};
use super::{configure, Configured};
use crate::protocol::base64;
use crate::tokens::rsa::RsaKey;
use crate::tokens::sa_tests::key_file_json;
use crate::tokens::TokenRecord;

const CONFIG: &str = r#"{
  "providers": {
    "vertexish": {"cluster": "c_vertex", "authority": "vertex.example",
                  "credential": {"google_service_account": {"env": "SA_KEY", "cluster": "google_oauth2"}}}
  },
  "models": {"m/chat": {"endpoints": [
    {"provider": "vertexish", "upstream_model": "chat-v", "pricing": {"prompt": 2, "completion": 2}}
  ]}}
}"#;

fn configure_with(config: &str, key_file: Option<String>) -> Result<Configured, String> {
    configure(config.as_bytes(), &|name| (name == "SA_KEY").then(|| key_file.clone()).flatten())
        .map_err(|e| e.to_string())
}

fn load_error(config: &str, key_file: Option<String>) -> String {
    configure_with(config, key_file).err().expect("the configuration is refused")
}

fn configured() -> Rc<Configured> {
    Rc::new(configure_with(CONFIG, Some(key_file_json("https://oauth2.googleapis.com/token"))).unwrap())
}

fn decode_url(s: &str) -> Vec<u8> {
    base64::decode(&s.replace('-', "+").replace('_', "/")).unwrap()
}

#[test]
fn the_tick_signs_an_assertion_and_the_answer_is_every_workers_token() {
    let config = configured();
    let source = config.catalog.token_sources[0].clone();
    let host = MockHost::new();
    let (mut w1, mut w2) = (TokenFetcher::default(), TokenFetcher::default());
    let now = 1_700_000_000_000;
    w1.tick(&host, &config.catalog, now); // creates the record
    w2.tick(&host, &config.catalog, now + 100); // leases and fetches
    w1.tick(&host, &config.catalog, now + 100); // leased by w2: nothing
    let calls = host.state().http_calls.clone();
    let bodies = host.state().http_bodies.clone();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (cluster, headers) = &calls[0];
    assert_eq!(cluster, "google_oauth2");
    for (k, v) in [
        (":method", "POST"),
        (":path", "/token"),
        (":authority", "oauth2.googleapis.com"),
        ("content-type", "application/x-www-form-urlencoded"),
    ] {
        assert!(headers.contains(&(k.to_string(), v.to_string())), "{k} in {headers:?}");
    }
    let body = String::from_utf8(bodies[0].clone()).unwrap();
    assert!(headers.contains(&("content-length".to_string(), body.len().to_string())));
    let jwt = body.strip_prefix("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=").unwrap();
    let parts: Vec<&str> = jwt.split('.').collect();
    let claims: serde_json::Value = serde_json::from_slice(&decode_url(parts[1])).unwrap();
    // Signed with the host's clock at the tick that fetched.
    assert_eq!(claims["iat"], 1_700_000_000u64);
    assert_eq!(claims["exp"], 1_700_003_600u64);
    assert_eq!(claims["aud"], "https://oauth2.googleapis.com/token");
    let key = RsaKey::from_pkcs8_pem(include_str!("../tokens/testdata/test-only-sa-key.pem")).unwrap();
    let signed = format!("{}.{}", parts[0], parts[1]);
    assert_eq!(decode_url(parts[2]), key.sign(signed.as_bytes()).unwrap());
    // The token endpoint's answer is the record every worker reads.
    let answer = br#"{"access_token":"ya29.sa","expires_in":3599,"token_type":"Bearer"}"#;
    assert!(w2.answered(&host, 1, 200, answer, now + 300));
    let bytes = host.state().shared.get(&source.key()).map(|(v, _)| v.clone()).unwrap();
    assert_eq!(TokenRecord::decode(&bytes).unwrap().usable(now + 400), Some("ya29.sa"));
    assert_eq!(host.counter(&fetch_metric("ok")), 1);
    // A refusal from the endpoint (a bad signature: 400 invalid_grant) is a failed fetch.
    let (mut w, host) = (TokenFetcher::default(), MockHost::new());
    w.tick(&host, &config.catalog, now);
    w.tick(&host, &config.catalog, now + 100);
    assert!(w.answered(&host, 1, 400, br#"{"error":"invalid_grant"}"#, now + 200));
    assert_eq!(host.counter(&fetch_metric("http_error")), 1);
    let bytes = host.state().shared.get(&source.key()).map(|(v, _)| v.clone()).unwrap();
    assert_eq!(TokenRecord::decode(&bytes).unwrap().usable(now + 300), None);
}

#[test]
fn the_key_file_is_checked_at_load_and_errors_name_the_field_never_the_key() {
    let field = "providers[\"vertexish\"].credential.google_service_account";
    let e = load_error(CONFIG, None);
    assert!(e.contains(&format!("{field}.env")) && e.contains("SA_KEY is not set"), "{e}");
    let wrong_type =
        key_file_json("https://oauth2.googleapis.com/token").replace("\"service_account\"", "\"authorized_user\"");
    let e = load_error(CONFIG, Some(wrong_type));
    assert!(e.contains("field `type`"), "{e}");
    let pem = include_str!("../tokens/testdata/test-only-sa-key.pem");
    let body_line = pem.lines().nth(3).unwrap();
    let broken = key_file_json("https://oauth2.googleapis.com/token").replace(body_line, "AAAA");
    let e = load_error(CONFIG, Some(broken));
    assert!(e.contains("field `private_key`"), "{e}");
    assert!(!e.contains(pem.lines().nth(1).unwrap()), "the error quotes the key: {e}");
    let e = load_error(CONFIG, Some("{\"type\": \"service_account\", \"private_key\": \"x".into()));
    assert!(e.contains("is not a JSON object") && !e.contains("private_key\": \"x"), "{e}");
    // Exactly one source; the fields of the source are checked by name.
    let both = CONFIG.replace(
        r#""google_service_account""#,
        r#""google_metadata": {"cluster": "gcp_metadata"}, "google_service_account""#,
    );
    let e = load_error(&both, Some(key_file_json("https://o/t")));
    assert!(e.contains("exactly one"), "{e}");
    let bad_timeout = CONFIG.replace(r#""cluster": "google_oauth2""#, r#""cluster": "google_oauth2", "timeout_ms": 5"#);
    let e = load_error(&bad_timeout, Some(key_file_json("https://o/t")));
    assert!(e.contains(&format!("{field}.timeout_ms")), "{e}");
    // The catalog's Debug never shows the key.
    let shown = format!("{:?}", configured().catalog);
    assert!(!shown.contains(pem.lines().nth(1).unwrap()) && shown.contains("<redacted>"));
}
