//! JSON for the module: every parse goes through `serde_json`'s string reader, every `Value`
//! written goes through its byte writer.
//!
//! `serde_json::from_slice` and `from_str` each instantiate the whole parser, and every type's
//! visitor, for their own reader, and `serde_json` itself always needs the string reader (it
//! reads raw values back from text). Byte input is checked as UTF-8 first and read as text, so
//! the module holds one copy of the parser.

use serde::Deserialize;

/// `serde_json::from_slice`, through the string reader. Input that is not UTF-8 is refused as
/// a whole, where the byte reader refused it only inside the strings it read (JSON is UTF-8:
/// RFC 8259 section 8.1).
pub fn from_slice<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(e) => Err(serde::de::Error::custom(format_args!("invalid UTF-8 at byte {}", e.valid_up_to()))),
    }
}

/// `value.to_string()`, through the byte writer: `Value`'s `Display` writes through a
/// formatter adapter, a second copy of the serializer in the module (about 5 KB of code).
pub fn to_text(value: &serde_json::Value) -> String {
    // A `Value` always serializes (its keys are strings), so the default is never taken.
    serde_json::to_string(value).unwrap_or_default()
}

/// Appends `value`'s JSON to `out` (what `out.extend_from_slice(value.to_string().as_bytes())`
/// writes, without the string in between).
pub fn write<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing to a Vec cannot fail; a value that cannot serialize (a map with non-string keys)
    // leaves `null`, never half a value.
    let start = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    #[test]
    fn bytes_read_as_text_give_what_the_byte_reader_gives() {
        let body = br#"{"model":"m","n":1.5,"s":"caf\u00e9 \u00e9","raw":[1,{"a":null}]}"#;
        let ours: Value = super::from_slice(body).unwrap();
        assert_eq!(ours, serde_json::from_slice::<Value>(body).unwrap());
        // Borrowing from the input still works: an unescaped string is not copied.
        let s: &str = super::from_slice(br#""plain""#).unwrap();
        assert_eq!(s, "plain");
        let bad = super::from_slice::<Value>(b"{\"a\":1,}").unwrap_err();
        assert_eq!(bad.to_string(), serde_json::from_slice::<Value>(b"{\"a\":1,}").unwrap_err().to_string());
    }

    #[test]
    fn bytes_that_are_not_utf8_are_an_error() {
        let e = super::from_slice::<Value>(b"{\"a\":\"\xff\"}").unwrap_err();
        assert_eq!(e.to_string(), "invalid UTF-8 at byte 6");
        assert!(serde_json::from_slice::<Value>(b"{\"a\":\"\xff\"}").is_err(), "serde_json refuses it too");
    }

    #[test]
    fn text_is_the_compact_json_display_gives() {
        let v = json!({"b": [1, 2.5, "x\"y"], "a": {"n": null, "t": true}, "u": "\u{e9}"});
        assert_eq!(super::to_text(&v), v.to_string());
        let mut out = b"data: ".to_vec();
        super::write(&mut out, &v);
        assert_eq!(out, format!("data: {v}").into_bytes());
    }

    #[test]
    fn a_value_that_cannot_serialize_is_written_as_null() {
        let mut bad = std::collections::BTreeMap::new();
        bad.insert(vec![1u8], 2);
        let mut out = b"[".to_vec();
        super::write(&mut out, &bad);
        assert_eq!(out, b"[null");
    }
}
