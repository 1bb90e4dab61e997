//! redis-ratelimit: rate-limiting algorithms that run atomically inside Redis.
//!
//! * [`algorithm`] — the pure algorithms (no Redis imports), one per file;
//! * `command` — one thin handler per Redis command, and the shared glue;
//! * [`time`] — the server clock and unit conversions;
//! * [`error`] — every error reply, in one place.

pub mod algorithm;
mod command;
pub mod error;
pub mod time;

#[cfg(not(test))]
type ModuleAllocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const MODULE_ALLOCATOR: ModuleAllocator = redis_module::alloc::RedisAlloc;
// Unit tests run without a server, so without the Redis allocator.
#[cfg(test)]
type ModuleAllocator = std::alloc::System;
#[cfg(test)]
const MODULE_ALLOCATOR: ModuleAllocator = std::alloc::System;

redis_module::redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (crate::ModuleAllocator, crate::MODULE_ALLOCATOR),
    data_types: [],
    init: init_module,
}

fn init_module(
    ctx: &redis_module::Context,
    _args: &[redis_module::RedisString],
) -> redis_module::Status {
    command::register_all(ctx)
}
