//! Command documentation (`COMMAND DOCS`, `COMMAND INFO`) and ACL categories,
//! set at load only where the running server has the APIs:
//! `RedisModule_SetCommandInfo` (Redis 7.0+), `RedisModule_SetCommandACLCategories`
//! (7.2+, Valkey), `RedisModule_AddACLCategory` (Redis 7.4+, Valkey 8+: the `@ratelimit`
//! category). On servers without them the module loads and works the same;
//! the commands then carry only the categories their flags imply.

use std::ffi::CStr;

pub use crate::server::registry::{ArgDoc, ArgType, CommandDoc, KeySpec};

const fn arg(name: &'static CStr, kind: ArgType) -> ArgDoc {
    ArgDoc {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
    }
}

/// `key`, always first.
pub const KEY: ArgDoc = arg(c"key", ArgType::Key);
/// `[TOKENS n]`, the cost of a request.
pub const TOKENS: ArgDoc = option(c"n", ArgType::Integer, c"TOKENS");
/// `[REFUND n]`, tokens given back.
pub const REFUND: ArgDoc = option(c"refund", ArgType::Integer, c"REFUND");
/// `[FORCE]`: record the cost whatever the limit says.
pub const FORCE: ArgDoc = option(c"force", ArgType::PureToken, c"FORCE");
/// `[PEEK]`: answer without writing.
pub const PEEK: ArgDoc = option(c"peek", ArgType::PureToken, c"PEEK");
/// `[BLOCK duration]`: seconds to lock the limiter out when refused.
pub const BLOCK: ArgDoc = option(c"duration", ArgType::Double, c"BLOCK");
/// `[WITHLIMITS]` (`RL.ALL`): every limit's own five integers after the reply.
pub const WITHLIMITS: ArgDoc = option(c"withlimits", ArgType::PureToken, c"WITHLIMITS");

const fn option(name: &'static CStr, kind: ArgType, token: &'static CStr) -> ArgDoc {
    ArgDoc {
        name,
        kind,
        token: Some(token),
        optional: true,
        multiple: false,
    }
}

pub const fn string(name: &'static CStr) -> ArgDoc {
    arg(name, ArgType::String)
}

pub const fn int(name: &'static CStr) -> ArgDoc {
    arg(name, ArgType::Integer)
}

pub const fn seconds(name: &'static CStr) -> ArgDoc {
    arg(name, ArgType::Double)
}
