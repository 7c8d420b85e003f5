//! JSON reading for the module: every parse goes through `serde_json`'s string reader.
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
}
