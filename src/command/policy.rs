//! Server-side policies: named limits kept on the server, used by
//! `RL.LIMIT key policy` and `RL.ALL … POLICY name`, managed by
//!
//! ```text
//! RL.POLICY SET name limit [SHADOW] [SOFT percent] [BLOCK duration] [RESET]
//! RL.POLICY GET name | DEL name | STATS name | LIST | DUMP | RESETSTATS | HELP
//! RL.POLICY LOAD [REPLACE] [RESET] text
//! ```
//!
//! `limit` is a limit of `RL.ALL`'s grammar or `LEAKYBUCKET capacity
//! leak_tokens leak_period`, validated by its command's own parser. Policies
//! are module data kept beside the keyspace, like Redis Functions: `SET`,
//! `DEL` and `LOAD` propagate verbatim (they do not depend on the clock), RDB
//! files carry them as module auxiliary data ([`crate::server::rdb`]), and a
//! replica's full sync, `DEBUG RELOAD` or a restart replaces them with the
//! loaded file's. `FLUSHALL` leaves them. Each policy has its statistics
//! (`INFO ratelimit`, `policy_<name>` lines for the first
//! [`INFO_POLICY_LINES`] names; `RL.POLICY STATS name` for any), kept across
//! `SET`s of the same name.
//!
//! A client's `SET` or `LOAD` that would change an existing policy's
//! algorithm (or its variant: `ALIGN FIRST`, `BUCKETS`) is refused unless it
//! says `RESET`: the limiters of that policy start over. Definitions that
//! come from the master, an AOF or an RDB ([`Origin::Accepted`]) are never
//! refused for that, nor for this server's own bounds.

use std::collections::{BTreeMap, HashSet};
use std::ffi::{c_int, CString};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::all::{limit_kind, Count};
use super::args::{is_keyword, Args, Origin};
use super::limiter::{Limit, Modes};
use super::stats::CommandStats;
use super::{docs, settings};
use crate::algorithm::fixed_window::Align;
use crate::algorithm::policy::{
    info_name, is_dumpable_word, is_valid_name, lines, soft_count, SOFT_PERCENT_MAX,
    SOFT_PERCENT_MIN,
};
use crate::error::{Error, PolicyName, Result};
use crate::server::info::InfoWriter;
use crate::server::rdb::{AuxHooks, AuxReader, AuxWriter};
use crate::server::reply::Reply;
use crate::server::string::{Arg, OwnedString};
use crate::server::{effects, Ctx};

/// One policy.
pub struct Policy {
    /// The words after the name, as `SET` takes them back (`GET`, `DUMP`),
    /// joined by single spaces: the limit's keyword upper case, its
    /// parameters as given, then `SHADOW`, `SOFT percent`, `BLOCK duration`
    /// in that order. (One allocation per policy: loading and dropping
    /// 100k policies stays cheap.)
    pub text: Vec<u8>,
    /// The rule that decides; `Err` (why not) for a definition accepted
    /// where it was made (an RDB, an AOF, the primary) that this module
    /// cannot use (a longer window than it allows, a newer module's syntax):
    /// such a policy is kept, listed, dumped, saved and replicated as it is,
    /// and `RL.LIMIT` / `RL.ALL` refuse it ([`Error::PolicyUnusable`]) until
    /// a client redefines it. Nothing the primary accepted is dropped.
    pub rule: std::result::Result<Rule, Error>,
    /// Its statistics since load (kept when `SET` replaces the definition).
    pub stats: Arc<CommandStats>,
}

/// A policy's limit with what the policy adds to it.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The limit that decides: the nominal one, scaled up by `SOFT`.
    pub limit: Limit,
    pub modes: Modes,
}

type Policies = BTreeMap<Vec<u8>, Arc<Policy>>;

/// Every policy, by name (ordered: `LIST` and `DUMP` are sorted).
static POLICIES: Mutex<Policies> = Mutex::new(BTreeMap::new());
/// The policies a dataset load replaced, restored if the load fails.
static BEFORE_LOAD: Mutex<Option<Policies>> = Mutex::new(None);

/// The lock is only ever taken by the main thread (and the fork child that
/// saves an RDB), never across a call into the server; a panic while
/// holding it (caught at the command boundary) leaves the map usable.
fn policies() -> MutexGuard<'static, Policies> {
    POLICIES.lock().unwrap_or_else(PoisonError::into_inner)
}

fn before_load() -> MutexGuard<'static, Option<Policies>> {
    BEFORE_LOAD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The policy `name` and its rule. Errors: [`Error::PoliciesOff`],
/// [`Error::UnknownPolicy`], [`Error::PolicyUnusable`].
pub fn find(name: &[u8]) -> Result<(Arc<Policy>, Rule)> {
    if !settings::policies() {
        return Err(Error::PoliciesOff);
    }
    let found = policies().get(name).cloned().ok_or(Error::UnknownPolicy {
        name: PolicyName::new(name),
    })?;
    let rule = found.rule.map_err(|_| Error::PolicyUnusable {
        name: PolicyName::new(name),
    })?;
    Ok((found, rule))
}

/// A policy definition, parsed.
struct Definition {
    text: Vec<u8>,
    /// `Err` only for an accepted definition this module cannot use (see
    /// [`Policy::rule`]).
    rule: std::result::Result<Rule, Error>,
    /// `RESET`: the definition may change the algorithm of the policy it
    /// replaces (never stored: `GET` and `DUMP` leave it out).
    reset: bool,
}

/// Where the current call's definitions come from: the master (the
/// replication stream) or an AOF being replayed, else a client.
fn origin(ctx: Ctx) -> Origin {
    use redis_module::raw::{REDISMODULE_CTX_FLAGS_LOADING, REDISMODULE_CTX_FLAGS_REPLICATED};
    let flags = effects::context_flags(ctx);
    if flags & (REDISMODULE_CTX_FLAGS_REPLICATED | REDISMODULE_CTX_FLAGS_LOADING) != 0 {
        Origin::Accepted
    } else {
        Origin::Client
    }
}

/// The algorithm of a limit with its variant, as `RL.POLICY SET` names it:
/// limiters of two limits of the same variant read each other's state.
pub fn variant(limit: &Limit) -> &'static str {
    match limit {
        Limit::Gcra(_) => "GCRA",
        Limit::TokenBucket(_) => "TOKENBUCKET",
        Limit::LeakyBucket(_) => "LEAKYBUCKET",
        Limit::FixedWindow(w) if w.align() == Align::First => "FIXEDWINDOW ALIGN FIRST",
        Limit::FixedWindow(_) => "FIXEDWINDOW",
        Limit::SlidingWindow(_) => "SLIDINGWINDOW",
        Limit::BucketWindow(_) => "SLIDINGWINDOW BUCKETS",
        Limit::SlidingLog(_) => "SLIDINGLOG",
        Limit::Throttle(_) => "CL.THROTTLE",
    }
}

/// Refuses a client's definition that changes the variant of the policy it
/// replaces without `RESET` (`reset`, or the definition's own).
fn check_change(
    name: &[u8],
    old: &Policy,
    new: &Definition,
    origin: Origin,
    reset: bool,
) -> Result<()> {
    // A policy that cannot be used here has no variant to keep.
    let (Ok(old_rule), Ok(new_rule)) = (&old.rule, &new.rule) else {
        return Ok(());
    };
    let (from, to) = (variant(&old_rule.limit), variant(&new_rule.limit));
    if from == to || reset || new.reset || !origin.checks_local_bounds() {
        return Ok(());
    }
    Err(Error::PolicyAlgorithmChange {
        name: PolicyName::new(name),
        from,
        to,
    })
}

/// Parses `words` as the command's own parser would: each word becomes a
/// server string, read as a command argument from `origin`.
fn parse_words<T>(
    words: &[&[u8]],
    origin: Origin,
    parse: impl FnOnce(&Args) -> Result<T>,
) -> Result<T> {
    let owned = words
        .iter()
        .map(|w| OwnedString::detached_bytes(w))
        .collect::<Result<Vec<_>>>()?;
    let argv: Vec<Arg> = owned.iter().map(OwnedString::as_arg).collect();
    parse(&Args::with_origin(&argv, origin))
}

/// Parses `limit [SHADOW] [SOFT percent] [BLOCK duration] [RESET]`.
fn define(words: &[&[u8]], origin: Origin) -> Result<Definition> {
    let first = words.first().ok_or(Error::PolicySyntax)?;
    let kind = limit_kind(first).ok_or(Error::UnknownPolicyLimit)?;
    if words.len() < 1 + kind.params {
        return Err(Error::PolicySyntax);
    }
    let nominal = parse_words(words, origin, |args| {
        let limit = (kind.parse)(args, 1)?;
        let mut modes = Modes {
            policy: true,
            ..Modes::default()
        };
        let (mut soft, mut block, mut reset) = (None, None, false);
        let mut i = 1 + kind.params;
        while i < args.len() {
            let word = args.bytes(i)?;
            if is_keyword(word, b"SHADOW") && !modes.shadow {
                modes.shadow = true;
                i += 1;
            } else if is_keyword(word, b"RESET") && !reset {
                reset = true;
                i += 1;
            } else if is_keyword(word, b"SOFT") && soft.is_none() && i + 1 < args.len() {
                let percent = args.integer(i + 1, "SOFT")?;
                if !(SOFT_PERCENT_MIN..=SOFT_PERCENT_MAX).contains(&percent) {
                    return Err(Error::OutOfRange {
                        arg: "SOFT",
                        bound: ">= 1 and <= 1000",
                    });
                }
                soft = Some((percent, i + 1));
                i += 2;
            } else if is_keyword(word, b"BLOCK") && block.is_none() && i + 1 < args.len() {
                modes.block_us = Some(args.seconds_as_us(i + 1, "BLOCK")?);
                block = Some(i + 1);
                i += 2;
            } else {
                return Err(Error::PolicySyntax);
            }
        }
        Ok((limit, modes, soft, block, reset))
    })?;
    let (mut limit, mut modes, soft, block, reset) = nominal;
    // The words as SET takes them back, joined by spaces.
    let mut canonical: Vec<u8> = Vec::with_capacity(words.iter().map(|w| w.len() + 1).sum());
    let mut push = |word: &[u8]| {
        if !canonical.is_empty() {
            canonical.push(b' ');
        }
        canonical.extend_from_slice(word);
        is_dumpable_word(word)
    };
    let mut dumpable = push(kind.name);
    for word in &words[1..=kind.params] {
        dumpable &= push(word);
    }
    if modes.shadow {
        push(b"SHADOW");
    }
    if let Some((_, at)) = soft {
        push(b"SOFT");
        dumpable &= push(words[at]);
    }
    if let Some(at) = block {
        push(b"BLOCK");
        dumpable &= push(words[at]);
    }
    if !dumpable {
        return Err(Error::PolicySyntax);
    }
    if let Some((percent, _)) = soft {
        // Scale every count, then parse the scaled limit as its command would.
        let mut scaled: Vec<Vec<u8>> = words[..=kind.params].iter().map(|w| w.to_vec()).collect();
        let mut nominal_limit = None;
        for &(pos, count) in kind.counts {
            let text = std::str::from_utf8(words[1 + pos]).map_err(|_| Error::PolicySyntax)?;
            let value: i64 = text.parse().map_err(|_| Error::PolicySyntax)?;
            let (nominal_count, to_param) = match count {
                Count::Plain => (value, 0),
                Count::Burst => (value.checked_add(1).ok_or(Error::Overflow)?, 1),
            };
            let scaled_count = soft_count(nominal_count, percent).ok_or(Error::Overflow)?;
            nominal_limit.get_or_insert(nominal_count);
            scaled[1 + pos] = (scaled_count - to_param).to_string().into_bytes();
        }
        let scaled_words: Vec<&[u8]> = scaled.iter().map(Vec::as_slice).collect();
        limit = parse_words(&scaled_words, origin, |args| (kind.parse)(args, 1))?;
        modes.nominal_limit = nominal_limit;
    }
    Ok(Definition {
        text: canonical,
        rule: Ok(Rule { limit, modes }),
        reset,
    })
}

impl Definition {
    /// An accepted definition this module cannot use, kept as its words
    /// (`why`: the parse error). `Err(why)` when the words cannot even be
    /// kept (none, or not dumpable).
    fn unusable(words: &[&[u8]], why: Error) -> Result<Definition> {
        if words.is_empty() || !words.iter().all(|w| is_dumpable_word(w)) {
            return Err(why);
        }
        Ok(Definition {
            text: words.join(&b' '),
            rule: Err(why),
            reset: false,
        })
    }
}

/// Parses one `name limit [options]` entry; the name is checked.
fn entry(name: &[u8], words: &[&[u8]], origin: Origin) -> Result<(Vec<u8>, Definition)> {
    if !is_valid_name(name) {
        return Err(Error::PolicyName);
    }
    let definition = match define(words, origin) {
        Ok(definition) => definition,
        // The primary, an AOF or an RDB accepted it: keep it, unusable here,
        // rather than drop it or refuse the replication stream.
        Err(why) if !origin.checks_local_bounds() => Definition::unusable(words, why)?,
        Err(why) => return Err(why),
    };
    Ok((name.to_vec(), definition))
}

/// The policy of `definition`, with the statistics of the policy of the same
/// name in `previous` (a `SET` that replaces one keeps its counts).
fn policy(name: &[u8], d: Definition, previous: Option<&Policies>) -> Arc<Policy> {
    let previous = previous.and_then(|map| map.get(name));
    policy_after(d, previous.map(Arc::as_ref))
}

/// The policy of `definition`, with the statistics of `previous`.
fn policy_after(d: Definition, previous: Option<&Policy>) -> Arc<Policy> {
    let stats = previous.map(|p| Arc::clone(&p.stats)).unwrap_or_default();
    Arc::new(Policy {
        text: d.text,
        rule: d.rule,
        stats,
    })
}

/// The log line for an accepted definition this module cannot use.
fn unusable_message(name: &[u8], definition: &Definition) -> Option<String> {
    let why = definition.rule.as_ref().err()?;
    Some(format!(
        "ratelimit: policy '{}' kept as defined but not usable by this module ({why}): RL.LIMIT and RL.ALL refuse it until RL.POLICY SET redefines it",
        PolicyName::new(name)
    ))
}

/// `ERR line N: …` for an error of line `number` of a `LOAD` text.
fn at_line(number: usize, e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("ERR ").unwrap_or(&text);
    format!("ERR line {number}: {text}")
}

/// One parsed entry of a `LOAD` text: its line number, name, definition.
type Parsed = (usize, Vec<u8>, Definition);

/// Parses a `DUMP` / `LOAD` text: every entry, or the first error with its
/// line number (`ERR line N: …`). Linear in the text: a hash set finds a
/// name defined twice.
fn parse_text(text: &[u8], origin: Origin) -> std::result::Result<Vec<Parsed>, String> {
    // At most one entry a line: sized once, never moved while growing.
    let most = text.iter().filter(|&&b| b == b'\n').count() + 1;
    let mut parsed: Vec<Parsed> = Vec::with_capacity(most);
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(most);
    for line in lines(text) {
        let number = line.number;
        let (&name, rest) = line
            .words
            .split_first()
            .ok_or_else(|| at_line(number, &"empty"))?;
        let (name_owned, definition) =
            entry(name, rest, origin).map_err(|e| at_line(number, &e))?;
        if !seen.insert(name) {
            return Err(at_line(
                number,
                &format!("policy '{}' is defined twice", PolicyName::new(name)),
            ));
        }
        parsed.push((number, name_owned, definition));
    }
    Ok(parsed)
}

/// `name word word …` per policy, one a line, sorted by name.
fn dump_text(map: &Policies) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, policy) in map {
        out.extend_from_slice(name);
        out.push(b' ');
        out.extend_from_slice(&policy.text);
        out.push(b'\n');
    }
    out
}

// --- the subcommands ---------------------------------------------------------

/// The name argument of `RL.POLICY <sub> name …`.
fn name_arg<'a>(args: &Args<'a>) -> Result<&'a [u8]> {
    let name = args.bytes(2)?;
    if !is_valid_name(name) {
        return Err(Error::PolicyName);
    }
    Ok(name)
}

fn on() -> Result<()> {
    if settings::policies() {
        Ok(())
    } else {
        Err(Error::PoliciesOff)
    }
}

/// A change (`SET`, `DEL`, `LOAD`) is applied where policies are served,
/// and also, where they are only carried (`policies no`), when it comes from
/// the primary or an AOF replay: the data stays whole for a later restart or
/// promotion with `policies yes`.
fn on_or_carried(ctx: Ctx) -> Result<()> {
    if settings::policies()
        || (settings::policies_carried() && effects::is_replicated_or_loading(ctx))
    {
        Ok(())
    } else {
        Err(Error::PoliciesOff)
    }
}

fn set(ctx: Ctx, args: &Args) -> Result<Reply> {
    on_or_carried(ctx)?;
    let name = name_arg(args)?;
    let words = (3..args.len())
        .map(|i| args.bytes(i))
        .collect::<Result<Vec<_>>>()?;
    let origin = origin(ctx);
    let (name, definition) = entry(name, &words, origin)?;
    if let Some(message) = unusable_message(&name, &definition) {
        ctx.log_warning(&message);
    }
    {
        let mut map = policies();
        if let Some(old) = map.get(&name) {
            check_change(&name, old, &definition, origin, false)?;
        }
        let new = policy(&name, definition, Some(&map));
        map.insert(name, new);
    }
    effects::replicate_verbatim(ctx);
    Ok(Reply::Ok)
}

fn get(_ctx: Ctx, args: &Args) -> Result<Reply> {
    on()?;
    let name = name_arg(args)?;
    Ok(match policies().get(name) {
        Some(p) => Reply::Array(
            p.text
                .split(|&b| b == b' ')
                .map(|w| Reply::Bulk(w.to_vec()))
                .collect(),
        ),
        None => Reply::Null,
    })
}

fn del(ctx: Ctx, args: &Args) -> Result<Reply> {
    on_or_carried(ctx)?;
    let name = name_arg(args)?;
    let removed = policies().remove(name).is_some();
    if removed {
        effects::replicate_verbatim(ctx);
    }
    Ok(Reply::Integer(i64::from(removed)))
}

fn list(_ctx: Ctx, _args: &Args) -> Result<Reply> {
    on()?;
    Ok(Reply::Array(
        policies().keys().cloned().map(Reply::Bulk).collect(),
    ))
}

fn dump(_ctx: Ctx, _args: &Args) -> Result<Reply> {
    on()?;
    Ok(Reply::Bulk(dump_text(&policies())))
}

/// `RL.POLICY LOAD [REPLACE] [RESET] text`: every line is parsed and
/// checked before anything changes (a refused last line costs no more than
/// a successful load); then the map takes the entries in place.
fn load(ctx: Ctx, args: &Args) -> Result<Reply> {
    on_or_carried(ctx)?;
    let last = args.len().checked_sub(1).ok_or(Error::PolicySyntax)?;
    let (mut replace, mut reset) = (false, false);
    for i in 2..last {
        let word = args.bytes(i)?;
        if is_keyword(word, b"REPLACE") && !replace {
            replace = true;
        } else if is_keyword(word, b"RESET") && !reset {
            reset = true;
        } else {
            return Err(Error::LoadSyntax);
        }
    }
    let text = args.bytes(last)?;
    let origin = origin(ctx);
    let parsed = match parse_text(text, origin) {
        Ok(parsed) => parsed,
        Err(message) => return Ok(Reply::Error(message)),
    };
    let count = parsed.len();
    for (_, name, definition) in &parsed {
        if let Some(message) = unusable_message(name, definition) {
            ctx.log_warning(&message);
        }
    }
    {
        let mut map = policies();
        for (number, name, definition) in &parsed {
            if let Some(old) = map.get(name) {
                if let Err(e) = check_change(name, old, definition, origin, reset) {
                    return Ok(Reply::Error(at_line(*number, &e)));
                }
            }
        }
        if replace || map.is_empty() {
            // A new map, built in one pass from the entries sorted by name;
            // the statistics of the policies of the same name carry over,
            // found by walking the previous map alongside.
            let previous = std::mem::take(&mut *map);
            let mut parsed = parsed;
            parsed.sort_unstable_by(|a, b| a.1.cmp(&b.1));
            let mut before = previous.iter().peekable();
            *map = parsed
                .into_iter()
                .map(|(_, name, definition)| {
                    while before.next_if(|(n, _)| **n < name).is_some() {}
                    let same = before
                        .next_if(|(n, _)| **n == name)
                        .map(|(_, p)| p.as_ref());
                    let p = policy_after(definition, same);
                    (name, p)
                })
                .collect();
            drop(before);
            drop(previous);
        } else {
            for (_, name, definition) in parsed {
                let p = policy(&name, definition, Some(&map));
                map.insert(name, p);
            }
        }
    }
    effects::replicate_verbatim(ctx);
    Ok(Reply::Integer(count as i64))
}

fn stats(_ctx: Ctx, args: &Args) -> Result<Reply> {
    on()?;
    let name = name_arg(args)?;
    Ok(match policies().get(name) {
        Some(p) => Reply::Array(
            p.stats
                .fields()
                .iter()
                .flat_map(|(field, value)| {
                    [
                        Reply::Bulk(field.to_bytes().to_vec()),
                        Reply::Integer(i64::try_from(*value).unwrap_or(i64::MAX)),
                    ]
                })
                .collect(),
        ),
        None => Reply::Null,
    })
}

/// `RL.POLICY HELP`: one line per subcommand, as Redis's containers answer.
const HELP: &[&str] = &[
    "RL.POLICY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "SET <name> <limit> [SHADOW] [SOFT <percent>] [BLOCK <duration>] [RESET]",
    "    Create or replace a policy. <limit> is GCRA, TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW,",
    "    SLIDINGWINDOW or SLIDINGLOG with its parameters. RESET allows changing the algorithm",
    "    of an existing policy (its limiters start over).",
    "GET <name>",
    "    The policy's definition as SET takes it, or nil.",
    "DEL <name>",
    "    Delete a policy: 1 if it existed, else 0.",
    "LIST",
    "    The names of every policy, sorted.",
    "DUMP",
    "    Every policy, one 'name limit [options]' a line, as LOAD takes it.",
    "LOAD [REPLACE] [RESET] <text>",
    "    Set every policy of a text, all or nothing. REPLACE deletes the others; RESET as in SET.",
    "STATS <name>",
    "    The policy's statistics (the fields of its INFO ratelimit line), or nil.",
    "RESETSTATS",
    "    Zero the statistics of every policy and every command.",
    "HELP",
    "    Print this help.",
];

fn help(_ctx: Ctx, _args: &Args) -> Result<Reply> {
    Ok(Reply::Array(
        HELP.iter()
            .map(|l| Reply::Bulk(l.as_bytes().to_vec()))
            .collect(),
    ))
}

fn reset_stats(_ctx: Ctx, _args: &Args) -> Result<Reply> {
    on()?;
    for policy in policies().values() {
        policy.stats.reset();
    }
    super::reset_command_stats();
    Ok(Reply::Ok)
}

/// A subcommand of `RL.POLICY`.
pub struct Subcommand {
    /// Lower case, as registered (`set` → `RL.POLICY|SET`).
    pub name: &'static std::ffi::CStr,
    /// `rl.policy|set`, for `COMMAND DOCS` and ACL categories.
    pub full_name: &'static std::ffi::CStr,
    pub flags: &'static std::ffi::CStr,
    /// Fewest and most arguments, counting `RL.POLICY` and the subcommand.
    pub min_argc: usize,
    pub max_argc: Option<usize>,
    pub doc: &'static docs::CommandDoc,
    pub handler: fn(Ctx, &Args) -> Result<Reply>,
    /// Whether it changes policies or their statistics (`SET`, `LOAD`,
    /// `DEL`, `RESETSTATS`): `@admin @dangerous` only, not in the module's
    /// own ACL category.
    pub changes: bool,
}

/// Changing subcommands: `admin` (so `@admin` and `@dangerous` on servers
/// that give module commands ACL categories); they propagate.
const CHANGE_FLAGS: &std::ffi::CStr = c"write deny-oom admin deny-script";

const NAME: docs::ArgDoc = docs::string(c"name");

pub const SUBCOMMANDS: [Subcommand; 9] = [
    Subcommand {
        name: c"set",
        full_name: c"rl.policy|set",
        flags: CHANGE_FLAGS,
        min_argc: 4,
        max_argc: None,
        doc: &docs::CommandDoc {
            summary: c"Creates or replaces a policy: a named limit (GCRA, TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW or SLIDINGLOG with its parameters), optionally SHADOW, SOFT percent and BLOCK duration. Changing an existing policy's algorithm needs RESET.",
            complexity: c"O(log N) for N policies",
            arity: -4,
            acl_categories: "admin dangerous",
            keys: docs::KeySpec::None,
            args: &[
                NAME,
                docs::ArgDoc {
                    multiple: true,
                    ..docs::string(c"limit")
                },
            ],
        },
        handler: set,
        changes: true,
    },
    Subcommand {
        name: c"get",
        full_name: c"rl.policy|get",
        flags: c"readonly fast",
        min_argc: 3,
        max_argc: Some(3),
        doc: &docs::CommandDoc {
            summary: c"The policy's definition as RL.POLICY SET takes it, or nil.",
            complexity: c"O(log N) for N policies",
            arity: 3,
            acl_categories: "read fast",
            keys: docs::KeySpec::None,
            args: &[NAME],
        },
        handler: get,
        changes: false,
    },
    Subcommand {
        name: c"del",
        full_name: c"rl.policy|del",
        flags: c"write admin deny-script",
        min_argc: 3,
        max_argc: Some(3),
        doc: &docs::CommandDoc {
            summary: c"Deletes a policy: 1 if it existed, else 0.",
            complexity: c"O(log N) for N policies",
            arity: 3,
            acl_categories: "admin dangerous",
            keys: docs::KeySpec::None,
            args: &[NAME],
        },
        handler: del,
        changes: true,
    },
    Subcommand {
        name: c"list",
        full_name: c"rl.policy|list",
        flags: c"readonly",
        min_argc: 2,
        max_argc: Some(2),
        doc: &docs::CommandDoc {
            summary: c"The names of every policy, sorted.",
            complexity: c"O(N) for N policies",
            arity: 2,
            acl_categories: "read",
            keys: docs::KeySpec::None,
            args: &[],
        },
        handler: list,
        changes: false,
    },
    Subcommand {
        name: c"load",
        full_name: c"rl.policy|load",
        flags: CHANGE_FLAGS,
        min_argc: 3,
        max_argc: Some(5),
        doc: &docs::CommandDoc {
            summary: c"Sets every policy of a text (one 'name limit [options]' a line, as DUMP writes it); all or nothing. REPLACE deletes the others; RESET allows algorithm changes.",
            complexity: c"O(N log M) for N lines and M policies",
            arity: -3,
            acl_categories: "admin dangerous",
            keys: docs::KeySpec::None,
            args: &[
                docs::ArgDoc {
                    name: c"replace",
                    kind: docs::ArgType::PureToken,
                    token: Some(c"REPLACE"),
                    optional: true,
                    multiple: false,
                },
                docs::ArgDoc {
                    name: c"reset",
                    kind: docs::ArgType::PureToken,
                    token: Some(c"RESET"),
                    optional: true,
                    multiple: false,
                },
                docs::string(c"text"),
            ],
        },
        handler: load,
        changes: true,
    },
    Subcommand {
        name: c"dump",
        full_name: c"rl.policy|dump",
        flags: c"readonly",
        min_argc: 2,
        max_argc: Some(2),
        doc: &docs::CommandDoc {
            summary: c"Every policy, one 'name limit [options]' a line, as RL.POLICY LOAD takes it.",
            complexity: c"O(N) for N policies",
            arity: 2,
            acl_categories: "read",
            keys: docs::KeySpec::None,
            args: &[],
        },
        handler: dump,
        changes: false,
    },
    Subcommand {
        name: c"resetstats",
        full_name: c"rl.policy|resetstats",
        flags: c"admin deny-script",
        min_argc: 2,
        max_argc: Some(2),
        doc: &docs::CommandDoc {
            summary: c"Zeroes the statistics of every policy and every command (INFO ratelimit).",
            complexity: c"O(N) for N policies",
            arity: 2,
            acl_categories: "admin dangerous",
            keys: docs::KeySpec::None,
            args: &[],
        },
        handler: reset_stats,
        changes: true,
    },
    Subcommand {
        name: c"stats",
        full_name: c"rl.policy|stats",
        flags: c"readonly fast",
        min_argc: 3,
        max_argc: Some(3),
        doc: &docs::CommandDoc {
            summary: c"The policy's statistics as field-value pairs (the fields of its INFO ratelimit line), or nil.",
            complexity: c"O(log N) for N policies",
            arity: 3,
            acl_categories: "read fast",
            keys: docs::KeySpec::None,
            args: &[NAME],
        },
        handler: stats,
        changes: false,
    },
    Subcommand {
        name: c"help",
        full_name: c"rl.policy|help",
        flags: c"readonly fast",
        min_argc: 2,
        max_argc: Some(2),
        doc: &docs::CommandDoc {
            summary: c"Lines describing each subcommand.",
            complexity: c"O(1)",
            arity: 2,
            acl_categories: "fast",
            keys: docs::KeySpec::None,
            args: &[],
        },
        handler: help,
        changes: false,
    },
];

/// The container's documentation.
pub const CONTAINER_DOC: docs::CommandDoc = docs::CommandDoc {
    summary: c"Manages server-side policies: named limits for RL.LIMIT and RL.ALL.",
    complexity: c"Depends on the subcommand.",
    arity: -2,
    acl_categories: "",
    keys: docs::KeySpec::None,
    args: &[],
};

/// `RL.POLICY` with `policies unloadable`: one plain command,
/// no subcommands, that answers every call with [`Error::PoliciesOff`].
pub const OFF_SPEC: super::Spec = super::Spec {
    name: c"rl.policy",
    stat_name: c"cmdstat_rl.policy",
    min_argc: 2,
    max_argc: None,
    unit: super::ReplyUnit::Millis,
    flags: c"readonly fast",
    doc: &docs::CommandDoc {
        summary: c"Refuses: the module was loaded with policies unloadable (ratelimit.policies).",
        complexity: c"O(1)",
        arity: -2,
        acl_categories: "read fast",
        keys: docs::KeySpec::None,
        args: &[],
    },
    handler: |_, _| Err(Error::PoliciesOff),
    stats: &OFF_STATS,
};

/// Never counted: `RL.POLICY` only refuses while policies are off.
static OFF_STATS: CommandStats = CommandStats::new();

// --- statistics, RDB, loading ------------------------------------------------

/// The most `policy_<name>` lines `INFO ratelimit` shows: those of the
/// first names in byte order. `RL.POLICY STATS name` answers for any.
pub const INFO_POLICY_LINES: usize = 100;

/// `INFO ratelimit`: whether policies are on, how many there are, how many
/// lines were left out (`policy_lines_omitted`), then one `policy_<name>`
/// line for each of the first [`INFO_POLICY_LINES`] policies by name (the
/// name's `:` written `/`: see [`info_name`]).
pub fn write_info(out: &mut InfoWriter) {
    let map = policies();
    out.field(c"policies_enabled", u64::from(settings::policies()));
    out.field(c"policies", map.len() as u64);
    let unusable = map.values().filter(|p| p.rule.is_err()).count();
    out.field(c"policies_unusable", unusable as u64);
    let omitted = map.len().saturating_sub(INFO_POLICY_LINES);
    out.field(c"policy_lines_omitted", omitted as u64);
    for (name, policy) in map.iter().take(INFO_POLICY_LINES) {
        let mut line = b"policy_".to_vec();
        line.extend_from_slice(&info_name(name));
        if let Ok(line) = CString::new(line) {
            policy.stats.write(out, &line);
        }
    }
}

/// The encoding version of the RDB record.
pub const RDB_ENCVER: c_int = 0;

/// What the RDB carries: the policy count, then per policy its name and its
/// words joined by spaces (a `DUMP` line without the name).
pub const AUX_HOOKS: AuxHooks = AuxHooks {
    save: aux_save,
    load: aux_load,
};

fn aux_save(out: &mut AuxWriter, may_skip: bool) {
    let map = policies();
    if map.is_empty() && may_skip {
        return;
    }
    out.unsigned(map.len() as u64);
    for (name, policy) in map.iter() {
        out.bytes(name);
        out.bytes(&policy.text);
    }
}

fn aux_load(input: &mut AuxReader, encver: i32) -> std::result::Result<(), String> {
    if encver != RDB_ENCVER {
        return Err(format!(
            "policy records of encoding version {encver}; this module reads version {RDB_ENCVER}"
        ));
    }
    let count = input.unsigned()?;
    // The policies in force before this load (kept aside when it began):
    // their statistics carry over to policies of the same name.
    let previous = before_load();
    let mut loaded = Policies::new();
    for _ in 0..count {
        let name = input.bytes()?;
        let text = input.bytes()?;
        let words: Vec<&[u8]> = text
            .split(u8::is_ascii_whitespace)
            .filter(|w| !w.is_empty())
            .collect();
        // Accepted where the file was written: this server's own bounds
        // (`sliding-log-max-limit`, …) do not apply.
        match entry(&name, &words, Origin::Accepted) {
            Ok((name, definition)) => {
                if let Some(message) = unusable_message(&name, &definition) {
                    input.log_warning(&message);
                }
                let p = policy(&name, definition, previous.as_ref());
                loaded.insert(name, p);
            }
            // A definition this module cannot read at all (a newer module's
            // syntax, say): the rest of the dataset still loads; the log
            // says which.
            Err(e) => input.log_warning(&format!(
                "ratelimit: policy '{}' not loaded: {e}",
                PolicyName::new(&name)
            )),
        }
    }
    drop(previous);
    *policies() = loaded;
    Ok(())
}

/// A dataset load began (`RDB_START`, `AOF_START`, `REPL_START`): the
/// loaded data brings its own policies. Those in force are kept aside until
/// the load ends (then dropped) or fails (then restored).
pub fn on_load_start() {
    let current = std::mem::take(&mut *policies());
    *before_load() = Some(current);
}

/// The load ended. With `policies no`, says how many policies the data
/// brought: kept (saved again, replicated changes applied), not served.
pub fn on_load_ended(ctx: Ctx) {
    *before_load() = None;
    let count = count();
    if settings::policies_mode() == settings::PoliciesMode::No && count > 0 {
        ctx.log_warning(&format!(
            "ratelimit: {count} policies loaded and kept, not served (policies no): RL.POLICY and RL.LIMIT refuse until the module is loaded with policies yes"
        ));
    }
}

/// The load failed: the policies in force before it come back.
pub fn on_load_failed() {
    if let Some(previous) = before_load().take() {
        *policies() = previous;
    }
}

/// Every policy as `DUMP` writes it (empty when there is none).
pub fn dump_all() -> Vec<u8> {
    dump_text(&policies())
}

/// How many policies there are.
pub fn count() -> usize {
    policies().len()
}

/// Drops every policy (at `MODULE UNLOAD`).
pub fn clear() {
    policies().clear();
    *before_load() = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_lines_are_name_then_words() {
        assert_eq!(dump_text(&Policies::new()), b"");
    }
}
