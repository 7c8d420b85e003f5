//! The rendered Istio manifests against what each Istio release builds and registers (no istiod
//! or istio-proxy runs here, so their lists are vendored in `k8s/istio/`, each with its source
//! commit): every extension the EnvoyFilter names is compiled into that release's istio-proxy,
//! and every Any type in its patches is one istiod's validation webhook resolves. A type this test
//! does not know fails it: add it to `EXTENSION_OF` with the extension it belongs to. The
//! releases the README does not claim fail these checks for the stated reason.

use std::collections::BTreeSet;

use serde_json::Value;
use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::envoy::{repo_root, wasm_path, Build, ENVOY_REFUSED};
use switchyard_integration::istio::{envoy_filter, Variant, ISTIO_RELEASES, ISTIO_UNSUPPORTED};

/// The Envoy extension each Any type of the rendered patches belongs to ("core": compiled into
/// every Envoy, not in istio-proxy's extension list).
const EXTENSION_OF: [(&str, &str); 18] = [
    // SigV4 signing of an Amazon Bedrock provider's attempts (the shipped catalog's amazon-bedrock).
    (
        "envoy.extensions.filters.http.aws_request_signing.v3.AwsRequestSigning",
        "envoy.filters.http.aws_request_signing",
    ),
    ("envoy.extensions.filters.http.wasm.v3.Wasm", "envoy.filters.http.wasm"),
    // The metadata server's cluster drops `x-forwarded-for` (the shipped catalog's google-vertex).
    ("envoy.extensions.filters.http.header_mutation.v3.HeaderMutation", "envoy.filters.http.header_mutation"),
    // The native build's filters (`deployment.istio.build: native`).
    ("envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter", "envoy.filters.http.dynamic_modules"),
    // What enables the decision filter on Switchyard's routes (see `decision_filter_enabled`).
    ("envoy.extensions.filters.http.rbac.v3.RBACPerRoute", "envoy.filters.http.rbac"),
    ("envoy.extensions.filters.http.lua.v3.Lua", "envoy.filters.http.lua"),
    // What scopes the local-reply mappers to Switchyard's marked routes (see `route_mark_filter`).
    ("envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter", "envoy.access_loggers.extension_filters.cel"),
    (
        "envoy.extensions.filters.http.credential_injector.v3.CredentialInjector",
        "envoy.filters.http.credential_injector",
    ),
    ("envoy.extensions.http.injected_credentials.generic.v3.Generic", "envoy.http.injected_credentials.generic"),
    (
        "envoy.extensions.router.cluster_specifiers.matcher.v3.MatcherClusterSpecifier",
        "envoy.router.cluster_specifier_plugin.matcher",
    ),
    (
        "envoy.extensions.router.cluster_specifiers.matcher.v3.ClusterAction",
        "envoy.router.cluster_specifier_plugin.matcher",
    ),
    ("envoy.type.matcher.v3.HttpRequestHeaderMatchInput", "core"),
    ("envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec", "core"),
    ("envoy.extensions.filters.http.router.v3.Router", "core"),
    ("envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager", "core"),
    ("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "core"),
    ("envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext", "core"),
    ("google.protobuf.StringValue", "core"),
];

fn vendored(kind: &str, release: &str) -> BTreeSet<String> {
    let path = repo_root().join(format!("k8s/istio/{kind}-{release}.txt"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let source = lines.next().unwrap_or_default();
    assert!(
        source.starts_with('#') && source.contains(&format!("release-{release}")) || release == "master",
        "{}",
        path.display()
    );
    assert!(source.contains("commit"), "{}: the first line names its source commit", path.display());
    lines.filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect()
}

/// Every `@type` in the EnvoyFilter's patches.
fn types(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(t)) = o.get("@type") {
                out.insert(t.trim_start_matches("type.googleapis.com/").to_string());
            }
            // A local reply's JSON body template is text Envoy writes, not a message.
            o.iter().filter(|(k, _)| *k != "json_format").for_each(|(_, x)| types(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| types(x, out)),
        _ => {}
    }
}

/// What `release` would refuse or lack of the rendered EnvoyFilters (the Wasm build's).
fn problems(release: &str) -> Vec<String> {
    problems_of(release, Build::Wasm)
}

/// What `release` would refuse or lack of the EnvoyFilters rendered for `build`.
fn problems_of(release: &str, build: Build) -> Vec<String> {
    let mut catalog = Catalog::load(&default_catalog_path()).unwrap();
    catalog.istio.build = build;
    catalog.istio.native_image = Some("registry.example/switchyard/native:0.1.0".into());
    let cfg = catalog.envoy_stack(wasm_path(), &Default::default());
    let (extensions, registered) = (vendored("extensions", release), vendored("types", release));
    let mut out = Vec::new();
    for v in [Variant::EgressGateway, Variant::Sidecar] {
        let mut found = BTreeSet::new();
        types(&envoy_filter(&catalog, v, &cfg, &"ab".repeat(32))["spec"]["configPatches"], &mut found);
        for t in found {
            let Some((_, ext)) = EXTENSION_OF.iter().find(|(k, _)| *k == t) else {
                out.push(format!("{t}: unknown to this test (add it to EXTENSION_OF)"));
                continue;
            };
            if *ext != "core" && !extensions.contains(*ext) {
                out.push(format!("{ext} is not built"));
            }
            let package = t.rsplit_once('.').map_or("", |(p, _)| p);
            if !package.starts_with("google.protobuf") && !registered.contains(package) {
                out.push(format!("{t}: not registered with istiod"));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn every_extension_and_type_is_built_and_registered_by_each_claimed_release() {
    assert!(!ISTIO_RELEASES.is_empty());
    for (release, _) in ISTIO_RELEASES {
        assert_eq!(problems(release), Vec::<String>::new(), "Istio {release}");
        assert_eq!(problems_of(release, Build::Native), Vec::<String>::new(), "Istio {release}, native");
        // master (the next release) builds them too.
    }
    assert_eq!(problems("master"), Vec::<String>::new(), "istio master");
    assert_eq!(problems_of("master", Build::Native), Vec::<String>::new(), "istio master, native");
}

/// The native build needs Istio 1.31 whatever else a release has: istiod registers the
/// dynamic-module filter's type from 1.28 on, but istio-proxy builds the filter only from 1.31.
#[test]
fn the_native_build_needs_istio_1_31s_proxy() {
    for (release, _) in ISTIO_UNSUPPORTED {
        let found = problems_of(release, Build::Native);
        assert!(
            found.iter().any(|p| p == "envoy.filters.http.dynamic_modules is not built"),
            "Istio {release}: {found:?}"
        );
        assert!(!found.iter().any(|p| p.contains("not registered")), "Istio {release}: {found:?}");
    }
}

#[test]
fn unclaimed_releases_lack_what_the_readme_says() {
    for (release, why) in ISTIO_UNSUPPORTED {
        let found = problems(release);
        if why.contains("is not built") {
            assert!(found.iter().any(|p| p == why), "Istio {release}: {found:?}");
        } else {
            // Everything is built, but the release's Envoy (1.38) refuses the configuration at
            // load: the version-matrix test checks that on Envoy 1.38 itself.
            assert_eq!(found, Vec::<String>::new(), "Istio {release}");
            assert!(why.contains("Envoy 1.38") && ENVOY_REFUSED.iter().any(|v| v.starts_with("1.38.")), "{release}");
        }
    }
}
