//! RS256 and service-account key files against fixed vectors: the test-only key in
//! `testdata/` and the signature `openssl dgst -sha256 -sign` made of `testdata/message.txt`.

use super::rsa::RsaKey;
use super::service_account::{parse_key_file, ServiceAccountKey};
use super::*;
use crate::protocol::base64;

const KEY_PEM: &str = include_str!("testdata/test-only-sa-key.pem");
const MESSAGE: &[u8] = include_bytes!("testdata/message.txt");
const SIGNATURE_HEX: &str = include_str!("testdata/message.sig.hex");

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A key file as Google issues it (fields the filter ignores included), with the test key.
pub fn key_file_json(token_uri: &str) -> String {
    serde_json::json!({
        "type": "service_account",
        "project_id": "proj",
        "private_key_id": "0123456789abcdef0123456789abcdef01234567",
        "private_key": KEY_PEM,
        "client_email": "router@proj.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
    })
    .to_string()
}

fn key() -> ServiceAccountKey {
    parse_key_file(&key_file_json("https://oauth2.googleapis.com/token")).unwrap()
}

#[test]
fn rs256_matches_openssl_byte_for_byte() {
    let k = RsaKey::from_pkcs8_pem(KEY_PEM).unwrap();
    assert_eq!(k.bits(), 2048);
    assert_eq!(hex(&k.sign(MESSAGE).unwrap()), SIGNATURE_HEX.trim());
    // Another message, another signature (the digest is in it).
    assert_ne!(hex(&k.sign(b"other").unwrap()), SIGNATURE_HEX.trim());
}

#[test]
fn a_broken_key_is_refused_naming_what_is_wrong() {
    use super::der::KeyError;
    assert_eq!(RsaKey::from_pkcs8_pem("not a key").unwrap_err(), KeyError::Pem);
    let rsa1 = KEY_PEM.replace("PRIVATE KEY", "RSA PRIVATE KEY");
    assert_eq!(RsaKey::from_pkcs8_pem(&rsa1).unwrap_err(), KeyError::Pem);
    // A byte flipped inside the base64: the DER or the factors no longer hold.
    let body_start = KEY_PEM.find('\n').unwrap() + 40;
    let mut flipped = KEY_PEM.to_string();
    let c = if flipped.get(body_start..=body_start) == Some("A") { "B" } else { "A" };
    flipped.replace_range(body_start..=body_start, c);
    assert!(RsaKey::from_pkcs8_pem(&flipped).is_err());
    // Truncated.
    let cut = format!("{}\n-----END PRIVATE KEY-----\n", KEY_PEM.get(..400).unwrap());
    assert_eq!(RsaKey::from_pkcs8_pem(&cut).unwrap_err(), KeyError::Der);
}

#[test]
fn a_key_files_debug_never_prints_the_key() {
    let k = key();
    let shown = format!("{k:?}");
    assert!(shown.contains("router@proj.iam.gserviceaccount.com") && shown.contains("<redacted>"), "{shown}");
    let body_line = KEY_PEM.lines().nth(1).unwrap();
    assert!(!shown.contains(body_line));
}

#[test]
fn key_file_fields_are_checked_by_name() {
    let good: serde_json::Value = serde_json::from_str(&key_file_json("https://oauth2.googleapis.com/token")).unwrap();
    let with = |field: &str, v: serde_json::Value| {
        let mut j = good.clone();
        j[field] = v;
        parse_key_file(&j.to_string()).unwrap_err().0
    };
    assert_eq!(with("type", "authorized_user".into()), "type");
    assert_eq!(with("client_email", "".into()), "client_email");
    assert_eq!(with("private_key_id", "has space".into()), "private_key_id");
    assert_eq!(with("token_uri", "ftp://x/token".into()), "token_uri");
    assert_eq!(
        with("private_key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----".into()),
        "private_key"
    );
    assert_eq!(parse_key_file("{not json").unwrap_err().0, "");
    // The error of a broken key never quotes it.
    let (_, reason) = parse_key_file(&key_file_json("https://o/t").replace("MII", "XII")).unwrap_err();
    assert!(!reason.contains("XII"), "{reason}");
}

#[test]
fn the_assertion_is_a_signed_jwt_for_the_token_uri() {
    let k = key();
    let scopes = vec![CLOUD_PLATFORM_SCOPE.to_string()];
    let jwt = k.assertion(&scopes, 1_700_000_000).unwrap();
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3);
    let decode = |s: &str| {
        let std = s.replace('-', "+").replace('_', "/");
        base64::decode(&std).unwrap()
    };
    let header: serde_json::Value = serde_json::from_slice(&decode(parts[0])).unwrap();
    assert_eq!(header, serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": k.private_key_id}));
    let claims: serde_json::Value = serde_json::from_slice(&decode(parts[1])).unwrap();
    assert_eq!(
        claims,
        serde_json::json!({
            "iss": "router@proj.iam.gserviceaccount.com",
            "scope": CLOUD_PLATFORM_SCOPE,
            "aud": "https://oauth2.googleapis.com/token",
            "iat": 1_700_000_000u64,
            "exp": 1_700_003_600u64,
        })
    );
    // The signature is RS256 of the signing input with the file's key.
    let signing_input = format!("{}.{}", parts[0], parts[1]);
    let want = RsaKey::from_pkcs8_pem(KEY_PEM).unwrap().sign(signing_input.as_bytes()).unwrap();
    assert_eq!(decode(parts[2]), want);
    let body = String::from_utf8(k.request_body(&scopes, 1_700_000_000).unwrap()).unwrap();
    assert_eq!(body, format!("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={jwt}"));
}

#[test]
fn the_source_posts_to_the_token_uri_and_reads_googles_answer() {
    let s = TokenSource {
        cluster: "google_oauth2".into(),
        timeout_ms: 5_000,
        identity: Identity::GoogleServiceAccount { key: Arc::new(key()), scopes: vec![CLOUD_PLATFORM_SCOPE.into()] },
    };
    assert_eq!(s.field(), "google_service_account");
    let path = s.path();
    assert_eq!(
        s.request_headers(&path),
        [
            (":method", "POST"),
            (":path", "/token"),
            (":authority", "oauth2.googleapis.com"),
            ("content-type", "application/x-www-form-urlencoded")
        ]
    );
    assert!(s.key().starts_with("sy/token/gsa/google_oauth2/router@proj.iam.gserviceaccount.com/"));
    assert!(!s.request_body(1_700_000_000_000).unwrap().is_empty());
    let answer = br#"{"access_token":"ya29.k","expires_in":3599,"token_type":"Bearer"}"#;
    assert_eq!(s.parse_answer(200, answer), Ok(("ya29.k".to_string(), 3599)));
    assert!(!format!("{s:?}").contains("BEGIN PRIVATE KEY"));
}

/// Measurement, not an assertion: `cargo test --release -p switchyard rs256_signing_time --
/// --ignored --nocapture` prints the time of one signature natively.
#[test]
#[ignore]
fn rs256_signing_time() {
    let k = RsaKey::from_pkcs8_pem(KEY_PEM).unwrap();
    let n = 50;
    let start = std::time::Instant::now();
    for i in 0..n {
        assert!(k.sign(format!("m{i}").as_bytes()).is_some());
    }
    println!("RS256 2048-bit sign (CRT + check): {:?} each", start.elapsed() / n);
}
