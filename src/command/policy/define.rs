//! Policy definitions read by this server: the core's definitions and text
//! ([`crate::definition`]) with the server's strings as words and its
//! settings as bounds.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::definition::{self, ReadWords};
pub(super) use crate::definition::{at_line, unusable_message, Definition, Parsed};

/// Where the current call's definitions come from: the master (the
/// replication stream) or an AOF being replayed, else a client.
pub(super) fn origin(ctx: Ctx) -> Origin {
    use redis_module::raw::{REDISMODULE_CTX_FLAGS_LOADING, REDISMODULE_CTX_FLAGS_REPLICATED};
    let flags = effects::context_flags(ctx);
    if flags & (REDISMODULE_CTX_FLAGS_REPLICATED | REDISMODULE_CTX_FLAGS_LOADING) != 0 {
        Origin::Accepted
    } else {
        Origin::Client
    }
}

/// A definition's words as server strings, read as a command's arguments:
/// a policy's numbers parse exactly as the same limit's command would.
pub(super) struct ServerWords;

impl ReadWords for ServerWords {
    type W<'a> = Arg<'a>;

    fn read<T>(
        &self,
        words: &[&[u8]],
        origin: Origin,
        parse: impl for<'a> FnOnce(&Args<'a>) -> Result<T>,
    ) -> Result<T> {
        let owned = words
            .iter()
            .map(|w| OwnedString::detached_bytes(w))
            .collect::<Result<Vec<_>>>()?;
        let argv: Vec<Arg> = owned.iter().map(OwnedString::as_arg).collect();
        parse(&Args::with_origin(&argv, origin))
    }
}

/// Parses one `name limit [options]` entry ([`definition::entry`]).
pub(super) fn entry(name: &[u8], words: &[&[u8]], origin: Origin) -> Result<(Vec<u8>, Definition)> {
    definition::entry(name, words, origin, &ServerWords, &SettingsBounds)
}

/// Parses a `DUMP` / `LOAD` text ([`definition::parse_text`]).
pub(super) fn parse_text(text: &[u8], origin: Origin) -> std::result::Result<Vec<Parsed>, String> {
    definition::parse_text(text, origin, &ServerWords, &SettingsBounds)
}

/// Refuses a client's definition that changes the variant of `old` without
/// `RESET` ([`definition::check_change`]).
pub(super) fn check_change(
    name: &[u8],
    old: &Policy,
    new: &Definition,
    origin: Origin,
    reset: bool,
) -> Result<()> {
    definition::check_change(name, &old.rule, new, origin, reset)
}

/// `name word word …` per policy, one a line, sorted by name.
pub(super) fn dump_text(map: &Policies) -> Vec<u8> {
    definition::dump_text(
        map.iter()
            .map(|(name, p)| (name.as_slice(), p.text.as_slice())),
    )
}

/// The policy of `definition`, with the statistics of the policy of the same
/// name in `previous` (a `SET` that replaces one keeps its counts).
pub(super) fn policy(name: &[u8], d: Definition, previous: Option<&Policies>) -> Arc<Policy> {
    let previous = previous.and_then(|map| map.get(name));
    policy_after(d, previous.map(Arc::as_ref))
}

/// The policy of `definition`, with the statistics of `previous`.
pub(super) fn policy_after(d: Definition, previous: Option<&Policy>) -> Arc<Policy> {
    let stats = previous.map(|p| Arc::clone(&p.stats)).unwrap_or_default();
    Arc::new(Policy {
        text: d.text,
        rule: d.rule,
        stats,
    })
}
