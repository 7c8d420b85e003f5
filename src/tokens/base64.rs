//! Base64: the standard alphabet decoded (a PEM key's body) and the URL-safe one encoded
//! without padding (a JWT's parts, RFC 7515). Linear; no dependency.

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

fn value(c: u8) -> Option<u32> {
    match c {
        b'A'..=b'Z' => Some(u32::from(c - b'A')),
        b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
        b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Standard base64 (whitespace skipped, `=` padding optional at the end); None for any other
/// character or a dangling sixth bit group.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits, mut padded) = (0u32, 0u32, false);
    for c in text.bytes() {
        if c.is_ascii_whitespace() {
            continue;
        }
        if c == b'=' {
            padded = true;
            continue;
        }
        if padded {
            return None; // data after padding
        }
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (bits < 6).then_some(out)
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
