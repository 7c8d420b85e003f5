//! A private PKI for the TLS tests: a CA and per-provider server certificates (the real
//! provider host names, signed by the test CA), so Envoy's TLS to providers (SNI, chain and
//! name validation, ALPN) is exercised exactly as rendered, only trusting this CA instead of
//! the system bundle.

use std::path::Path;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};

/// A server identity: certificate chain and key, DER.
#[derive(Clone)]
pub struct Identity {
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
    /// The same certificate and (PKCS#8) key as PEM, for files Envoy reads.
    pub cert_pem: String,
    pub key_pem: String,
}

pub struct TestCa {
    cert: Certificate,
    key: KeyPair,
}

impl TestCa {
    pub fn new(name: &str) -> Result<TestCa, String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
        Ok(TestCa { cert, key })
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// Writes the CA certificate (the trust bundle Envoy gets) to `path`.
    pub fn write_pem(&self, path: &Path) -> Result<(), String> {
        std::fs::write(path, self.pem()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A server certificate for `dns_name`, signed by this CA.
    pub fn issue(&self, dns_name: &str) -> Result<Identity, String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = CertificateParams::new(vec![dns_name.to_string()]).map_err(|e| e.to_string())?;
        params.distinguished_name.push(DnType::CommonName, dns_name);
        let cert = params.signed_by(&key, &self.cert, &self.key).map_err(|e| e.to_string())?;
        Ok(Identity {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate whose only SAN is the URI `uri` (a SPIFFE id, as Istio's workload
    /// certificates carry), signed by this CA.
    pub fn issue_client(&self, uri: &str) -> Result<Identity, String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        params.subject_alt_names = vec![SanType::URI(uri.try_into().map_err(|e| format!("{uri}: {e:?}"))?)];
        params.distinguished_name.push(DnType::CommonName, "switchyard test workload");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.cert, &self.key).map_err(|e| e.to_string())?;
        Ok(Identity {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The CA certificate, DER (a client's trust root).
    pub fn der(&self) -> Vec<u8> {
        self.cert.der().to_vec()
    }
}
