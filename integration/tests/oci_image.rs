//! `make image`'s OCI image through a real registry (Debian `docker-registry`) on 127.0.0.1:
//! pushed with skopeo, pulled back the way istio-agent pulls (manifest by tag, then the layer
//! blob, `plugin.wasm` extracted from the tar.gz), byte-identical to the built module, its
//! manifest digest equal to the `sha256` the renderer puts in the WasmPlugin, and the pulled
//! module loaded in Envoy, routing a request.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::client::post_json;
use switchyard_integration::envoy::{repo_root, wasm_path, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::istio::{envoy_filter, Variant};
use switchyard_integration::mock::{Behavior, MockProvider};
use switchyard_integration::oci::{extract_module, sha256_hex, Image, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE};

/// A registry process, stopped by PID when dropped.
struct Registry {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_registry(dir: &std::path::Path) -> Registry {
    let port = free_port();
    let config = dir.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("registry.log")).unwrap();
    let mut cmd = Command::new("docker-registry");
    cmd.arg("serve").arg(&config).stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log);
    // SAFETY: prctl only asks the kernel to kill the registry if this thread dies.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().expect("docker-registry (make registry-tools installs it)");
    let registry = Registry { child, addr: SocketAddr::from(([127, 0, 0, 1], port)) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if matches!(get(registry.addr, "/v2/", ""), Ok((200, _, _))) {
            return registry;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("registry not ready: {}", std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default());
}

/// Blocking HTTP/1.1 GET returning (status, lower-case headers, body bytes).
fn get(addr: SocketAddr, path: &str, accept: &str) -> Result<(u16, String, Vec<u8>), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| e.to_string())?;
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no header end")?;
    let head = String::from_utf8_lossy(&buf[..split]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, head, buf[split + 4..].to_vec()))
}

/// Pushes tag 0.1.0 of the OCI layout at `layout` to `repo` in the registry with skopeo.
fn push(registry: &Registry, layout: &std::path::Path, repo: &str) {
    let dest = format!("docker://{}/{repo}:0.1.0", registry.addr);
    let out = Command::new("skopeo")
        .args(["copy", "--dest-tls-verify=false", &format!("oci:{}:0.1.0", layout.display()), &dest])
        .output()
        .unwrap();
    assert!(out.status.success(), "skopeo push: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn image_round_trips_through_a_registry_and_the_pulled_module_runs_in_envoy() {
    let dir = repo_root().join(".work").join(format!("oci-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let module = std::fs::read(wasm_path()).unwrap();

    // What `make image` writes, and the module digest `make render` writes for it (the
    // EnvoyFilter's Wasm extension configs).
    let layout = dir.join("layout");
    let image = Image::from_module(&module);
    image.write_layout(&layout, "0.1.0").unwrap();
    let catalog = Catalog::load(&default_catalog_path()).unwrap();
    let rendered_sha = envoy_filter(
        &catalog,
        Variant::EgressGateway,
        &catalog.envoy_stack(wasm_path(), &Default::default()),
        &image.digest(),
    )["spec"]["configPatches"][0]["patch"]["value"]["typed_config"]["config"]["vm_config"]["code"]["remote"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();

    let registry = start_registry(&dir);
    push(&registry, &layout, "switchyard/filter");

    // Pull as istio-agent does (go-containerregistry): manifest by tag, then the layer.
    let (status, head, manifest) =
        get(registry.addr, "/v2/switchyard/filter/manifests/0.1.0", MANIFEST_MEDIA_TYPE).unwrap();
    assert_eq!(status, 200, "{head}");
    let served_digest = sha256_hex(&manifest);
    assert!(head.contains(&format!("docker-content-digest: sha256:{served_digest}")), "{head}");
    assert_eq!(served_digest, rendered_sha, "the rendered sha256 must be the manifest digest istio-agent sees");
    let m: Value = serde_json::from_slice(&manifest).unwrap();
    let layers = m["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], LAYER_MEDIA_TYPE, "Istio's compat format: one OCI tar+gzip layer");
    let layer_digest = layers[0]["digest"].as_str().unwrap();
    let (status, _, layer) = get(registry.addr, &format!("/v2/switchyard/filter/blobs/{layer_digest}"), "*/*").unwrap();
    assert_eq!(status, 200);
    assert_eq!(format!("sha256:{}", sha256_hex(&layer)), layer_digest);
    let pulled = extract_module(&layer).unwrap();
    assert!(pulled == module, "pulled module differs from the built one ({} vs {} bytes)", pulled.len(), module.len());
    let pulled_path = dir.join("pulled.wasm");
    std::fs::write(&pulled_path, &pulled).unwrap();
    drop(registry);

    // The pulled module in Envoy, routing a request.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let provider = rt.block_on(MockProvider::start("p", 0, Behavior::default())).unwrap();
    let catalog = json!({
        "providers": {"p": {"cluster": "c_p", "authority": "p.example", "credential": {"value": "key-p"}}},
        "models": {"m/x": {"endpoints": [{"provider": "p", "upstream_model": "x-upstream", "pricing": {"prompt": 1, "completion": 1}}]}}
    });
    let mut cfg = StackConfig::new(catalog, vec![ClusterSpec { name: "c_p".into(), port: provider.addr.port() }], None);
    cfg.wasm = pulled_path;
    let envoy = Envoy::start(&cfg, "oci-pulled").unwrap();
    let r = rt
        .block_on(post_json(
            envoy.addr(),
            "/v1/chat/completions",
            &[],
            &json!({"model": "m/x", "messages": [{"role": "user", "content": "hi"}]}),
        ))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("p"));
    assert_eq!(provider.received()[0].json()["model"], "x-upstream");
}

/// `make image-native`'s library image through the same registry: pushed with skopeo, its
/// manifest digest the one the native manifests pin in the image volume's reference, and what
/// the registry serves (manifest, config, layer) unpacked by the Istio model's kubelet into the
/// volume: `libswitchyard.so` at its root, byte-identical to `make native`'s library.
#[test]
fn the_library_image_round_trips_through_a_registry_into_the_image_volume() {
    use switchyard_integration::envoy::{native_path, Build};
    use switchyard_integration::istio::variant_manifests;
    use switchyard_integration::istio_native::LIBRARY_VOLUME;
    use switchyard_integration::istio_sim::image_volumes::image_volume_files;
    use switchyard_integration::oci::LIBRARY_FILE;

    let dir = repo_root().join(".work").join(format!("oci-native-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let library = std::fs::read(native_path()).expect("the native library (run `make native`)");
    let image = Image::from_library(&library);
    let layout = dir.join("layout");
    image.write_layout(&layout, "0.1.0").unwrap();

    let registry = start_registry(&dir);
    push(&registry, &layout, "switchyard/native");
    let (status, head, manifest) =
        get(registry.addr, "/v2/switchyard/native/manifests/0.1.0", MANIFEST_MEDIA_TYPE).unwrap();
    assert_eq!(status, 200, "{head}");
    let served = sha256_hex(&manifest);
    assert_eq!(served, image.digest(), "the registry serves the manifest the renderer pins");
    let m: Value = serde_json::from_slice(&manifest).unwrap();
    let blob = |digest: &str| {
        let (status, _, bytes) = get(registry.addr, &format!("/v2/switchyard/native/blobs/{digest}"), "*/*").unwrap();
        assert_eq!(status, 200, "{digest}");
        assert_eq!(format!("sha256:{}", sha256_hex(&bytes)), digest);
        bytes
    };
    let config = blob(m["config"]["digest"].as_str().unwrap());
    let layer = blob(m["layers"][0]["digest"].as_str().unwrap());
    drop(registry);

    // The native manifests pin that digest, and the model's kubelet mounts what was pulled.
    let mut catalog = Catalog::load(&default_catalog_path()).unwrap();
    catalog.istio.build = Build::Native;
    catalog.istio.native_image = Some("registry.example/switchyard/native:0.1.0".into());
    let cfg = catalog.envoy_stack(wasm_path(), &Default::default());
    let patch = variant_manifests(&catalog, Variant::EgressGateway, &cfg, &served).keys_patch;
    let volume = patch["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == LIBRARY_VOLUME)
        .cloned()
        .unwrap();
    assert_eq!(volume["image"]["reference"], format!("registry.example/switchyard/native:0.1.0@sha256:{served}"));
    let pulled = Image { layer, config, manifest };
    let files = image_volume_files(LIBRARY_VOLUME, &volume, &[&pulled]).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].0, LIBRARY_FILE, "at the image root");
    assert!(files[0].1 == library, "the pulled library differs from the built one");
}
