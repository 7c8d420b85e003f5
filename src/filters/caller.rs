//! The caller's unforgeable facts for policy selection, read from Envoy lazily (only what the
//! configured rules ask for): route metadata, the mTLS peer's URI SAN, dynamic metadata written
//! by earlier filters (`jwt_authn`), and request headers the configuration trusts.

use super::host::{find, Host};
use crate::protocol::scope::{METADATA_NAMESPACE, ROUTE_POLICY_KEY};
use crate::routing::policy::CallerFacts;

pub struct HostFacts<'a> {
    pub host: &'a dyn Host,
    pub headers: &'a [(String, String)],
}

fn text(host: &dyn Host, path: &[&str]) -> Option<String> {
    host.property(path).and_then(|b| String::from_utf8(b).ok()).filter(|s| !s.is_empty())
}

impl CallerFacts for HostFacts<'_> {
    fn route_policy(&mut self) -> Option<String> {
        text(self.host, &["xds", "route_metadata", "filter_metadata", METADATA_NAMESPACE, ROUTE_POLICY_KEY])
    }

    fn peer_uri_san(&mut self) -> Option<String> {
        // Empty without TLS or without a client certificate.
        text(self.host, &["connection", "uri_san_peer_certificate"])
    }

    fn dynamic_metadata(&mut self, namespace: &str, path: &[String]) -> Option<String> {
        let mut full: Vec<&str> = vec!["metadata", "filter_metadata", namespace];
        full.extend(path.iter().map(String::as_str));
        text(self.host, &full)
    }

    fn header(&mut self, name: &str) -> Option<String> {
        find(self.headers, name).map(str::to_string)
    }
}
