//! Keywords of the grammar, compared without regard to case: the limit
//! grammar ([`crate::limit`]) and the algorithms (`RL.CONCURRENCY`'s
//! operations) both read them.

/// Whether `word` is the keyword `name` (ASCII letters only), ignoring
/// case. Exact for letter-only keywords: `b | 0x20` equals a lowercase letter
/// only for that letter and its uppercase. From 4 letters, 4 bytes at a time
/// (below 8 letters: two windows, overlapping), from 8 letters 8 bytes at a
/// time (the last window overlapping the one before): a few instructions
/// per keyword on the hot path (`RL.ALL` reads one per limit).
#[inline]
pub fn is_keyword(word: &[u8], name: &[u8]) -> bool {
    debug_assert!(name.iter().all(u8::is_ascii_alphabetic));
    let len = name.len();
    if word.len() != len {
        return false;
    }
    if len < 4 {
        return word.iter().zip(name).all(|(w, n)| (w | 0x20) == (n | 0x20));
    }
    if len < 8 {
        // Two 4-byte windows (overlapping below 8 letters); both exist.
        let four = |b: &[u8], at: usize| {
            b.get(at..at + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map_or(0, |b| u32::from_ne_bytes(b) | 0x2020_2020)
        };
        return four(word, 0) == four(name, 0) && four(word, len - 4) == four(name, len - 4);
    }
    // Both are `len` long: every window is there (0 would be a mismatch).
    let eight = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, |b| u64::from_ne_bytes(b) | 0x2020_2020_2020_2020)
    };
    let mut at = 0;
    loop {
        let window = at.min(len - 8);
        if eight(word, window) != eight(name, window) {
            return false;
        }
        if window == len - 8 {
            return true;
        }
        at += 8;
    }
}
