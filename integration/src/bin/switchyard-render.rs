//! `make render`: renders `envoy/switchyard.yaml` and `k8s/` from `catalog/switchyard.json`.
//!
//! Usage: switchyard-render [--catalog PATH] [--wasm PATH]
//! The WasmPlugin's sha256 is the digest of the OCI image `make image` builds from the module.

use std::path::PathBuf;

use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::envoy::{repo_root, wasm_path};
use switchyard_integration::oci::Image;
use switchyard_integration::render::render_all;

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
        let module = std::fs::read(&wasm).map_err(|e| format!("{}: {e} (run `make wasm` first)", wasm.display()))?;
        let digest = Image::from_module(&module).digest();
        for (path, text) in render_all(&c, &digest) {
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
