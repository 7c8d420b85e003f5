//! `upstream_headers`: which caller headers may reach a provider (see `forwarding`).

use serde::Deserialize;

use super::{err, ConfigError};
use crate::forwarding::{valid_pattern, HeaderPolicy};

/// Caller headers forwarded to providers (see `forwarding`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstreamHeaders {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Vec<String>,
}

pub(super) fn compile_upstream_headers(h: &RawUpstreamHeaders) -> Result<HeaderPolicy, ConfigError> {
    let check = |list: &[String], field: &str| -> Result<Vec<String>, ConfigError> {
        list.iter()
            .enumerate()
            .map(|(i, p)| {
                let p = p.to_ascii_lowercase();
                if valid_pattern(&p) {
                    Ok(p)
                } else {
                    Err(err(
                        format!("upstream_headers.{field}[{i}]"),
                        "must be a header name (letters, digits, - _ .), optionally with `*` wildcards",
                    ))
                }
            })
            .collect()
    };
    let allow = match &h.allow {
        Some(list) => Some(check(list, "allow")?),
        None => None,
    };
    Ok(HeaderPolicy { allow, deny: check(&h.deny, "deny")? })
}
