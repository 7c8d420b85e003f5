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
    files
}

/// The text with every `sha256: <64 hex>` replaced by a placeholder: the image digest follows
/// the module build, so committed files are compared without it (the image test checks it).
pub fn mask_digests(text: &str) -> String {
    text.lines()
        .map(|l| match l.split_once("sha256: ") {
            Some((head, tail))
                if tail.trim_matches('"').len() == 64
                    && tail.trim_matches('"').chars().all(|c| c.is_ascii_hexdigit()) =>
            {
                format!("{head}sha256: <digest>\n")
            }
            _ => format!("{l}\n"),
        })
        .collect()
}
