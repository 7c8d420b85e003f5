//! `make render`: every deployment file rendered from the catalog, in one place, so the CLI
//! and the stale-file test produce exactly the same bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::catalog::Catalog;
use crate::envoy::{bootstrap, to_yaml};
use crate::istio::render_k8s;

/// The module path written into `envoy/switchyard.yaml` (relative to the repository root).
pub const WASM_RELATIVE: &str = "target/wasm32-wasip1/release/switchyard.wasm";

/// (path relative to the repository root, content) of every rendered file. `image_digest` is the
/// OCI image's manifest digest (the `sha256` of the Wasm configs).
pub fn render_all(c: &Catalog, image_digest: &str) -> Vec<(String, String)> {
    let cfg = c.envoy_stack(PathBuf::from(WASM_RELATIVE), &BTreeMap::new());
    let keys: Vec<String> = c.env_keys().iter().map(|k| format!("{k}=...")).collect();
    let envoy = format!(
        "# Switchyard in front of real providers: one DNS + TLS cluster per provider (SNI, certificate checked\n\
         # against the system CA bundle and the host name, HTTP/2 by ALPN where the provider offers it).\n\
         # Generated from catalog/switchyard.json by `make render`; do not edit.\n\
         # Run from the repository root after `make wasm`:\n\
         #   {} .venv/bin/envoy -c envoy/switchyard.yaml\n",
        keys.join(" ")
    ) + &to_yaml(&bootstrap(&cfg));
    let mut files = vec![("envoy/switchyard.yaml".to_string(), envoy)];
    for (path, text) in render_k8s(c, &cfg, image_digest) {
        files.push((format!("k8s/{path}"), text));
    }
    // The rate limit service's limits, when the catalog has `rate_limits` (envoyproxy/ratelimit's
    // format; JSON is YAML).
    if let Some(limits) = crate::ratelimit::service_config(&cfg.plugin_config) {
        let text = serde_json::to_string_pretty(&limits).unwrap_or_default();
        files.push((
            "envoy/ratelimit.yaml".to_string(),
            format!("# The rate limit service's limits, from catalog/switchyard.json's rate_limits by `make render`.\n{text}\n"),
        ));
    }
    files
}

/// What the committed files (`k8s/`) carry where the image digest goes: the digest follows every
/// module build, so the committed files are templates and `make render` writes the deployable
/// copy, with the digest of the image `make image` builds from the module, to `DEPLOY_DIR`.
pub const DIGEST_PLACEHOLDER: &str = "image-digest-written-by-make-render-into-target-deploy";

/// Where `make render` writes the deployable files (the digest filled in).
pub const DEPLOY_DIR: &str = "target/deploy";
