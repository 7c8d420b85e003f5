//! How the decision filter hands its order to Envoy's retries: the next attempt's cluster,
//! named by a token, rewritten by each attempt.
//!
//! The route's cluster specifier is Envoy's matcher (`envoy.router.cluster_specifier_plugin.matcher`);
//! its retry policy sets `refresh_cluster_on_retry` (Envoy 1.39+), so the specifier runs again
//! before every retry. The decision filter writes the first attempt's token and the whole order
//! (`SLOTS_PROPERTY`, filter state); each attempt's filter writes the next attempt's token (none
//! after the last) before it is sent, which is what the specifier reads if the attempt fails.
//! Where the token travels is the `Handoff`:
//!
//! - `FilterState` (the default; plain Envoy, both builds): in filter state, one key per attempt
//!   (`next_state_property`), read by the matcher's filter-state input. Nothing of it is on the
//!   request: a provider sees no Switchyard or Envoy header at all. One key per attempt rather
//!   than one key rewritten because the native build's filter state is written once per key; the
//!   matcher takes the highest attempt's key present.
//! - `Header` (istio-proxy, whose build has no filter-state or metadata matcher input): in the
//!   request header `x-switchyard-next`. A header the retry reads must be on the request while
//!   the attempt is sent (an upstream filter can change request headers only before then:
//!   proxy-wasm refuses request-header writes after the headers phase, measured on Envoy 1.39.3
//!   and 1.40.0), so attempt k carries attempt k + 1's token and nothing else of Switchyard's or
//!   Envoy's. The token is keyed there (`keyed_slot_token`, SipHash-2-4 under a per-deployment
//!   key): a provider cannot tell from it which provider comes next.
//!
//! The matcher maps the token of each cluster the configuration knows to that cluster, so any
//! other value matches nothing. The routed route also requires the plan in filter state
//! (`plan::PLAN_STATE_KEY`), which only the decision filter writes: a forged token without a
//! plan matches no route to a provider.

/// The request header naming the next attempt's cluster by its token (`Handoff::Header`).
pub use crate::wiring::NEXT_CLUSTER_HEADER;

/// Filter-state key (`wasm.<key>`) of the planned clusters' tokens in attempt order,
/// comma-separated: the attempts' filters write the next one from it.
pub const SLOTS_PROPERTY: &str = "switchyard_slots";

/// Filter-state keys (`wasm.<prefix><k>`) of attempt k's cluster token (`Handoff::FilterState`).
pub const NEXT_STATE_PREFIX: &str = "switchyard_next_";

/// Where the next attempt's token travels (`routing.handoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handoff {
    /// Filter state, one key per attempt: nothing on the request.
    #[default]
    FilterState,
    /// The request header `x-switchyard-next`, keyed tokens (istio-proxy).
    Header,
}

/// The filter-state property holding attempt `attempt`'s (1-based) cluster token.
pub fn next_state_property(attempt: usize) -> String {
    format!("{NEXT_STATE_PREFIX}{attempt}")
}

/// The opaque value naming `cluster` where it never leaves the proxy (FNV-1a 64 of the name,
/// hex): the same for the decision filter and the generated matcher, whatever order the
/// configuration lists clusters in (a reload never shifts it).
pub fn slot_token(cluster: &str) -> String {
    format!("{:016x}", crate::protocol::plan::fingerprint(cluster.as_bytes()))
}

/// The value naming `cluster` where it travels on the request (`Handoff::Header`): SipHash-2-4
/// of the name under the deployment's 128-bit key, hex. Without the key the token tells nothing
/// of the cluster; the generated matcher is built with the same key.
pub fn keyed_slot_token(key: &[u8; 16], cluster: &str) -> String {
    let k0 = u64::from_le_bytes([key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7]]);
    let k1 = u64::from_le_bytes([key[8], key[9], key[10], key[11], key[12], key[13], key[14], key[15]]);
    format!("{:016x}", siphash24(k0, k1, cluster.as_bytes()))
}

/// A handoff key as configured: 32 hex digits (128 bits).
pub fn parse_handoff_key(hex: &str) -> Option<[u8; 16]> {
    let b = hex.as_bytes();
    if b.len() != 32 {
        return None;
    }
    let mut key = [0u8; 16];
    for (byte, pair) in key.iter_mut().zip(b.chunks_exact(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(key)
}

/// SipHash-2-4 (Aumasson and Bernstein), the keyed PRF that hash tables use against chosen keys;
/// linear in the input, no allocation.
fn siphash24(k0: u64, k1: u64, msg: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = msg.chunks_exact(8);
    for c in &mut chunks {
        let m = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    for (d, s) in last.iter_mut().zip(chunks.remainder()) {
        *d = *s;
    }
    last[7] = msg.len() as u8;
    let m = u64::from_le_bytes(last);
    v[3] ^= m;
    round(&mut v);
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The tokens of `clusters` in attempt order, as `SLOTS_PROPERTY` holds them (`key`: the
/// deployment's handoff key where tokens travel on the request).
pub fn encode_slots(clusters: &[&str], key: Option<&[u8; 16]>) -> String {
    let token = |c: &str| match key {
        Some(k) => keyed_slot_token(k, c),
        None => slot_token(c),
    };
    clusters.iter().map(|c| token(c)).collect::<Vec<_>>().join(",")
}

/// The token of the cluster after attempt `attempt` (1-based), if the plan has one.
pub fn next_token(slots: &[u8], attempt: usize) -> Option<&str> {
    let text = std::str::from_utf8(slots).ok()?;
    text.split(',').nth(attempt).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_finds_the_next_token_and_the_last_none() {
        let slots = encode_slots(&["c_a", "c_b", "c_c"], None);
        assert_eq!(next_token(slots.as_bytes(), 1), Some(slot_token("c_b").as_str()));
        assert_eq!(next_token(slots.as_bytes(), 2), Some(slot_token("c_c").as_str()));
        assert_eq!(next_token(slots.as_bytes(), 3), None);
        assert_eq!(next_token(b"", 1), None);
        assert_eq!(next_token(&[0xff, b',', 0xfe], 1), None);
    }

    #[test]
    fn tokens_are_stable_opaque_and_distinct() {
        let t = slot_token("outbound|443||api.together.xyz");
        assert_eq!(t.len(), 16);
        assert!(!t.contains("together"));
        assert_eq!(t, slot_token("outbound|443||api.together.xyz"));
        assert_ne!(t, slot_token("outbound|443|first|api.together.xyz"));
    }

    #[test]
    fn siphash_matches_the_reference_vectors() {
        // The SipHash paper's test key 00 01 .. 0f; messages 00 01 .. (n-1).
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let k0 = u64::from_le_bytes(key[..8].try_into().unwrap());
        let k1 = u64::from_le_bytes(key[8..].try_into().unwrap());
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(k0, k1, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(k0, k1, &msg[..8]), 0x93f5_f579_9a93_2462);
        assert_eq!(siphash24(k0, k1, &msg), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn keyed_tokens_depend_on_the_key_and_not_only_on_public_names() {
        let a = parse_handoff_key("000102030405060708090a0b0c0d0e0f").unwrap();
        let b = parse_handoff_key("f00102030405060708090a0b0c0d0e0f").unwrap();
        let c = "outbound|443||api.together.xyz";
        assert_eq!(keyed_slot_token(&a, c).len(), 16);
        assert_eq!(keyed_slot_token(&a, c), keyed_slot_token(&a, c));
        assert_ne!(keyed_slot_token(&a, c), keyed_slot_token(&b, c), "another deployment, another token");
        assert_ne!(keyed_slot_token(&a, c), slot_token(c), "not the unkeyed hash of the name");
        assert_eq!(next_state_property(2), "switchyard_next_2");
    }

    #[test]
    fn a_handoff_key_is_exactly_32_hex_digits() {
        assert!(parse_handoff_key("000102030405060708090a0b0c0d0e0f").is_some());
        assert!(parse_handoff_key("000102030405060708090A0B0C0D0E0F").is_some());
        for bad in [
            "",
            "00",
            "000102030405060708090a0b0c0d0e0",
            "000102030405060708090a0b0c0d0e0g",
            "é00102030405060708090a0b0c0d0e0f",
        ] {
            assert!(parse_handoff_key(bad).is_none(), "{bad}");
        }
    }
}
