//! Presets: what a preset sets, how the request narrows it, and the errors that name it.

use super::*;
use crate::api::Surface;
use crate::routing::request::SortBy;

fn catalog() -> Catalog {
    let c = r#"{"providers": {"aa": {"cluster": "c_aa", "authority": "aa"}, "bb": {"cluster": "c_bb", "authority": "bb"},
                              "cc": {"cluster": "c_cc", "authority": "cc"}},
               "models": {"m/one": {"endpoints": [{"provider": "aa", "pricing": {"prompt": 1, "completion": 1}},
                                                  {"provider": "bb", "pricing": {"prompt": 2, "completion": 2}}]},
                          "m/two": {"endpoints": [{"provider": "cc", "pricing": {"prompt": 1, "completion": 1}}]}}}"#;
    Catalog::from_json(c.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("{e}"))
}

fn presets(json: &str) -> Result<Presets, ConfigError> {
    Presets::from_json(format!(r#"{{"presets": {json}}}"#).as_bytes(), &catalog())
}

const WRITER: &str = r#"{"writer": {"model": "m/one", "models": ["m/two"],
    "provider": {"only": ["aa", "bb"], "sort": "price", "max_price": {"prompt": 5}},
    "parameters": {"temperature": 0.2, "max_tokens": 300}}}"#;

fn applied<'a>(p: &'a Presets, body: &'a str) -> Result<ChatRequest<'a>, ApiError> {
    let mut req = ChatRequest::parse_for(body.as_bytes(), &Surface::OPENAI, None)?;
    p.apply(&mut req)?;
    Ok(req)
}

#[test]
fn a_preset_named_as_the_model_sets_the_routing_and_the_missing_parameters() {
    let p = presets(WRITER).unwrap();
    let r = applied(&p, r#"{"model": "@preset/writer", "messages": [], "temperature": 0.9}"#).unwrap();
    assert_eq!((r.model.as_deref(), r.models.clone()), (Some("m/one"), vec!["m/two".to_string()]));
    assert_eq!(r.provider.only, Some(vec!["aa".to_string(), "bb".to_string()]));
    assert_eq!(r.provider.sort.map(|s| s.by), Some(SortBy::Price));
    // The request's own temperature wins; the preset adds what the request does not set.
    assert_eq!(r.fields.get("temperature").map(|v| v.get()), Some("0.9"));
    assert_eq!(r.fields.get("max_tokens").map(|v| v.get()), Some("300"));
    assert!(r.parameters.contains(&"max_tokens".to_string()));
    assert_eq!(r.preset.as_deref(), Some("writer"));
}

#[test]
fn the_request_narrows_the_preset_and_keeps_its_own_model() {
    let p = presets(WRITER).unwrap();
    // `<model>@preset/<name>`: the request's model, the preset's other settings.
    let r = applied(&p, r#"{"model": "m/two@preset/writer", "messages": []}"#).unwrap();
    assert_eq!(r.model.as_deref(), Some("m/two"));
    // A `preset` field beside the request's own model and provider: the request narrows.
    let r = applied(
        &p,
        r#"{"model": "m/one", "preset": "writer", "messages": [],
            "provider": {"only": ["bb", "cc"], "max_price": {"prompt": 9}, "zdr": true, "sort": "latency"}}"#,
    )
    .unwrap();
    assert_eq!(r.model.as_deref(), Some("m/one"));
    assert_eq!(r.provider.only, Some(vec!["bb".to_string()]), "only is intersected");
    assert_eq!(r.provider.max_price.prompt, Some(5.0), "the lower ceiling holds");
    assert!(r.provider.zdr);
    assert_eq!(
        r.provider.sort.map(|s| s.by),
        Some(SortBy::Latency),
        "an ordering the request sets replaces the preset's"
    );
    // `only` meets as a policy's does: a base name and one of its variants meet in the variant.
    let v = presets(r#"{"v": {"model": "m/one", "provider": {"only": ["aa", "cc"]}}}"#).unwrap();
    let r = applied(&v, r#"{"model": "@preset/v", "messages": [], "provider": {"only": ["aa/fast", "bb"]}}"#).unwrap();
    assert_eq!(r.provider.only, Some(vec!["aa/fast".to_string()]));
    // The request's own fallbacks replace the preset's.
    let r = applied(&p, r#"{"model": "@preset/writer", "models": ["m/one"], "messages": []}"#).unwrap();
    assert_eq!(r.models, vec!["m/one".to_string()]);
}

#[test]
fn unknown_presets_and_bad_presets_are_named() {
    let p = presets(WRITER).unwrap();
    let e = applied(&p, r#"{"model": "@preset/nope", "messages": []}"#).err().unwrap();
    assert_eq!((e.status, e.code, e.param.as_deref()), (400, "preset_not_found", Some("model")));
    assert!(e.message.contains("\"nope\""), "{}", e.message);
    let e = applied(&p, r#"{"model": "m/one", "preset": "nope", "messages": []}"#).err().unwrap();
    assert_eq!(e.param.as_deref(), Some("preset"));
    let e = applied(&p, r#"{"model": "m/one", "preset": 3, "messages": []}"#).err().unwrap();
    assert_eq!(e.param.as_deref(), Some("preset"));
    let reason = |json: &str| presets(json).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(reason(r#"{"w": {"model": "m/none"}}"#).contains("presets[\"w\"].model"));
    assert!(reason(r#"{"w": {"models": ["m/one", "x/y"]}}"#).contains("presets[\"w\"].models[1]"));
    assert!(reason(r#"{"w": {"provider": {"sort": "vibes"}}}"#).contains("presets[\"w\"].provider.sort"));
    assert!(reason(r#"{"w": {"parameters": {"messages": []}}}"#).contains("presets[\"w\"].parameters.messages"));
    assert!(reason(r#"{"w": {"colour": 1}}"#).contains("colour"));
    assert!(reason(r#"{"a b": {}}"#).contains("presets[\"a b\"]"));
    // A preset without a model, used without one.
    let p = presets(r#"{"bare": {"parameters": {"temperature": 0}}}"#).unwrap();
    let e = applied(&p, r#"{"model": "@preset/bare", "messages": []}"#).err().unwrap();
    assert!(e.message.contains("names no model"), "{}", e.message);
}
