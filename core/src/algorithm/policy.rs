//! Server-side policies: what is pure about them — names, the `SOFT`
//! arithmetic, how `SHADOW` and `SOFT` turn the deciding limiter's answer into
//! the policy's reply, and the line format of `RL.POLICY DUMP` / `LOAD`.
//!
//! * `SOFT percent` (1–1000) admits up to ⌊count × (100 + percent) / 100⌋
//!   where the nominal limit admits `count`: every count of the limit (limit,
//!   capacity, burst, tokens per period) is scaled so, the durations stay. The
//!   reply speaks of the nominal limit ([`soft_reply`]). Envoy's ratelimit
//!   calls this a quota; the seed documents call it soft throttling.
//! * `SHADOW` decides as usual and always answers allowed ([`shadow_reply`]),
//!   as envoy ratelimit's `shadow_mode`.

use super::Decision;

/// The longest policy name.
pub const MAX_NAME_LEN: usize = 64;

/// The smallest and largest `SOFT` percent.
pub const SOFT_PERCENT_MIN: i64 = 1;
pub const SOFT_PERCENT_MAX: i64 = 1_000;

/// Whether `name` is a policy name: 1 to 64 characters of
/// `A-Z a-z 0-9 _ . : -`.
///
/// ```
/// use ratelimit_core::algorithm::policy::is_valid_name;
/// assert!(is_valid_name(b"api:free-tier_v2.1"));
/// assert!(!is_valid_name(b"") && !is_valid_name(b"a b") && !is_valid_name(&[b'x'; 65]));
/// ```
pub fn is_valid_name(name: &[u8]) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// The policy's name as its `INFO ratelimit` field shows it: the server
/// writes `:` in a field name as `_`, which would give `a:b` and `a_b` the
/// same field; so `:` is written `/` (never part of a name) and every other
/// character stays. One-to-one on valid names; names without `:` keep their
/// field name.
///
/// ```
/// use ratelimit_core::algorithm::policy::info_name;
/// assert_eq!(info_name(b"api:free"), b"api/free");
/// assert_eq!(info_name(b"api_free"), b"api_free");
/// ```
pub fn info_name(name: &[u8]) -> Vec<u8> {
    name.iter()
        .map(|&b| if b == b':' { b'/' } else { b })
        .collect()
}

/// The count a soft limit admits where the nominal one admits `count`:
/// ⌊count × (100 + percent) / 100⌋. `None` on overflow or for a percent out
/// of 1–1000.
///
/// ```
/// use ratelimit_core::algorithm::policy::soft_count;
/// assert_eq!(soft_count(100, 10), Some(110)); // "100 per second with 10 % soft lets 110 through"
/// assert_eq!(soft_count(5, 10), Some(5));    // rounded down
/// assert_eq!(soft_count(5, 1000), Some(55));
/// ```
pub fn soft_count(count: i64, percent: i64) -> Option<i64> {
    if !(SOFT_PERCENT_MIN..=SOFT_PERCENT_MAX).contains(&percent) {
        return None;
    }
    let scaled = i128::from(count) * i128::from(100 + percent) / 100;
    i64::try_from(scaled).ok()
}

/// The reply of a soft policy from the decision of its scaled limiter:
/// `limit` is the nominal one and `remaining` counts what is left of it (0
/// once past it); the durations are the scaled limiter's (when a retry would
/// really be allowed, when it is full again). The second value says whether
/// an allowed call was admitted beyond the nominal limit (`soft_over`).
///
/// ```
/// use ratelimit_core::algorithm::{policy::soft_reply, Decision};
/// // Nominal 100, soft 110: the 101st call leaves 9 of the scaled 110.
/// let scaled = Decision { limited: false, limit: 110, remaining: 9, retry_after_us: None, reset_after_us: 5 };
/// let (reply, over) = soft_reply(scaled, 100);
/// assert_eq!((reply.limit, reply.remaining, over), (100, 0, true));
/// ```
pub fn soft_reply(scaled: Decision, nominal_limit: i64) -> (Decision, bool) {
    let extra = scaled.limit.saturating_sub(nominal_limit).max(0);
    let remaining = scaled.remaining.saturating_sub(extra).max(0);
    let over = !scaled.limited && scaled.remaining < extra;
    (
        Decision {
            limit: nominal_limit,
            remaining,
            ..scaled
        },
        over,
    )
}

/// The reply of a shadow policy: its decision, always allowed. A refusal it
/// would have made shows only as `remaining` 0 (and in its statistics); the
/// second value says whether it would have refused.
///
/// ```
/// use ratelimit_core::algorithm::{policy::shadow_reply, Decision};
/// let refused = Decision { limited: true, limit: 5, remaining: 0, retry_after_us: Some(7), reset_after_us: 9 };
/// let (reply, would_refuse) = shadow_reply(refused);
/// assert!(!reply.limited && reply.retry_after_us.is_none() && would_refuse);
/// ```
pub fn shadow_reply(d: Decision) -> (Decision, bool) {
    (
        Decision {
            limited: false,
            retry_after_us: None,
            ..d
        },
        d.limited,
    )
}

/// One line of a `RL.POLICY DUMP` / `LOAD` text: its 1-based number and its
/// words (`name limit [options]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<'a> {
    pub number: usize,
    pub words: Vec<&'a [u8]>,
}

/// The policy lines of a `LOAD` text: lines split at `\n` (a trailing `\r`
/// dropped), words at ASCII whitespace; blank lines and lines whose first
/// word starts with `#` are skipped.
///
/// ```
/// use ratelimit_core::algorithm::policy::lines;
/// let text = b"# tiers\r\nfree GCRA 9 10 1\n\n  pro  GCRA 99 100 1 SHADOW\n";
/// let parsed: Vec<_> = lines(text).map(|l| (l.number, l.words.len())).collect();
/// assert_eq!(parsed, [(2, 5), (4, 6)]);
/// ```
pub fn lines(text: &[u8]) -> impl Iterator<Item = Line<'_>> {
    text.split(|&b| b == b'\n')
        .enumerate()
        .filter_map(|(i, line)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let mut words: Vec<&[u8]> = Vec::with_capacity(8);
            words.extend(
                line.split(u8::is_ascii_whitespace)
                    .filter(|w| !w.is_empty()),
            );
            match words.first() {
                None => None,
                Some(first) if first.starts_with(b"#") => None,
                Some(_) => Some(Line {
                    number: i + 1,
                    words,
                }),
            }
        })
}

/// Whether `word` can stand in a `DUMP` line: non-empty, printable ASCII
/// without whitespace (so that `LOAD` reads back exactly the words `SET`
/// took).
pub fn is_dumpable_word(word: &[u8]) -> bool {
    !word.is_empty() && word.iter().all(u8::is_ascii_graphic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(limited: bool, limit: i64, remaining: i64) -> Decision {
        Decision {
            limited,
            limit,
            remaining,
            retry_after_us: limited.then_some(1_000),
            reset_after_us: 2_000,
        }
    }

    #[test]
    fn names() {
        for ok in [&b"a"[..], b"free", b"A-Z_a.z:0-9", &[b'x'; 64]] {
            assert!(is_valid_name(ok), "{ok:?}");
        }
        for bad in [
            &b""[..],
            b"a b",
            b"a/b",
            b"\xc3\xa9",
            b"a\n",
            &[b'x'; 65],
            b"*",
        ] {
            assert!(!is_valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn soft_counts() {
        let cases = [
            (100, 10, Some(110)),
            (100, 1, Some(101)),
            (99, 1, Some(99)),
            (1, 1000, Some(11)),
            (7, 50, Some(10)),
            (i64::MAX, 1, None),
            (10, 0, None),
            (10, 1001, None),
        ];
        for (count, percent, expected) in cases {
            assert_eq!(soft_count(count, percent), expected, "{count} {percent}");
        }
    }

    #[test]
    fn soft_replies_speak_of_the_nominal_limit() {
        // Nominal 100, scaled 110.
        let cases = [
            // scaled remaining → nominal remaining, soft_over
            (d(false, 110, 109), 99, false),
            (d(false, 110, 10), 0, false),
            (d(false, 110, 9), 0, true),
            (d(false, 110, 0), 0, true),
            (d(true, 110, 0), 0, false),
        ];
        for (scaled, remaining, over) in cases {
            let (reply, was_over) = soft_reply(scaled, 100);
            assert_eq!(reply.limit, 100);
            assert_eq!((reply.remaining, was_over), (remaining, over), "{scaled:?}");
            assert_eq!(reply.limited, scaled.limited);
            assert_eq!(reply.retry_after_us, scaled.retry_after_us);
            assert_eq!(reply.reset_after_us, scaled.reset_after_us);
        }
        // Not soft (scaled == nominal): unchanged, never over.
        let plain = d(false, 5, 0);
        assert_eq!(soft_reply(plain, 5), (plain, false));
    }

    #[test]
    fn shadow_replies_always_allow() {
        let (reply, would) = shadow_reply(d(true, 5, 0));
        assert_eq!(
            (reply.limited, reply.remaining, reply.retry_after_us, would),
            (false, 0, None, true)
        );
        let allowed = d(false, 5, 3);
        assert_eq!(shadow_reply(allowed), (allowed, false));
    }

    #[test]
    fn load_text_lines() {
        let text = b"a GCRA 1 2 3\n#x\n   \n\tb FIXEDWINDOW 5 1 SOFT 10\r\nc";
        let got: Vec<(usize, Vec<&[u8]>)> = lines(text).map(|l| (l.number, l.words)).collect();
        assert_eq!(
            got,
            vec![
                (1, vec![&b"a"[..], b"GCRA", b"1", b"2", b"3"]),
                (
                    4,
                    vec![&b"b"[..], b"FIXEDWINDOW", b"5", b"1", b"SOFT", b"10"]
                ),
                (5, vec![&b"c"[..]]),
            ]
        );
        assert_eq!(lines(b"").count(), 0);
        assert!(is_dumpable_word(b"0.5") && !is_dumpable_word(b"a b") && !is_dumpable_word(b""));
    }

    proptest! {
        /// `INFO` field names are one-to-one on valid names, and names
        /// without `:` keep theirs.
        #[test]
        fn info_names_are_one_to_one(a in "[A-Za-z0-9_.:-]{1,8}", b in "[A-Za-z0-9_.:-]{1,8}") {
            prop_assert_eq!(info_name(a.as_bytes()) == info_name(b.as_bytes()), a == b);
            if !a.contains(':') {
                prop_assert_eq!(info_name(a.as_bytes()), a.as_bytes().to_vec());
            }
        }

        /// A soft limit admits at least the nominal count and never less for
        /// a larger percent.
        #[test]
        fn soft_never_shrinks(count in 0i64..1_000_000_000, p in 1i64..=1000, q in 1i64..=1000) {
            let a = soft_count(count, p).unwrap();
            prop_assert!(a >= count);
            if p <= q {
                prop_assert!(a <= soft_count(count, q).unwrap());
            }
        }

        /// The nominal reply never shows more than the nominal limit left.
        #[test]
        fn soft_reply_within_nominal(nominal in 1i64..10_000, p in 1i64..=1000, used in 0i64..20_000, limited: bool) {
            let scaled_limit = soft_count(nominal, p).unwrap();
            let remaining = (scaled_limit - used).max(0);
            let (reply, _) = soft_reply(d(limited, scaled_limit, remaining), nominal);
            prop_assert!(reply.remaining >= 0 && reply.remaining <= nominal);
        }
    }
}
