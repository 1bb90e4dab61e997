//! redis-ratelimit: rate-limiting algorithms that run atomically inside Redis.
//!
//! * [`algorithm`] — the pure algorithms (no Redis imports), one per file;
//! * `command` — one thin handler per Redis command, and the shared glue;
//! * `server` — the one home of the server's module API: safe functions and
//!   types over it, the entry points (`RedisModule_OnLoad`) and the allocator;
//! * [`time`] — the server clock and unit conversions;
//! * [`error`] — every error reply, in one place.

pub mod algorithm;
mod command;
pub mod error;
mod server;
pub mod time;

/// The module's global allocator (see [`server::load::ModuleAllocator`]).
#[global_allocator]
static ALLOCATOR: server::load::ModuleAllocator = server::load::ModuleAllocator;
