//! The Istio model's own tests (`istio_sim.rs`).

use super::*;

fn boot() -> Value {
    json!({"static_resources": {
        "listeners": [{"name": "0.0.0.0_8080", "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {"http_filters": [{"name": "a"}, {"name": "envoy.filters.http.router", "typed_config": {}}],
                             "route_config": {"virtual_hosts": [{"name": "h:80", "routes": [{"name": "vs"}]}]}}}]}]}],
        "clusters": [{"name": "outbound|443||p", "circuit_breakers": {"thresholds": [{"max_retries": 3}]},
                      "typed_extension_protocol_options": {"k": {"istio": true, "x": 1}}}]
    }})
}

fn ef(patches: Value) -> Value {
    json!({"spec": {"configPatches": patches}})
}

#[test]
fn patches_apply_with_istio_semantics() {
    let mut b = boot();
    let mut ext = Extensions::new();
    let sub = |n: &str| json!({"context": "GATEWAY", "listener": {"filterChain": {"filter": {"name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": n}}}}});
    let patches = json!([
        {"applyTo": "HTTP_FILTER", "match": sub("envoy.filters.http.router"), "patch": {"operation": "INSERT_BEFORE", "value": {"name": "b"}}},
        {"applyTo": "HTTP_FILTER", "match": sub("a"), "patch": {"operation": "REPLACE", "value": {"name": "a2"}}},
        {"applyTo": "HTTP_FILTER", "match": sub("envoy.filters.http.router"), "patch": {"operation": "MERGE", "value": {"name": "envoy.filters.http.router", "typed_config": {"suppress_envoy_headers": true}}}},
        // Another context: skipped.
        {"applyTo": "HTTP_FILTER", "match": {"context": "SIDECAR_OUTBOUND", "listener": {"filterChain": {"filter": {"name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": "a2"}}}}}, "patch": {"operation": "INSERT_BEFORE", "value": {"name": "nope"}}},
        {"applyTo": "HTTP_ROUTE", "match": {"context": "GATEWAY", "routeConfiguration": {"vhost": {"name": "h:80"}}}, "patch": {"operation": "INSERT_FIRST", "value": {"name": "routed"}}},
        {"applyTo": "VIRTUAL_HOST", "match": {"context": "GATEWAY", "routeConfiguration": {"vhost": {"name": "h:80"}}}, "patch": {"operation": "MERGE", "value": {"include_request_attempt_count": true}}},
        {"applyTo": "CLUSTER", "match": {"context": "GATEWAY", "cluster": {"name": "outbound|443||p"}}, "patch": {"operation": "MERGE", "value": {
            "circuit_breakers": {"thresholds": [{"max_retries": 9}]},
            "typed_extension_protocol_options": {"k": {"mine": true}}}}},
        {"applyTo": "EXTENSION_CONFIG", "patch": {"operation": "ADD", "value": {"name": "e", "typed_config": {}}}}
    ]);
    apply_envoy_filter(&mut b, &ef(patches), "GATEWAY", &mut ext).unwrap();
    let hcm = &b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    let names: Vec<&str> =
        hcm["http_filters"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a2", "b", "envoy.filters.http.router"]);
    assert_eq!(hcm["http_filters"][2]["typed_config"], json!({"suppress_envoy_headers": true}));
    assert_eq!(hcm["route_config"]["virtual_hosts"][0]["routes"], json!([{"name": "routed"}, {"name": "vs"}]));
    assert_eq!(hcm["route_config"]["virtual_hosts"][0]["include_request_attempt_count"], true);
    let c = &b["static_resources"]["clusters"][0];
    // Lists append (as proto merge does); map values are replaced whole, not merged.
    assert_eq!(c["circuit_breakers"]["thresholds"].as_array().unwrap().len(), 2);
    assert_eq!(c["typed_extension_protocol_options"]["k"], json!({"mine": true}));
    assert!(ext.contains_key("e"));
}

#[test]
fn unmodelled_or_unmatched_patches_are_errors() {
    let mut ext = Extensions::new();
    let unknown =
        json!([{"applyTo": "LISTENER", "match": {"context": "GATEWAY"}, "patch": {"operation": "ADD", "value": {}}}]);
    assert!(apply_envoy_filter(&mut boot(), &ef(unknown), "GATEWAY", &mut ext).unwrap_err().contains("not modelled"));
    let filter = |port: u16, name: &str| {
        json!({"context": "GATEWAY", "listener": {"portNumber": port, "filterChain": {"filter": {
        "name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": name}}}}})
    };
    for unmatched in [
        json!({"applyTo": "CLUSTER", "match": {"context": "GATEWAY", "cluster": {"name": "outbound|443||other"}}, "patch": {"operation": "MERGE", "value": {}}}),
        // A filter another release names differently: istiod would skip it silently.
        json!({"applyTo": "HTTP_FILTER", "match": filter(8080, "absent"), "patch": {"operation": "REPLACE", "value": {"name": "zz"}}}),
        // The right filter on another listener port.
        json!({"applyTo": "HTTP_FILTER", "match": filter(80, "a"), "patch": {"operation": "INSERT_BEFORE", "value": {"name": "zz"}}}),
        json!({"applyTo": "VIRTUAL_HOST", "match": {"context": "GATEWAY", "routeConfiguration": {"vhost": {"name": "other:80"}}}, "patch": {"operation": "MERGE", "value": {}}}),
    ] {
        let err = apply_envoy_filter(&mut boot(), &ef(json!([unmatched])), "GATEWAY", &mut ext).unwrap_err();
        assert!(err.contains("matched nothing"), "{err}");
    }
    // A MERGE on a filter without typed_config (an ECDS filter): istiod skips it.
    let merge_a = json!([{"applyTo": "HTTP_FILTER", "match": filter(8080, "a"), "patch": {"operation": "MERGE", "value": {"name": "a", "typed_config": {"x": 1}}}}]);
    let err = apply_envoy_filter(&mut boot(), &ef(merge_a), "GATEWAY", &mut ext).unwrap_err();
    assert!(err.contains("no typed_config"), "{err}");
    assert!(apply_envoy_filter(
        &mut boot(),
        &ef(json!([{"applyTo": "HTTP_FILTER", "match": filter(8080, "a"), "patch": {"operation": "INSERT_BEFORE", "value": {"name": "ok"}}}])),
        "GATEWAY",
        &mut ext
    )
    .is_ok());
}

fn patch(container: Value, volumes: Value) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [container], "volumes": volumes}}}})
}

#[test]
fn the_api_server_needs_an_image_and_only_injection_replaces_auto() {
    let bare = patch(json!({"name": "istio-proxy", "env": [{"name": "A", "value": "1"}]}), json!([]));
    // A sidecar's istio-proxy is a new container in the application's pod: no image, refused.
    let err = admitted_pod(Install::Sidecar, &bare).unwrap_err();
    assert!(err.contains("containers[1].image: Required value"), "{err}");
    // The gateways' Deployments have the container: the patch merges into it.
    for install in [Install::HelmGateway, Install::IstioctlGateway] {
        let pod = admitted_pod(install, &bare).unwrap();
        let proxy = &pod["spec"]["containers"][0];
        assert_eq!(proxy["image"], PROXY_IMAGE, "{install:?}");
        assert!(proxy["env"].as_array().unwrap().iter().any(|e| e["name"] == "A"), "{install:?}");
    }
    let auto = patch(json!({"name": "istio-proxy", "image": "auto"}), json!([]));
    let pod = admitted_pod(Install::Sidecar, &auto).unwrap();
    assert_eq!(pod["spec"]["containers"][1]["image"], PROXY_IMAGE);
    let err = admitted_pod(Install::IstioctlGateway, &auto).unwrap_err();
    assert!(err.contains("not injected"), "{err}");
}

#[test]
fn the_bootstrap_override_annotation_works_only_where_the_pod_is_injected() {
    let mut annotated = patch(json!({"name": "istio-proxy"}), json!([]));
    annotated["spec"]["template"]["metadata"] = json!({"annotations": {"sidecar.istio.io/bootstrapOverride": "boot"}});
    let map = |ns: &str| json!({"kind": "ConfigMap", "metadata": {"name": "boot", "namespace": ns}, "data": {"custom_bootstrap.json": "{\"stats_config\": {}}"}});
    let helm = admitted_pod(Install::HelmGateway, &annotated).unwrap();
    let volumes = proxy_volumes(&helm, &[map(ROOT_NAMESPACE)], &[], &[]).unwrap();
    assert_eq!(agent_override_args(&helm, &volumes).unwrap(), ["--config-yaml", "{\"stats_config\":{}}"]);
    let istioctl = admitted_pod(Install::IstioctlGateway, &annotated).unwrap();
    let volumes = proxy_volumes(&istioctl, &[map(ROOT_NAMESPACE)], &[], &[]).unwrap();
    assert!(agent_override_args(&istioctl, &volumes).unwrap().is_empty(), "nothing reads the annotation there");
    // An explicit variable and volume work on both.
    let explicit = patch(
        json!({"name": "istio-proxy", "env": [{"name": "ISTIO_BOOTSTRAP_OVERRIDE", "value": "/b/custom_bootstrap.json"}],
               "volumeMounts": [{"name": "boot", "mountPath": "/b"}]}),
        json!([{"name": "boot", "configMap": {"name": "boot"}}]),
    );
    for install in [Install::HelmGateway, Install::IstioctlGateway] {
        let pod = admitted_pod(install, &explicit).unwrap();
        let volumes = proxy_volumes(&pod, &[map(ROOT_NAMESPACE)], &[], &[]).unwrap();
        assert_eq!(agent_override_args(&pod, &volumes).unwrap().len(), 2, "{install:?}");
    }
    // The pod's namespace: a ConfigMap elsewhere is not found and the pod does not start.
    let mut sidecar = explicit.clone();
    sidecar["spec"]["template"]["spec"]["containers"][0]["image"] = json!("auto");
    let pod = admitted_pod(Install::Sidecar, &sidecar).unwrap();
    let err = proxy_volumes(&pod, &[map(ROOT_NAMESPACE)], &[], &[]).unwrap_err();
    assert!(err.contains("configmap \"boot\" not found in namespace apps"), "{err}");
    assert!(proxy_volumes(&pod, &[map(APP_NAMESPACE)], &[], &[]).is_ok());
}

#[test]
fn envoy_filters_and_telemetry_apply_by_namespace_and_selector() {
    let pod = Install::Sidecar.pod();
    let ef = |ns: &str, labels: Value| json!({"kind": "EnvoyFilter", "metadata": {"name": "e", "namespace": ns}, "spec": {"workloadSelector": {"labels": labels}}});
    let mine = json!({"switchyard.io/llm-client": "true"});
    let resources = [
        ef(ROOT_NAMESPACE, mine.clone()),
        ef(APP_NAMESPACE, mine.clone()),
        ef("elsewhere", mine.clone()),
        ef(ROOT_NAMESPACE, json!({"switchyard.io/llm-client": "false"})),
    ];
    let picked: Vec<&str> =
        envoy_filters_for(&pod, &resources).iter().map(|r| r["metadata"]["namespace"].as_str().unwrap()).collect();
    assert_eq!(picked, [ROOT_NAMESPACE, APP_NAMESPACE]);
    let t = |ns: &str, selector: Value| json!({"kind": "Telemetry", "metadata": {"name": "t", "namespace": ns}, "spec": {"selector": {"matchLabels": selector}}});
    let resources = [t(ROOT_NAMESPACE, mine.clone()), t(APP_NAMESPACE, mine.clone()), t(ROOT_NAMESPACE, json!({}))];
    let picked: Vec<(&str, bool)> = telemetries_for(&pod, &resources)
        .iter()
        .map(|r| (r["metadata"]["namespace"].as_str().unwrap(), r["spec"]["selector"]["matchLabels"] == json!({})))
        .collect();
    // The root namespace's selector-based Telemetry applies to nobody.
    assert_eq!(picked, [(APP_NAMESPACE, false), (ROOT_NAMESPACE, true)]);
}

#[test]
fn clusters_come_from_the_exported_manifests() {
    let se = |export: Value| {
        json!({"kind": "ServiceEntry", "metadata": {"name": "p", "namespace": ROOT_NAMESPACE}, "spec": {
        "hosts": ["api.p.example"], "resolution": "DNS", "ports": [{"number": 8443, "name": "http", "protocol": "HTTP"}], "exportTo": export}})
    };
    let dr = json!({"kind": "DestinationRule", "metadata": {"name": "p", "namespace": ROOT_NAMESPACE}, "spec": {
        "host": "api.p.example", "subsets": [{"name": "first"}],
        "trafficPolicy": {"connectionPool": {"http": {"maxRetries": 7, "h2UpgradePolicy": "UPGRADE"}},
            "portLevelSettings": [{"port": {"number": 8443}, "tls": {"mode": "SIMPLE", "sni": "sni.p.example", "subjectAltNames": ["san.p.example"]}}]}}});
    let clusters = clusters_from_manifests(&[se(json!(["apps"])), dr.clone()], "apps", "/ca.pem").unwrap();
    let names: Vec<&str> = clusters.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["outbound|8443||api.p.example", "outbound|8443|first|api.p.example"]);
    let c = &clusters[1];
    assert_eq!(
        c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["port_value"],
        8443
    );
    assert_eq!(c["circuit_breakers"]["thresholds"][0]["max_retries"], 7);
    assert_eq!(c["circuit_breakers"]["thresholds"][0]["max_requests"], u32::MAX);
    let tls = &c["transport_socket"]["typed_config"];
    assert_eq!(tls["sni"], "sni.p.example");
    assert_eq!(
        tls["common_tls_context"]["validation_context"]["match_typed_subject_alt_names"][0]["matcher"]["exact"],
        "san.p.example"
    );
    assert!(c["typed_extension_protocol_options"].to_string().contains("http2_protocol_options"));
    // Not exported to the proxy's namespace: no cluster at all.
    assert!(clusters_from_manifests(&[se(json!(["apps"])), dr.clone()], "billing", "/ca.pem").unwrap().is_empty());
    assert_eq!(clusters_from_manifests(&[se(json!(["."])), dr.clone()], ROOT_NAMESPACE, "/ca.pem").unwrap().len(), 2);
    // A TLS mode the model does not know is an error, not a guess.
    let mut mutual = dr;
    mutual["spec"]["trafficPolicy"]["portLevelSettings"][0]["tls"]["mode"] = json!("MUTUAL");
    assert!(clusters_from_manifests(&[se(json!(["*"])), mutual], "apps", "/ca.pem").unwrap_err().contains("MUTUAL"));
}

#[test]
fn agent_substitutes_deny_all_rbac_for_a_module_it_cannot_fetch() {
    let ext = json!({"name": "d", "typed_config": {"config": {"failure_policy": "FAIL_RELOAD"}}});
    assert_eq!(
        agent_failed_pull(&ext),
        json!({"name": "d", "typed_config": {"@type": crate::istio::RBAC_TYPE_URL, "rules": {}, "rules_stat_prefix": "wasm-default-deny"}})
    );
}

#[test]
fn agent_checks_the_digest() {
    let mut e = json!({"typed_config": {"config": {"vm_config": {"code": {"remote": {"http_uri": {"uri": "oci://r/x:1"}, "sha256": "aa"}}}}}});
    assert!(agent_localize(&mut e.clone(), "bb", Path::new("/m.wasm")).unwrap_err().contains("does not match"));
    agent_localize(&mut e, "aa", Path::new("/m.wasm")).unwrap();
    assert_eq!(e["typed_config"]["config"]["vm_config"]["code"], json!({"local": {"filename": "/m.wasm"}}));
}
