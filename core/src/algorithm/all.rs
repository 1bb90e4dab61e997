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
/// use ratelimit_core::algorithm::{all::binding, Decision};
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
    binding_among(decisions.into_iter().map(Some))
}

/// [`binding`] among the decisions that are `Some`: a `None` (a limit that
/// cannot bind, such as a `SHADOW` policy's) is skipped but keeps its
/// position. `None` when every decision is.
///
/// ```
/// use ratelimit_core::algorithm::{all::binding_among, Decision};
/// let d = |remaining| Decision {
///     limited: false, limit: 10, remaining, retry_after_us: None, reset_after_us: 0,
/// };
/// assert_eq!(binding_among([None, Some(d(5)), Some(d(2))]).map(|b| b.0), Some(2));
/// assert_eq!(binding_among([Some(d(5)), None]).map(|b| b.0), Some(0));
/// assert!(binding_among([None::<Decision>]).is_none());
/// ```
#[inline]
pub fn binding_among(
    decisions: impl IntoIterator<Item = Option<Decision>>,
) -> Option<(usize, Decision, bool)> {
    let mut best: Option<(usize, Decision)> = None;
    for (i, d) in decisions.into_iter().enumerate() {
        let Some(d) = d else { continue };
        if best.map_or(true, |(_, b)| binds_before(&d, &b)) {
            best = Some((i, d));
        }
    }
    best.map(|(i, d)| (i, d, !d.limited))
}

/// Whether a later limit's decision `d` binds rather than `best`, the
/// binding one among those before it (the order of [`binding`]): a refusal
/// before an allowance, the longer retry among refusals (`None`, "never",
/// longest), the fewer remaining among allowances; a tie keeps `best`.
/// For callers that keep their decisions in place (no copy of each).
///
/// ```
/// use ratelimit_core::algorithm::{all::binds_before, Decision};
/// let d = |limited, remaining, retry| Decision {
///     limited, limit: 10, remaining, retry_after_us: retry, reset_after_us: 0,
/// };
/// assert!(binds_before(&d(false, 1, None), &d(false, 2, None)));
/// assert!(!binds_before(&d(false, 2, None), &d(false, 2, None)));
/// assert!(binds_before(&d(true, 0, None), &d(true, 0, Some(5))));
/// assert!(!binds_before(&d(false, 0, None), &d(true, 0, Some(5))));
/// ```
#[inline]
pub fn binds_before(d: &Decision, best: &Decision) -> bool {
    match (d.limited, best.limited) {
        (true, false) => true,
        (false, true) => false,
        // The longest retry; None ("never") is the longest.
        (true, true) => match (d.retry_after_us, best.retry_after_us) {
            (None, Some(_)) => true,
            (Some(x), Some(y)) => x > y,
            _ => false,
        },
        (false, false) => d.remaining < best.remaining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(remaining: i64) -> Decision {
        Decision {
            limited: false,
            limit: 10,
            remaining,
            retry_after_us: None,
            reset_after_us: 0,
        }
    }

    fn limited(retry_after_us: Option<i64>) -> Decision {
        Decision {
            limited: true,
            limit: 10,
            remaining: 0,
            retry_after_us,
            reset_after_us: 0,
        }
    }

    #[test]
    fn the_binding_limit_of_each_pair() {
        // (decisions, binding position, allowed)
        let cases: &[(&[Decision], usize, bool)] = &[
            (&[allowed(5), allowed(2)], 1, true),
            (&[allowed(2), allowed(5)], 0, true),
            (&[allowed(3), allowed(3)], 0, true),
            (&[allowed(0), limited(Some(1))], 1, false),
            (&[limited(Some(1)), allowed(0)], 0, false),
            (&[limited(Some(5)), limited(Some(7))], 1, false),
            (&[limited(Some(7)), limited(Some(5))], 0, false),
            (&[limited(Some(5)), limited(Some(5))], 0, false),
            (&[limited(Some(7)), limited(None)], 1, false),
            (&[limited(None), limited(Some(7))], 0, false),
            (&[limited(None), limited(None)], 0, false),
            (&[allowed(1), limited(Some(3)), limited(Some(9))], 2, false),
        ];
        for &(decisions, at, ok) in cases {
            let (i, d, a) = binding(decisions.iter().copied()).unwrap();
            assert_eq!((i, a), (at, ok), "{decisions:?}");
            assert_eq!(d, decisions[at]);
        }
        assert_eq!(binding([]), None);
    }
}
