//! Server-side policies: named limits kept on the server, used by
//! `RL.LIMIT key policy` and `RL.ALL … POLICY name`, managed by
//!
//! ```text
//! RL.POLICY SET name limit [SHADOW] [SOFT percent] [BLOCK duration]
//! RL.POLICY GET name | DEL name | LIST | DUMP | RESETSTATS
//! RL.POLICY LOAD [REPLACE] text
//! ```
//!
//! `limit` is a limit of `RL.ALL`'s grammar or `LEAKYBUCKET capacity
//! leak_tokens leak_period`, validated by its command's own parser. Policies
//! are module data kept beside the keyspace, like Redis Functions: `SET`,
//! `DEL` and `LOAD` propagate verbatim (they do not depend on the clock), RDB
//! files carry them as module auxiliary data ([`crate::server::rdb`]), and a
//! replica's full sync, `DEBUG RELOAD` or a restart replaces them with the
//! loaded file's. `FLUSHALL` leaves them. Each policy has its statistics
//! (`INFO ratelimit`, `policy_<name>` lines), kept across `SET`s of the same
//! name.

use std::collections::BTreeMap;
use std::ffi::{c_int, CString};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::all::{limit_kind, Count};
use super::args::{is_keyword, Args};
use super::limiter::{Limit, Modes};
use super::stats::CommandStats;
use super::{docs, settings};
use crate::algorithm::policy::{
    is_dumpable_word, is_valid_name, lines, soft_count, SOFT_PERCENT_MAX, SOFT_PERCENT_MIN,
};
use crate::error::{Error, PolicyName, Result};
use crate::server::info::InfoWriter;
use crate::server::rdb::{AuxHooks, AuxReader, AuxWriter};
use crate::server::reply::Reply;
use crate::server::string::{Arg, OwnedString};
use crate::server::{effects, Ctx};

/// One policy.
pub struct Policy {
    /// The words after the name, as `SET` takes them back (`GET`, `DUMP`):
    /// the limit's keyword upper case, its parameters as given, then
    /// `SHADOW`, `SOFT percent`, `BLOCK duration` in that order.
    pub words: Vec<Vec<u8>>,
    /// The limit that decides: the nominal one, scaled up by `SOFT`.
    pub limit: Limit,
    pub modes: Modes,
    /// Its statistics since load (kept when `SET` replaces the definition).
    pub stats: Arc<CommandStats>,
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

/// The policy `name`. Errors: [`Error::PoliciesOff`],
/// [`Error::UnknownPolicy`].
pub fn find(name: &[u8]) -> Result<Arc<Policy>> {
    if !settings::policies() {
        return Err(Error::PoliciesOff);
    }
    policies().get(name).cloned().ok_or(Error::UnknownPolicy {
        name: PolicyName::new(name),
    })
}

/// A policy definition, parsed.
struct Definition {
    words: Vec<Vec<u8>>,
    limit: Limit,
    modes: Modes,
}

/// Parses `words` as the command's own parser would: each word becomes a
/// server string, read as a command argument.
fn parse_words<T>(words: &[&[u8]], parse: impl FnOnce(&Args) -> Result<T>) -> Result<T> {
    let owned = words
        .iter()
        .map(|w| OwnedString::detached_bytes(w))
        .collect::<Result<Vec<_>>>()?;
    let argv: Vec<Arg> = owned.iter().map(OwnedString::as_arg).collect();
    parse(&Args::new(&argv))
}

/// Parses `limit [SHADOW] [SOFT percent] [BLOCK duration]`.
fn define(words: &[&[u8]]) -> Result<Definition> {
    let first = words.first().ok_or(Error::PolicySyntax)?;
    let kind = limit_kind(first).ok_or(Error::UnknownPolicyLimit)?;
    if words.len() < 1 + kind.params {
        return Err(Error::PolicySyntax);
    }
    let nominal = parse_words(words, |args| {
        let limit = (kind.parse)(args, 1)?;
        let mut modes = Modes::default();
        let (mut soft, mut block) = (None, None);
        let mut i = 1 + kind.params;
        while i < args.len() {
            let word = args.bytes(i)?;
            if is_keyword(word, b"SHADOW") && !modes.shadow {
                modes.shadow = true;
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
        Ok((limit, modes, soft, block))
    })?;
    let (mut limit, mut modes, soft, block) = nominal;
    // The words as SET takes them back.
    let mut canonical: Vec<Vec<u8>> = Vec::with_capacity(words.len());
    canonical.push(kind.name.to_vec());
    canonical.extend(words[1..=kind.params].iter().map(|w| w.to_vec()));
    if modes.shadow {
        canonical.push(b"SHADOW".to_vec());
    }
    if let Some((percent, at)) = soft {
        canonical.push(b"SOFT".to_vec());
        canonical.push(words[at].to_vec());
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
        limit = parse_words(&scaled_words, |args| (kind.parse)(args, 1))?;
        modes.nominal_limit = nominal_limit;
    }
    if let Some(at) = block {
        canonical.push(b"BLOCK".to_vec());
        canonical.push(words[at].to_vec());
    }
    if !canonical.iter().all(|w| is_dumpable_word(w)) {
        return Err(Error::PolicySyntax);
    }
    Ok(Definition {
        words: canonical,
        limit,
        modes,
    })
}

/// Parses one `name limit [options]` entry; the name is checked.
fn entry(name: &[u8], words: &[&[u8]]) -> Result<(Vec<u8>, Definition)> {
    if !is_valid_name(name) {
        return Err(Error::PolicyName);
    }
    Ok((name.to_vec(), define(words)?))
}

/// The policy of `definition`, with the statistics of the policy of the same
/// name in `previous` (a `SET` that replaces one keeps its counts).
fn policy(name: &[u8], d: Definition, previous: Option<&Policies>) -> Arc<Policy> {
    let stats = previous
        .and_then(|map| map.get(name))
        .map(|p| Arc::clone(&p.stats))
        .unwrap_or_default();
    Arc::new(Policy {
        words: d.words,
        limit: d.limit,
        modes: d.modes,
        stats,
    })
}

/// Parses a `DUMP` / `LOAD` text: every entry, or the first error with its
/// line number (`ERR line N: …`).
fn parse_text(text: &[u8]) -> std::result::Result<Vec<(Vec<u8>, Definition)>, String> {
    let mut parsed: Vec<(Vec<u8>, Definition)> = Vec::new();
    for line in lines(text) {
        let at_line = |e: &dyn std::fmt::Display| {
            let text = e.to_string();
            let text = text.strip_prefix("ERR ").unwrap_or(&text).to_string();
            format!("ERR line {}: {text}", line.number)
        };
        let (name, rest) = line.words.split_first().ok_or_else(|| at_line(&"empty"))?;
        let (name, definition) = entry(name, rest).map_err(|e| at_line(&e))?;
        if parsed.iter().any(|(n, _)| *n == name) {
            return Err(at_line(&format!(
                "policy '{}' is defined twice",
                PolicyName::new(&name)
            )));
        }
        parsed.push((name, definition));
    }
    Ok(parsed)
}

/// `name word word …` per policy, one a line, sorted by name.
fn dump_text(map: &Policies) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, policy) in map {
        out.extend_from_slice(name);
        for word in &policy.words {
            out.push(b' ');
            out.extend_from_slice(word);
        }
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
    let (name, definition) = entry(name, &words)?;
    {
        let mut map = policies();
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
        Some(p) => Reply::Array(p.words.iter().cloned().map(Reply::Bulk).collect()),
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

fn load(ctx: Ctx, args: &Args) -> Result<Reply> {
    on_or_carried(ctx)?;
    let (replace, text) = match args.len() {
        3 => (false, args.bytes(2)?),
        4 if is_keyword(args.bytes(2)?, b"REPLACE") => (true, args.bytes(3)?),
        _ => return Err(Error::PolicySyntax),
    };
    let parsed = match parse_text(text) {
        Ok(parsed) => parsed,
        Err(message) => return Ok(Reply::Error(message)),
    };
    let count = parsed.len();
    {
        let mut map = policies();
        let mut new = if replace {
            Policies::new()
        } else {
            map.clone()
        };
        for (name, definition) in parsed {
            let p = policy(&name, definition, Some(&map));
            new.insert(name, p);
        }
        *map = new;
    }
    effects::replicate_verbatim(ctx);
    Ok(Reply::Integer(count as i64))
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
}

/// Changing subcommands: `admin` (so `@admin` and `@dangerous` on servers
/// that give module commands ACL categories); they propagate.
const CHANGE_FLAGS: &std::ffi::CStr = c"write deny-oom admin deny-script";

const NAME: docs::ArgDoc = docs::string(c"name");

pub const SUBCOMMANDS: [Subcommand; 7] = [
    Subcommand {
        name: c"set",
        full_name: c"rl.policy|set",
        flags: CHANGE_FLAGS,
        min_argc: 4,
        max_argc: None,
        doc: &docs::CommandDoc {
            summary: c"Creates or replaces a policy: a named limit (GCRA, TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW or SLIDINGLOG with its parameters), optionally SHADOW, SOFT percent and BLOCK duration.",
            complexity: c"O(log N) for N policies",
            arity: -4,
            acl_categories: "admin dangerous write",
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
            acl_categories: "admin dangerous write",
            keys: docs::KeySpec::None,
            args: &[NAME],
        },
        handler: del,
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
    },
    Subcommand {
        name: c"load",
        full_name: c"rl.policy|load",
        flags: CHANGE_FLAGS,
        min_argc: 3,
        max_argc: Some(4),
        doc: &docs::CommandDoc {
            summary: c"Sets every policy of a text (one 'name limit [options]' a line, as DUMP writes it); all or nothing. REPLACE deletes the others.",
            complexity: c"O(N + M log M) for N lines and M policies",
            arity: -3,
            acl_categories: "admin dangerous write",
            keys: docs::KeySpec::None,
            args: &[
                docs::ArgDoc {
                    name: c"replace",
                    kind: docs::ArgType::PureToken,
                    token: Some(c"REPLACE"),
                    optional: true,
                    multiple: false,
                },
                docs::string(c"text"),
            ],
        },
        handler: load,
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

/// `INFO ratelimit`: whether policies are on, how many there are, then one
/// `policy_<name>` line per policy (the server shows `:` in a name as `_`).
pub fn write_info(out: &mut InfoWriter) {
    let map = policies();
    out.field(c"policies_enabled", u64::from(settings::policies()));
    out.field(c"policies", map.len() as u64);
    for (name, policy) in map.iter() {
        let mut line = b"policy_".to_vec();
        line.extend_from_slice(name);
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
        out.bytes(&policy.words.join(&b' '));
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
        match entry(&name, &words) {
            Ok((name, definition)) => {
                let p = policy(&name, definition, previous.as_ref());
                loaded.insert(name, p);
            }
            // A definition this server no longer accepts (a setting changed,
            // say): the rest of the dataset still loads; the log says which.
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

/// The load ended.
pub fn on_load_ended() {
    *before_load() = None;
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
