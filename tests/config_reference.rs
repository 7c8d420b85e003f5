//! Every field of the plugin configuration is documented in the configuration reference
//! (`docs/configuration.md`): each field a `Raw*`/`Pricing` struct deserializes appears
//! there as a backticked name or path ending in it (`credential.header`, `rules[].jwt_claim.claim`).
//! A new field without a reference row fails here.

use std::path::Path;

/// (struct, field names as the configuration spells them) of the deserialized structs in `src`.
fn config_fields(src: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = src.lines().peekable();
    let mut derive_deserialize = false;
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with("#[derive(") {
            derive_deserialize = t.contains("Deserialize");
            continue;
        }
        let Some(rest) = without_visibility(t).strip_prefix("struct ") else { continue };
        if !derive_deserialize || !rest.ends_with('{') {
            continue;
        }
        let name = rest.trim_end_matches('{').trim().to_string();
        let mut rename: Option<String> = None;
        for l in lines.by_ref() {
            let l = l.trim();
            if l == "}" {
                break;
            }
            if let Some(r) = l.split("rename = \"").nth(1).and_then(|r| r.split('"').next()) {
                rename = Some(r.to_string());
            }
            let field = without_visibility(l);
            if let Some((f, _)) = field.split_once(':') {
                if !f.is_empty() && f.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()) {
                    out.push((name.clone(), rename.take().unwrap_or_else(|| f.to_string())));
                }
            }
        }
        derive_deserialize = false;
    }
    out
}

/// `line` without a leading `pub`, `pub(crate)`, `pub(super)` or `pub(in ...)`.
fn without_visibility(line: &str) -> &str {
    match line.strip_prefix("pub") {
        Some(rest) if rest.starts_with(' ') => rest.trim_start(),
        Some(rest) if rest.starts_with('(') => rest.split_once(')').map_or(line, |(_, r)| r.trim_start()),
        _ => line,
    }
}

/// Whether `field` is documented: a backticked token in the reference that is a dotted path
/// with the field as one of its segments (an object field is documented by its members' rows,
/// `credential.header`; `[]` marks a list).
fn documented(reference: &str, field: &str) -> bool {
    reference
        .split('`')
        .skip(1)
        .step_by(2)
        .any(|tok| !tok.contains(' ') && tok.split('.').any(|seg| seg.trim_end_matches("[]") == field))
}

#[test]
fn every_configuration_field_is_in_the_reference() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let reference = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    assert!(reference.len() > 1000, "no configuration reference in docs/configuration.md");
    // The configuration's sections (`src/config/`, one module each), then the other structs.
    let mut files: Vec<_> = std::fs::read_dir(root.join("src/config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    assert!(files.len() > 3, "src/config/ no longer holds the configuration's sections");
    files.extend(["src/routing/policy.rs", "src/forwarding.rs"].map(|f| root.join(f)));
    // Each provider kind's own options (`kind_options`).
    let mut kinds: Vec<_> = std::fs::read_dir(root.join("src/providers"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    kinds.sort();
    files.extend(kinds);
    let mut fields = Vec::new();
    for file in &files {
        fields.extend(config_fields(&std::fs::read_to_string(file).unwrap()));
    }
    assert!(fields.len() > 60, "found only {} fields: the parser no longer sees the structs", fields.len());
    let missing: Vec<String> =
        fields.iter().filter(|(_, f)| !documented(&reference, f)).map(|(s, f)| format!("{s}.{f}")).collect();
    assert!(missing.is_empty(), "configuration fields missing from docs/configuration.md: {missing:?}");
}

#[test]
fn the_field_finder_sees_fields_renames_and_skips_other_structs() {
    let src = "#[derive(Deserialize)]\nstruct RawA {\n    #[serde(default)]\n    a_b: u8,\n    #[serde(rename = \"c\")]\n    cc: u8,\n}\n#[derive(Debug)]\nstruct Other {\n    x: u8,\n}\n";
    assert_eq!(config_fields(src), [("RawA".to_string(), "a_b".to_string()), ("RawA".to_string(), "c".to_string())]);
    let visible = "#[derive(Deserialize)]\npub(super) struct RawB {\n    pub(crate) d: u8,\n    pub e: u8,\n}\n";
    assert_eq!(config_fields(visible), [("RawB".to_string(), "d".to_string()), ("RawB".to_string(), "e".to_string())]);
    assert!(documented("| `credential.header` |", "header"));
    assert!(documented("| `rules[].jwt_claim.claim` |", "claim"));
    assert!(documented("| `credential.header` |", "credential"));
    assert!(!documented("| `credential.header` |", "eader"));
    assert!(!documented("see `a header` here", "header"));
}
