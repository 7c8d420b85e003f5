//! The AWS event stream decoder (`switchyard::providers::bedrock::eventstream`): any bytes, split
//! anywhere, never panic; the messages and the error do not depend on where the input was split;
//! and every message decoded re-encodes to the bytes it came from. The first byte picks the split
//! size, the second the maximum frame (in 64-byte units). The ConverseStream converter over the
//! same bytes never panics and writes the same SSE however they are split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::providers::bedrock::converse_stream::Converter;
use switchyard::providers::bedrock::eventstream::{encode, Decoder, Message};

fn run(body: &[u8], split: usize, max: usize) -> (Vec<Message>, Result<(), String>) {
    let mut d = Decoder::with_max_frame(max);
    let mut out = Vec::new();
    for chunk in body.chunks(split.max(1)) {
        if d.feed(chunk, &mut out).is_err() {
            break;
        }
    }
    (out, d.finish().map_err(|e| e.to_string()))
}

fuzz_target!(|data: &[u8]| {
    let [split, max, body @ ..] = data else { return };
    let max = (usize::from(*max) + 1) * 64;
    let whole = run(body, body.len(), max);
    let pieces = run(body, usize::from(*split), max);
    assert_eq!(whole, pieces, "the result depends on how the input was split");
    let mut again = Vec::new();
    for m in &whole.0 {
        let headers: Vec<(&str, _)> = m.headers.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        again.extend(encode(&headers, &m.payload));
    }
    assert!(body.starts_with(&again), "a decoded message does not re-encode to its bytes");
    let convert = |n: usize| {
        body.chunks(n.max(1)).fold((Converter::new("m", "i"), Vec::new()), |(mut c, mut out), p| {
            out.extend(c.feed(p));
            (c, out)
        })
    };
    assert_eq!(convert(body.len()).1, convert(usize::from(*split)).1, "the converted stream depends on the split");
});
