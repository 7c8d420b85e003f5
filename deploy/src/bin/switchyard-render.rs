//! `make render`: renders `envoy/switchyard.yaml` and `k8s/` from `catalog/switchyard.json`, and
//! the deployable copy of them into `target/deploy/`.
//!
//! Usage: switchyard-render [--catalog PATH] [--wasm PATH]
//! The committed files carry a placeholder where the image digest goes (it follows every module
//! build); the copy in `target/deploy/` carries the digest of the OCI image `make image` builds
//! from the module (with `deployment.istio.build: native`, of the library image `make
//! image-native` builds from `make native`'s library).

use std::path::PathBuf;

use switchyard_deploy::catalog::{default_catalog_path, Catalog};
use switchyard_deploy::envoy::{native_path, repo_root, wasm_path, Build};
use switchyard_deploy::oci::Image;
use switchyard_deploy::render::{render_all, DEPLOY_DIR, DIGEST_PLACEHOLDER};

fn main() {
    let mut catalog = default_catalog_path();
    let mut wasm = wasm_path();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--catalog", Some(p)) => catalog = PathBuf::from(p),
            ("--wasm", Some(p)) => wasm = PathBuf::from(p),
            _ => {
                eprintln!("usage: switchyard-render [--catalog PATH] [--wasm PATH]");
                std::process::exit(2);
            }
        }
    }
    let result = Catalog::load(&catalog).and_then(|c| {
        // The digest of the image of the build the catalog delivers on Istio: the Wasm module's
        // (the Wasm configs' sha256) or, with `deployment.istio.build: native`, the library's
        // (the image volume's pinned reference).
        let digest = if c.istio.build == Build::Native {
            let lib = native_path();
            let library =
                std::fs::read(&lib).map_err(|e| format!("{}: {e} (run `make native` first)", lib.display()))?;
            Image::from_library(&library).digest()
        } else {
            let module =
                std::fs::read(&wasm).map_err(|e| format!("{}: {e} (run `make wasm` first)", wasm.display()))?;
            Image::from_module(&module).digest()
        };
        let committed = render_all(&c, DIGEST_PLACEHOLDER).into_iter().map(|(p, t)| (p.clone(), p, t));
        let deployable = render_all(&c, &digest).into_iter().map(|(p, t)| (format!("{DEPLOY_DIR}/{p}"), p, t));
        for (path, _, text) in committed.chain(deployable) {
            let full = repo_root().join(&path);
            if let Some(dir) = full.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            std::fs::write(&full, text).map_err(|e| format!("{}: {e}", full.display()))?;
            println!("wrote {path}");
        }
        Ok(())
    });
    if let Err(e) = result {
        eprintln!("switchyard-render: {e}");
        std::process::exit(1);
    }
}
