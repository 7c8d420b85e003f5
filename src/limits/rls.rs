//! Envoy's rate limit service API (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`)
//! on the wire: the request encoded and the response decoded by hand (protobuf is a few lines
//! for these two messages; a protobuf crate would add tens of KB to the module). Decoding never
//! panics and reads each byte once: a malformed answer is `None`, which the caller treats as
//! the service failing.
//!
//! Field numbers (envoy/service/ratelimit/v3/rls.proto, envoy/extensions/common/ratelimit/v3):
//! `RateLimitRequest { domain = 1; descriptors = 2; hits_addend = 3 }`,
//! `RateLimitDescriptor { entries = 1 }`, `Entry { key = 1; value = 2 }`,
//! `RateLimitResponse { overall_code = 1; statuses = 2 }`,
//! `DescriptorStatus { code = 1; current_limit = 2; limit_remaining = 3; duration_until_reset = 4 }`,
//! `google.protobuf.Duration { seconds = 1; nanos = 2 }`.

/// The gRPC service and method Switchyard calls.
pub const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
pub const METHOD: &str = "ShouldRateLimit";

/// One descriptor: its entries, in order.
pub type Descriptor = Vec<(String, String)>;

/// `RateLimitResponse.Code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Unknown,
    Ok,
    OverLimit,
}

impl Code {
    fn of(v: u64) -> Code {
        match v {
            1 => Code::Ok,
            2 => Code::OverLimit,
            _ => Code::Unknown,
        }
    }
}

/// What one descriptor's status said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub remaining: u32,
    /// Seconds until the window frees capacity (rounded up), when the service said.
    pub reset_s: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub overall: Code,
    /// One per descriptor sent, in order, when the service returns them (envoyproxy/ratelimit
    /// does; a service that does not leaves this empty).
    pub statuses: Vec<Status>,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes_field(out: &mut Vec<u8>, field: u64, value: &[u8]) {
    varint(out, field << 3 | 2);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// `RateLimitRequest` with `hits_addend` applying to every descriptor.
pub fn encode_request(domain: &str, descriptors: &[Descriptor], hits_addend: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + descriptors.len() * 64);
    bytes_field(&mut out, 1, domain.as_bytes());
    let mut descriptor = Vec::new();
    let mut entry = Vec::new();
    for d in descriptors {
        descriptor.clear();
        for (k, v) in d {
            entry.clear();
            bytes_field(&mut entry, 1, k.as_bytes());
            bytes_field(&mut entry, 2, v.as_bytes());
            bytes_field(&mut descriptor, 1, &entry);
        }
        bytes_field(&mut out, 2, &descriptor);
    }
    if hits_addend > 0 {
        varint(&mut out, 3 << 3);
        varint(&mut out, u64::from(hits_addend));
    }
    out
}

/// Reads protobuf fields in order.
struct Fields<'a>(&'a [u8]);

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.0.split_first()?;
            self.0 = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    /// The next field, or `Some(None)` at the end; `None` when malformed.
    fn next(&mut self) -> Option<Option<(u64, Value<'a>)>> {
        if self.0.is_empty() {
            return Some(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed
            }
            2 => {
                let n = usize::try_from(self.varint()?).ok()?;
                Value::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Value::Fixed
            }
            _ => return None,
        };
        Some(Some((key >> 3, value)))
    }
}

fn duration_s(b: &[u8]) -> Option<u64> {
    let (mut seconds, mut nanos) = (0u64, 0u64);
    let mut f = Fields(b);
    while let Some((field, value)) = f.next()? {
        match (field, value) {
            (1, Value::Varint(v)) => seconds = v,
            (2, Value::Varint(v)) => nanos = v,
            _ => {}
        }
    }
    // Negative durations (two's complement) mean nothing useful here.
    (seconds < i64::MAX as u64).then(|| seconds + u64::from(nanos > 0 && nanos < 1_000_000_000))
}

fn status(b: &[u8]) -> Option<Status> {
    let mut s = Status { code: Code::Unknown, remaining: 0, reset_s: None };
    let mut f = Fields(b);
    while let Some((field, value)) = f.next()? {
        match (field, value) {
            (1, Value::Varint(v)) => s.code = Code::of(v),
            (3, Value::Varint(v)) => s.remaining = u32::try_from(v).unwrap_or(u32::MAX),
            (4, Value::Bytes(d)) => s.reset_s = Some(duration_s(d)?),
            _ => {}
        }
    }
    Some(s)
}

/// Decodes a `RateLimitResponse`; `None` when the bytes are not one.
pub fn decode_response(b: &[u8]) -> Option<Response> {
    let mut r = Response { overall: Code::Unknown, statuses: Vec::new() };
    let mut f = Fields(b);
    while let Some((field, value)) = f.next()? {
        match (field, value) {
            (1, Value::Varint(v)) => r.overall = Code::of(v),
            (2, Value::Bytes(s)) => r.statuses.push(status(s)?),
            _ => {}
        }
    }
    Some(r)
}

/// Encodes a response (the test service and the tests use it; the filter only decodes).
pub fn encode_response(r: &Response) -> Vec<u8> {
    let code = |c: Code| match c {
        Code::Unknown => 0,
        Code::Ok => 1,
        Code::OverLimit => 2,
    };
    let mut out = Vec::new();
    varint(&mut out, 1 << 3);
    varint(&mut out, code(r.overall));
    for s in &r.statuses {
        let mut st = Vec::new();
        varint(&mut st, 1 << 3);
        varint(&mut st, code(s.code));
        varint(&mut st, 3 << 3);
        varint(&mut st, u64::from(s.remaining));
        if let Some(reset) = s.reset_s {
            let mut d = Vec::new();
            varint(&mut d, 1 << 3);
            varint(&mut d, reset);
            bytes_field(&mut st, 4, &d);
        }
        bytes_field(&mut out, 2, &st);
    }
    out
}

/// Decodes a `RateLimitRequest` (the test service uses it): domain, descriptors, hits_addend.
pub fn decode_request(b: &[u8]) -> Option<(String, Vec<Descriptor>, u32)> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
    let (mut domain, mut descriptors, mut hits) = (String::new(), Vec::new(), 0u32);
    let mut f = Fields(b);
    while let Some((field, value)) = f.next()? {
        match (field, value) {
            (1, Value::Bytes(d)) => domain = text(d)?,
            (2, Value::Bytes(d)) => {
                let mut entries = Vec::new();
                let mut df = Fields(d);
                while let Some((field, value)) = df.next()? {
                    if let (1, Value::Bytes(e)) = (field, value) {
                        let (mut k, mut v) = (String::new(), String::new());
                        let mut ef = Fields(e);
                        while let Some((field, value)) = ef.next()? {
                            match (field, value) {
                                (1, Value::Bytes(x)) => k = text(x)?,
                                (2, Value::Bytes(x)) => v = text(x)?,
                                _ => {}
                            }
                        }
                        entries.push((k, v));
                    }
                }
                descriptors.push(entries);
            }
            (3, Value::Varint(v)) => hits = u32::try_from(v).ok()?,
            _ => {}
        }
    }
    Some((domain, descriptors, hits))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(entries: &[(&str, &str)]) -> Descriptor {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn request_round_trips_and_matches_protobuf_bytes() {
        let ds = vec![d(&[("switchyard_limit", "team"), ("subject", "search")]), d(&[("k", "é")])];
        let b = encode_request("switchyard", &ds, 300);
        assert_eq!(decode_request(&b), Some(("switchyard".to_string(), ds, 300)));
        // Known bytes: domain "d", one descriptor with entry (a, b), hits 1.
        let one = encode_request("d", &[d(&[("a", "b")])], 1);
        assert_eq!(one, [0x0a, 1, b'd', 0x12, 8, 0x0a, 6, 0x0a, 1, b'a', 0x12, 1, b'b', 0x18, 1]);
        // hits_addend 0 is the protobuf default: not written.
        assert!(!encode_request("d", &[], 0).contains(&0x18));
    }

    #[test]
    fn response_decodes_statuses_and_skips_unknown_fields() {
        let r = Response {
            overall: Code::OverLimit,
            statuses: vec![
                Status { code: Code::Ok, remaining: 5, reset_s: None },
                Status { code: Code::OverLimit, remaining: 0, reset_s: Some(42) },
            ],
        };
        let mut b = encode_response(&r);
        assert_eq!(decode_response(&b), Some(r.clone()));
        // Unknown fields of every wire type are skipped (raw_body = 5, a fixed64, a fixed32).
        b.extend_from_slice(&[0x2a, 2, b'h', b'i', 0x39, 0, 0, 0, 0, 0, 0, 0, 0, 0x45, 0, 0, 0, 0]);
        assert_eq!(decode_response(&b), Some(r));
        assert_eq!(decode_response(&[]), Some(Response { overall: Code::Unknown, statuses: vec![] }));
    }

    #[test]
    fn malformed_responses_are_none_never_a_panic() {
        let good = encode_response(&Response {
            overall: Code::Ok,
            statuses: vec![Status { code: Code::Ok, remaining: 1, reset_s: Some(1) }],
        });
        for cut in 0..good.len() {
            let _ = decode_response(&good[..cut]);
        }
        assert_eq!(decode_response(&[0x0a, 0xff]), None);
        assert_eq!(decode_response(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(decode_response(&[0x0b]), None);
        let mut x: u64 = 7;
        for _ in 0..2000 {
            let bytes: Vec<u8> = (0..(x % 40) as usize)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = decode_response(&bytes);
            let _ = decode_request(&bytes);
        }
    }
}
