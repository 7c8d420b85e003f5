//! A bounded fault soak in `make test` (the longer one is `make soak`): 2,000 requests at 16
//! connections through Envoy (`--concurrency 2`) against six providers that each answer only
//! 70 % of requests normally.

use switchyard_integration::soak::{run, SoakConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_holds_under_a_fault_soak() {
    let cfg = SoakConfig { requests: 2_000, concurrency: 16, seed: 7, ok_share: 0.7 };
    let report = run(&cfg).await.unwrap();
    println!("{}", report.summary());
    let shown: Vec<&String> = report.violations.iter().take(20).collect();
    assert!(report.violations.is_empty(), "{} violations, first ones: {shown:#?}", report.violations.len());
    assert_eq!(report.answered, report.requests, "every request gets exactly one answer");
    assert_eq!(report.retry_overflows, 0, "Envoy refused failovers");
    assert!(
        report.healthy_success_rate() >= 0.999,
        "success with a healthy allowed endpoint: {:.4}",
        report.healthy_success_rate()
    );
    // The mix exercises each class (guards against a generator that stopped injecting faults).
    assert!(report.with_healthy >= 1_000, "{}", report.summary());
    assert!(report.without_healthy >= 10 && report.cut_risk >= 10, "{}", report.summary());
    assert!(report.cut_risk_error_event >= 1, "{}", report.summary());
    assert!(report.attempts > report.requests * 5 / 4, "faults caused failovers: {}", report.summary());
}
