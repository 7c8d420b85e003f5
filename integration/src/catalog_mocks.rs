//! TLS mocks for a whole catalog: a mock provider for each of its providers, with a certificate
//! for the provider's real host name from a fresh test CA.
//!
//! Kept apart from `tls` (the test PKI) and `mock` (one mock provider) because it uses both and
//! `mock` already uses `tls`: so `tls` never reaches up into `mock`.
//!
//! A Bedrock provider (`kind: bedrock`) needs nothing more: every mock answers Bedrock's paths
//! as Bedrock does (`mock::bedrock`), recomputing the SigV4 signature for the keys the test kit
//! gives every Envoy (`envoy::TEST_AWS_ENV`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::catalog::Catalog;
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
    let providers = rt.block_on(async {
        let mut out = BTreeMap::new();
        for p in &catalog.providers {
            let id = ca.issue(&p.host)?;
            let mock = MockProvider::start_tls(&p.slug, 0, Behavior::default(), &id, p.http2)
                .await
                .map_err(|e| format!("mock {}: {e}", p.slug))?;
            out.insert(p.slug.clone(), mock);
        }
        Ok::<_, String>(out)
    })?;
    let ports = catalog
        .providers
        .iter()
        .filter_map(|p| Some((p.slug.clone(), (p.host.clone(), providers.get(&p.slug)?.addr.port()))))
        .collect();
    Ok(CatalogMocks { ca_file, providers, ports })
}
