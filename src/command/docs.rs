//! Command documentation (`COMMAND DOCS`, `COMMAND INFO`) and ACL categories,
//! set at load only where the running server has the APIs:
//! `RedisModule_SetCommandInfo` (Redis 7.0+), `RedisModule_SetCommandACLCategories`
//! (7.2+, Valkey), `RedisModule_AddACLCategory` (Redis 7.4+, Valkey 8+: the `@ratelimit`
//! category). On servers without them the module loads and works the same;
//! the commands then carry only the categories their flags imply.

use std::ffi::{c_char, c_int, CStr};

use redis_module::raw::{
    self, RedisModuleCommandArg, RedisModuleCommandInfo, RedisModuleCommandKeySpec,
};

/// The module's own ACL category (servers with module categories only).
pub const MODULE_ACL_CATEGORY: &CStr = c"ratelimit";

/// The type of a documented argument.
#[derive(Clone, Copy)]
pub enum ArgType {
    Key,
    Integer,
    /// A number of seconds, possibly fractional.
    Double,
}

/// One documented argument.
pub struct ArgDoc {
    pub name: &'static CStr,
    pub kind: ArgType,
    /// The keyword that introduces it (`TOKENS`), if any.
    pub token: Option<&'static CStr>,
    pub optional: bool,
}

const fn arg(name: &'static CStr, kind: ArgType) -> ArgDoc {
    ArgDoc {
        name,
        kind,
        token: None,
        optional: false,
    }
}

/// `key`, always first.
pub const KEY: ArgDoc = arg(c"key", ArgType::Key);
/// `[TOKENS n]`, the cost of a request.
pub const TOKENS: ArgDoc = ArgDoc {
    name: c"n",
    kind: ArgType::Integer,
    token: Some(c"TOKENS"),
    optional: true,
};

/// What `COMMAND DOCS` shows for one command.
pub struct CommandDoc {
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// Negative: at least that many arguments, the command name included.
    pub arity: c_int,
    /// ACL categories besides the module's own (`write fast`, …).
    pub acl_categories: &'static str,
    pub args: &'static [ArgDoc],
}

/// The version of the module that introduced the commands.
const SINCE: &CStr = c"0.1.0";

pub const fn int(name: &'static CStr) -> ArgDoc {
    arg(name, ArgType::Integer)
}

pub const fn seconds(name: &'static CStr) -> ArgDoc {
    arg(name, ArgType::Double)
}

/// Applies `doc` to the registered command `name`; returns an error text for
/// the log when the server refuses it.
pub fn apply(
    ctx: *mut raw::RedisModuleCtx,
    name: &CStr,
    doc: &CommandDoc,
    module_category: bool,
) -> Result<(), String> {
    // SAFETY: plain reads of function pointers set at load.
    let (get_command, set_info, set_acl) = unsafe {
        (
            raw::RedisModule_GetCommand,
            raw::RedisModule_SetCommandInfo,
            raw::RedisModule_SetCommandACLCategories,
        )
    };
    let Some(get_command) = get_command else {
        return Ok(());
    };
    // SAFETY: ctx is the load context; name is a registered command.
    let command = unsafe { get_command(ctx, name.as_ptr()) };
    if command.is_null() {
        return Err(format!("{} is not registered", name.to_string_lossy()));
    }
    if let Some(set_info) = set_info {
        let status = set_command_info(set_info, command, doc);
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "the server refused the documentation of {}",
                name.to_string_lossy()
            ));
        }
    }
    if let Some(set_acl) = set_acl {
        // With the module's own category first; without it if the server
        // refuses (it has no module categories, or lost ours).
        let own = format!(
            "{} {}",
            doc.acl_categories,
            MODULE_ACL_CATEGORY.to_string_lossy()
        );
        let attempts = if module_category {
            vec![own, doc.acl_categories.to_string()]
        } else {
            vec![doc.acl_categories.to_string()]
        };
        let accepted = attempts.into_iter().any(|categories| {
            std::ffi::CString::new(categories).is_ok_and(|c| {
                // SAFETY: command is valid; the server copies the string.
                unsafe { set_acl(command, c.as_ptr()) == raw::REDISMODULE_OK as c_int }
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
    // One key spec, as registered (first key 1, last key 1, step 1): the
    // limiter key is read and updated. The array ends with a zeroed entry.
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
    key_specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    key_specs[0].fk.range.lastkey = 0;
    key_specs[0].fk.range.keystep = 1;
    key_specs[0].fk.range.limit = 0;
    // The arguments, ending with a zeroed entry.
    let mut args: Vec<RedisModuleCommandArg> = doc
        .args
        .iter()
        .map(|a| {
            // SAFETY: as above.
            let mut arg: RedisModuleCommandArg = unsafe { std::mem::zeroed() };
            arg.name = a.name.as_ptr();
            arg.type_ = match a.kind {
                ArgType::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
                ArgType::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                ArgType::Double => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_DOUBLE,
            };
            arg.key_spec_index = if matches!(a.kind, ArgType::Key) {
                0
            } else {
                -1
            };
            arg.token = a.token.map_or(std::ptr::null(), |t| t.as_ptr());
            arg.flags = if a.optional {
                raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
            } else {
                0
            };
            arg
        })
        .collect();
    // SAFETY: as above.
    args.push(unsafe { std::mem::zeroed() });
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
