//! The plugin configuration parser and compiler: any input is a catalog or a ConfigError.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::config::Catalog;

fuzz_target!(|json: &[u8]| {
    if let Ok(c) = Catalog::from_json(json, &|name| (name.len() < 64).then(|| format!("secret-{name}"))) {
        // A compiled catalog never shows a secret in its Debug output.
        let shown = format!("{c:?}");
        assert!(!shown.contains("secret-"), "Debug output shows a credential");
    }
});
