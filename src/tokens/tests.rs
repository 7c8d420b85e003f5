use super::azure::IdParam;
use super::google::{valid_scope, valid_service_account};
use super::*;

fn source() -> TokenSource {
    TokenSource {
        cluster: "gcp_metadata".into(),
        timeout_ms: 5_000,
        identity: Identity::Google { service_account: "default".into(), scopes: vec![CLOUD_PLATFORM_SCOPE.into()] },
    }
}

fn azure_source(user_assigned: Option<(IdParam, &str)>) -> TokenSource {
    TokenSource {
        cluster: "azure_imds".into(),
        timeout_ms: 5_000,
        identity: Identity::Azure {
            resource: azure::COGNITIVE_SERVICES_RESOURCE.into(),
            user_assigned: user_assigned.map(|(p, v)| (p, v.to_string())),
        },
    }
}

#[test]
fn an_hour_token_is_refreshed_at_two_thirds_and_used_until_ten_seconds_before_expiry() {
    let life = 3_600_000;
    assert_eq!(refresh_at(1_000, life), 1_000 + 2_400_000);
    assert_eq!(usable_until(1_000, life), 1_000 + 3_590_000);
}

#[test]
fn a_ten_minute_token_is_refreshed_five_minutes_before_expiry() {
    // 2/3 would be 400 s; 5 minutes before expiry (300 s) is sooner.
    assert_eq!(refresh_at(0, 600_000), 300_000);
}

#[test]
fn a_short_token_is_refreshed_at_half_its_life_never_at_once() {
    // 5 minutes before a 6 s token's expiry is in the past: half its life instead.
    assert_eq!(refresh_at(10_000, 6_000), 13_000);
    assert_eq!(usable_until(10_000, 6_000), 15_000);
    // Never within a second, whatever the server says.
    assert_eq!(refresh_at(0, 1_000), MIN_REFRESH_MS);
    // Every refresh comes before the token stops being usable, for every life from 2 s up.
    for life_s in 2..=7_200u64 {
        let life = life_s * 1000;
        assert!(refresh_at(0, life) < usable_until(0, life), "life {life_s} s");
        assert!(usable_until(0, life) < life, "life {life_s} s");
    }
}

#[test]
fn failures_back_off_doubling_up_to_ten_seconds() {
    let b: Vec<u64> = (1..=8).map(backoff_ms).collect();
    assert_eq!(b, [500, 1_000, 2_000, 4_000, 8_000, 10_000, 10_000, 10_000]);
    assert_eq!(backoff_ms(u32::MAX), MAX_BACKOFF_MS);
}

#[test]
fn the_record_round_trips_and_foreign_bytes_read_as_none() {
    let r = TokenRecord {
        token: "ya29.a0-tok_en".into(),
        expires_at_ms: 10,
        usable_until_ms: 9,
        refresh_at_ms: 8,
        lease_until_ms: 7,
        failures: 3,
    };
    assert_eq!(TokenRecord::decode(&r.encode()), Some(r.clone()));
    assert_eq!(TokenRecord::decode(&TokenRecord::default().encode()), Some(TokenRecord::default()));
    assert_eq!(TokenRecord::decode(b""), None);
    assert_eq!(TokenRecord::decode(&r.encode()[..20]), None);
    let mut v2 = r.encode();
    v2[0] = 2;
    assert_eq!(TokenRecord::decode(&v2), None);
}

#[test]
fn a_token_is_usable_only_before_its_time() {
    let r = fetched("t".into(), 6, 1_000);
    assert_eq!(r.usable(1_000), Some("t"));
    assert_eq!(r.usable(5_999), Some("t"));
    assert_eq!(r.usable(6_000), None);
    // Past the margin a request is not planned on it, but an attempt of one planned before
    // still sends it until it expires.
    assert_eq!(r.unexpired(6_999), Some("t"));
    assert_eq!(r.unexpired(7_000), None);
    assert_eq!(TokenRecord::default().usable(0), None);
    assert_eq!(TokenRecord::default().unexpired(0), None);
}

#[test]
fn one_lease_at_a_time_and_only_when_due() {
    let now = 100_000;
    // No record yet: leased.
    let leased = take_lease(None, now, 5_000).unwrap();
    assert_eq!(leased.lease_until_ms, now + 5_000 + LEASE_MARGIN_MS);
    // Leased by another worker: nobody else fetches until the lease runs out.
    assert_eq!(take_lease(Some(&leased), now + 1, 5_000), None);
    assert_eq!(take_lease(Some(&leased), now + 5_999, 5_000), None);
    // The fetcher died: after the lease, another takes over.
    assert!(take_lease(Some(&leased), now + 6_000, 5_000).is_some());
    // A fresh token: nothing to do before its refresh time, then a lease that keeps the token.
    let fresh = fetched("t".into(), 3_600, now);
    assert_eq!(take_lease(Some(&fresh), now + 2_399_999, 5_000), None);
    let renew = take_lease(Some(&fresh), now + 2_400_000, 5_000).unwrap();
    assert_eq!(renew.token, "t");
    assert_eq!(renew.usable(now + 2_400_000), Some("t"));
}

#[test]
fn a_failure_keeps_the_token_and_schedules_the_retry() {
    let now = 50_000;
    let fresh = fetched("t".into(), 6, now);
    let f1 = failed(Some(&fresh), now + 3_000);
    assert_eq!((f1.failures, f1.refresh_at_ms, f1.lease_until_ms), (1, now + 3_500, 0));
    assert_eq!(f1.usable(now + 4_000), Some("t"));
    let f2 = failed(Some(&f1), now + 3_500);
    assert_eq!(f2.refresh_at_ms, now + 4_500);
    // A success starts over.
    assert_eq!(fetched("u".into(), 6, now + 4_500).failures, 0);
    // No token at all: none usable, a retry scheduled.
    let none = failed(None, now);
    assert_eq!((none.usable(now), none.refresh_at_ms), (None, now + 500));
}

#[test]
fn the_metadata_request_asks_for_the_account_and_scopes() {
    let s = source();
    assert_eq!(
        s.path(),
        "/computeMetadata/v1/instance/service-accounts/default/token?scopes=https://www.googleapis.com/auth/cloud-platform"
    );
    let s = TokenSource {
        identity: Identity::Google {
            service_account: "vertex@proj.iam.gserviceaccount.com".into(),
            scopes: vec![CLOUD_PLATFORM_SCOPE.into(), "https://www.googleapis.com/auth/userinfo.email".into()],
        },
        ..source()
    };
    let path = s.path();
    assert_eq!(
        path,
        "/computeMetadata/v1/instance/service-accounts/vertex@proj.iam.gserviceaccount.com/token?scopes=https://www.googleapis.com/auth/cloud-platform,https://www.googleapis.com/auth/userinfo.email"
    );
    let h = s.request_headers(&path);
    assert!(h.contains(&("metadata-flavor", "Google")));
    assert!(h.contains(&(":method", "GET")));
    assert!(h.contains(&(":authority", "metadata.google.internal")));
    assert_ne!(source().key(), s.key());
}

#[test]
fn account_and_scope_names_cannot_escape_the_path_or_query() {
    for ok in ["default", "a@b.iam.gserviceaccount.com", "x_y-z"] {
        assert!(valid_service_account(ok), "{ok}");
    }
    for bad in ["", "../token", "a/b", "a?b", "a b", ".hidden", "a%2F"] {
        assert!(!valid_service_account(bad), "{bad}");
    }
    assert!(valid_scope(CLOUD_PLATFORM_SCOPE));
    for bad in ["", "a,b", "a&x=1", "a b", "a#", "a\n"] {
        assert!(!valid_scope(bad), "{bad:?}");
    }
}

#[test]
fn the_answer_is_parsed_strictly() {
    let parse_answer = |status, body| source().parse_answer(status, body);
    let ok = br#"{"access_token":"ya29.c.abc-_.~+/=","expires_in":3599,"token_type":"Bearer"}"#;
    assert_eq!(parse_answer(200, ok), Ok(("ya29.c.abc-_.~+/=".into(), 3599)));
    assert_eq!(parse_answer(200, br#"{"access_token":"t","expires_in":6}"#), Ok(("t".into(), 6)));
    assert_eq!(parse_answer(0, ok), Err(FetchError::Unreachable));
    assert_eq!(parse_answer(404, ok), Err(FetchError::Status));
    assert_eq!(parse_answer(503, b""), Err(FetchError::Status));
    for bad in [
        &br#"{"access_token":"","expires_in":6}"#[..],
        br#"{"access_token":"a b","expires_in":6}"#,
        br#"{"access_token":"a\r\nx-injected: 1","expires_in":6}"#,
        br#"{"access_token":"t","expires_in":0}"#,
        br#"{"access_token":"t","expires_in":-5}"#,
        br#"{"access_token":"t"}"#,
        br#"{"access_token":"t","expires_in":6,"token_type":"MAC"}"#,
        b"not json",
        b"",
    ] {
        assert_eq!(parse_answer(200, bad), Err(FetchError::Malformed), "{}", String::from_utf8_lossy(bad));
        assert_eq!(azure_source(None).parse_answer(200, bad), Err(FetchError::Malformed));
    }
    let long = format!(r#"{{"access_token":"{}","expires_in":6}}"#, "a".repeat(9000));
    assert_eq!(parse_answer(200, long.as_bytes()), Err(FetchError::Malformed));
}

#[test]
fn the_imds_request_names_the_audience_and_the_user_assigned_identity() {
    let system = azure_source(None);
    let path = system.path();
    assert_eq!(
        path,
        "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://cognitiveservices.azure.com"
    );
    let h = system.request_headers(&path);
    assert_eq!(
        h,
        [(":method", "GET"), (":path", path.as_str()), (":authority", "169.254.169.254"), ("metadata", "true")]
    );
    let by_client = azure_source(Some((IdParam::ClientId, "11111111-2222-3333-4444-555555555555")));
    assert!(by_client.path().ends_with("&client_id=11111111-2222-3333-4444-555555555555"), "{}", by_client.path());
    let res_id = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/sy";
    let by_res = azure_source(Some((IdParam::MsiResId, res_id)));
    assert!(by_res.path().ends_with(&format!("&msi_res_id={res_id}")));
    // One record per identity and audience, none shared with Google's.
    let keys = [system.key(), by_client.key(), by_res.key(), source().key()];
    for (i, k) in keys.iter().enumerate() {
        assert!(keys.iter().skip(i + 1).all(|o| o != k), "{keys:?}");
    }
    assert_eq!(system.field(), "azure_managed_identity");
    assert_eq!(source().field(), "google_metadata");
    assert!(by_client.who().contains("client_id=11111111"));
}

#[test]
fn identities_and_resources_cannot_escape_the_query() {
    assert!(IdParam::ClientId.valid("11111111-2222-3333-4444-55555555aaAA"));
    assert!(IdParam::ObjectId.valid("11111111-2222-3333-4444-555555555555"));
    for bad in ["", "1111-2222", "11111111-2222-3333-4444-55555555555g", "11111111-2222-3333-4444-555555555555&x=1"] {
        assert!(!IdParam::ClientId.valid(bad), "{bad}");
    }
    assert!(
        IdParam::MsiResId.valid("/subscriptions/s/resourceGroups/rg(1).x/providers/M.MI/userAssignedIdentities/a_b")
    );
    for bad in ["", "subscriptions/s", "/subscriptions/s&resource=x", "/subscriptions/s#", "/subscriptions/a b"] {
        assert!(!IdParam::MsiResId.valid(bad), "{bad}");
    }
    assert!(azure::valid_resource(azure::COGNITIVE_SERVICES_RESOURCE));
    assert!(azure::valid_resource("https://ai.azure.com/"));
    for bad in
        ["", "https://", "http://cognitiveservices.azure.com", "https://x&client_id=y", "https://x?y", "https://x y"]
    {
        assert!(!azure::valid_resource(bad), "{bad}");
    }
}

#[test]
fn the_imds_answer_has_its_times_as_strings() {
    let parse = |status, body: &[u8]| azure_source(None).parse_answer(status, body);
    // As IMDS writes it: every time a string of seconds.
    let imds = br#"{"access_token":"eyJ0eXAiOiJKV1Qi.eyJhdWQiOiJo.c2ln","refresh_token":"","expires_in":"86399","expires_on":"1765170000","not_before":"1765083300","resource":"https://cognitiveservices.azure.com","token_type":"Bearer"}"#;
    assert_eq!(parse(200, imds), Ok(("eyJ0eXAiOiJKV1Qi.eyJhdWQiOiJo.c2ln".into(), 86_399)));
    // A number is taken too; a short life as it is.
    assert_eq!(parse(200, br#"{"access_token":"t","expires_in":6,"token_type":"Bearer"}"#), Ok(("t".into(), 6)));
    assert_eq!(parse(0, imds), Err(FetchError::Unreachable));
    // IMDS's errors: 400 identity not found, 429 throttled, 500.
    for status in [400, 404, 429, 500] {
        assert_eq!(
            parse(status, br#"{"error":"invalid_request","error_description":"Identity not found"}"#),
            Err(FetchError::Status)
        );
    }
    for bad in [
        &br#"{"access_token":"t","expires_in":"soon","token_type":"Bearer"}"#[..],
        br#"{"access_token":"t","expires_in":"0","token_type":"Bearer"}"#,
        br#"{"access_token":"t","expires_in":"-5","token_type":"Bearer"}"#,
        br#"{"access_token":"t","expires_on":"1765170000","token_type":"Bearer"}"#,
        br#"{"access_token":"t","expires_in":"60","token_type":"PoP"}"#,
        br#"{"access_token":"a\r\nx: 1","expires_in":"60"}"#,
    ] {
        assert_eq!(parse(200, bad), Err(FetchError::Malformed), "{}", String::from_utf8_lossy(bad));
    }
}
