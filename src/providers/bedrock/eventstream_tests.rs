use super::*;
use serde_json::Value as Json;

/// Frames made in Python and checked with botocore's decoder (`testdata/make_vectors.py`).
const VECTORS: &str = include_str!("testdata/vectors.json");

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn vectors(set: &str) -> Vec<Json> {
    let v: Json = serde_json::from_str(VECTORS).unwrap();
    v[set].as_array().unwrap().clone()
}

/// A vector's recorded header as this module's value.
fn header(h: &Json) -> (String, Value) {
    let name = h[0].as_str().unwrap().to_string();
    let v = &h[2];
    let value = match h[1].as_u64().unwrap() {
        0 | 1 => Value::Bool(v.as_bool().unwrap()),
        2 => Value::Byte(v.as_i64().unwrap() as i8),
        3 => Value::Short(v.as_i64().unwrap() as i16),
        4 => Value::Int(v.as_i64().unwrap() as i32),
        5 => Value::Long(v.as_i64().unwrap()),
        6 => Value::Bytes(unhex(v.as_str().unwrap())),
        7 => Value::String(v.as_str().unwrap().to_string()),
        8 => Value::Timestamp(v.as_i64().unwrap()),
        9 => Value::Uuid(unhex(v.as_str().unwrap()).try_into().unwrap()),
        t => panic!("type {t}"),
    };
    (name, value)
}

fn expected(v: &Json) -> Message {
    Message {
        headers: v["headers"].as_array().unwrap().iter().map(header).collect(),
        payload: unhex(v["payload"].as_str().unwrap()),
    }
}

/// Feeds `chunk`, the messages it completes (none if it errs).
fn take(d: &mut Decoder, chunk: &[u8]) -> Result<Vec<Message>, Error> {
    let mut out = Vec::new();
    d.feed(chunk, &mut out)?;
    Ok(out)
}

/// Decodes `stream` fed in chunks of `size` bytes.
fn decode_in(stream: &[u8], size: usize) -> Result<Vec<Message>, Error> {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    for c in stream.chunks(size) {
        out.extend(take(&mut d, c)?);
    }
    d.finish()?;
    Ok(out)
}

#[test]
fn crc32_is_iso_hdlc() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    // AWS's empty message: prelude and message CRCs.
    assert_eq!(crc32(&[0, 0, 0, 0x10, 0, 0, 0, 0]), 0x05C2_48EB);
}

#[test]
fn botocore_vectors_decode_whole_and_split_anywhere() {
    let good = vectors("good");
    assert!(good.len() >= 7);
    for v in &good {
        let name = v["name"].as_str().unwrap();
        let frame = unhex(v["frame"].as_str().unwrap());
        let want = expected(v);
        assert_eq!(decode_in(&frame, frame.len()).unwrap(), vec![want.clone()], "{name}");
        // Every split into two chunks.
        for at in 0..=frame.len() {
            let mut d = Decoder::new();
            let mut got = take(&mut d, &frame[..at]).unwrap();
            got.extend(take(&mut d, &frame[at..]).unwrap());
            assert_eq!(got, vec![want.clone()], "{name} split at {at}");
            assert_eq!(d.pending(), 0);
        }
        // The encoder writes the same bytes as the Python one.
        let headers: Vec<(&str, Value)> = want.headers.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        assert_eq!(encode(&headers, &want.payload), frame, "{name}");
    }
    // All of them as one stream, in chunks of every size.
    let stream: Vec<u8> = good.iter().flat_map(|v| unhex(v["frame"].as_str().unwrap())).collect();
    let want: Vec<Message> = good.iter().map(expected).collect();
    for size in 1..=stream.len() {
        assert_eq!(decode_in(&stream, size).unwrap(), want, "chunks of {size}");
    }
}

#[test]
fn bedrock_messages_say_what_they_are() {
    let good = vectors("good");
    let by_name = |n: &str| expected(good.iter().find(|v| v["name"] == n).unwrap());
    let chunk = by_name("chunk_text_delta");
    assert_eq!(chunk.kind(), Kind::Event("chunk"));
    assert_eq!(chunk.string(":content-type"), Some("application/json"));
    let payload: Json = serde_json::from_slice(&chunk.payload).unwrap();
    assert!(payload["bytes"].is_string());
    assert_eq!(by_name("throttling_exception").kind(), Kind::Exception("throttlingException"));
    assert_eq!(by_name("model_stream_error_exception").kind(), Kind::Exception("modelStreamErrorException"));
    assert_eq!(by_name("empty").kind(), Kind::Unknown);
    // The helpers build what the vectors hold.
    let raw = unhex(good.iter().find(|v| v["name"] == "chunk_text_delta").unwrap()["frame"].as_str().unwrap());
    assert_eq!(event("chunk", &chunk.payload), raw);
    let error =
        encode(&[(":message-type", Value::String("error".into())), (":error-code", Value::String("E".into()))], b"");
    assert_eq!(decode_in(&error, 3).unwrap()[0].kind(), Kind::Error("E"));
}

#[test]
fn botocore_rejects_what_the_decoder_rejects() {
    for v in vectors("bad") {
        let name = v["name"].as_str().unwrap();
        let frame = unhex(v["frame"].as_str().unwrap());
        let e = decode_in(&frame, 5).unwrap_err();
        let ok = match name {
            "prelude_crc" => matches!(e, Error::PreludeCrc { .. }),
            "message_crc" | "message_crc_field" => matches!(e, Error::MessageCrc { .. }),
            // 200 KiB: over a decoder limited to 64 KiB, refused from the prelude alone.
            "headers_too_long" => {
                let mut d = Decoder::with_max_frame(64 * 1024);
                matches!(take(&mut d, &frame), Err(Error::TooLong { total: 204800, .. }))
            }
            _ => panic!("unknown vector {name}"),
        };
        assert!(ok, "{name}: {e:?}");
    }
}

#[test]
fn an_error_ends_the_stream_for_good() {
    let good = event("chunk", b"{}");
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 6] ^= 0x20;
    let mut d = Decoder::new();
    let mut stream = good.clone();
    stream.extend_from_slice(&bad);
    stream.extend_from_slice(&good);
    // The good frame before the bad one is delivered, then only the error.
    d.push(&stream);
    assert!(d.next_message().unwrap().is_some());
    let e = d.next_message().unwrap_err();
    assert!(matches!(e, Error::MessageCrc { .. }), "{e}");
    assert_eq!(take(&mut d, &good), Err(e.clone()));
    assert_eq!(d.finish(), Err(e));
    assert_eq!(d.pending(), 0);
    // Fed as one chunk: the message before the bad one is still handed out.
    let mut out = Vec::new();
    let e = Decoder::new().feed(&stream, &mut out).unwrap_err();
    assert!(matches!(e, Error::MessageCrc { .. }), "{e}");
    assert_eq!(out.len(), 1);
}

/// A frame with valid CRCs around the given lengths and headers block.
fn raw_frame(total: u32, headers_len: u32, rest: &[u8]) -> Vec<u8> {
    let mut out = total.to_be_bytes().to_vec();
    out.extend_from_slice(&headers_len.to_be_bytes());
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out.extend_from_slice(rest);
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out
}

#[test]
fn lengths_and_headers_are_checked_never_trusted() {
    // Total below the overhead; headers longer than the frame.
    for (total, headers) in [(15, 0), (0, 0), (16, 1), (20, 5), (u32::MAX, u32::MAX)] {
        let e = take(&mut Decoder::new(), &raw_frame(total, headers, b"")).unwrap_err();
        assert_eq!(e, Error::BadLength { total, headers }, "{total} {headers}");
    }
    // Over the maximum: refused from the 12 bytes of prelude, nothing more buffered.
    let mut d = Decoder::with_max_frame(1024);
    let e = take(&mut d, &raw_frame(1025, 0, b"")[..12]).unwrap_err();
    assert_eq!(e, Error::TooLong { total: 1025, max: 1024 });
    assert_eq!(
        take(&mut Decoder::new(), &raw_frame(u32::MAX - 1, 0, b"")[..12]).unwrap_err(),
        Error::TooLong { total: u32::MAX - 1, max: DEFAULT_MAX_FRAME }
    );
    // Header blocks cut short, of an unknown type, or not UTF-8.
    for block in [
        &[5u8, b'a'][..],
        &[1, b'a', 10],
        &[1, b'a', 7, 0, 3, b'x'],
        &[1, b'a', 4, 0, 0],
        &[1, 0xff, 0],
        &[1, b'a', 7, 0, 1, 0xff],
        &[1, b'a', 9, 1, 2, 3],
    ] {
        let frame = raw_frame((16 + block.len()) as u32, block.len() as u32, block);
        assert_eq!(take(&mut Decoder::new(), &frame), Err(Error::BadHeader), "{block:?}");
    }
    // A stream that stops inside a frame.
    let frame = event("chunk", b"{}");
    let mut d = Decoder::new();
    assert_eq!(take(&mut d, &frame[..20]), Ok(vec![]));
    assert_eq!(d.finish(), Err(Error::Truncated(20)));
    assert_eq!(take(&mut d, &frame[20..]).unwrap().len(), 1);
    assert_eq!(d.finish(), Ok(()));
}

#[test]
fn a_long_stream_fed_a_byte_at_a_time_keeps_one_frame_buffered() {
    let frame = event("chunk", &[b'x'; 300]);
    let mut d = Decoder::new();
    let mut n = 0;
    for _ in 0..200 {
        for b in frame.chunks(1) {
            n += take(&mut d, b).unwrap().len();
            assert!(d.buf.len() <= frame.len());
        }
    }
    assert_eq!(n, 200);
}

/// The fuzz target's properties on mutations of the vectors (a cheap stand-in for `make fuzz`):
/// no panic, the same result however the input is split, messages re-encode to their bytes.
#[test]
fn mutated_streams_decode_the_same_however_split() {
    let stream: Vec<u8> = vectors("good").iter().flat_map(|v| unhex(v["frame"].as_str().unwrap())).collect();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let run = |body: &[u8], split: usize| {
        let mut d = Decoder::with_max_frame(512);
        let mut out = Vec::new();
        for c in body.chunks(split) {
            if d.feed(c, &mut out).is_err() {
                break;
            }
        }
        (out, d.finish())
    };
    for _ in 0..2000 {
        let mut body = stream.clone();
        for _ in 0..(next() % 4) {
            let at = (next() as usize) % body.len();
            body[at] = next() as u8;
        }
        body.truncate((next() as usize) % (body.len() + 1));
        let whole = run(&body, body.len().max(1));
        let split = 1 + (next() as usize) % 40;
        assert_eq!(whole, run(&body, split), "{split} {}", body.len());
        let again: Vec<u8> = whole
            .0
            .iter()
            .flat_map(|m| {
                let h: Vec<(&str, Value)> = m.headers.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
                encode(&h, &m.payload)
            })
            .collect();
        assert!(body.starts_with(&again));
    }
}
