//! Unsigned big numbers for RSA: little-endian `u64` limbs, u128 products, Montgomery
//! multiplication (CIOS) and modular exponentiation. Only what RS256 signing needs; no
//! dependency. Each multiplication is quadratic in the limbs (32 for a 2048-bit modulus).

use std::cmp::Ordering;

/// A number as little-endian 64-bit limbs (no length invariant: leading zero limbs allowed).
pub type Limbs = Vec<u64>;

/// The number a big-endian byte string spells.
pub fn from_be_bytes(bytes: &[u8]) -> Limbs {
    let mut out: Limbs = Vec::with_capacity(bytes.len().div_ceil(8));
    for chunk in bytes.rchunks(8) {
        out.push(chunk.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)));
    }
    out
}

/// `x` as exactly `len` big-endian bytes (None if it does not fit).
pub fn to_be_bytes(x: &[u64], len: usize) -> Option<Vec<u8>> {
    let mut le: Vec<u8> = x.iter().flat_map(|l| l.to_le_bytes()).collect();
    while le.len() > len {
        if le.pop() != Some(0) {
            return None;
        }
    }
    le.resize(len, 0);
    le.reverse();
    Some(le)
}

/// Without its leading zero limbs.
pub fn trim(mut x: Limbs) -> Limbs {
    while x.last() == Some(&0) {
        x.pop();
    }
    x
}

fn limb(x: &[u64], i: usize) -> u64 {
    x.get(i).copied().unwrap_or(0)
}

/// Compares numbers of any limb counts.
pub fn cmp(a: &[u64], b: &[u64]) -> Ordering {
    let n = a.len().max(b.len());
    for i in (0..n).rev() {
        match limb(a, i).cmp(&limb(b, i)) {
            Ordering::Equal => continue,
            o => return o,
        }
    }
    Ordering::Equal
}

/// `a -= b` over `a`'s limbs; the borrow out (true when b > a).
fn sub_assign(a: &mut [u64], b: &[u64]) -> bool {
    let mut borrow = false;
    for (i, x) in a.iter_mut().enumerate() {
        let (d1, b1) = x.overflowing_sub(limb(b, i));
        let (d2, b2) = d1.overflowing_sub(u64::from(borrow));
        *x = d2;
        borrow = b1 || b2;
    }
    borrow
}

/// `a += b` over `a`'s limbs; the carry out.
fn add_assign(a: &mut [u64], b: &[u64]) -> bool {
    let mut carry = false;
    for (i, x) in a.iter_mut().enumerate() {
        let (s1, c1) = x.overflowing_add(limb(b, i));
        let (s2, c2) = s1.overflowing_add(u64::from(carry));
        *x = s2;
        carry = c1 || c2;
    }
    carry
}

/// `a * b` (schoolbook).
pub fn mul(a: &[u64], b: &[u64]) -> Limbs {
    let mut out = vec![0u64; a.len() + b.len()];
    for (i, ai) in a.iter().enumerate() {
        let mut carry = 0u128;
        for (o, bj) in out.iter_mut().skip(i).zip(b) {
            let s = u128::from(*o) + u128::from(*ai) * u128::from(*bj) + carry;
            *o = s as u64;
            carry = s >> 64;
        }
        if let Some(o) = out.get_mut(i + b.len()) {
            *o = carry as u64;
        }
    }
    out
}

/// `a + b` (the result has one limb more than the longer).
pub fn add(a: &[u64], b: &[u64]) -> Limbs {
    let mut out = a.to_vec();
    out.resize(a.len().max(b.len()) + 1, 0);
    add_assign(&mut out, b);
    out
}

/// `(a - b) mod m` for `a, b < m`.
pub fn sub_mod(a: &[u64], b: &[u64], m: &[u64]) -> Limbs {
    let mut out = a.to_vec();
    out.resize(m.len(), 0);
    if sub_assign(&mut out, b) {
        add_assign(&mut out, m);
    }
    out
}

/// `x mod m` for any `x` and a non-zero `m`, a bit at a time (linear in x's bits times m's
/// limbs: used a few times per signature, never per multiplication).
pub fn reduce(x: &[u64], m: &[u64]) -> Limbs {
    let mut r = vec![0u64; m.len() + 1];
    for i in (0..x.len() * 64).rev() {
        let bit = (limb(x, i / 64) >> (i % 64)) & 1;
        shl1(&mut r, bit);
        if cmp(&r, m) != Ordering::Less {
            sub_assign(&mut r, m);
        }
    }
    r.truncate(m.len());
    r
}

/// `r = 2r + bit`.
fn shl1(r: &mut [u64], bit: u64) {
    let mut carry = bit;
    for x in r.iter_mut() {
        let next = *x >> 63;
        *x = (*x << 1) | carry;
        carry = next;
    }
}

/// Arithmetic modulo an odd `m` in Montgomery form (R = 2^(64 * limbs)).
pub struct Montgomery {
    m: Limbs,
    /// `-m^-1 mod 2^64`.
    m_inv: u64,
    /// `R^2 mod m`: what turns a number into Montgomery form.
    r2: Limbs,
}

impl Montgomery {
    /// None for an even or zero modulus.
    pub fn new(m: &[u64]) -> Option<Montgomery> {
        let m = trim(m.to_vec());
        let m0 = *m.first()?;
        if m0 & 1 == 0 {
            return None;
        }
        // Newton's iteration doubles the correct low bits: 1 -> 2 -> ... -> 64.
        let mut inv: u64 = 1;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(m0.wrapping_mul(inv)));
        }
        // R^2 mod m: 1 doubled 128 * limbs times.
        let mut r2 = vec![0u64; m.len() + 1];
        if let Some(x) = r2.first_mut() {
            *x = 1;
        }
        for _ in 0..128 * m.len() {
            shl1(&mut r2, 0);
            if cmp(&r2, &m) != Ordering::Less {
                sub_assign(&mut r2, &m);
            }
        }
        r2.truncate(m.len());
        Some(Montgomery { m_inv: inv.wrapping_neg(), m, r2 })
    }

    /// `a * b / R mod m` for `a, b < m` (CIOS: the product and the reduction interleaved).
    pub fn mul(&self, a: &[u64], b: &[u64]) -> Limbs {
        let n = self.m.len();
        let mut t = vec![0u64; n + 2];
        for i in 0..n {
            let ai = u128::from(limb(a, i));
            let mut carry = 0u128;
            for (j, tj) in t.iter_mut().take(n).enumerate() {
                let s = u128::from(*tj) + ai * u128::from(limb(b, j)) + carry;
                *tj = s as u64;
                carry = s >> 64;
            }
            propagate(&mut t, n, carry);
            let u = u128::from(limb(&t, 0).wrapping_mul(self.m_inv));
            let mut carry = 0u128;
            for (tj, mj) in t.iter_mut().zip(&self.m) {
                let s = u128::from(*tj) + u * u128::from(*mj) + carry;
                *tj = s as u64;
                carry = s >> 64;
            }
            propagate(&mut t, n, carry);
            // The low limb is now zero: divide by 2^64.
            t.rotate_left(1);
            if let Some(last) = t.last_mut() {
                *last = 0;
            }
        }
        if cmp(&t, &self.m) != Ordering::Less {
            sub_assign(&mut t, &self.m);
        }
        t.truncate(n);
        t
    }

    /// `a * b mod m` for `a, b < m` (out of Montgomery form at once: `(ab / R) * R^2 / R`).
    pub fn mul_mod(&self, a: &[u64], b: &[u64]) -> Limbs {
        self.mul(&self.mul(a, b), &self.r2)
    }

    /// `base^exp mod m` (`base < m`), left to right with a 4-bit window.
    pub fn pow(&self, base: &[u64], exp: &[u64]) -> Limbs {
        let n = self.m.len();
        let mut one = vec![0u64; n];
        if let Some(x) = one.first_mut() {
            *x = 1;
        }
        let b = self.mul(base, &self.r2);
        // table[k] = base^k in Montgomery form, k < 16.
        let mut table = Vec::with_capacity(16);
        table.push(self.mul(&one, &self.r2));
        for k in 1..16 {
            let prev = table.get(k - 1).cloned().unwrap_or_default();
            table.push(self.mul(&prev, &b));
        }
        let mut acc = table.first().cloned().unwrap_or_default();
        let exp = trim(exp.to_vec());
        for i in (0..exp.len() * 16).rev() {
            for _ in 0..4 {
                acc = self.mul(&acc, &acc);
            }
            let nibble = (limb(&exp, i / 16) >> ((i % 16) * 4)) & 15;
            if nibble != 0 {
                if let Some(t) = table.get(nibble as usize) {
                    acc = self.mul(&acc, t);
                }
            }
        }
        // Out of Montgomery form.
        self.mul(&acc, &one)
    }
}

/// Adds a carry into `t[n]` and `t[n + 1]`.
fn propagate(t: &mut [u64], n: usize, carry: u128) {
    if let Some(x) = t.get_mut(n) {
        let s = u128::from(*x) + carry;
        *x = s as u64;
        if let Some(y) = t.get_mut(n + 1) {
            *y = y.wrapping_add((s >> 64) as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_modular_exponentiation_matches_plain_arithmetic() {
        let m = 1_000_000_007u64;
        let mont = Montgomery::new(&[m]).unwrap();
        let mut want = 1u128;
        for _ in 0..65_537 {
            want = want * 123_456_789 % u128::from(m);
        }
        assert_eq!(mont.pow(&[123_456_789], &[65_537]), vec![want as u64]);
        assert_eq!(mont.pow(&[5], &[0]), vec![1]);
        assert!(Montgomery::new(&[10]).is_none());
    }

    #[test]
    fn multi_limb_arithmetic_matches_u128() {
        // m = 2^127 - 1 (prime), two limbs.
        let m: u128 = (1 << 127) - 1;
        let ml = [m as u64, (m >> 64) as u64];
        let mont = Montgomery::new(&ml).unwrap();
        let a: u128 = 0x1234_5678_9abc_def0_0fed_cba9_8765_4321;
        // a^3 mod m by reduce() of the full products.
        let al = [a as u64, (a >> 64) as u64];
        let a2 = reduce(&mul(&al, &al), &ml);
        let a3 = reduce(&mul(&a2, &al), &ml);
        assert_eq!(mont.pow(&al, &[3]), a3);
        // Fermat: a^(m-1) = 1.
        let e = m - 1;
        assert_eq!(trim(mont.pow(&al, &[e as u64, (e >> 64) as u64])), vec![1]);
        assert_eq!(
            to_be_bytes(&from_be_bytes(&[1, 2, 3, 4, 5, 6, 7, 8, 9]), 9).unwrap(),
            vec![1, 2, 3, 4, 5, 6, 7, 8, 9]
        );
        assert_eq!(to_be_bytes(&[1 << 40], 4), None);
        assert_eq!(sub_mod(&[3], &[5], &[7]), vec![5]);
    }
}
