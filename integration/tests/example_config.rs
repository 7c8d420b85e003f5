//! The committed example Envoy configuration is exactly what the generator produces, and
//! Envoy 1.40 accepts it.

use std::process::Command;

use switchyard_integration::demo::example_yaml;
use switchyard_integration::envoy::{envoy_binary, repo_root};

#[test]
fn committed_example_matches_the_generator_and_validates() {
    let path = repo_root().join("envoy/switchyard-demo.yaml");
    let committed = std::fs::read_to_string(&path).unwrap();
    // The whole file, header included: the header says how to run it (tests/demo.rs runs it so).
    let generated = example_yaml("target/wasm32-wasip1/release/switchyard.wasm".into());
    assert!(
        committed == generated,
        "envoy/switchyard-demo.yaml is stale: regenerate it with `switchyard-demo --print-config`"
    );
    let out = Command::new(envoy_binary())
        .current_dir(repo_root())
        .args(["--mode", "validate", "-c", "envoy/switchyard-demo.yaml", "--base-id", "31977", "--disable-hot-restart"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && log.contains("OK"), "{log}");
}
