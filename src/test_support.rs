//! Helpers shared by the unit tests: a seeded random source and the request-body mutator of the
//! "never panics" tests.

/// Deterministic 64-bit LCG (Knuth's MMIX constants), 53 high bits mapped to [0, 1).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Applies 1 to 4 random edits to a body: a byte flip, a truncation, a spliced fragment or a
/// removed byte.
pub fn mutate(b: &mut Vec<u8>, fragments: &[&str], rng: &mut Lcg) {
    for _ in 0..1 + (rng.next() * 4.0) as usize {
        if b.is_empty() {
            b.push(b'{');
        }
        let pos = (rng.next() * b.len() as f64) as usize % b.len();
        match (rng.next() * 4.0) as u32 {
            0 => b[pos] = (rng.next() * 256.0) as u8,
            1 => b.truncate(pos),
            2 => {
                let f = fragments[(rng.next() * fragments.len() as f64) as usize % fragments.len()];
                b.splice(pos..pos, f.bytes());
            }
            _ => {
                b.remove(pos);
            }
        }
    }
}
