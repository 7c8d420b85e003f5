//! Unary gRPC over the ABI's HTTP callout: the request's headers and 5-byte frame, and what
//! an answer means (the callout hands the module headers and body, no trailers).

/// The cluster and `:authority` a call's target names: the serialized `GrpcService` of
/// `limits::grpc_target` (`envoy_grpc { cluster_name = 1; authority = 2 }` as field 1), which
/// Envoy's Wasm host parses itself, or else the bare cluster name.
pub fn grpc_target_parts(target: &str) -> (String, String) {
    let b = target.as_bytes();
    let fields = |b: &[u8]| -> Option<Vec<(u8, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut at = 0usize;
        while at < b.len() {
            let tag = *b.get(at)?;
            let len = usize::from(*b.get(at + 1).filter(|l| **l < 0x80)?);
            out.push((tag, b.get(at + 2..at + 2 + len)?.to_vec()));
            at += 2 + len;
        }
        Some(out)
    };
    let parsed = fields(b).and_then(|outer| match outer.as_slice() {
        [(0x0a, inner)] => {
            let inner = fields(inner)?;
            let get =
                |tag: u8| inner.iter().find(|(t, _)| *t == tag).and_then(|(_, v)| String::from_utf8(v.clone()).ok());
            let cluster = get(0x0a)?;
            let authority = get(0x12).unwrap_or_else(|| cluster.clone());
            Some((cluster, authority))
        }
        _ => None,
    });
    parsed.unwrap_or_else(|| (target.to_string(), target.to_string()))
}

/// gRPC over an HTTP/2 callout: the request headers of a unary call.
pub fn grpc_headers<'a>(authority: &'a str, path: &'a str, timeout: &'a str) -> [(&'a str, &'a str); 6] {
    [
        (":method", "POST"),
        (":path", path),
        ("host", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", timeout),
    ]
}

/// The 5-byte length-prefixed message of a unary gRPC request (uncompressed).
pub fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + message.len());
    v.push(0);
    v.extend_from_slice(&u32::try_from(message.len()).unwrap_or(u32::MAX).to_be_bytes());
    v.extend_from_slice(message);
    v
}

/// The gRPC status and message of a unary answer: `grpc-status` from the headers when the
/// service answered trailers-only (an error); otherwise a 200 with a whole frame is OK (the
/// callout hands the module no trailers). Transport failures read as 14 (unavailable).
pub fn grpc_answer(http_ok: bool, http_status: Option<&str>, grpc_status: Option<&str>, body: &[u8]) -> (u32, Vec<u8>) {
    if !http_ok || http_status != Some("200") {
        return (14, Vec::new());
    }
    if let Some(s) = grpc_status {
        let code = s.trim().parse::<u32>().unwrap_or(2);
        if code != 0 {
            return (code, Vec::new());
        }
    }
    let Some(len) = body.get(1..5).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_be_bytes) else {
        return (13, Vec::new());
    };
    match body.get(5..5usize.saturating_add(len as usize)) {
        Some(m) if body.first() == Some(&0) => (0, m.to_vec()),
        _ => (13, Vec::new()),
    }
}

/// A gRPC timeout header value (`<n>m`).
pub fn grpc_timeout(ms: u32) -> String {
    format!("{}m", ms.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_frames_round_trip() {
        let framed = grpc_frame(b"abc");
        assert_eq!(framed, vec![0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(grpc_answer(true, Some("200"), None, &framed), (0, b"abc".to_vec()));
        assert_eq!(grpc_answer(true, Some("200"), Some("0"), &framed), (0, b"abc".to_vec()));
    }

    #[test]
    fn targets_name_their_cluster_and_authority() {
        let t = crate::limits::grpc_target("switchyard_ratelimit");
        assert_eq!(grpc_target_parts(&t), ("switchyard_ratelimit".to_string(), "switchyard_ratelimit".to_string()));
        let t = crate::limits::grpc_target("outbound|8081||rls.ns.svc.cluster.local");
        assert_eq!(
            grpc_target_parts(&t),
            ("outbound|8081||rls.ns.svc.cluster.local".to_string(), "rls.ns.svc.cluster.local".to_string())
        );
        assert_eq!(grpc_target_parts("plain"), ("plain".to_string(), "plain".to_string()));
    }

    #[test]
    fn grpc_failures_have_their_status() {
        assert_eq!(grpc_answer(false, None, None, &[]).0, 14);
        assert_eq!(grpc_answer(true, Some("503"), None, &[]).0, 14);
        assert_eq!(grpc_answer(true, Some("200"), Some("4"), &[]).0, 4);
        assert_eq!(grpc_answer(true, Some("200"), None, &[0, 0, 0, 0, 9, 1]).0, 13);
        assert_eq!(grpc_timeout(0), "1m");
    }
}
