//! TLS mocks for a whole catalog: a mock provider for each of its providers, with a certificate
//! for the provider's real host name from a fresh test CA.
//!
//! Kept apart from `tls` (the test PKI) and `mock` (one mock provider) because it uses both and
//! `mock` already uses `tls`: so `tls` never reaches up into `mock`.
//!
//! A provider taking a Google access token (`credential.google_metadata`, the shipped catalog's
//! `google-vertex`) accepts only live tokens of a mock metadata server started with the mocks
//! ([`CatalogMocks::metadata`]); `CatalogMocks::local` points the catalog at both, so no test
//! Envoy reaches for the clouds' own metadata server.
//!
//! A Bedrock provider (`kind: bedrock`) needs nothing more: every mock answers Bedrock's paths
//! as Bedrock does (`mock::bedrock`), recomputing the SigV4 signature for the keys the test kit
//! gives every Envoy (`envoy::TEST_AWS_ENV`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::time::Duration;

use serde_json::Value;

use crate::catalog::Catalog;
use crate::mock::gcp_metadata::MetadataServer;
use crate::mock::{Behavior, MockProvider};
use crate::tls::TestCa;

/// A TLS mock for every provider of `catalog`, each with a certificate for the provider's real
/// host name from a fresh test CA (written to `dir/ca.pem`), and where each now listens: point
/// the catalog at them with `Catalog::with_hosts(&mocks.ports)`.
pub struct CatalogMocks {
    pub ca_file: PathBuf,
    pub providers: BTreeMap<String, MockProvider>,
    /// Provider slug -> (host, local port).
    pub ports: BTreeMap<String, (String, u16)>,
    /// The metadata server issuing the tokens of the catalog's `google_metadata` providers (None
    /// when it has none).
    pub metadata: Option<MetadataServer>,
}

impl CatalogMocks {
    /// `catalog` pointed at these mocks: its provider hosts and its metadata server.
    pub fn local(&self, catalog: &Catalog) -> Catalog {
        let c = catalog.with_hosts(&self.ports);
        match &self.metadata {
            Some(m) => c.with_metadata_server(("127.0.0.1".into(), m.addr.port())),
            None => c,
        }
    }
}

/// How long the mock metadata server's tokens live: longer than any test, so that no request is
/// planned without one (the token tests shorten it themselves).
const TOKEN_LIFE: Duration = Duration::from_secs(3600);

/// The Vertex AI project of a provider's `kind_options` (its mock serves that project).
fn vertex_project(plugin_config: &Value, slug: &str) -> Option<String> {
    plugin_config["providers"][slug]["kind_options"]["project"].as_str().map(str::to_string)
}

pub fn start_catalog_mocks(
    rt: &tokio::runtime::Runtime,
    catalog: &Catalog,
    dir: &Path,
) -> Result<CatalogMocks, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ca = TestCa::new("Switchyard test CA")?;
    let ca_file = dir.join("ca.pem");
    ca.write_pem(&ca_file)?;
    let plugin_config = catalog.plugin_config();
    let takes_token = |slug: &str| plugin_config["providers"][slug]["credential"].get("google_metadata").is_some();
    let (providers, metadata) = rt.block_on(async {
        let metadata = match catalog.providers.iter().any(|p| takes_token(&p.slug)) {
            true => Some(MetadataServer::start(TOKEN_LIFE, "default").await.map_err(|e| format!("metadata: {e}"))?),
            false => None,
        };
        let mut out = BTreeMap::new();
        for p in &catalog.providers {
            let id = ca.issue(&p.host)?;
            let behavior = match (&metadata, takes_token(&p.slug)) {
                (Some(m), true) => Behavior {
                    google_tokens: Some(std::sync::Arc::clone(&m.issuer)),
                    vertex_project: vertex_project(&plugin_config, &p.slug),
                    ..Behavior::default()
                },
                _ => Behavior::default(),
            };
            let mock = MockProvider::start_tls(&p.slug, 0, behavior, &id, p.http2)
                .await
                .map_err(|e| format!("mock {}: {e}", p.slug))?;
            out.insert(p.slug.clone(), mock);
        }
        Ok::<_, String>((out, metadata))
    })?;
    let ports = catalog
        .providers
        .iter()
        .filter_map(|p| Some((p.slug.clone(), (p.host.clone(), providers.get(&p.slug)?.addr.port()))))
        .collect();
    Ok(CatalogMocks { ca_file, providers, ports, metadata })
}
