//! Mesh-wide limits: configuration errors name the field, which limits apply to whom, the
//! descriptors, settlement arithmetic and the pending charges.

use std::collections::HashMap;

use super::*;
use crate::config::Catalog;
use crate::routing::policy::Policies;

const CATALOG: &str = r#"{
  "providers": {
    "alpha": {"cluster": "c_alpha", "authority": "a"},
    "beta": {"cluster": "c_beta", "authority": "b"}
  },
  "models": {"m/a": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}},
  "policies": {"search": {}, "finance": {}},
  "policy_selection": {"trusted_headers": ["x-team"], "rules": [{"policy": "finance", "route": "finance"}], "default": "search"}
}"#;

fn with(rate_limits: &str) -> String {
    CATALOG.replacen("\"policies\"", &format!("\"rate_limits\": {rate_limits},\n  \"policies\""), 1)
}

fn compile(json: &str) -> Result<MeshLimits, ConfigError> {
    let catalog = Catalog::from_json(json.as_bytes(), &|_| None).expect("catalog");
    let policies = Policies::from_json(json.as_bytes(), &catalog).expect("policies");
    MeshLimits::from_json(json.as_bytes(), &catalog, &policies)
}

const SERVICE: &str = r#""service": {"cluster": "rls"}"#;

#[test]
fn absent_means_no_limits_and_no_service() {
    assert_eq!(compile(CATALOG).unwrap(), MeshLimits::default());
}

#[test]
fn limits_compile_with_their_defaults() {
    let l = compile(&with(&format!(
        r#"{{{SERVICE}, "limits": {{
            "search-spend": {{"policy": "search", "per": "policy", "spend_usd": 200, "window": "day"}},
            "team-tokens": {{"per": {{"header": "X-Team"}}, "tokens": 2000000, "window": "minute", "failure_mode": "closed"}},
            "claims": {{"per": {{"jwt_claim": {{"claim": ["org", "team"]}}}}, "requests": 5, "window": "second"}}
          }},
          "capacity": {{"alpha": {{"requests_per_minute": 600}}}}, "share_cooldowns": true}}"#
    )))
    .unwrap();
    assert_eq!(
        l.service,
        Some(Service {
            cluster: "rls".into(),
            domain: "switchyard".into(),
            timeout_ms: 50,
            target: grpc_target("rls")
        })
    );
    let by_name: HashMap<&str, &Limit> = l.limits.iter().map(|x| (x.name.as_str(), x)).collect();
    let spend = by_name["search-spend"];
    assert_eq!(
        (spend.kind, spend.amount, spend.window, spend.fail_closed),
        (Kind::Spend, 2_000_000, Window::Day, false)
    );
    assert_eq!(spend.per, Subject::Policy);
    let team = by_name["team-tokens"];
    assert_eq!((team.per.clone(), team.fail_closed), (Subject::Header("x-team".into()), true));
    assert_eq!(
        by_name["claims"].per,
        Subject::JwtClaim {
            namespace: "envoy.filters.http.jwt_authn".into(),
            payload_key: "jwt_payload".into(),
            path: vec!["org".into(), "team".into()]
        }
    );
    assert_eq!(
        l.capacity,
        vec![Capacity { provider: "alpha".into(), requests_per_minute: Some(600), tokens_per_minute: None }]
    );
    assert!(l.share_cooldowns && l.tracks_provider("alpha") && l.tracks_provider("beta"));
    // Requests without max_tokens are admitted for routing.expected_completion_tokens by default.
    assert_eq!(l.default_completion_tokens, 256);
    let set = compile(&with(&format!(r#"{{{SERVICE}, "default_completion_tokens": 1000}}"#))).unwrap();
    assert_eq!(set.default_completion_tokens, 1000);
}

#[test]
fn configuration_errors_name_the_field() {
    let cases = [
        (r#"{"service": {"cluster": ""}}"#, "rate_limits.service.cluster"),
        (r#"{"service": {"cluster": "c_alpha"}}"#, "rate_limits.service.cluster"),
        (r#"{"service": {"cluster": "r", "timeout_ms": 0}}"#, "rate_limits.service.timeout_ms"),
        (r#"{"service": {"cluster": "r", "failure_mode": "maybe"}}"#, "rate_limits.service.failure_mode"),
        (r#"{"service": {"cluster": "r"}, "default_completion_tokens": 0}"#, "rate_limits.default_completion_tokens"),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"requests": 1, "tokens": 2, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"]",
        ),
        (r#"{"service": {"cluster": "r"}, "limits": {"a": {"window": "day"}}}"#, "rate_limits.limits[\"a\"]"),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"requests": 1, "window": "week"}}}"#,
            "rate_limits.limits[\"a\"].window",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"requests": 0, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"].requests",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"spend_usd": 500000, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"].spend_usd",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"spend_usd": -1, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"].spend_usd",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"policy": "nope", "requests": 1, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"].policy",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"per": {"header": "x-any"}, "requests": 1, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"].per.header",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"per": "ip", "requests": 1, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"].per",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"per": {"jwt_claim": {"claim": ""}}, "requests": 1, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"].per.jwt_claim.claim",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a": {"per": {"jwt_claim": {"claim": "t", "value": "x"}}, "requests": 1, "window": "day"}}}"#,
            "rate_limits.limits[\"a\"].per.jwt_claim",
        ),
        (
            r#"{"service": {"cluster": "r"}, "limits": {"a b": {"requests": 1, "window": "day"}}}"#,
            "rate_limits.limits[\"a b\"]",
        ),
        (
            r#"{"service": {"cluster": "r"}, "capacity": {"nope": {"requests_per_minute": 1}}}"#,
            "rate_limits.capacity[\"nope\"]",
        ),
        (r#"{"service": {"cluster": "r"}, "capacity": {"alpha": {}}}"#, "rate_limits.capacity[\"alpha\"]"),
        (
            r#"{"service": {"cluster": "r"}, "capacity": {"alpha": {"tokens_per_minute": 0}}}"#,
            "rate_limits.capacity[\"alpha\"].tokens_per_minute",
        ),
    ];
    for (rl, field) in cases {
        let e = compile(&with(rl)).expect_err(rl);
        assert_eq!(e.field, field, "{rl}: {e}");
    }
    let unknown = compile(&with(r#"{"service": {"cluster": "r"}, "budgets": {}}"#)).unwrap_err();
    assert!(unknown.reason.contains("budgets"), "{unknown}");
}

struct Facts(HashMap<&'static str, &'static str>);

impl CallerFacts for Facts {
    fn route_policy(&mut self) -> Option<String> {
        None
    }
    fn peer_uri_san(&mut self) -> Option<String> {
        self.0.get("san").map(|s| s.to_string())
    }
    fn dynamic_metadata(&mut self, namespace: &str, path: &[String]) -> Option<String> {
        (namespace == "jwt" && path.join(".") == "p.team").then(|| self.0.get("claim").map(|s| s.to_string())).flatten()
    }
    fn header(&mut self, name: &str) -> Option<String> {
        self.0.get(name).map(|s| s.to_string())
    }
}

#[test]
fn which_limits_apply_and_whose_counter_they_charge() {
    let l = compile(&with(&format!(
        r#"{{{SERVICE}, "limits": {{
            "a-all": {{"requests": 10, "window": "minute"}},
            "b-search": {{"policy": "search", "per": "policy", "tokens": 10, "window": "minute"}},
            "c-team": {{"per": {{"header": "x-team"}}, "tokens": 10, "window": "minute"}},
            "d-san": {{"per": "peer_uri_san", "requests": 10, "window": "minute"}},
            "e-claim": {{"per": {{"jwt_claim": {{"namespace": "jwt", "payload_key": "p", "claim": "team"}}}}, "requests": 1, "window": "hour"}}
          }}}}"#
    )))
    .unwrap();
    let subjects = |policy: Option<&str>, facts: &[(&'static str, &'static str)]| -> Vec<(String, String)> {
        l.applicable(policy, &mut Facts(facts.iter().copied().collect()))
            .iter()
            .map(|a| (l.limit(a).unwrap().name.clone(), a.subject.clone()))
            .collect()
    };
    let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    };
    assert_eq!(
        subjects(Some("search"), &[("x-team", "blue"), ("san", "spiffe://a"), ("claim", "red")]),
        s(&[("a-all", "all"), ("b-search", "search"), ("c-team", "blue"), ("d-san", "spiffe://a"), ("e-claim", "red")])
    );
    // Another policy skips the search-only limit; missing identities share one counter.
    assert_eq!(
        subjects(Some("finance"), &[]),
        s(&[("a-all", "all"), ("c-team", UNIDENTIFIED), ("d-san", UNIDENTIFIED), ("e-claim", UNIDENTIFIED)])
    );
    let long: &'static str = Box::leak("x".repeat(300).into_boxed_str());
    assert_eq!(subjects(None, &[("x-team", long)])[1], ("c-team".to_string(), UNIDENTIFIED.to_string()));
    assert_eq!(limit_descriptor("a", "b"), vec![(LIMIT_KEY.into(), "a".into()), (SUBJECT_KEY.into(), "b".into())]);
    assert_eq!(capacity_descriptor("alpha", Kind::Tokens)[1], (KIND_KEY.to_string(), "tokens".to_string()));
}

#[test]
fn admission_reserves_the_estimate_and_settlement_counts_the_use() {
    assert_eq!(reservation(Kind::Requests, 500, 1.0), 1);
    assert_eq!(reservation(Kind::Tokens, 500, 1.0), 500);
    assert_eq!(reservation(Kind::Tokens, 0, 0.0), 1, "a call adds at least one");
    assert_eq!(reservation(Kind::Spend, 0, 0.01231), 124, "spend rounds up");
    assert_eq!(reservation(Kind::Spend, 0, f64::NAN), 1);
    assert_eq!(reservation(Kind::Tokens, u64::MAX, 0.0), u64::from(u32::MAX));
    assert_eq!(used(Kind::Requests, 500, 1.0), 0.0);
    assert_eq!(used(Kind::Tokens, 500, 1.0), 500.0);
    assert!((used(Kind::Spend, 0, 0.0123) - 123.0).abs() < 1e-9);
    assert_eq!(used(Kind::Spend, 0, -5.0), 0.0);
}

/// A lease as `Ledger::lease` returns it.
fn lease(credit: u64, credit_until_ms: u64, hits: u64) -> Lease {
    Lease { credit, credit_until_ms, hits }
}

#[test]
fn a_chunk_lease_admits_n_requests_with_one_call() {
    let mut l = Ledger::default();
    let a = limit_descriptor("a", "x");
    // The first reservation knows nothing of the counter: exactly its 100 units.
    assert_eq!(l.lease(&a, 100, 1_000_000, 0), lease(0, 0, 100));
    l.counted(&a, 0, Some(999_900), 60_000, 5);
    // The next, 10 ms later: the worker used 100 units in 10 ms, so it leases a second of that
    // (10,000 units; under 1,000,000 / 64 and 999,900 / 8): one call for this request and the
    // next 99.
    assert_eq!(l.lease(&a, 100, 1_000_000, 10), lease(0, 0, 10_000));
    l.counted(&a, 9_900, Some(989_900), 60_010, 12);
    let local = (0..99).filter(|_| l.lease(&a, 100, 1_000_000, 20) == lease(100, 60_010, 0)).count();
    assert_eq!(local, 99, "99 requests admitted from the chunk, no call");
    assert_eq!(l.credit(&a, 20), 0);
    // Used up: the next leases again, its size from the use since the last lease.
    assert_eq!(l.lease(&a, 100, 1_000_000, 20), lease(0, 0, 15_625), "100 x 100 units in 10 ms: capped at 1/64");
    // A worker that used little leases little: 1 unit a second is the request's own.
    let b = limit_descriptor("b", "x");
    assert_eq!(l.lease(&b, 1, 1_000, 0), lease(0, 0, 1));
    l.counted(&b, 0, Some(999), 60_000, 0);
    assert_eq!(l.lease(&b, 1, 1_000, 1_000), lease(0, 0, 1));
}

#[test]
fn the_chunk_shrinks_near_the_end_of_the_budget() {
    let mut l = Ledger::default();
    let a = limit_descriptor("a", "x");
    let mut at = 0;
    let mut chunk = |l: &mut Ledger, remaining: u32| {
        // A busy worker (100 units every millisecond) whose credit is used up.
        l.counted(&a, 0, Some(remaining), 3_600_000, at);
        at += 1;
        let got = l.lease(&a, 100, 1_000_000, at);
        assert_eq!(got.credit, 0);
        got.hits
    };
    assert_eq!(chunk(&mut l, 1_000_000), 100, "nothing used yet: exactly the reservation");
    assert_eq!(chunk(&mut l, 900_000), 15_625, "a budget's 1/64 while plenty remains");
    assert_eq!(chunk(&mut l, 80_000), 10_000, "then 1/8 of what remains");
    assert_eq!(chunk(&mut l, 8_000), 1_000);
    assert_eq!(chunk(&mut l, 1_000), 125);
    assert_eq!(chunk(&mut l, 700), 100, "the last 800 units: exactly the reservation");
    assert_eq!(chunk(&mut l, 100), 100);
}

#[test]
fn a_refused_chunk_falls_back_to_the_exact_estimate() {
    let mut l = Ledger::default();
    let a = limit_descriptor("a", "x");
    assert_eq!(l.lease(&a, 100, 1_000_000, 0).hits, 100);
    l.counted(&a, 0, Some(500_000), 60_000, 0);
    assert_eq!(l.lease(&a, 100, 1_000_000, 1).hits, 15_625, "a chunk");
    // The service refused it: leases are exact until the window resets...
    l.refused(&a, 60_000, 2);
    assert_eq!(l.lease(&a, 100, 1_000_000, 3), lease(0, 0, 100));
    assert_eq!(l.lease(&a, 100, 1_000_000, 59_999), lease(0, 0, 100));
    // ...after which the counter is unknown (exact) until the service says what remains.
    assert_eq!(l.lease(&a, 100, 1_000_000, 60_000), lease(0, 0, 100));
    l.counted(&a, 0, Some(1_000_000), 120_000, 60_000);
    assert!(l.lease(&a, 100, 1_000_000, 60_001).hits > 100);
    // A service that says no remaining count (Limitador's server) is always asked exactly.
    let b = limit_descriptor("b", "x");
    for at in 0..10 {
        assert_eq!(l.lease(&b, 100, 1_000_000, at), lease(0, 0, 100));
        l.counted(&b, 0, None, 60_000, at);
    }
}

#[test]
fn credits_expire_with_the_window_and_settlement_nets_against_them() {
    let mut l = Ledger::default();
    let a = limit_descriptor("a", "x");
    assert_eq!(l.lease(&a, 100, 1_000_000, 0).hits, 100);
    l.counted(&a, 0, Some(999_000), 10_000, 0);
    // A request reserved 300 and used 180: 120 credit until its window ends at 10 s.
    assert_eq!(l.settle(&a, -120.0, 10_000, 1_000), 0);
    assert_eq!(l.credit(&a, 1_000), 120);
    // The next reservation of 100 is admitted from it; one of 100 more takes the 20 left and
    // leases the rest.
    assert_eq!(l.lease(&a, 100, 1_000_000, 2_000), lease(100, 10_000, 0));
    let more = l.lease(&a, 100, 1_000_000, 2_000);
    assert_eq!((more.credit, more.credit_until_ms), (20, 10_000));
    // An answer over its reservation is charged from the credit first; what it does not cover
    // is owed, sent in whole units (fractions wait).
    l.counted(&a, 50, Some(990_000), 10_000, 2_000);
    assert_eq!(l.settle(&a, 30.0, 0, 3_000), 0, "30 of the 50 credit");
    assert_eq!(l.settle(&a, 22.5, 0, 3_000), 2, "20 from the credit, 2 owed, the half waits");
    assert_eq!(l.settle(&a, 0.5, 0, 3_000), 1);
    // A credit is not carried into the next window, nor added once that window is over.
    assert_eq!(l.settle(&a, -50.0, 10_000, 4_000), 0);
    assert_eq!(l.credit(&a, 9_999), 50);
    assert_eq!(l.credit(&a, 10_000), 0);
    assert_eq!(l.lease(&a, 100, 1_000_000, 10_000), lease(0, 0, 100), "the window reset: exact");
    l.counted(&a, 500, Some(999_000), 10_000, 10_001);
    assert_eq!(l.settle(&a, -50.0, 10_000, 10_001), 0);
    assert_eq!(l.credit(&a, 10_002), 0, "a lease counted in a window that is over is no credit");
    // A refused reservation gives back the credit it took, in its window.
    l.give_back(&a, 40, 20_000, 11_000);
    assert_eq!(l.lease(&a, 30, 1_000_000, 11_000), lease(30, 20_000, 0));
    l.give_back(&a, 30, 20_000, 21_000);
    assert_eq!(l.credit(&a, 21_000), 0);
    assert_eq!(l.settle(&a, f64::NAN, 0, 0), 0);
    // Bounded: at the cap, the counters holding under a unit make room for new ones.
    for i in 0..5000 {
        l.settle(&limit_descriptor("c", &i.to_string()), 0.5, 0, 0);
    }
    assert_eq!(l.settle(&limit_descriptor("new", "x"), 3.0, 0, 0), 3);
}

#[test]
fn pending_sums_per_descriptor_and_carries_fractions_and_credits() {
    let mut p = Pending::default();
    let a = limit_descriptor("a", "x");
    let b = limit_descriptor("b", "x");
    p.add(a.clone(), 2.5);
    p.add(a.clone(), 2.75);
    p.add(b.clone(), -1.0);
    p.add(b.clone(), f64::NAN);
    assert_eq!(p.drain(), vec![(a.clone(), 5)]);
    // a keeps 0.25, b owes 1: the next charges are net of both.
    p.add(a.clone(), 0.75);
    p.add(b.clone(), 3.0);
    assert_eq!(p.drain(), vec![(a.clone(), 1), (b.clone(), 2)]);
    assert!(p.is_empty() && p.drain().is_empty());
    // Bounded: at the cap, carried fractions make room for new descriptors.
    for i in 0..5000 {
        p.add(limit_descriptor("c", &i.to_string()), 0.5);
    }
    p.add(limit_descriptor("new", "x"), 3.0);
    assert_eq!(p.drain(), vec![(limit_descriptor("new", "x"), 3)]);
}

#[test]
fn cooldown_slots_cover_retry_after_capped() {
    assert_eq!(cooldown_slots(1000, 12), 200..=202);
    assert_eq!(cooldown_slots(1003, 1), 200..=200);
    assert_eq!(cooldown_slots(1000, 0), 200..=200);
    assert_eq!(cooldown_slots(1000, 100_000), 200..=259);
    assert_eq!(cooldown_descriptor("alpha", 7)[1], (SLOT_KEY.to_string(), "7".to_string()));
}

#[test]
fn the_grpc_target_names_the_cluster_and_an_authority_http2_servers_accept() {
    // GrpcService { envoy_grpc { cluster_name: "rls", authority: "rls" } }
    assert_eq!(grpc_target("rls").as_bytes(), [0x0a, 10, 0x0a, 3, b'r', b'l', b's', 0x12, 3, b'r', b'l', b's']);
    // Istio's cluster of a Service: the authority is the host, without the `|`.
    let t = grpc_target("outbound|8081||ratelimit.limits.svc.cluster.local");
    let b = t.as_bytes();
    assert_eq!((b[0], b[2], b[3] as usize), (0x0a, 0x0a, "outbound|8081||ratelimit.limits.svc.cluster.local".len()));
    let host = "ratelimit.limits.svc.cluster.local";
    assert!(t.ends_with(&format!("\u{12}{}{host}", char::from(host.len() as u8))), "{t:?}");
    // Too long for one-byte lengths: the bare cluster name (Envoy reads it as one).
    let long = "c".repeat(130);
    assert_eq!(grpc_target(&long), long);
}
