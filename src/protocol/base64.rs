//! Base64: the standard alphabet decoded (Bedrock's event payloads, a PEM key's body) and the
//! URL-safe one encoded without padding (a JWT's parts, RFC 7515). Linear; no dependency.

const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `data` in base64url without padding.
pub fn encode_url(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    let sym = |v: u32| URL.get((v & 63) as usize).map_or('A', |b| char::from(*b));
    for chunk in data.chunks(3) {
        let b = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let v = (b(0) << 16) | (b(1) << 8) | b(2);
        out.push(sym(v >> 18));
        out.push(sym(v >> 12));
        if chunk.len() > 1 {
            out.push(sym(v >> 6));
        }
        if chunk.len() > 2 {
            out.push(sym(v));
        }
    }
    out
}

/// Decodes standard base64 (with or without `=` padding). None on any other byte, a misplaced
/// pad, or a length no encoding has. Linear, panic-free.
pub fn decode_bytes(s: &[u8]) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let body = match s {
        [rest @ .., b'=', b'='] | [rest @ .., b'='] if s.len().is_multiple_of(4) => rest,
        _ => s,
    };
    if body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    for group in body.chunks(4) {
        let mut n = 0u32;
        for &c in group {
            n = (n << 6) | sextet(c)?;
        }
        // A short final group: 2 sextets hold one byte, 3 hold two; the bits left over must be 0.
        let (bytes, spare) = match group.len() {
            4 => (3, 0),
            3 => (2, 2),
            _ => (1, 4),
        };
        if n & ((1 << spare) - 1) != 0 {
            return None;
        }
        n >>= spare;
        let be = n.to_be_bytes();
        out.extend_from_slice(be.get(4 - bytes..).unwrap_or_default());
    }
    Some(out)
}

/// Standard base64 with whitespace between its characters (a PEM key's body): [`decode_bytes`]
/// of the text without its whitespace.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let compact: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    decode_bytes(&compact)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, enc) in cases {
            assert_eq!(encode_url(plain.as_bytes()), enc);
            assert_eq!(decode(enc).as_deref(), Some(plain.as_bytes()));
        }
        assert_eq!(decode("Zm9vYg==").as_deref(), Some(&b"foob"[..]));
        assert_eq!(decode("Zm9v\nYmFy\r\n").as_deref(), Some(&b"foobar"[..]));
        // URL-safe symbols where standard base64 has + and /.
        assert_eq!(encode_url(&[0xfb, 0xff]), "-_8");
        assert_eq!(decode("-_8"), None);
        assert_eq!(decode("Zg=a"), None);
        assert_eq!(decode("Z"), None);
    }
}
