//! Where Switchyard runs in the mesh, and what that decides about the Istio manifests.
//!
//! A file of its own because both `istio` (the manifests) and `istio_native` (the library's
//! image volume) tell the variants apart, and `istio_native` must not import `istio`.

use serde_json::{json, Value};

use crate::catalog::Catalog;

/// Where Switchyard runs in the mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// In the egress gateway: one place holds the keys and talks to providers.
    EgressGateway,
    /// In the sidecars of selected application pods (outbound traffic).
    Sidecar,
}

impl Variant {
    pub fn dir(self) -> &'static str {
        match self {
            Variant::EgressGateway => "egress-gateway",
            Variant::Sidecar => "sidecar",
        }
    }

    /// EnvoyFilter patch context.
    pub fn context(self) -> &'static str {
        match self {
            Variant::EgressGateway => "GATEWAY",
            Variant::Sidecar => "SIDECAR_OUTBOUND",
        }
    }

    /// Visibility of the ServiceEntries, DestinationRules and the entry point: the gateway lives
    /// in their namespace; sidecars see them in the namespaces listed in
    /// `deployment.istio.sidecar_namespaces` only (istiod builds a proxy's clusters from the
    /// ServiceEntries exported to its namespace: `exportTo`, read in
    /// `pilot/pkg/model/push_context.go` at release-1.31). Any other workload of the mesh keeps
    /// calling the providers with its own TLS on 443.
    pub(crate) fn export_to(self, c: &Catalog) -> Value {
        match self {
            Variant::EgressGateway => json!(["."]),
            Variant::Sidecar => json!(c.istio.sidecar_namespaces),
        }
    }

    /// The namespaces the proxies run in, where what they mount (the ConfigMaps) and a
    /// selector-based Telemetry must be: the gateway's, or each application namespace.
    pub fn proxy_namespaces(self, c: &Catalog) -> Vec<String> {
        match self {
            Variant::EgressGateway => vec![c.istio.namespace.clone()],
            Variant::Sidecar => c.istio.sidecar_namespaces.clone(),
        }
    }

    pub(crate) fn labels(self, c: &Catalog) -> Value {
        match self {
            Variant::EgressGateway => json!(c.istio.gateway_labels),
            Variant::Sidecar => json!(c.istio.sidecar_labels),
        }
    }

    /// The host applications send requests to, and so the virtual host the route goes into.
    pub fn entry_host(self, c: &Catalog) -> String {
        c.istio.service_host.clone()
    }
}
