//! `RL.ALL`: several limits decided as one.
//!
//! The call is allowed only if every limit allows its request; then every
//! limit takes it, otherwise none does (the command layer writes accordingly).
//! Its reply is the **binding** limit's decision: when limited, the refusing
//! limit with the longest `retry_after` (`None`, "never", counts as longest);
//! when allowed, the limit with the fewest `remaining`; the first on ties.

use super::Decision;

/// The binding limit among `decisions` (in the order of the call's limits):
/// its 0-based position and decision, and whether the call is allowed.
/// `None` for no decisions.
///
/// ```
/// use redis_ratelimit::algorithm::{all::binding, Decision};
/// let d = |limited, remaining, retry| Decision {
///     limited, limit: 10, remaining, retry_after_us: retry, reset_after_us: 0,
/// };
/// // Allowed by both: the one with the fewest remaining binds.
/// assert_eq!(binding([d(false, 5, None), d(false, 2, None)]).map(|b| b.0), Some(1));
/// // Refused by one: it binds, and the call is refused.
/// let (at, decision, allowed) = binding([d(false, 1, None), d(true, 0, Some(7))]).unwrap();
/// assert_eq!((at, decision.limited, allowed), (1, true, false));
/// ```
pub fn binding(decisions: impl IntoIterator<Item = Decision>) -> Option<(usize, Decision, bool)> {
    let mut best: Option<(usize, Decision)> = None;
    for (i, d) in decisions.into_iter().enumerate() {
        let better = match best {
            None => true,
            Some((_, b)) => match (d.limited, b.limited) {
                (true, false) => true,
                (false, true) => false,
                // The longest retry; None ("never") is the longest.
                (true, true) => match (d.retry_after_us, b.retry_after_us) {
                    (None, Some(_)) => true,
                    (Some(x), Some(y)) => x > y,
                    _ => false,
                },
                (false, false) => d.remaining < b.remaining,
            },
        };
        if better {
            best = Some((i, d));
        }
    }
    best.map(|(i, d)| (i, d, !d.limited))
}
