//! The committed example Envoy configuration is exactly what the generator produces, and
//! Envoy 1.40 accepts it.

use std::process::Command;

use switchyard_integration::demo::example_config;
use switchyard_integration::envoy::{bootstrap, envoy_binary, repo_root, to_yaml};

#[test]
fn committed_example_matches_the_generator_and_validates() {
    let path = repo_root().join("envoy/switchyard-demo.yaml");
    let committed = std::fs::read_to_string(&path).unwrap();
    let body: String = committed.lines().skip_while(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    let generated = to_yaml(&bootstrap(&example_config("target/wasm32-wasip1/release/switchyard.wasm".into())));
    assert!(
        body == generated,
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
