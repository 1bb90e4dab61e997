//! redis-ratelimit: rate-limiting algorithms that run atomically inside Redis.
//!
//! * [`algorithm`], [`error`], [`time`] — the pure core, re-exported from the
//!   `ratelimit-core` crate (no Redis in its dependency tree);
//! * `command` — one thin handler per Redis command, and the shared glue;
//! * `server` — the one home of the server's module API: safe functions and
//!   types over it, and the allocator; it never imports `command`;
//! * `entry` — the composition root: the exported entry points
//!   (`RedisModule_OnLoad`, `RedisModule_OnUnload`), and the hooks through
//!   which the server's callbacks reach the commands.

mod command;
mod entry;
mod server;

// The pure core (algorithms, errors, time units) lives in its own crate,
// `ratelimit-core`; re-exported under the paths the glue uses.
pub use ratelimit_core::{algorithm, calendar, definition, error, limit, time};

/// The module's global allocator (see [`server::load::ModuleAllocator`]).
#[global_allocator]
static ALLOCATOR: server::load::ModuleAllocator = server::load::ModuleAllocator;
