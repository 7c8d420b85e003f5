//! Encodings of the proxy-wasm ABI (header maps, property paths), decoded without panicking:
//! header values are bytes, not necessarily UTF-8 (HTTP/1.1 allows obs-text), and a malformed
//! buffer from the host yields what could be read rather than a trap.

/// Serializes header pairs: `count u32`, then `(name_len u32, value_len u32)` per pair, then
/// `name \0 value \0` per pair (all little-endian).
pub fn serialize_map(map: &[(&str, &str)]) -> Vec<u8> {
    let size = 4 + map.iter().map(|(k, v)| k.len() + v.len() + 10).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(map.len() as u32).to_le_bytes());
    for (k, v) in map {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in map {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    super::bytes::u32_at(b, at).map(|n| n as usize)
}

/// Inverse of [`serialize_map`]; invalid UTF-8 becomes U+FFFD, truncation ends the list.
pub fn deserialize_map(b: &[u8]) -> Vec<(String, String)> {
    let Some(count) = u32_at(b, 0) else { return Vec::new() };
    let mut out = Vec::with_capacity(count.min(256));
    let Some(mut p) = count.checked_mul(8).and_then(|n| n.checked_add(4)) else { return out };
    for n in 0..count {
        let s = 4 + n * 8;
        let (Some(klen), Some(vlen)) = (u32_at(b, s), u32_at(b, s + 4)) else { break };
        let Some(key) = p.checked_add(klen).and_then(|end| b.get(p..end)) else { break };
        p += klen + 1;
        let Some(value) = p.checked_add(vlen).and_then(|end| b.get(p..end)) else { break };
        p += vlen + 1;
        out.push((String::from_utf8_lossy(key).into_owned(), String::from_utf8_lossy(value).into_owned()));
    }
    out
}

/// A property path (`["upstream", "address"]`) as the host expects it: segments joined by NUL.
pub fn property_path(path: &[&str]) -> Vec<u8> {
    path.iter().map(|p| p.as_bytes()).collect::<Vec<_>>().join(&0u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_round_trip() {
        let m = [(":status", "200"), ("x-a", ""), ("content-type", "application/json")];
        let got = deserialize_map(&serialize_map(&m));
        let want: Vec<(String, String)> = m.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(got, want);
        assert!(deserialize_map(&[]).is_empty());
    }

    #[test]
    fn non_utf8_and_truncated_maps_do_not_panic() {
        let mut b = serialize_map(&[("x-bin", "ab")]);
        let v = b.len() - 3; // first byte of the value
        b[v] = 0xff;
        assert_eq!(deserialize_map(&b), vec![("x-bin".to_string(), "\u{fffd}b".to_string())]);
        let full = serialize_map(&[("a", "1"), ("b", "2")]);
        let whole = deserialize_map(&full);
        assert_eq!(whole.len(), 2);
        // A truncated map never invents pairs: it decodes to a leading part of the whole.
        for cut in 0..full.len() {
            let got = deserialize_map(&full[..cut]);
            assert!(whole.starts_with(&got), "cut {cut}: {got:?}");
        }
        // A count far larger than the buffer.
        assert!(deserialize_map(&[0xff, 0xff, 0xff, 0xff]).is_empty());
    }

    #[test]
    fn property_paths() {
        assert_eq!(property_path(&["upstream", "address"]), b"upstream\0address".to_vec());
        assert_eq!(property_path(&["plugin_root_id"]), b"plugin_root_id".to_vec());
        assert!(property_path(&[]).is_empty());
    }
}
