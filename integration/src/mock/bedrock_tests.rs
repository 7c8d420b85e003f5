use super::*;
use serde_json::Value;

/// Requests botocore signed (`testdata/make_sigv4.py`).
const SIGNED: &str = include_str!("testdata/sigv4.json");

struct Case {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    now: i64,
}

fn cases() -> Vec<Case> {
    let v: Value = serde_json::from_str(SIGNED).unwrap();
    assert_eq!((v["access_key"].as_str(), v["secret_key"].as_str()), (Some(ACCESS_KEY), Some(SECRET_KEY)));
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            method: c["method"].as_str().unwrap().into(),
            path: c["path"].as_str().unwrap().into(),
            headers: c["headers"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().into()))
                .collect(),
            body: c["body"].as_str().unwrap().as_bytes().to_vec(),
            now: amz_date_seconds(c["now"].as_str().unwrap()).unwrap(),
        })
        .collect()
}

fn check(c: &Case) -> Result<(), Refusal> {
    let signed = Signed { method: &c.method, path: &c.path, query: "", headers: &c.headers, body: &c.body };
    verify(&signed, "us-east-1", "bedrock", c.now)
}

fn set(c: &mut Case, name: &str, value: Option<&str>) {
    c.headers.retain(|(k, _)| k != name);
    if let Some(v) = value {
        c.headers.push((name.into(), v.into()));
    }
}

#[test]
fn hmac_is_rfc_4231() {
    assert_eq!(
        hex(&hmac(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(amz_date_seconds("19700101T000000Z"), Some(0));
    assert_eq!(amz_date_seconds("20261206T231500Z"), Some(1_796_598_900));
}

#[test]
fn botocores_signatures_pass_and_anything_changed_fails_as_aws_says() {
    let all = cases();
    assert!(all.len() >= 2);
    for c in &all {
        assert_eq!(check(c), Ok(()), "{}", c.path);
    }
    let refused = |change: &dyn Fn(&mut Case)| {
        let mut c = cases().remove(1);
        change(&mut c);
        check(&c).map_err(|(status, kind, _)| (status, kind))
    };
    let invalid = Err((403, "InvalidSignatureException"));
    assert_eq!(refused(&|c| c.body.push(b' ')), invalid, "the body is signed");
    assert_eq!(refused(&|c| c.path = c.path.replace("%3A", ":")), invalid, "the path as sent is signed");
    assert_eq!(refused(&|c| c.path = c.path.replace("invoke-with-response-stream", "invoke")), invalid);
    assert_eq!(refused(&|c| c.method = "PUT".into()), invalid);
    assert_eq!(refused(&|c| set(c, "x-amz-security-token", Some("other"))), invalid);
    assert_eq!(refused(&|c| set(c, "host", Some("bedrock-runtime.us-west-2.amazonaws.com"))), invalid);
    assert_eq!(refused(&|c| c.now += 301), invalid, "more than 5 minutes late");
    assert_eq!(refused(&|c| c.now += 299), Ok(()));
    assert_eq!(refused(&|c| set(c, "x-amz-content-sha256", Some("UNSIGNED-PAYLOAD"))), invalid);
    let unknown = |c: &mut Case| {
        let auth =
            c.headers.iter().find(|(k, _)| k == "authorization").unwrap().1.replace(ACCESS_KEY, "AKIDSOMEONEELSE00000");
        set(c, "authorization", Some(&auth));
    };
    assert_eq!(refused(&unknown), Err((403, "UnrecognizedClientException")));
    assert_eq!(refused(&|c| set(c, "authorization", None)), Err((403, "MissingAuthenticationTokenException")));
    // HTTP/2: host as :authority.
    let h2 = |c: &mut Case| {
        let host = c.headers.iter().find(|(k, _)| k == "host").unwrap().1.clone();
        set(c, "host", None);
        set(c, ":authority", Some(&host));
    };
    assert_eq!(refused(&h2), Ok(()));
    // The message of a bad signature quotes the canonical request (the filter must cut it).
    let mut c = cases().remove(0);
    c.body.push(b' ');
    assert!(check(&c).unwrap_err().2.contains("The Canonical String for this request should have been"));
}

#[test]
fn streams_are_event_streams_the_filter_decodes() {
    use switchyard::providers::bedrock::stream::Converter;
    assert_eq!(
        model_of("/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke-with-response-stream"),
        Some(("us.anthropic.claude-sonnet-4-20250514-v1:0".into(), true))
    );
    assert_eq!(model_of("/model/x/converse"), None);
    let body = stream_body("claude-x", "Hello", None);
    let sse = String::from_utf8(Converter::new().feed(&body)).unwrap();
    assert!(
        sse.starts_with("event: message_start\n")
            && sse.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
        "{sse}"
    );
    let cut = stream_body("claude-x", "Hello", Some(("throttlingException", "slow down")));
    let sse = String::from_utf8(Converter::new().feed(&cut)).unwrap();
    assert!(sse.contains("event: error") && sse.contains("rate_limit_error"), "{sse}");
    assert_eq!(invalid_body(br#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":1,"messages":[]}"#), None);
    for bad in [
        &br#"{"anthropic_version":"bedrock-2023-05-31","model":"x"}"#[..],
        br#"{"anthropic_version":"bedrock-2023-05-31","stream":true}"#,
        br#"{"max_tokens":1}"#,
        b"{",
    ] {
        assert!(invalid_body(bad).is_some(), "{}", String::from_utf8_lossy(bad));
    }
}
