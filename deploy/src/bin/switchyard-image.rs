//! `make image`: writes the filter's OCI image (Istio's compat Wasm format, reproducible) as an
//! OCI image layout, tagged with the catalog's image tag, and prints its digest. `make
//! image-native` (`--native`): the native library's image (`libswitchyard.so` at the root of a
//! linux/amd64 image, what `deployment.istio.build: native` mounts as an image volume), tagged
//! with `deployment.istio.native_image`'s tag (or, without one, the Wasm image's).
//!
//! Usage: switchyard-image [--wasm PATH] [--out DIR] | --native [--library PATH] [--out DIR]
//! (default out: target/switchyard-oci, target/switchyard-native-oci)
//! Push it with: skopeo copy oci:<out>:<tag> docker://<registry>/<repo>:<tag>

use std::path::PathBuf;

use switchyard_deploy::catalog::{default_catalog_path, Catalog};
use switchyard_deploy::envoy::{native_path, repo_root, wasm_path};
use switchyard_deploy::oci::Image;

const USAGE: &str = "usage: switchyard-image [--wasm PATH] [--out DIR] | --native [--library PATH] [--out DIR]";

fn main() {
    let mut native = false;
    let mut file = None;
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--native" {
            native = true;
            continue;
        }
        match (a.as_str(), args.next()) {
            ("--wasm" | "--library", Some(p)) => file = Some(PathBuf::from(p)),
            ("--out", Some(p)) => out = Some(PathBuf::from(p)),
            _ => {
                eprintln!("{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let (file, out) = if native {
        (file.unwrap_or_else(native_path), out.unwrap_or_else(|| repo_root().join("target/switchyard-native-oci")))
    } else {
        (file.unwrap_or_else(wasm_path), out.unwrap_or_else(|| repo_root().join("target/switchyard-oci")))
    };
    let result = Catalog::load(&default_catalog_path()).and_then(|c| {
        // The library image's tag is `native_image`'s; a catalog without one (the Wasm build)
        // gets the Wasm image's, so both images of a release share it.
        let reference = c.istio.native_image.clone().filter(|_| native).unwrap_or_else(|| c.istio.image.clone());
        let tag = reference.rsplit_once(':').map(|(_, t)| t.to_string()).filter(|t| !t.contains('/'));
        let tag = tag.unwrap_or_else(|| "latest".into());
        let make = if native { "make native" } else { "make wasm" };
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e} (run `{make}` first)", file.display()))?;
        let image = if native { Image::from_library(&bytes) } else { Image::from_module(&bytes) };
        let _ = std::fs::remove_dir_all(&out);
        image.write_layout(&out, &tag).map_err(|e| format!("{}: {e}", out.display()))?;
        println!("wrote {} (tag {tag})", out.display());
        println!("image digest sha256:{}", image.digest());
        println!("push: skopeo copy oci:{}:{tag} docker://<registry>/<repository>:{tag}", out.display());
        Ok(())
    });
    if let Err(e) = result {
        eprintln!("switchyard-image: {e}");
        std::process::exit(1);
    }
}
