//! The floor rows the probe and `make bench` measure beside the full path: plain Envoy plus the
//! least a proxy-wasm body router does (`integration/floor-module`), with or without the
//! answer side. One place builds the module and its bootstrap, so both tools measure the same.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use switchyard_integration::envoy::repo_root;

/// The floor module, built (release, wasm32-wasip1, its own target directory) when missing;
/// `PROBE_FLOOR_WASM` names another build.
pub fn floor_module() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("PROBE_FLOOR_WASM") {
        return Ok(PathBuf::from(p));
    }
    let root = repo_root();
    let module = root.join("target/floor/wasm32-wasip1/release/floor_module.wasm");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-q", "--release", "--target", "wasm32-wasip1", "--manifest-path"])
        .arg(root.join("integration/floor-module/Cargo.toml"))
        .arg("--target-dir")
        .arg(root.join("target/floor"))
        .status()
        .map_err(|e| format!("building the floor module: {e}"))?;
    if !status.success() || !module.exists() {
        return Err("the floor module did not build".into());
    }
    Ok(module)
}

/// `plain` with the floor filter first: `answer` also holds and rewrites the response.
pub fn floor_bootstrap(plain: &Value, module: &std::path::Path, answer: bool) -> Result<Value, String> {
    let mut b = plain.clone();
    let hcm = b
        .pointer_mut("/static_resources/listeners/0/filter_chains/0/filters/0/typed_config")
        .ok_or("no HTTP connection manager in the plain bootstrap")?;
    let filters = hcm["http_filters"].as_array_mut().ok_or("no http_filters")?;
    let configuration = if answer { "answer" } else { "" };
    filters.insert(
        0,
        json!({"name": "envoy.filters.http.wasm", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
        "config": {"name": "floor", "root_id": "floor", "allow_on_headers_stop_iteration": true,
            "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": configuration},
            "vm_config": {"vm_id": "floor", "runtime": "envoy.wasm.runtime.v8",
                          "code": {"local": {"filename": module.to_string_lossy()}}}}}}),
    );
    Ok(b)
}
