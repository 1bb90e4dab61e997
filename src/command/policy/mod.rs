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

use std::collections::BTreeMap;
use std::ffi::{c_int, CString};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::args::SettingsBounds;
use super::args::{is_keyword, Args, Origin};
use super::stats::CommandStats;
use super::{docs, settings};
use crate::algorithm::policy::{info_name, is_valid_name};
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

pub use crate::definition::Rule;

impl Policy {
    /// Whether a call can use it here and now: a rule this module could
    /// parse, whose cheapest call (`TOKENS 1`) fits the current
    /// `sliding-log-call-budget` (a definition kept from when the budget
    /// was larger, or accepted from a primary with a larger one, fails
    /// every call with [`Error::OverBudget`]).
    pub fn is_usable(&self) -> bool {
        self.rule.as_ref().is_ok_and(|rule| {
            super::decide::check_budget([(&rule.limit, false)], super::decide::Op::Take(1)).is_ok()
        })
    }
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

mod define;
mod subcommands;

use define::{dump_text, entry, policy, unusable_message};
pub use subcommands::{Subcommand, SUBCOMMANDS};

// --- the container ----------------------------------------------------------

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
    let unusable = map.values().filter(|p| !p.is_usable()).count();
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
