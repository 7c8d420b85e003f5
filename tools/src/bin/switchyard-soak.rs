//! `make soak`: a longer fault soak (default 20,000 requests at 32 connections) with the same
//! checks as the bounded test, plus Envoy's memory before and after.
//!
//! Usage: switchyard-soak [--requests N] [--concurrency N] [--seed N] [--ok-share F]

use switchyard_integration::soak::{run, SoakConfig};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let cfg = SoakConfig {
        requests: arg("--requests", 20_000),
        concurrency: arg("--concurrency", 32),
        seed: arg("--seed", 1),
        ok_share: arg("--ok-share", 0.7),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard-soak: {e}");
            std::process::exit(2);
        }
    };
    let report = match rt.block_on(run(&cfg)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("switchyard-soak: {e}");
            std::process::exit(2);
        }
    };
    println!("{cfg:?}\n{}", report.summary());
    for v in report.violations.iter().take(20) {
        println!("violation: {v}");
    }
    let rss_growth_mib = report.rss_end_kib.saturating_sub(report.rss_start_kib) / 1024;
    let ok = report.violations.is_empty()
        && report.answered == report.requests
        && report.retry_overflows == 0
        && report.healthy_success_rate() >= 0.999
        && rss_growth_mib < 64;
    println!("{}", if ok { "SOAK PASSED" } else { "SOAK FAILED" });
    std::process::exit(if ok { 0 } else { 1 });
}
