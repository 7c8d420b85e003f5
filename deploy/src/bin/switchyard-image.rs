//! `make image`: writes the filter's OCI image (Istio's compat Wasm format, reproducible) as an
//! OCI image layout, tagged with the catalog's image tag, and prints its digest.
//!
//! Usage: switchyard-image [--wasm PATH] [--out DIR]   (default out: target/switchyard-oci)
//! Push it with: skopeo copy oci:target/switchyard-oci:<tag> docker://<registry>/<repo>:<tag>

use std::path::PathBuf;

use switchyard_deploy::catalog::{default_catalog_path, Catalog};
use switchyard_deploy::envoy::{repo_root, wasm_path};
use switchyard_deploy::oci::Image;

fn main() {
    let mut wasm = wasm_path();
    let mut out = repo_root().join("target/switchyard-oci");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--wasm", Some(p)) => wasm = PathBuf::from(p),
            ("--out", Some(p)) => out = PathBuf::from(p),
            _ => {
                eprintln!("usage: switchyard-image [--wasm PATH] [--out DIR]");
                std::process::exit(2);
            }
        }
    }
    let result = Catalog::load(&default_catalog_path()).and_then(|c| {
        let tag = c.istio.image.rsplit_once(':').map(|(_, t)| t.to_string()).filter(|t| !t.contains('/'));
        let tag = tag.unwrap_or_else(|| "latest".into());
        let module = std::fs::read(&wasm).map_err(|e| format!("{}: {e} (run `make wasm` first)", wasm.display()))?;
        let image = Image::from_module(&module);
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
