//! The filter's OCI image, written as an OCI image layout by code (no Docker engine, no
//! buildah): Istio's "compat" Wasm image format, one `application/vnd.oci.image.layer.v1.tar+gzip`
//! layer holding `plugin.wasm`. The image is reproducible (fixed tar metadata, gzip without a
//! timestamp), so its manifest digest is a function of the module: the renderer puts that
//! digest in the Wasm configs' `sha256` (for `oci://` URLs istio-agent compares `sha256` with the
//! image's manifest digest, not with the module's).

use std::io::Write;
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// One tar member (ustar), fixed owner and mtime.
fn tar_with(name: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, s: &[u8]| h[at..at + s.len()].copy_from_slice(s);
    put(&mut h, 0, name.as_bytes());
    put(&mut h, 100, b"0000644\0");
    put(&mut h, 108, b"0000000\0");
    put(&mut h, 116, b"0000000\0");
    put(&mut h, 124, format!("{:011o}\0", data.len()).as_bytes());
    put(&mut h, 136, b"00000000000\0");
    put(&mut h, 148, b"        ");
    h[156] = b'0';
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// The image's blobs and manifest.
pub struct Image {
    pub layer: Vec<u8>,
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
}

impl Image {
    pub fn from_module(wasm: &[u8]) -> Image {
        let tar = tar_with("plugin.wasm", wasm);
        // gzip header with mtime 0 and no name: the same module always gives the same bytes.
        let mut gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::best());
        let _ = gz.write_all(&tar);
        let layer = gz.finish().unwrap_or_default();
        let config = json!({
            "architecture": "wasm",
            "os": "wasip1",
            "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", sha256_hex(&tar))]},
            "config": {}
        })
        .to_string()
        .into_bytes();
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": format!("sha256:{}", sha256_hex(&config)), "size": config.len()},
            "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": format!("sha256:{}", sha256_hex(&layer)), "size": layer.len(),
                        "annotations": {"org.opencontainers.image.title": "plugin.wasm"}}]
        })
        .to_string()
        .into_bytes();
        Image { layer, config, manifest }
    }

    /// The manifest digest (hex): what the rendered Wasm configs' `sha256` holds for this image.
    pub fn digest(&self) -> String {
        sha256_hex(&self.manifest)
    }

    /// Writes an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/`) tagged `tag`.
    pub fn write_layout(&self, dir: &Path, tag: &str) -> std::io::Result<()> {
        let blobs = dir.join("blobs/sha256");
        std::fs::create_dir_all(&blobs)?;
        for blob in [&self.layer, &self.config, &self.manifest] {
            std::fs::write(blobs.join(sha256_hex(blob)), blob)?;
        }
        std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        let index = json!({
            "schemaVersion": 2,
            "manifests": [{"mediaType": MANIFEST_MEDIA_TYPE, "digest": format!("sha256:{}", self.digest()),
                           "size": self.manifest.len(), "annotations": {"org.opencontainers.image.ref.name": tag}}]
        });
        std::fs::write(dir.join("index.json"), index.to_string())
    }
}

/// Extracts `plugin.wasm` from a compat-format layer (tar.gz), as istio-agent does.
pub fn extract_module(layer: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(layer).read_to_end(&mut tar).map_err(|e| format!("gunzip: {e}"))?;
    let mut at = 0;
    while at + 512 <= tar.len() {
        let h = &tar[at..at + 512];
        if h.iter().all(|&b| b == 0) {
            break;
        }
        let name: String = h[..100].iter().take_while(|&&b| b != 0).map(|&b| b as char).collect();
        let size_text: String = h[124..136].iter().take_while(|&&b| b != 0 && b != b' ').map(|&b| b as char).collect();
        let size = usize::from_str_radix(size_text.trim(), 8).map_err(|e| format!("tar size: {e}"))?;
        let data = tar.get(at + 512..at + 512 + size).ok_or("tar truncated")?;
        if name.rsplit('/').next() == Some("plugin.wasm") {
            return Ok(data.to_vec());
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    Err("plugin.wasm not found in the layer".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_is_reproducible_and_round_trips() {
        let module = b"\0asm\x01\0\0\0 some module bytes".repeat(100);
        let a = Image::from_module(&module);
        let b = Image::from_module(&module);
        assert_eq!(a.manifest, b.manifest);
        assert_eq!(a.digest(), b.digest());
        assert_eq!(extract_module(&a.layer).unwrap(), module);
        assert_ne!(Image::from_module(b"\0asm\x01\0\0\0").digest(), a.digest());
    }
}
