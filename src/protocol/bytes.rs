//! Little-endian byte reading for everything Switchyard decodes from bytes (the attempt plan,
//! outcome records, shared-data records, ABI header maps, numeric properties): a read past the
//! end yields `None`, never a panic.

/// The `u32` at byte `at`, if the slice holds it.
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// The `u64` at byte `at`, if the slice holds it (Envoy's numeric properties are 8 bytes).
pub fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Appends `s` as a JSON string, escaped, straight into `out` (no intermediate allocation: this
/// runs several times per request).
pub fn push_json_string(out: &mut Vec<u8>, s: &str) {
    // Writing a &str into a Vec cannot fail; if it ever did, the string is left empty.
    let start = out.len();
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"\"\"");
    }
}

/// Reads fields in order from the front of a slice.
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader(bytes)
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }

    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A UTF-8 string preceded by its `u16` length.
    pub fn string(&mut self) -> Option<String> {
        let n = usize::from(self.u16()?);
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_order_and_stops_at_the_end() {
        let mut b = vec![7u8];
        b.extend_from_slice(&0x0102u16.to_le_bytes());
        b.extend_from_slice(&0x0304_0506u32.to_le_bytes());
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(b"ok");
        let mut r = Reader::new(&b);
        assert_eq!((r.u8(), r.u16(), r.u32(), r.u64()), (Some(7), Some(0x0102), Some(0x0304_0506), Some(u64::MAX)));
        assert_eq!(r.string().as_deref(), Some("ok"));
        assert_eq!((r.u8(), r.take(0)), (None, Some(&[][..])));
        let mut short = Reader::new(&[1, 2, 3]);
        assert_eq!(short.u32(), None);
        assert_eq!(u32_at(&b, 3), Some(0x0304_0506));
        assert_eq!(u64_at(&b, 7), Some(u64::MAX));
        assert_eq!((u32_at(&b, b.len() - 3), u64_at(&b, usize::MAX - 2)), (None, None));
    }
}
