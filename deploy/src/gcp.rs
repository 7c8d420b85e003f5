//! The clouds' metadata servers: the cluster that providers with `credential.google_metadata`
//! (Google's metadata server) or `credential.azure_managed_identity` (Azure's Instance Metadata
//! Service) get their access tokens from (the module fetches them from the root context's
//! tick); both listen on `169.254.169.254:80`, plain HTTP. And the Kubernetes service-account
//! annotations that GKE Workload Identity and EKS IRSA bind a cloud identity with. And the
//! token endpoint (`oauth2.googleapis.com:443`, TLS) that `credential.google_service_account`
//! providers trade their key file's signed assertions at.

use serde_json::{json, Value};
use switchyard::tokens::METADATA_ADDRESS;

/// GKE Workload Identity: the annotation on a Kubernetes ServiceAccount naming the Google
/// service account its pods act as (the metadata server then issues that account's tokens).
pub const GKE_SA_ANNOTATION: &str = "iam.gke.io/gcp-service-account";
/// EKS IRSA: the annotation naming the IAM role its pods assume (Envoy's AWS credential chain
/// reads the web identity token EKS mounts for it: Bedrock's SigV4 signing).
pub const EKS_ROLE_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

/// The metadata-server clusters the plugin configuration's providers name (one per distinct
/// `credential.google_metadata.cluster` or `credential.azure_managed_identity.cluster`, in
/// catalog order), at `address` (None: the metadata servers' own, `169.254.169.254:80`). Plain HTTP/1.1: the server is link-local and speaks
/// nothing else. None for a configuration the filter would refuse.
pub fn metadata_clusters(plugin_config: &Value, address: Option<&(String, u16)>) -> Vec<Value> {
    let Ok(catalog) =
        switchyard::config::Catalog::from_json(for_generator(plugin_config).to_string().as_bytes(), &|_| {
            Some("x".into())
        })
    else {
        return Vec::new();
    };
    let (host, port) = address.map_or((METADATA_ADDRESS.0, METADATA_ADDRESS.1), |(h, p)| (h.as_str(), *p));
    let key_file = key_file_clusters(plugin_config);
    let mut names: Vec<&str> = Vec::new();
    for s in &catalog.token_sources {
        if !names.contains(&s.cluster.as_str()) && !key_file.contains(&s.cluster) {
            names.push(&s.cluster);
        }
    }
    names.into_iter().map(|name| metadata_cluster(name, host, port)).collect()
}

/// Google's OAuth2 token endpoint, where key files' assertions are traded for tokens.
pub const TOKEN_ENDPOINT: (&str, u16) = ("oauth2.googleapis.com", 443);

/// The `credential.google_service_account.cluster`s the providers name (raw, in order, unique).
fn key_file_clusters(plugin_config: &Value) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in plugin_config["providers"].as_object().into_iter().flat_map(|m| m.values()) {
        if let Some(c) = p.pointer("/credential/google_service_account/cluster").and_then(Value::as_str) {
            if !names.iter().any(|n| n == c) {
                names.push(c.to_string());
            }
        }
    }
    names
}

/// The key files' environment variables (`credential.google_service_account.env`): the VM
/// must be given them like `credential.env` keys.
pub fn key_file_envs(provider: &Value) -> Option<String> {
    provider.pointer("/credential/google_service_account/env").and_then(Value::as_str).map(str::to_string)
}

/// The plugin configuration as the generators read it with the filter's parser: a key file is
/// only in the proxy's environment at run time, so each `google_service_account` credential
/// stands as a `google_metadata` one of the same cluster (the same shape to the generators: an
/// access token, a per-attempt filter, a token cluster that is not a provider's).
pub fn for_generator(plugin_config: &Value) -> Value {
    let mut v = plugin_config.clone();
    for p in v["providers"].as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
        let Some(c) = p.pointer("/credential/google_service_account/cluster").cloned() else { continue };
        p["credential"] = serde_json::json!({"google_metadata": {"cluster": c}});
    }
    v
}

/// The token-endpoint clusters of the key-file providers: `oauth2.googleapis.com:443` over TLS
/// (SNI and certificate checked against the name, CAs from `ca_file`), HTTP/1.1; or, when
/// `address` is given (tests: a local mock), plain HTTP there.
pub fn token_endpoint_clusters(plugin_config: &Value, address: Option<&(String, u16)>, ca_file: &str) -> Vec<Value> {
    key_file_clusters(plugin_config)
        .iter()
        .map(|name| match address {
            Some((host, port)) => metadata_cluster(name, host, *port),
            None => {
                let (host, port) = TOKEN_ENDPOINT;
                json!({
                    "name": name,
                    "type": "STRICT_DNS",
                    "connect_timeout": "2s",
                    "dns_lookup_family": "V4_PREFERRED",
                    "lb_policy": "ROUND_ROBIN",
                    "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
                        {"socket_address": {"address": host, "port_value": port}}}}]}]},
                    "transport_socket": crate::envoy::upstream_tls(host, ca_file, false)
                })
            }
        })
        .collect()
}

/// One metadata-server cluster (an IP: STATIC; a name: STRICT_DNS), plain HTTP/1.1, whose
/// requests lose `x-forwarded-for` on the way out: Azure IMDS (and Google's metadata server)
/// refuse a request that carries one, and Envoy's HTTP callouts from a dynamic module (the
/// native build's token fetch) add one; the Wasm build's add none.
pub fn metadata_cluster(name: &str, host: &str, port: u16) -> Value {
    let kind = if host.parse::<std::net::IpAddr>().is_ok() { "STATIC" } else { "STRICT_DNS" };
    json!({
        "name": name,
        "type": kind,
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http_protocol_options": {}},
            "http_filters": [
                {"name": "envoy.filters.http.header_mutation", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
                    "mutations": {"request_mutations": [{"remove": "x-forwarded-for"}]}}},
                {"name": "envoy.filters.http.upstream_codec", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}
            ]}},
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
            {"socket_address": {"address": host, "port_value": port}}}}]}]}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(cred: Value) -> Value {
        json!({
            "providers": {
                "v": {"cluster": "c_v", "authority": "v.example", "credential": cred},
                "w": {"cluster": "c_w", "authority": "w.example", "credential": {"google_metadata": {"cluster": "gcp_metadata", "service_account": "other@p.iam.gserviceaccount.com"}}},
                "k": {"cluster": "c_k", "authority": "k.example", "credential": {"value": "s"}}
            },
            "models": {"m": {"endpoints": [{"provider": "v", "upstream_model": "m", "pricing": {"prompt": 1, "completion": 1}}]}}
        })
    }

    #[test]
    fn one_plain_http_cluster_per_metadata_cluster_at_the_link_local_address() {
        let c = metadata_clusters(&config(json!({"google_metadata": {"cluster": "gcp_metadata"}})), None);
        assert_eq!(c.len(), 1, "two providers, one cluster: {c:?}");
        assert_eq!(c[0]["name"], "gcp_metadata");
        assert_eq!(c[0]["type"], "STATIC");
        let addr = &c[0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
        assert_eq!((addr["address"].as_str(), addr["port_value"].as_u64()), (Some("169.254.169.254"), Some(80)));
        assert!(c[0].get("transport_socket").is_none(), "plain HTTP");
        let moved =
            metadata_clusters(&config(json!({"google_metadata": {"cluster": "gcp2"}})), Some(&("127.0.0.1".into(), 9)));
        let names: Vec<&str> = moved.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["gcp2", "gcp_metadata"]);
        assert_eq!(
            moved[0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
                ["port_value"],
            9
        );
    }

    #[test]
    fn azure_imds_gets_the_same_plain_http_cluster_beside_google_metadata() {
        let mut c = config(json!({"azure_managed_identity": {"cluster": "azure_imds"}}));
        c["providers"]["v"]["kind"] = json!("azure");
        let clusters = metadata_clusters(&c, None);
        let names: Vec<&str> = clusters.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["azure_imds", "gcp_metadata"]);
        let addr =
            &clusters[0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
        assert_eq!((addr["address"].as_str(), addr["port_value"].as_u64()), (Some("169.254.169.254"), Some(80)));
        assert!(clusters[0].get("transport_socket").is_none(), "plain HTTP");
        // The native build's callouts carry x-forwarded-for, which IMDS refuses: taken off.
        let opts =
            &clusters[0]["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
        assert_eq!(
            opts["http_filters"][0]["typed_config"]["mutations"]["request_mutations"][0]["remove"],
            "x-forwarded-for"
        );
        assert_eq!(opts["http_filters"][1]["name"], "envoy.filters.http.upstream_codec");
        // Both clouds naming one cluster: rendered once.
        let shared = config(json!({"azure_managed_identity": {"cluster": "gcp_metadata"}}));
        assert_eq!(metadata_clusters(&shared, None).len(), 1);
    }

    #[test]
    fn a_key_file_provider_gets_a_tls_cluster_to_googles_token_endpoint() {
        let c = config(json!({"google_service_account": {"env": "SA_KEY", "cluster": "google_oauth2"}}));
        // The metadata cluster stays for the other provider; the key file's is not one.
        let names: Vec<String> =
            metadata_clusters(&c, None).iter().filter_map(|c| c["name"].as_str().map(String::from)).collect();
        assert_eq!(names, ["gcp_metadata"]);
        let t = token_endpoint_clusters(&c, None, "/ca.pem");
        assert_eq!(t.len(), 1);
        assert_eq!(t[0]["name"], "google_oauth2");
        let addr = &t[0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
        assert_eq!((addr["address"].as_str(), addr["port_value"].as_u64()), (Some("oauth2.googleapis.com"), Some(443)));
        let tls = &t[0]["transport_socket"]["typed_config"];
        assert_eq!(tls["sni"], "oauth2.googleapis.com");
        assert_eq!(tls["common_tls_context"]["validation_context"]["trusted_ca"]["filename"], "/ca.pem");
        // A test points it at a local mock: plain HTTP there.
        let local = token_endpoint_clusters(&c, Some(&("127.0.0.1".into(), 9)), "/ca.pem");
        assert!(local[0].get("transport_socket").is_none());
        assert!(token_endpoint_clusters(&config(json!({"value": "k"})), None, "/ca.pem").is_empty());
        assert_eq!(key_file_envs(&c["providers"]["v"]).as_deref(), Some("SA_KEY"));
    }

    #[test]
    fn no_cluster_without_the_credential_or_for_a_refused_configuration() {
        let mut c = config(json!({"value": "k"}));
        c["providers"].as_object_mut().unwrap().remove("w");
        assert!(metadata_clusters(&c, None).is_empty());
        assert!(metadata_clusters(&config(json!({"google_metadata": {"cluster": "c_k"}})), None).is_empty());
    }
}
