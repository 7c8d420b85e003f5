//! The filter's OCI images, written as an OCI image layout by code (no Docker engine, no
//! buildah), each one `application/vnd.oci.image.layer.v1.tar+gzip` layer holding one file:
//! - the Wasm module: Istio's "compat" Wasm image format, `plugin.wasm` (`Image::from_module`);
//! - the native build: `libswitchyard.so` at the image root, a `linux/amd64` image a Kubernetes
//!   image volume mounts into istio-proxy (`Image::from_library`, see `istio_native`).
//!
//! The images are reproducible (fixed tar metadata, gzip without a timestamp), so a manifest
//! digest is a function of the file: the renderer puts the Wasm image's digest in the Wasm
//! configs' `sha256` (for `oci://` URLs istio-agent compares `sha256` with the image's manifest
//! digest, not with the module's), and pins the library image volume's reference to its digest.

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

/// The file name of the module in a compat Wasm image.
pub const WASM_FILE: &str = "plugin.wasm";
/// The file name of the native library in its image (at the root: the image volume's mount
/// directory holds it).
pub const LIBRARY_FILE: &str = "libswitchyard.so";

impl Image {
    pub fn from_module(wasm: &[u8]) -> Image {
        Image::with_file(WASM_FILE, wasm, "wasm", "wasip1")
    }

    /// The native library's image: a `linux/amd64` image (the platform the container runtime
    /// matches against the node's; `make native` builds for x86_64 Linux) whose one layer holds
    /// `libswitchyard.so` at its root, mode 0644 (`dlopen` maps it, nothing executes it).
    pub fn from_library(library: &[u8]) -> Image {
        Image::with_file(LIBRARY_FILE, library, "amd64", "linux")
    }

    fn with_file(name: &str, data: &[u8], architecture: &str, os: &str) -> Image {
        let tar = tar_with(name, data);
        // gzip header with mtime 0 and no name: the same module always gives the same bytes.
        let mut gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::best());
        let _ = gz.write_all(&tar);
        let layer = gz.finish().unwrap_or_default();
        let config = json!({
            "architecture": architecture,
            "os": os,
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
                        "annotations": {"org.opencontainers.image.title": name}}]
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
    extract_file(layer, WASM_FILE)
}

/// Every regular file of a layer (tar.gz) by its path, as a container runtime unpacks it into
/// an image volume's directory.
pub fn layer_files(layer: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    use std::io::Read;
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(layer).read_to_end(&mut tar).map_err(|e| format!("gunzip: {e}"))?;
    let mut out = Vec::new();
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
        // Regular files only ('0' or the old NUL type flag).
        if h[156] == b'0' || h[156] == 0 {
            out.push((name.trim_start_matches("./").to_string(), data.to_vec()));
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    Ok(out)
}

/// Extracts the file `file` (at any depth) from a layer (tar.gz).
pub fn extract_file(layer: &[u8], file: &str) -> Result<Vec<u8>, String> {
    layer_files(layer)?
        .into_iter()
        .find(|(name, _)| name.rsplit('/').next() == Some(file))
        .map(|(_, data)| data)
        .ok_or_else(|| format!("{file} not found in the layer"))
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

    #[test]
    fn the_library_image_is_a_linux_amd64_image_with_the_library_at_its_root() {
        let library = b"\x7fELF some library bytes".repeat(300);
        let image = Image::from_library(&library);
        assert_eq!(image.digest(), Image::from_library(&library).digest(), "reproducible");
        let config: serde_json::Value = serde_json::from_slice(&image.config).unwrap();
        assert_eq!((config["os"].as_str(), config["architecture"].as_str()), (Some("linux"), Some("amd64")));
        assert_eq!(layer_files(&image.layer).unwrap(), vec![(LIBRARY_FILE.to_string(), library.to_vec())]);
        assert!(extract_module(&image.layer).is_err(), "not a Wasm image");
    }
}
