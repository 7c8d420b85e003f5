//! Stream translation between the three APIs (`switchyard::translate::stream`): any bytes, split
//! anywhere, never panic, and the output does not depend on where the input was split. The first
//! byte picks the direction, the second the split size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::api::Api;
use switchyard::translate::stream::StreamTranslator;

fuzz_target!(|data: &[u8]| {
    let [pick, split, body @ ..] = data else { return };
    let from = Api::ALL[usize::from(pick % 3)];
    let to = Api::ALL[usize::from(pick / 3 % 3)];
    let array = pick & 0x80 != 0;
    let mut whole = StreamTranslator::new(from, to, 1, array);
    let out = whole.feed(body);
    let mut pieces = StreamTranslator::new(from, to, 1, array);
    let mut split_out = Vec::new();
    for chunk in body.chunks(usize::from(*split).max(1)) {
        split_out.extend(pieces.feed(chunk));
    }
    assert_eq!(out, split_out, "the output depends on how the input was split");
    assert_eq!(whole.ended(), pieces.ended());
});
