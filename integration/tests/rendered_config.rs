//! The files rendered from the catalog (`envoy/switchyard.yaml`, `k8s/`) are current, and Envoy
//! every Envoy of the support matrix accepts the real-provider and demo configurations (with the
//! filter loaded and configured).

use std::process::Command;

use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::envoy::{envoy_release, repo_root, ENVOY_MATRIX};
use switchyard_integration::render::{render_all, DIGEST_PLACEHOLDER};

#[test]
fn committed_rendered_files_are_current() {
    let catalog = Catalog::load(&default_catalog_path()).unwrap();
    // The committed files carry the digest placeholder (the deployable copy, with the digest,
    // goes to target/deploy): a module rebuild changes nothing committed.
    let files = render_all(&catalog, DIGEST_PLACEHOLDER);
    assert!(files.iter().any(|(p, _)| p == "envoy/switchyard.yaml"));
    assert!(files.iter().any(|(p, _)| p == "k8s/egress-gateway/switchyard.yaml"));
    let mut stale = Vec::new();
    for (path, text) in &files {
        let committed = std::fs::read_to_string(repo_root().join(path)).unwrap_or_default();
        if committed != *text {
            stale.push(path.clone());
        }
    }
    assert!(stale.is_empty(), "stale rendered files (run `make render` and commit): {stale:?}");
}

/// The catalog's Azure OpenAI resource is rendered everywhere a provider is: its cluster (plain
/// Envoy), its ServiceEntry and DestinationRule (Istio), and on Istio its key injected by SDS in
/// Azure's `api-key` header, bare (no `Bearer `).
#[test]
fn azure_is_rendered_with_its_cluster_and_api_key_injection() {
    let catalog = Catalog::load(&default_catalog_path()).unwrap();
    let host = "switchyard-eastus2.openai.azure.com";
    let cluster = format!("outbound|443||{host}");
    let files = render_all(&catalog, DIGEST_PLACEHOLDER);
    let file = |path: &str| files.iter().find(|(p, _)| p == path).map(|(_, t)| t.as_str()).unwrap_or_default();
    let envoy = file("envoy/switchyard.yaml");
    assert!(envoy.contains(&cluster), "no Azure cluster in envoy/switchyard.yaml");
    assert!(envoy.contains("AZURE_OPENAI_API_KEY"), "the key's environment variable");
    let providers = file("k8s/egress-gateway/providers.yaml");
    assert!(providers.contains(host), "no Azure ServiceEntry in k8s/egress-gateway/providers.yaml");
    let gateway = file("k8s/egress-gateway/switchyard.yaml");
    let patch_of = format!("match: {{cluster: {{name: \"{cluster}\"}}");
    let at = gateway.find(&patch_of).unwrap_or_else(|| panic!("no Azure cluster patch in the gateway's EnvoyFilter"));
    let rest = &gateway[at + patch_of.len()..];
    let patch = &rest[..rest.find("match:").unwrap_or(rest.len())];
    assert!(patch.contains("api-key") && patch.contains("credential_injector"), "{patch}");
    assert!(!patch.contains("header_value_prefix"), "Azure's key goes bare: {patch}");
}

/// The catalog's Vertex AI provider is rendered as every provider is (a TLS cluster to the real
/// host, its ServiceEntry on Istio) and takes its access tokens from the metadata server
/// (`credential.google_metadata`): the metadata server's plain-HTTP cluster at 169.254.169.254
/// losing `x-forwarded-for` (which the server refuses), in both renderings, and no key injector
/// or key variable for Vertex (the per-attempt filter puts the token on each attempt).
#[test]
fn vertex_is_rendered_with_its_cluster_and_the_metadata_server() {
    let catalog = Catalog::load(&default_catalog_path()).unwrap();
    let host = "aiplatform.googleapis.com";
    let cluster = format!("outbound|443||{host}");
    let files = render_all(&catalog, DIGEST_PLACEHOLDER);
    let file = |path: &str| files.iter().find(|(p, _)| p == path).map(|(_, t)| t.as_str()).unwrap_or_default();
    let metadata_cluster = |text: &str| {
        let at = text.find("name: gcp_metadata").unwrap_or_else(|| panic!("no metadata server cluster"));
        let around = &text[at.saturating_sub(400)..(at + 900).min(text.len())];
        assert!(around.contains("address: 169.254.169.254, port_value: 80"), "{around}");
        assert!(around.contains("remove: x-forwarded-for"), "{around}");
    };
    let envoy = file("envoy/switchyard.yaml");
    assert!(envoy.contains(&format!("sni: {host}")), "no TLS cluster to Vertex in envoy/switchyard.yaml");
    assert!(envoy.contains(r#""google_metadata": {"#), "Vertex's token source");
    assert!(!envoy.contains("GOOGLE_VERTEX"), "no key variable for Vertex");
    metadata_cluster(envoy);
    assert!(file("k8s/egress-gateway/providers.yaml").contains(host), "no Vertex ServiceEntry");
    for variant in ["egress-gateway", "sidecar"] {
        let text = file(&format!("k8s/{variant}/switchyard.yaml"));
        metadata_cluster(text);
        let patch_of = format!("match: {{cluster: {{name: \"{cluster}\"}}");
        let at = text.find(&patch_of).unwrap_or_else(|| panic!("no Vertex cluster patch in the {variant} EnvoyFilter"));
        let rest = &text[at + patch_of.len()..];
        let patch = &rest[..rest.find("match:").unwrap_or(rest.len())];
        assert!(patch.contains("switchyard-upstream"), "Vertex's per-attempt filter: {patch}");
        assert!(!patch.contains("credential_injector"), "no key injector for Vertex: {patch}");
    }
}

/// The committed configurations (real providers, and the demo) are accepted by every Envoy of
/// the support matrix, with the filter loaded and configured.
#[test]
fn real_provider_config_validates_in_envoy() {
    let catalog = Catalog::load(&default_catalog_path()).unwrap();
    for version in ENVOY_MATRIX {
        for file in ["envoy/switchyard.yaml", "envoy/switchyard-demo.yaml"] {
            let mut cmd = Command::new(envoy_release(version));
            cmd.current_dir(repo_root()).args([
                "--mode",
                "validate",
                "-c",
                file,
                "--base-id",
                "31978",
                "--disable-hot-restart",
            ]);
            for k in catalog.env_keys() {
                cmd.env(k, "validation-placeholder");
            }
            let out = cmd.output().unwrap_or_else(|e| panic!("Envoy {version}: {e} (run `make envoy-matrix`)"));
            let log = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && log.contains("OK"), "Envoy {version}, {file}: {log}");
        }
    }
}

/// A catalog with `rate_limits` (the service written by `host` and `port`): every Envoy of the
/// matrix accepts the rendering with the service's HTTP/2 cluster, and the filter loads the
/// plugin configuration naming it; the service's limits are rendered beside it.
#[test]
fn a_catalog_with_mesh_limits_renders_and_validates_in_envoy() {
    use switchyard_integration::envoy::{bootstrap, to_yaml, work_dir};
    let path = default_catalog_path();
    let mut raw: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    raw["rate_limits"] = serde_json::json!({
        "service": {"host": "ratelimit.limits.svc.cluster.local", "port": 8081, "failure_mode": "open"},
        "limits": {"all-tokens": {"tokens": 1000000, "window": "minute"}},
        "share_cooldowns": true
    });
    let catalog = Catalog::parse(&raw.to_string()).unwrap();
    let files = render_all(&catalog, DIGEST_PLACEHOLDER);
    let limits = files.iter().find(|(p, _)| p == "envoy/ratelimit.yaml").expect("envoy/ratelimit.yaml rendered");
    assert!(limits.1.contains("all-tokens") && limits.1.contains("switchyard_cooldown"), "{}", limits.1);
    let cfg =
        catalog.envoy_stack(repo_root().join("target/wasm32-wasip1/release/switchyard.wasm"), &Default::default());
    let yaml = to_yaml(&bootstrap(&cfg));
    assert!(yaml.contains("outbound|8081||ratelimit.limits.svc.cluster.local"), "no service cluster");
    let file = work_dir("mesh-limits-render").join("switchyard.yaml");
    std::fs::write(&file, yaml).unwrap();
    validates_on_the_matrix(&catalog, &file, "31979");
}

/// `envoy --mode validate` of `file` passes on every Envoy of the matrix (the catalog's
/// environment keys set to placeholders).
fn validates_on_the_matrix(catalog: &Catalog, file: &std::path::Path, base_id: &str) {
    for version in ENVOY_MATRIX {
        let mut cmd = Command::new(envoy_release(version));
        cmd.args(["--mode", "validate", "-c"]).arg(file).args(["--base-id", base_id, "--disable-hot-restart"]);
        for k in catalog.env_keys() {
            cmd.env(k, "validation-placeholder");
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("Envoy {version}: {e} (run `make envoy-matrix`)"));
        let log = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && log.contains("OK"), "Envoy {version}, {}: {log}", file.display());
    }
}

/// Tracing (the OpenTelemetry tracer, upstream spans, the GenAI custom tags) and the JSON access
/// log, as the generator renders them, are accepted by every Envoy of the matrix: the custom
/// tags' `value` formatters and the JSON log's `%FILTER_STATE%` fields included, and what types
/// its numbers (`%TYPED_CEL(...)%`, the Lua filter, `%DYNAMIC_METADATA(...)%`).
#[test]
fn tracing_and_the_json_access_log_validate_in_envoy() {
    use switchyard_integration::envoy::{bootstrap, to_yaml, work_dir, AccessLog, Tracing};
    let catalog = Catalog::load(&default_catalog_path()).unwrap();
    let mut cfg =
        catalog.envoy_stack(repo_root().join("target/wasm32-wasip1/release/switchyard.wasm"), &Default::default());
    cfg.access_log = AccessLog::Json;
    cfg.tracing = Some(Tracing {
        collector: ("otel-collector.observability.svc.cluster.local".into(), 4317),
        service_name: "switchyard".into(),
        sampling_percent: 1.0,
    });
    let boot = bootstrap(&cfg);
    let yaml = to_yaml(&boot);
    assert!(yaml.contains("envoy.tracers.opentelemetry") && yaml.contains("gen_ai.usage.input_tokens"));
    assert!(yaml.contains("%TYPED_CEL(int(") && yaml.contains("%DYNAMIC_METADATA(switchyard.log:"), "{yaml}");
    assert!(yaml.contains("switchyard.typed_log_numbers"), "{yaml}");
    let file = work_dir("tracing-render").join("switchyard.yaml");
    std::fs::write(&file, yaml).unwrap();
    validates_on_the_matrix(&catalog, &file, "31980");
}
