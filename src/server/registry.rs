//! Commands: registration, documentation (`COMMAND DOCS`, key specs, ACL
//! categories) and the boundary every call crosses ([`dispatch`]).
//!
//! Documentation and categories are set only where the running server has
//! the APIs: `RedisModule_SetCommandInfo` (Redis 7.0+),
//! `RedisModule_SetCommandACLCategories` (7.2+, Valkey),
//! `RedisModule_AddACLCategory` (7.4+, Valkey 8+).

use std::ffi::{c_char, c_int, CStr};

use redis_module::raw::{
    self, RedisModuleCommandArg, RedisModuleCommandInfo, RedisModuleCommandKeySpec, RedisModuleCtx,
    RedisModuleString,
};

use super::string::{args_of, Arg};
use super::{guard, reply, Ctx, ERR, OK};

/// The `extern "C"` signature of a command's entry point.
pub type EntryPoint =
    extern "C" fn(*mut RedisModuleCtx, *mut *mut RedisModuleString, c_int) -> c_int;

/// The boundary of every command call: wraps the context and the arguments
/// and runs `body`, answering a caught panic with an `ERR` reply (a panic
/// unwinding into the server would abort it). Bodies reply only after their
/// work is done, so a caught panic never leaves a half-written reply.
pub fn dispatch(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
    body: impl FnOnce(Ctx, &[Arg]) -> c_int,
) -> c_int {
    let Some(ctx) = Ctx::from_raw(ctx) else {
        return ERR;
    };
    let argc = usize::try_from(argc).unwrap_or(0);
    // SAFETY: the server passes `argc` valid strings in `argv`, alive for
    // the whole call.
    let Some(args) = (unsafe { args_of(argv, argc) }) else {
        return reply::wrong_arity(ctx);
    };
    guard(
        || body(ctx, args),
        || {
            let caught = crate::error::Error::Internal {
                what: "a panic was caught",
            };
            reply::error(ctx, &caught.to_string())
        },
    )
}

/// Whether the server calls the command only to learn where its keys are
/// (a `getkeys-api` command, e.g. for Redis Cluster's slot check).
pub fn is_keys_position_request(ctx: Ctx) -> bool {
    // SAFETY: a plain read of a function pointer set at load.
    match unsafe { raw::RedisModule_IsKeysPositionRequest } {
        // SAFETY: the context of the current command.
        Some(f) => (unsafe { f(ctx.as_ptr()) }) != 0,
        None => false,
    }
}

/// Answers a keys-position request: argument `pos` is a key.
pub fn key_at_pos(ctx: Ctx, pos: usize) {
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(f) = unsafe { raw::RedisModule_KeyAtPos } {
        // SAFETY: the context of the current keys-position request.
        unsafe { f(ctx.as_ptr(), pos as c_int) };
    }
}

/// What `COMMAND DOCS` shows for one argument.
#[derive(Clone, Copy)]
pub struct ArgDoc {
    pub name: &'static CStr,
    pub kind: ArgType,
    /// The keyword that introduces it (`TOKENS`), if any.
    pub token: Option<&'static CStr>,
    pub optional: bool,
    /// It may be repeated.
    pub multiple: bool,
}

/// The type of a documented argument.
#[derive(Clone, Copy)]
pub enum ArgType {
    Key,
    Integer,
    /// A number of seconds, possibly fractional.
    Double,
    String,
    /// A keyword alone (`PEEK`).
    PureToken,
}

/// Where a command's keys are.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeySpec {
    /// One key, at position 1.
    One,
    /// `numkeys` at position 1, then that many keys (as `EVAL` and `ZUNION`).
    NumKeys,
    /// No keys (`RL.POLICY`'s subcommands).
    None,
}

/// What `COMMAND DOCS` shows for one command.
pub struct CommandDoc {
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// Negative: at least that many arguments, the command name included.
    pub arity: c_int,
    /// ACL categories besides the module's own (`write fast`, …).
    pub acl_categories: &'static str,
    /// Where the keys are.
    pub keys: KeySpec,
    pub args: &'static [ArgDoc],
}

/// The version of the module that introduced the commands.
const SINCE: &CStr = c"0.1.0";

/// Adds the module's own ACL category where the server has module
/// categories; true when the commands can carry it. On a reload the category
/// already exists (the server keeps it) and adding it fails: the commands
/// still get it.
pub fn add_acl_category(ctx: Ctx, category: &CStr) -> bool {
    // SAFETY: a plain read of a function pointer set at load.
    match unsafe { raw::RedisModule_AddACLCategory } {
        Some(add) => {
            // SAFETY: the load context (the only place this call is allowed).
            unsafe { add(ctx.as_ptr(), category.as_ptr()) };
            true
        }
        None => false,
    }
}

/// Keys are signalled as modified only when a command writes (the module
/// does it itself), not whenever a key was opened for writing.
pub fn no_implicit_signal_modified(ctx: Ctx) {
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(set_options) = unsafe { raw::RedisModule_SetModuleOptions } {
        // SAFETY: the load context.
        unsafe {
            set_options(
                ctx.as_ptr(),
                raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int,
            )
        };
    }
}

/// An all-zero key spec (the end of a key spec array).
fn unsafe_zeroed_key_spec() -> RedisModuleCommandKeySpec {
    // SAFETY: all-zero is a valid value of this plain C struct.
    unsafe { std::mem::zeroed() }
}

/// Registers the container command `name` (`RL.POLICY`): it has no handler of
/// its own, only the subcommands [`create_subcommand`] adds (`name|sub`).
/// False when the server refused.
pub fn create_container(ctx: Ctx, name: &CStr) -> bool {
    let Some(create) = (
        // SAFETY: a plain read of a function pointer set at load.
        unsafe { raw::RedisModule_CreateCommand }
    ) else {
        return false;
    };
    // SAFETY: the load context; the name and flags are NUL-terminated; a
    // container has no handler and no keys.
    let status = unsafe { create(ctx.as_ptr(), name.as_ptr(), None, c"".as_ptr(), 0, 0, 0) };
    status == OK
}

/// Registers the subcommand `sub` of the container `parent` with `entry`
/// and `flags`, without keys. False when the server refused (or has no
/// subcommands: Redis 7.0+ has them).
pub fn create_subcommand(
    ctx: Ctx,
    parent: &CStr,
    sub: &CStr,
    entry: EntryPoint,
    flags: &CStr,
) -> bool {
    let (Some(get_command), Some(create)) = (
        // SAFETY: plain reads of function pointers set at load.
        unsafe { raw::RedisModule_GetCommand },
        // SAFETY: as above.
        unsafe { raw::RedisModule_CreateSubcommand },
    ) else {
        return false;
    };
    // SAFETY: the load context; `parent` is NUL-terminated.
    let container = unsafe { get_command(ctx.as_ptr(), parent.as_ptr()) };
    if container.is_null() {
        return false;
    }
    // SAFETY: a command of this module; the name and flags are
    // NUL-terminated; no keys.
    let status = unsafe {
        create(
            container,
            sub.as_ptr(),
            Some(entry),
            flags.as_ptr(),
            0,
            0,
            0,
        )
    };
    status == OK
}

/// Registers `name` with `entry`. A [`KeySpec::One`] command has its key at
/// position 1 (first key 1, last key 1, step 1), so that Redis Cluster routes
/// by it and ACL key patterns apply; a [`KeySpec::NumKeys`] command gets its
/// keys from the key spec that [`document`] sets. False when the server
/// refused.
pub fn create_command(
    ctx: Ctx,
    name: &CStr,
    entry: EntryPoint,
    flags: &CStr,
    keys: KeySpec,
) -> bool {
    let first = c_int::from(keys == KeySpec::One);
    // SAFETY: a plain read of a function pointer set at load.
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return false;
    };
    // SAFETY: the load context; the strings are static.
    let status = unsafe {
        create(
            ctx.as_ptr(),
            name.as_ptr(),
            Some(entry),
            flags.as_ptr(),
            first,
            first,
            first,
        )
    };
    status == OK
}

/// Applies `doc` and the ACL categories to the registered command `name`;
/// an error text for the log when the server refuses.
pub fn document(
    ctx: Ctx,
    name: &CStr,
    doc: &CommandDoc,
    own_category: Option<&CStr>,
) -> Result<(), String> {
    // SAFETY: a plain read of a function pointer set at load.
    let Some(get_command) = (unsafe { raw::RedisModule_GetCommand }) else {
        return Ok(());
    };
    // SAFETY: the load context; `name` is a registered command.
    let command = unsafe { get_command(ctx.as_ptr(), name.as_ptr()) };
    if command.is_null() {
        return Err(format!("{} is not registered", name.to_string_lossy()));
    }
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(set_info) = unsafe { raw::RedisModule_SetCommandInfo } {
        if set_command_info(set_info, command, doc) != OK {
            return Err(format!(
                "the server refused the documentation of {}",
                name.to_string_lossy()
            ));
        }
    }
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(set_acl) = unsafe { raw::RedisModule_SetCommandACLCategories } {
        // With the module's own category first; without it if the server
        // refuses (it has no module categories, or lost ours).
        let mut attempts = Vec::with_capacity(2);
        if let Some(own) = own_category {
            let own = own.to_string_lossy();
            attempts.push(if doc.acl_categories.is_empty() {
                own.into_owned()
            } else {
                format!("{} {own}", doc.acl_categories)
            });
        }
        attempts.push(doc.acl_categories.to_string());
        let accepted = attempts.into_iter().any(|categories| {
            std::ffi::CString::new(categories).is_ok_and(|c| {
                // SAFETY: `command` is registered; the server copies the string.
                unsafe { set_acl(command, c.as_ptr()) == OK }
            })
        });
        if !accepted {
            return Err(format!(
                "the server refused the ACL categories of {}",
                name.to_string_lossy()
            ));
        }
    }
    Ok(())
}

fn set_command_info(
    set_info: unsafe extern "C" fn(
        *mut raw::RedisModuleCommand,
        *const RedisModuleCommandInfo,
    ) -> c_int,
    command: *mut raw::RedisModuleCommand,
    doc: &CommandDoc,
) -> c_int {
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<RedisModuleCommandArg>(),
    };
    // One key spec: the limiter keys are read and updated. `One`: the key at
    // position 1 (as registered); `NumKeys`: the count at position 1, then
    // that many keys. The array ends with a zeroed entry.
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut key_specs: [RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    key_specs[0].flags = u64::from(
        raw::REDISMODULE_CMD_KEY_RW
            | raw::REDISMODULE_CMD_KEY_ACCESS
            | raw::REDISMODULE_CMD_KEY_UPDATE,
    );
    key_specs[0].begin_search_type =
        raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    key_specs[0].bs.index.pos = 1;
    match doc.keys {
        // No key spec: the zeroed first entry ends the array.
        KeySpec::None => key_specs[0] = unsafe_zeroed_key_spec(),
        KeySpec::One => {
            key_specs[0].find_keys_type =
                raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
            key_specs[0].fk.range.lastkey = 0;
            key_specs[0].fk.range.keystep = 1;
            key_specs[0].fk.range.limit = 0;
        }
        KeySpec::NumKeys => {
            key_specs[0].find_keys_type =
                raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
            key_specs[0].fk.keynum.keynumidx = 0;
            key_specs[0].fk.keynum.firstkey = 1;
            key_specs[0].fk.keynum.keystep = 1;
        }
    }
    // The arguments, ending with a zeroed entry.
    let mut args: Vec<RedisModuleCommandArg> = doc.args.iter().map(command_arg).collect();
    args.push(zeroed_arg());
    let info = RedisModuleCommandInfo {
        version: &version,
        summary: doc.summary.as_ptr(),
        complexity: doc.complexity.as_ptr(),
        since: SINCE.as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null::<c_char>(),
        arity: doc.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    };
    // SAFETY: every pointer in `info` is valid for the call; the server
    // copies what it keeps.
    unsafe { set_info(command, &info) }
}

fn zeroed_arg() -> RedisModuleCommandArg {
    // SAFETY: all-zero is a valid value of this plain C struct (null
    // pointers, zero integers): the array terminator.
    unsafe { std::mem::zeroed() }
}

fn command_arg(a: &ArgDoc) -> RedisModuleCommandArg {
    let mut arg = zeroed_arg();
    arg.name = a.name.as_ptr();
    arg.type_ = match a.kind {
        ArgType::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        ArgType::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        ArgType::Double => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_DOUBLE,
        ArgType::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        ArgType::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    };
    arg.key_spec_index = if matches!(a.kind, ArgType::Key) {
        0
    } else {
        -1
    };
    arg.token = a.token.map_or(std::ptr::null(), |t| t.as_ptr());
    arg.flags = 0;
    if a.optional {
        arg.flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
    }
    if a.multiple {
        arg.flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
    }
    arg
}
