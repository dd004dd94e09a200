//! Property-test input generators shared by every module's no-panic tests.

use proptest::prelude::*;

/// Cases per property: more than proptest's default 256, since parsers
/// are cheap and the no-panic properties are the crate's main promise.
pub fn config() -> ProptestConfig {
    ProptestConfig::with_cases(2048)
}

/// Arbitrary bytes, up to `max` of them.
pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=max)
}

/// A valid packet with a few random bytes overwritten, then cut at a random
/// length or extended with random bytes. This reaches the deep branches that
/// random bytes almost never get past (right version, right lengths).
pub fn mutated(base: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        any::<prop::sample::Index>(),
        proptest::collection::vec(any::<u8>(), 0..16),
        0..4u8,
    )
        .prop_map(move |(edits, cut, tail, mode)| {
            let mut v = base.to_vec();
            if !v.is_empty() {
                for (at, val) in edits {
                    let i = at.index(v.len());
                    v[i] = val;
                }
            }
            match mode {
                // Keep the length.
                0 => {}
                // Truncate anywhere.
                1 => v.truncate(cut.index(v.len() + 1)),
                // Append junk (padding, trailing garbage).
                2 => v.extend_from_slice(&tail),
                // Truncate close to the end, where off-by-one bugs live.
                _ => {
                    let n = v.len().saturating_sub(cut.index(4));
                    v.truncate(n);
                }
            }
            v
        })
}
