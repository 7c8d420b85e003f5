//! A DER reader for one structure: a PEM `PRIVATE KEY` (PKCS#8 PrivateKeyInfo, RFC 5208)
//! holding an RSA key (RSAPrivateKey, RFC 8017 A.1.2). Definite lengths only, every length
//! checked against what is left; linear in the key's bytes.

use crate::protocol::base64;

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
/// rsaEncryption, 1.2.840.113549.1.1.1.
const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/// Why a key could not be read (the configuration error's reason; never the key itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// Not `-----BEGIN PRIVATE KEY-----` ... `-----END PRIVATE KEY-----` around base64.
    Pem,
    /// The DER is not a PKCS#8 PrivateKeyInfo.
    Der,
    /// A PKCS#8 key of another algorithm than RSA.
    NotRsa,
}

impl KeyError {
    pub fn reason(self) -> &'static str {
        match self {
            KeyError::Pem => "is not a PEM `PRIVATE KEY` (PKCS#8): -----BEGIN PRIVATE KEY----- around base64",
            KeyError::Der => "is not a well-formed PKCS#8 PrivateKeyInfo holding an RSAPrivateKey",
            KeyError::NotRsa => "is a PKCS#8 key of another algorithm: only RSA (rsaEncryption) signs RS256",
        }
    }
}

/// An RSA private key's integers, big-endian without sign bytes.
pub struct RsaParts {
    pub n: Vec<u8>,
    pub e: Vec<u8>,
    pub d: Vec<u8>,
    pub p: Vec<u8>,
    pub q: Vec<u8>,
    pub dp: Vec<u8>,
    pub dq: Vec<u8>,
    pub qinv: Vec<u8>,
}

/// The DER bytes of a PEM `PRIVATE KEY` block.
pub fn pem_private_key(pem: &str) -> Result<Vec<u8>, KeyError> {
    const BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
    const END: &str = "-----END PRIVATE KEY-----";
    let start = pem.find(BEGIN).ok_or(KeyError::Pem)? + BEGIN.len();
    let body = pem.get(start..).ok_or(KeyError::Pem)?;
    let end = body.find(END).ok_or(KeyError::Pem)?;
    base64::decode(body.get(..end).ok_or(KeyError::Pem)?).ok_or(KeyError::Pem)
}

/// A reader over DER bytes.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The next element's contents if its tag is `tag`.
    fn take(&mut self, tag: u8) -> Result<&'a [u8], KeyError> {
        let (&t, rest) = self.0.split_first().ok_or(KeyError::Der)?;
        let (&first, mut rest) = rest.split_first().ok_or(KeyError::Der)?;
        if t != tag {
            return Err(KeyError::Der);
        }
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            // Long form: 1 to 4 length bytes (a key is never 4 GB).
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 {
                return Err(KeyError::Der);
            }
            let (bytes, after) = rest.split_at_checked(count).ok_or(KeyError::Der)?;
            rest = after;
            bytes.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
        };
        let (content, after) = rest.split_at_checked(len).ok_or(KeyError::Der)?;
        self.0 = after;
        Ok(content)
    }

    /// A non-negative INTEGER without its leading zero bytes.
    fn unsigned(&mut self) -> Result<Vec<u8>, KeyError> {
        let v = self.take(INTEGER)?;
        if v.first().is_some_and(|b| b & 0x80 != 0) {
            return Err(KeyError::Der); // negative
        }
        let skip = v.iter().take_while(|b| **b == 0).count();
        Ok(v.get(skip..).unwrap_or_default().to_vec())
    }
}

/// The RSA key in a PKCS#8 PrivateKeyInfo.
pub fn pkcs8_rsa(der: &[u8]) -> Result<RsaParts, KeyError> {
    let mut outer = Reader(der);
    let mut info = Reader(outer.take(SEQUENCE)?);
    if info.unsigned()? != [0u8; 0] {
        return Err(KeyError::Der); // PrivateKeyInfo version 0
    }
    let mut algorithm = Reader(info.take(SEQUENCE)?);
    if algorithm.take(OID)? != RSA_ENCRYPTION {
        return Err(KeyError::NotRsa);
    }
    let mut key = Reader(info.take(OCTET_STRING)?);
    let mut rsa = Reader(key.take(SEQUENCE)?);
    if !rsa.unsigned()?.is_empty() {
        return Err(KeyError::Der); // two-prime RSAPrivateKey, version 0
    }
    Ok(RsaParts {
        n: rsa.unsigned()?,
        e: rsa.unsigned()?,
        d: rsa.unsigned()?,
        p: rsa.unsigned()?,
        q: rsa.unsigned()?,
        dp: rsa.unsigned()?,
        dq: rsa.unsigned()?,
        qinv: rsa.unsigned()?,
    })
}
