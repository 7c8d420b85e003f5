//! AWS event stream (`application/vnd.amazon.eventstream`), the framing of Bedrock's
//! `InvokeModelWithResponseStream` answer: an incremental decoder fed body chunks as they arrive
//! (a frame may be split anywhere), and the encoder the tests and the mock use.
//!
//! A message (all integers big-endian):
//!
//! ```text
//! total length u32 | headers length u32 | prelude CRC u32 (of the 8 bytes before it)
//! headers (headers length bytes) | payload | message CRC u32 (of every byte before it)
//! ```
//!
//! A header is a name (u8 length, UTF-8 bytes), a type byte and a value: 0 true, 1 false (no
//! value), 2 byte, 3 i16, 4 i32, 5 i64, 6 bytes (u16 length), 7 string (u16 length, UTF-8),
//! 8 timestamp (i64 milliseconds), 9 UUID (16 bytes). Bedrock's messages carry `:message-type`
//! (`event`, `exception`, `error`), `:event-type` (`chunk`) or `:exception-type`
//! (`throttlingException`, ...), and `:content-type`.
//!
//! Both CRCs (CRC-32/ISO-HDLC, as zlib's `crc32`) are checked; a frame longer than the decoder's
//! maximum is refused when its prelude arrives, before it is buffered. The first error ends the
//! stream: the decoder cannot find the next frame after a bad one, so every later call returns
//! the same error. Everything here is panic-free and linear in the bytes fed: each byte is
//! checked by a CRC once and moved at most once (when the frame it belongs to is left incomplete
//! at the end of a chunk).

/// The prelude (two lengths and their CRC) and the message CRC: the smallest message.
pub const OVERHEAD: usize = 16;

/// The longest frame a decoder takes by default: Bedrock's frames carry one Anthropic stream
/// event each, a few kilobytes; 1 MiB leaves room and bounds what one stream may buffer.
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// The header types' codes.
mod code {
    pub const TRUE: u8 = 0;
    pub const FALSE: u8 = 1;
    pub const BYTE: u8 = 2;
    pub const SHORT: u8 = 3;
    pub const INT: u8 = 4;
    pub const LONG: u8 = 5;
    pub const BYTES: u8 = 6;
    pub const STRING: u8 = 7;
    pub const TIMESTAMP: u8 = 8;
    pub const UUID: u8 = 9;
}

/// A header's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Bool(bool),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Bytes(Vec<u8>),
    String(String),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
}

/// One decoded message: its headers in order and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub headers: Vec<(String, Value)>,
    pub payload: Vec<u8>,
}

/// What a message is, by its `:message-type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind<'a> {
    /// `event`, with its `:event-type` (Bedrock: `chunk`).
    Event(&'a str),
    /// `exception`, with its `:exception-type` (`throttlingException`, ...).
    Exception(&'a str),
    /// `error`, with its `:error-code`.
    Error(&'a str),
    /// No `:message-type`, or one this decoder does not know.
    Unknown,
}

impl Message {
    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&Value> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The first header named `name` if it is a string.
    pub fn string(&self, name: &str) -> Option<&str> {
        match self.header(name)? {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// What the message is (`:message-type` and the header naming its type).
    pub fn kind(&self) -> Kind<'_> {
        let typed = |name| self.string(name).unwrap_or("");
        match self.string(":message-type") {
            Some("event") => Kind::Event(typed(":event-type")),
            Some("exception") => Kind::Exception(typed(":exception-type")),
            Some("error") => Kind::Error(typed(":error-code")),
            _ => Kind::Unknown,
        }
    }
}

/// Why a stream could not be decoded. After one, the decoder returns it for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The prelude's CRC does not match its 8 bytes.
    PreludeCrc { expected: u32, computed: u32 },
    /// The message CRC does not match the message.
    MessageCrc { expected: u32, computed: u32 },
    /// The total length is below the 16 bytes of overhead, or the headers do not fit in it.
    BadLength { total: u32, headers: u32 },
    /// The total length is over the decoder's maximum.
    TooLong { total: u32, max: usize },
    /// A header is cut short, has an unknown type or a name or string that is not UTF-8.
    BadHeader,
    /// The stream ended inside a frame (`finish`): this many bytes were left.
    Truncated(usize),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::PreludeCrc { expected, computed } => {
                write!(f, "event stream prelude CRC {computed:#010x}, expected {expected:#010x}")
            }
            Error::MessageCrc { expected, computed } => {
                write!(f, "event stream message CRC {computed:#010x}, expected {expected:#010x}")
            }
            Error::BadLength { total, headers } => {
                write!(f, "event stream frame of {total} bytes cannot hold {headers} bytes of headers")
            }
            Error::TooLong { total, max } => write!(f, "event stream frame of {total} bytes (at most {max})"),
            Error::BadHeader => f.write_str("malformed event stream header"),
            Error::Truncated(n) => write!(f, "event stream ended inside a frame ({n} bytes left)"),
        }
    }
}

/// The CRC-32/ISO-HDLC table (reflected polynomial 0xEDB88320), built at compile time (an index
/// out of range would fail the build, not a request).
#[allow(clippy::indexing_slicing)]
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32/ISO-HDLC of `bytes` (zlib's `crc32`, check value 0xCBF43926 for `123456789`).
// The index is a u8 and the table has 256 entries: it cannot be out of range.
#[allow(clippy::indexing_slicing)]
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = u32::MAX;
    for &b in bytes {
        c = TABLE[usize::from((c as u8) ^ b)] ^ (c >> 8);
    }
    !c
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// Reads the headers block, every read bounds-checked.
fn parse_headers(mut b: &[u8]) -> Option<Vec<(String, Value)>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Some(head)
    }
    fn array<const N: usize>(b: &mut &[u8]) -> Option<[u8; N]> {
        take(b, N)?.try_into().ok()
    }
    let mut headers = Vec::new();
    while !b.is_empty() {
        let [name_len] = array::<1>(&mut b)?;
        let name = std::str::from_utf8(take(&mut b, usize::from(name_len))?).ok()?.to_string();
        let [kind] = array::<1>(&mut b)?;
        let value = match kind {
            code::TRUE => Value::Bool(true),
            code::FALSE => Value::Bool(false),
            code::BYTE => Value::Byte(i8::from_be_bytes(array(&mut b)?)),
            code::SHORT => Value::Short(i16::from_be_bytes(array(&mut b)?)),
            code::INT => Value::Int(i32::from_be_bytes(array(&mut b)?)),
            code::LONG => Value::Long(i64::from_be_bytes(array(&mut b)?)),
            code::TIMESTAMP => Value::Timestamp(i64::from_be_bytes(array(&mut b)?)),
            code::UUID => Value::Uuid(array(&mut b)?),
            code::BYTES | code::STRING => {
                let len = usize::from(u16::from_be_bytes(array(&mut b)?));
                let bytes = take(&mut b, len)?;
                if kind == code::BYTES {
                    Value::Bytes(bytes.to_vec())
                } else {
                    Value::String(std::str::from_utf8(bytes).ok()?.to_string())
                }
            }
            _ => return None,
        };
        headers.push((name, value));
    }
    Some(headers)
}

/// Decodes a stream of messages from chunks of any size.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf` (bytes before it are decoded, dropped on `push`).
    pos: usize,
    max_frame: usize,
    failed: Option<Error>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder refusing frames over [`DEFAULT_MAX_FRAME`].
    pub fn new() -> Decoder {
        Decoder::with_max_frame(DEFAULT_MAX_FRAME)
    }

    /// A decoder refusing frames over `max_frame` bytes (at least the 16 bytes of overhead).
    pub fn with_max_frame(max_frame: usize) -> Decoder {
        Decoder { buf: Vec::new(), pos: 0, max_frame: max_frame.max(OVERHEAD), failed: None }
    }

    /// Adds a chunk of the stream. Messages are then taken with [`Decoder::next_message`].
    pub fn push(&mut self, chunk: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        if self.pos > 0 {
            // What is left is at most one incomplete frame: moved once, then kept until whole.
            self.buf.drain(..self.pos.min(self.buf.len()));
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole message, None when the bytes pushed so far end inside a frame (or hold
    /// none), or the error that ended the stream.
    pub fn next_message(&mut self) -> Result<Option<Message>, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.decode() {
            Err(e) => {
                self.failed = Some(e.clone());
                self.buf = Vec::new();
                self.pos = 0;
                Err(e)
            }
            ok => ok,
        }
    }

    /// Adds a chunk and appends every whole message it completes to `out`, up to the first
    /// error (the messages before it are in `out`).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Message>) -> Result<(), Error> {
        self.push(chunk);
        while let Some(m) = self.next_message()? {
            out.push(m);
        }
        Ok(())
    }

    /// Whether the decoder holds part of a frame (at the end of the stream: it was truncated).
    pub fn pending(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The end of the stream: an error if it stopped inside a frame or an error came before.
    pub fn finish(&self) -> Result<(), Error> {
        match (&self.failed, self.pending()) {
            (Some(e), _) => Err(e.clone()),
            (None, 0) => Ok(()),
            (None, n) => Err(Error::Truncated(n)),
        }
    }

    fn decode(&mut self) -> Result<Option<Message>, Error> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let (Some(total), Some(headers_len), Some(prelude_crc)) = (be32(rest, 0), be32(rest, 4), be32(rest, 8)) else {
            return Ok(None);
        };
        let computed = crc32(rest.get(..8).unwrap_or_default());
        if computed != prelude_crc {
            return Err(Error::PreludeCrc { expected: prelude_crc, computed });
        }
        let (len, hlen) = (total as usize, headers_len as usize);
        if len < OVERHEAD || hlen > len - OVERHEAD {
            return Err(Error::BadLength { total, headers: headers_len });
        }
        if len > self.max_frame {
            return Err(Error::TooLong { total, max: self.max_frame });
        }
        let Some(frame) = rest.get(..len) else { return Ok(None) };
        let expected = be32(frame, len - 4).unwrap_or_default();
        let computed = crc32(frame.get(..len - 4).unwrap_or_default());
        if computed != expected {
            return Err(Error::MessageCrc { expected, computed });
        }
        let headers = frame.get(12..12 + hlen).and_then(parse_headers).ok_or(Error::BadHeader)?;
        let payload = frame.get(12 + hlen..len - 4).unwrap_or_default().to_vec();
        self.pos += len;
        Ok(Some(Message { headers, payload }))
    }
}

/// One message's bytes (the mock's streams, the tests). A header name over 255 bytes or a
/// string or byte value over 65535 is cut to fit.
pub fn encode(headers: &[(&str, Value)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        let name = name.as_bytes().get(..name.len().min(255)).unwrap_or_default();
        h.push(name.len() as u8);
        h.extend_from_slice(name);
        let mut sized = |kind: u8, bytes: &[u8]| {
            let bytes = bytes.get(..bytes.len().min(usize::from(u16::MAX))).unwrap_or_default();
            h.push(kind);
            h.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
            h.extend_from_slice(bytes);
        };
        match value {
            Value::Bytes(b) => sized(code::BYTES, b),
            Value::String(s) => sized(code::STRING, s.as_bytes()),
            Value::Bool(true) => h.push(code::TRUE),
            Value::Bool(false) => h.push(code::FALSE),
            Value::Byte(v) => h.extend_from_slice(&[code::BYTE, *v as u8]),
            Value::Short(v) => {
                h.push(code::SHORT);
                h.extend_from_slice(&v.to_be_bytes());
            }
            Value::Int(v) => {
                h.push(code::INT);
                h.extend_from_slice(&v.to_be_bytes());
            }
            Value::Long(v) => {
                h.push(code::LONG);
                h.extend_from_slice(&v.to_be_bytes());
            }
            Value::Timestamp(v) => {
                h.push(code::TIMESTAMP);
                h.extend_from_slice(&v.to_be_bytes());
            }
            Value::Uuid(v) => {
                h.push(code::UUID);
                h.extend_from_slice(v);
            }
        }
    }
    let total = (OVERHEAD + h.len() + payload.len()) as u32;
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out
}

/// An event message as Bedrock sends one (`:event-type`, `:content-type`, `:message-type`).
pub fn event(event_type: &str, payload: &[u8]) -> Vec<u8> {
    encode(
        &[
            (":event-type", Value::String(event_type.into())),
            (":content-type", Value::String("application/json".into())),
            (":message-type", Value::String("event".into())),
        ],
        payload,
    )
}

/// An exception message as Bedrock sends one (`:exception-type`, `:content-type`,
/// `:message-type`), its payload `{"message": ...}`.
pub fn exception(exception_type: &str, payload: &[u8]) -> Vec<u8> {
    encode(
        &[
            (":exception-type", Value::String(exception_type.into())),
            (":content-type", Value::String("application/json".into())),
            (":message-type", Value::String("exception".into())),
        ],
        payload,
    )
}

#[cfg(test)]
#[path = "eventstream_tests.rs"]
mod tests;
