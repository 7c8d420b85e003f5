//! The native build on Istio 1.31 (`deployment.istio.build: native`), from the rendered
//! manifests through the Istio model (`istio_sim`) to real Envoy 1.39.3 (istio-proxy 1.31's):
//! on every install path the library arrives by a Kubernetes image volume (the sidecar
//! template's `userVolume` annotations on an application pod, the Deployment overlay on both
//! gateway charts), the EnvoyFilter's inline dynamic-module filters load it from the mount, and
//! requests are routed and failed over through it to HTTPS mock providers. A library missing at
//! its path is refused by Envoy; without the decision filter, forged slot headers reach no
//! provider. Needs `make native` (the library) and `make envoy-matrix` (Envoy 1.39.3).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};
use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::catalog_mocks::{start_catalog_mocks, CatalogMocks};
use switchyard_integration::client::{post_json, send, Reply};
use switchyard_integration::envoy::{http_get, native_path, remove_http_filter, repo_root, Build, Envoy};
use switchyard_integration::istio::{first_attempt_providers, variant_manifests, Variant};
use switchyard_integration::istio_native::{library_path, LIBRARY_MOUNT, LIBRARY_VOLUME, USER_VOLUME_ANNOTATION};
use switchyard_integration::istio_sim::{
    install_native, install_proxy_from, istio_envoy, test_secret, Install, Proxy, Registry, APP_NAMESPACE,
};
use switchyard_integration::mock::MockProvider;
use switchyard_integration::oci::Image;

/// TLS mock providers for every catalog provider, the catalog pointed at them with the native
/// build, and the library image built from `make native`'s library.
struct Mesh {
    rt: tokio::runtime::Runtime,
    providers: BTreeMap<String, MockProvider>,
    local: Catalog,
    ca_file: String,
    library: Vec<u8>,
    image: Image,
}

fn native(mut c: Catalog) -> Catalog {
    c.istio.build = Build::Native;
    c.istio.native_image = Some("registry.example/switchyard/native:0.1.0".into());
    c
}

fn mesh(tag: &str) -> Mesh {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let catalog = Catalog::load(&default_catalog_path()).unwrap();
    let dir = repo_root().join(".work").join(format!("{tag}-{}", std::process::id()));
    let mocks = start_catalog_mocks(&rt, &catalog, &dir).unwrap();
    let mut local = native(mocks.local(&catalog));
    let CatalogMocks { ca_file, providers, .. } = mocks;
    local.istio.service_host = "switchyard.local".into();
    local.istio.sidecar_namespaces = vec![APP_NAMESPACE.into()];
    let library = std::fs::read(native_path()).expect("the native library (run `make native`)");
    let image = Image::from_library(&library);
    Mesh { rt, providers, local, ca_file: ca_file.to_string_lossy().into_owned(), library, image }
}

impl Mesh {
    fn install(&self, install: Install) -> Proxy {
        install_native(&self.local, install, &self.ca_file, &self.image, &test_secret(&self.local), &[])
            .unwrap_or_else(|e| panic!("{install:?}: {e}"))
    }

    fn start(&self, proxy: &Proxy, tag: &str) -> Result<Envoy, String> {
        Envoy::start_binary_with_args(&istio_envoy(), &proxy.boot, tag, &[], 1, &proxy.args)
    }

    fn chat(&self, envoy: &Envoy, id: &str, extra: &[(&str, &str)], body: Value) -> Reply {
        let mut h = vec![("x-test-id", id), ("authorization", "Bearer caller-secret")];
        h.extend_from_slice(extra);
        self.rt.block_on(post_json(envoy.addr(), "/v1/chat/completions", &h, &body)).unwrap()
    }
}

fn msg() -> Value {
    json!([{"role": "user", "content": "hello"}])
}

fn stat(admin: std::net::SocketAddr, name: &str) -> u64 {
    let (_, body) = http_get(admin, "/stats").unwrap();
    body.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Every `dynamic_module_config.module.local.filename` of a configuration.
fn module_files(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match v {
        Value::Object(o) => {
            if let Some(f) = o.get("dynamic_module_config").and_then(|m| m.pointer("/module/local/filename")) {
                out.push(f.as_str().unwrap_or_default().to_string());
            }
            o.values().for_each(|x| out.extend(module_files(x)));
        }
        Value::Array(a) => a.iter().for_each(|x| out.extend(module_files(x))),
        _ => {}
    }
    out
}

/// Each install path assembles from the native build's rendered manifests (no extension config;
/// the decision, per-attempt and first-attempt filters load the library from the image volume,
/// whose file is the built library byte for byte) and, on Envoy 1.39.3, routes a request and
/// fails one over through the native module: the provider gets its key from the mounted Secret
/// and none of the caller's secrets, and the module's metrics have the Wasm build's names.
#[test]
fn every_install_path_routes_and_fails_over_through_the_native_module() {
    let m = mesh("istio-native-paths");
    for install in Install::ALL {
        let proxy = m.install(install);
        assert!(proxy.extensions.is_empty(), "{install:?}: no ECDS on the native build");
        let files = module_files(&proxy.boot);
        let cfg = m.local.envoy_stack(PathBuf::from("unused.wasm"), &Default::default());
        let twins = first_attempt_providers(&m.local, &cfg).len();
        assert!(twins >= 4, "the catalog's single-API providers have first-attempt clusters");
        assert_eq!(files.len(), 1 + m.local.providers.len() + twins, "{install:?}: decision, attempts, first attempts");
        for f in &files {
            assert!(!f.starts_with(LIBRARY_MOUNT), "{install:?}: {f} was not mapped to the mounted volume");
            assert!(
                std::fs::read(f).unwrap() == m.library,
                "{install:?}: the mounted library differs from the built one"
            );
        }
        let envoy = m.start(&proxy, &format!("istio-native-{}", install.name())).unwrap();
        // The chain: Istio's filters, the native decision filter, the router.
        let (_, dump) = http_get(envoy.admin, "/config_dump?resource=static_listeners").unwrap();
        let dump: Value = serde_json::from_str(&dump).unwrap();
        let chain = &dump["configs"][0]["listener"]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"];
        let decision = chain.as_array().unwrap().iter().find(|f| f["name"] == "switchyard-decision").unwrap();
        assert_eq!(
            decision["typed_config"]["@type"],
            "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"
        );

        let id = format!("native-{}-route", install.name());
        let r = m.chat(&envoy, &id, &[], json!({"model": "openai/gpt-4.1-mini", "messages": msg()}));
        assert_eq!(r.status, 200, "{install:?}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("openai"), "{install:?}");
        let got = m.providers["openai"].received_for(&id);
        assert_eq!(got.len(), 1, "{install:?}");
        assert_eq!(got[0].header("authorization"), Some("Bearer key-for-OPENAI_API_KEY"), "{install:?}");
        assert_eq!(got[0].json()["model"], "gpt-4.1-mini", "{install:?}");
        assert_eq!(got[0].internal_headers(), vec![], "{install:?}: internal headers reached openai");
        assert!(got[0].headers.iter().all(|(_, v)| !v.contains("caller-secret")), "{install:?}");

        let id = format!("native-{}-failover", install.name());
        let body = json!({"model": "meta-llama/llama-3.3-70b-instruct", "messages": msg(),
                          "provider": {"order": ["groq", "together"]}});
        let r = m.chat(&envoy, &id, &[("x-mock-behavior", "groq=429")], body);
        assert_eq!(r.status, 200, "{install:?}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("together"), "{install:?}");
        assert_eq!(r.header("x-switchyard-attempts"), Some("2"), "{install:?}");
        assert_eq!(m.providers["groq"].received_for(&id).len(), 1, "{install:?}");
        let got = m.providers["together"].received_for(&id);
        assert_eq!(got.len(), 1, "{install:?}");
        assert_eq!(got[0].header("authorization"), Some("Bearer key-for-TOGETHER_API_KEY"), "{install:?}");
        // istio-proxy reads the next cluster from a header: an attempt that may be retried
        // carries the keyed token of the next one's cluster, and nothing else internal.
        assert_eq!(got[0].internal_headers_but_next_token(), vec![], "{install:?}");
        // The first attempt on groq's first-attempt cluster (the native first-attempt filter),
        // the retry on together's regular cluster (the native per-attempt filter).
        let groq = m.local.providers.iter().find(|p| p.slug == "groq").unwrap();
        let together = m.local.providers.iter().find(|p| p.slug == "together").unwrap();
        let first = m.providers["groq"].received_for(&id);
        assert_eq!(first[0].internal_headers_but_next_token(), vec![], "{install:?}");
        let keyed = switchyard::protocol::slots::keyed_slot_token(&m.local.istio.handoff_key, &together.cluster());
        assert_eq!(first[0].next_token(), Some(keyed.as_str()), "{install:?}: groq's attempt names together's cluster");
        assert_eq!(stat(envoy.admin, &format!("cluster.{}.upstream_rq_total", groq.first_attempt_cluster())), 1);
        assert_eq!(stat(envoy.admin, &format!("cluster.{}.upstream_rq_total", together.cluster())), 1);
        // The bootstrap override's runtime flag (a layer after Istio's): the module's metrics are
        // the Wasm build's Prometheus series, labelled by the override's rules.
        let (_, runtime) = http_get(envoy.admin, "/runtime").unwrap();
        let runtime: Value = serde_json::from_str(&runtime).unwrap();
        let flag = &runtime["entries"]["envoy.reloadable_features.dynamic_modules_strip_custom_stat_prefix"];
        assert_eq!(flag["final_value"], "true", "{install:?}: {runtime}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (_, prom) = http_get(envoy.admin, "/stats/prometheus").unwrap();
            let labelled = prom.lines().any(|l| {
                l.starts_with("switchyard_attempts_total{")
                    && l.contains("endpoint=\"together\"")
                    && l.contains("outcome=\"success\"")
            });
            if labelled {
                assert!(
                    !prom.contains("envoy_wasmcustom_switchyard"),
                    "{install:?}: the stats prefix was not stripped"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{install:?}: no labelled switchyard_attempts_total:\n{prom}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// The library missing at the configured path (an image without it, a runtime that mounted
/// nothing there): Envoy refuses the configuration that names it and does not start, so no
/// route runs without the decision filter.
#[test]
fn a_missing_library_is_refused_by_envoy() {
    let m = mesh("istio-native-missing");
    for install in [Install::HelmGateway, Install::Sidecar] {
        let proxy = m.install(install);
        let files = module_files(&proxy.boot);
        std::fs::remove_file(&files[0]).unwrap();
        let tag = format!("istio-native-missing-{}", install.name());
        let err = match m.start(&proxy, &tag) {
            Ok(envoy) => panic!("{install:?}: Envoy started without its library (admin {})", envoy.admin),
            Err(e) => e,
        };
        assert!(err.contains("envoy exited"), "{install:?}: {err}");
        assert!(err.contains("Failed to load dynamic module"), "{install:?}: {err}");
        assert!(err.contains("libswitchyard.so: cannot open shared object file"), "{install:?}: {err}");
    }
}

/// Points every dynamic module of `v` at `file`.
fn set_module_files(v: &mut Value, file: &str) -> usize {
    let mut n = 0;
    match v {
        Value::Object(o) => {
            if let Some(f) = o.get_mut("dynamic_module_config").and_then(|m| m.pointer_mut("/module/local/filename")) {
                *f = json!(file);
                n += 1;
            }
            o.values_mut().for_each(|x| n += set_module_files(x, file));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| n += set_module_files(x, file)),
        _ => {}
    }
    n
}

/// The same refusal on a running proxy, as istiod's pushes reach it: the listener served by LDS
/// (from a file here, over ADS from istiod), then an update whose decision filter names a library
/// that is not there. Envoy rejects the update (`listener_manager.lds.update_rejected`) and the
/// listener in use, with its decision filter, keeps routing.
#[test]
fn an_update_naming_a_missing_library_is_rejected_and_the_listener_in_use_stays() {
    let m = mesh("istio-native-lds");
    let mut proxy = m.install(Install::HelmGateway);
    let dir = switchyard_integration::envoy::work_dir("istio-native-lds-files");
    let lds = dir.join("lds.json");
    let write = |listeners: &Value, version: &str| {
        let resources: Vec<Value> = listeners
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let mut l = l.clone();
                l["@type"] = json!("type.googleapis.com/envoy.config.listener.v3.Listener");
                l
            })
            .collect();
        let tmp = dir.join("lds.tmp");
        std::fs::write(&tmp, json!({"version_info": version, "resources": resources}).to_string()).unwrap();
        std::fs::rename(&tmp, &lds).unwrap();
    };
    let listeners = proxy.boot["static_resources"]["listeners"].take();
    proxy.boot["static_resources"].as_object_mut().unwrap().remove("listeners");
    write(&listeners, "1");
    proxy.boot["dynamic_resources"] = json!({"lds_config": {
        "path_config_source": {"path": lds.to_string_lossy(), "watched_directory": {"path": dir.to_string_lossy()}},
        "resource_api_version": "V3"}});
    let envoy = m.start(&proxy, "istio-native-lds").unwrap();
    let r = m.chat(&envoy, "native-lds-before", &[], json!({"model": "openai/gpt-4.1-mini", "messages": msg()}));
    assert_eq!(r.status, 200, "{}", r.text());

    let mut broken = listeners.clone();
    let missing = dir.join("not-mounted").join("libswitchyard.so");
    assert_eq!(set_module_files(&mut broken, &missing.to_string_lossy()), 1, "the decision filter");
    write(&broken, "2");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while stat(envoy.admin, "listener_manager.lds.update_rejected") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the update was neither rejected nor applied:\n{}",
            envoy.log_tail()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let r = m.chat(&envoy, "native-lds-after", &[], json!({"model": "openai/gpt-4.1-mini", "messages": msg()}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("openai"));
    assert_eq!(m.providers["openai"].received_for("native-lds-after").len(), 1);
    // The listener in use is the first version; the rejected one is at most in `error_state`.
    let (_, dump) = http_get(envoy.admin, "/config_dump?resource=dynamic_listeners").unwrap();
    let dump: Value = serde_json::from_str(&dump).unwrap();
    let listener = &dump["configs"][0];
    assert!(listener["active_state"]["listener"].is_object(), "{listener}");
    assert_eq!(listener["active_state"]["version_info"], "1", "{listener}");
    assert!(!listener["active_state"].to_string().contains("not-mounted"), "{listener}");
}

/// Without the decision filter in the chain (a listener the patch missed, a hand-edited
/// configuration), a caller forging the next-cluster token of every provider cluster reaches
/// none of them (the route needs the plan only the decision filter writes); with it, a forged
/// token on a request it refuses reaches none either.
#[test]
fn forged_slot_headers_reach_no_provider_on_the_native_build() {
    let m = mesh("istio-native-forged");
    for absent in [true, false] {
        let mut proxy = m.install(Install::HelmGateway);
        if absent {
            assert_eq!(remove_http_filter(&mut proxy.boot, "switchyard-decision"), 1);
        }
        let envoy = m.start(&proxy, "istio-native-forged").unwrap();
        let (_, stats) = http_get(envoy.admin, "/stats").unwrap();
        let clusters: Vec<String> = stats
            .lines()
            .filter_map(|l| l.strip_prefix("cluster.")?.strip_suffix(".upstream_rq_total: 0").map(str::to_string))
            .filter(|c| c.starts_with("outbound|"))
            .collect();
        assert!(clusters.len() >= 8 && clusters.iter().any(|c| c.contains("|first|")), "{clusters:?}");
        for c in &clusters {
            // The token the routed route's matcher knows (keyed on istio-proxy).
            let key = Catalog::load(&default_catalog_path()).unwrap().istio.handoff_key;
            let token = switchyard::protocol::slots::keyed_slot_token(&key, c);
            let model = if absent { "openai/gpt-4.1-mini" } else { "no-such/model" };
            let h = [("x-switchyard-next", token.as_str())];
            let r = m.chat(&envoy, "native-forged", &h, json!({"model": model, "messages": msg()}));
            assert_eq!(r.status / 100, 4, "absent={absent} {c}: {}", r.text());
        }
        let r = m.rt.block_on(send(envoy.addr(), "GET", "/v1/files", &[("x-test-id", "native-forged")], b"")).unwrap();
        assert_eq!(r.status / 100, 4, "{}", r.text());
        for c in &clusters {
            assert_eq!(stat(envoy.admin, &format!("cluster.{c}.upstream_rq_total")), 0, "absent={absent}: {c}");
        }
        assert!(m.providers.values().all(|p| p.received_for("native-forged").is_empty()));
    }
}

/// The model's refusal (a proxy that assembled fails the test).
fn refused(r: Result<Proxy, String>) -> String {
    match r {
        Ok(p) => panic!("assembled, expected a refusal: {}", p.pod),
        Err(e) => e,
    }
}

/// The rendered manifests, as the model refuses what Kubernetes and Istio would: the library's
/// delivery must fit the install path (the gateway template reads no `userVolume` annotation),
/// a mount needs its volume, an unknown kind of volume or an image the registry does not have
/// stops the pod; the Wasm renders have none of the native parts.
#[test]
fn the_native_manifests_fit_each_install_path_and_nothing_else() {
    let mut c = native(Catalog::load(&default_catalog_path()).unwrap());
    c.istio.sidecar_namespaces = vec![APP_NAMESPACE.into()];
    let cfg = c.envoy_stack(PathBuf::from("unused.wasm"), &Default::default());
    let image = Image::from_library(b"\x7fELF stand-in library");
    let digest = image.digest();
    let registry = Registry { images: &[&image] };
    let secret = test_secret(&c);
    let install = |m: &switchyard_integration::istio::VariantManifests, i: Install, reg: &Registry| {
        install_proxy_from(m, i, "/ca.pem", &PathBuf::from("unused.wasm"), &digest, &secret, &[], &[], reg)
    };
    let gateway = variant_manifests(&c, Variant::EgressGateway, &cfg, &digest);
    let sidecar = variant_manifests(&c, Variant::Sidecar, &cfg, &digest);
    for (m, i) in [(&gateway, Install::HelmGateway), (&gateway, Install::IstioctlGateway), (&sidecar, Install::Sidecar)]
    {
        let proxy = install(m, i, &registry).unwrap_or_else(|e| panic!("{i:?}: {e}"));
        let files = module_files(&proxy.boot);
        assert!(files.iter().all(|f| std::fs::read(f).unwrap() == b"\x7fELF stand-in library"), "{i:?}");
        let proxy_container =
            proxy.pod["spec"]["containers"].as_array().unwrap().iter().find(|x| x["name"] == "istio-proxy").unwrap();
        let mount =
            proxy_container["volumeMounts"].as_array().unwrap().iter().find(|x| x["name"] == LIBRARY_VOLUME).unwrap();
        assert_eq!(
            (mount["mountPath"].as_str(), mount["readOnly"].as_bool()),
            (Some(LIBRARY_MOUNT), Some(true)),
            "{i:?}"
        );
        // The registry does not have the pinned image: the pod does not start.
        let err = refused(install(m, i, &Registry { images: &[] }));
        assert!(err.contains("cannot be pulled"), "{i:?}: {err}");
    }
    assert_eq!(library_path(), "/var/lib/switchyard/libswitchyard.so");
    // The sidecar's annotations on a gateway: the gateway template ignores them (Helm chart),
    // nothing reads them on istioctl's uninjected pod: the library is under no mount.
    for i in [Install::HelmGateway, Install::IstioctlGateway] {
        let mut annotated = variant_manifests(&c, Variant::EgressGateway, &cfg, &digest);
        let t = &mut annotated.keys_patch["spec"]["template"];
        t["metadata"] = sidecar.keys_patch["spec"]["template"]["metadata"].clone();
        t["spec"]["volumes"].as_array_mut().unwrap().retain(|v| v["name"] != LIBRARY_VOLUME);
        t["spec"]["containers"][0]["volumeMounts"].as_array_mut().unwrap().retain(|v| v["name"] != LIBRARY_VOLUME);
        assert!(t["metadata"]["annotations"][USER_VOLUME_ANNOTATION].is_string());
        let err = refused(install(&annotated, i, &registry));
        assert!(err.contains("not under any volume mounted into istio-proxy"), "{i:?}: {err}");
    }
    // A mount without its volume; a kind of volume the model does not know.
    let mut no_volume = variant_manifests(&c, Variant::EgressGateway, &cfg, &digest);
    no_volume.keys_patch["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .retain(|v| v["name"] != LIBRARY_VOLUME);
    let err = refused(install(&no_volume, Install::IstioctlGateway, &registry));
    assert!(err.contains(&format!("volumeMount {LIBRARY_VOLUME}: no such volume")), "{err}");
    let mut host_path = variant_manifests(&c, Variant::EgressGateway, &cfg, &digest);
    for v in host_path.keys_patch["spec"]["template"]["spec"]["volumes"].as_array_mut().unwrap() {
        if v["name"] == LIBRARY_VOLUME {
            *v = json!({"name": LIBRARY_VOLUME, "hostPath": {"path": "/opt/switchyard"}});
        }
    }
    let err = refused(install(&host_path, Install::IstioctlGateway, &registry));
    assert!(err.contains("a kind the model does not know"), "{err}");
    // The EnvoyFilter: inline modules, no extension config; the Wasm build's (the repository's
    // catalog, the committed renders) has no native part.
    let ef = &gateway.main[0];
    assert_eq!(ef["kind"], "EnvoyFilter");
    assert!(!ef.to_string().contains("EXTENSION_CONFIG"));
    let wasm = Catalog::load(&default_catalog_path()).unwrap();
    let w = variant_manifests(
        &wasm,
        Variant::Sidecar,
        &wasm.envoy_stack(PathBuf::from("m.wasm"), &Default::default()),
        &digest,
    );
    let text = serde_json::to_string(&w.main).unwrap() + &w.keys_patch.to_string();
    assert!(!text.contains("dynamic_modules") && !text.contains(LIBRARY_VOLUME) && !text.contains("userVolume"));
}
