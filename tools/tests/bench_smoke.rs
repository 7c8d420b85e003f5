//! `make bench`'s pieces work together: a very short run of the real bench binary (its mock and
//! load generator processes, plain Envoy, the Switchyard full path from the generator the tests
//! use; no LiteLLM, no breakdown rows, no RSS pass) serves requests on every row, JSON and SSE,
//! and counts no error. Nothing here is timed: speed is `make bench`'s business.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_short_bench_run_serves_every_row_without_errors() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out_file = root.join(format!(".work/bench-smoke-{}.md", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-bench"))
        .env("BENCH_SECONDS", "0.3")
        .env("BENCH_IDLE_SECONDS", "0.2")
        .env("BENCH_WARMUP_SECONDS", "0.1")
        .env("BENCH_ROUNDS", "1")
        .env("BENCH_SIZES", "1024")
        .env("BENCH_BREAKDOWN", "0")
        .env("BENCH_LITELLM", "0")
        .env("BENCH_RSS", "0")
        .env("BENCH_OUT", &out_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start switchyard-bench");
    // Bounded: the run takes a few seconds; stop exactly this process if it hangs.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("switchyard-bench did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let report = std::fs::read_to_string(&out_file).unwrap_or_default();
    let _ = std::fs::remove_file(&out_file);
    assert!(status.success(), "switchyard-bench failed ({status}); report:\n{report}");

    for load in ["1 KB", "1 KB SSE"] {
        for row in [
            "direct to the mock",
            "plain Envoy",
            "Switchyard full path",
            "Switchyard translated",
            "Switchyard Responses",
        ] {
            let line = report
                .lines()
                .find(|l| l.starts_with(&format!("| {load} | {row}")))
                .unwrap_or_else(|| panic!("no row {row:?} for {load:?} in:\n{report}"));
            let cols: Vec<&str> = line.split('|').map(str::trim).collect();
            let rps: f64 = cols[3].parse().unwrap_or(0.0);
            let errors: u64 = cols[cols.len() - 2].parse().unwrap_or(u64::MAX);
            assert!(rps > 0.0, "{load} / {row} served nothing: {line}");
            assert_eq!(errors, 0, "{load} / {row} counted errors: {line}\n{report}");
        }
    }
    // The Switchyard row went through the filter: its CPU column compares with plain Envoy's.
    assert!(report.contains("Envoy CPU per request at 1 KB"), "no targets section:\n{report}");
}
