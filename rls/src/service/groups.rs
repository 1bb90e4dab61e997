//! Grouping a request's limits into `RL.ALL` calls.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The calls one request needs: `(shadow, slot, hits)` → its limits.
/// Normally one group: every enforced limit of the request in one `RL.ALL`;
/// more for shadow rules, other slots, other hits, or a key named twice.
pub(super) fn plan(active: &[Active]) -> Vec<((bool, u16, u64), Vec<usize>)> {
    let mut groups: Vec<((bool, u16, u64), Vec<usize>)> = Vec::new();
    for (i, a) in active.iter().enumerate() {
        if a.m.rule.module_args.is_none() {
            continue;
        }
        let g = (a.m.rule.shadow_mode, a.slot, a.hits);
        // A key named twice (the same descriptor twice, or values sharing a
        // wildcard's threshold) takes its hits twice: in another call, as
        // `RL.ALL` names each key once.
        match groups
            .iter_mut()
            .find(|(k, members)| *k == g && members.iter().all(|&m| active[m].key != a.key))
        {
            Some((_, members)) => members.push(i),
            None => groups.push((g, vec![i])),
        }
    }
    // Enforced groups first; check-only (0 hits) groups before those that take.
    groups.sort_by_key(|((shadow, _, hits), _)| (*shadow, *hits != 0));
    groups
}
