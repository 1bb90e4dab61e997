//! What the module does at load (settings, commands and their docs, ACL
//! categories, configs, the policies' data type, INFO, server events) and
//! at unload.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Loads the module: module arguments ([`settings`]), the API check, every
/// command, then propagation's filter and events. An error (for the log)
/// refuses the load; the caller then calls [`unload`].
pub fn load(ctx: Ctx, args: &[Arg]) -> std::result::Result<(), String> {
    let settings = settings::parse(args)?;
    if let Some(missing) = server::missing_api() {
        return Err(format!("this server lacks {missing}"));
    }
    if !effects::create_constants() {
        return Err("could not create the module's constant strings".into());
    }
    let own_category =
        registry::add_acl_category(ctx, MODULE_ACL_CATEGORY).then_some(MODULE_ACL_CATEGORY);
    registry::no_implicit_signal_modified(ctx);
    // The effects are propagated as these commands: refuse to load where
    // `rename-command` hid one (replicas and the AOF would silently diverge).
    for command in [c"set", c"del", c"unlink", c"zadd", c"zrem", c"pexpireat"] {
        if !info::has_command(ctx, command) {
            return Err(format!(
                "the server has no {} command (renamed?); it is needed to replicate effects",
                command.to_string_lossy()
            ));
        }
    }
    for &(spec, entry) in COMMANDS.iter().chain(DEBUG_COMMANDS.iter()) {
        if !registry::create_command(ctx, spec.name, entry, spec.flags, spec.doc.keys) {
            return Err(format!(
                "could not register {}",
                spec.name.to_string_lossy()
            ));
        }
        // Documentation and categories are metadata: a server that refuses
        // them gets a warning, not a module that fails to load.
        if let Err(why) = registry::document(ctx, spec.name, spec.doc, own_category) {
            ctx.log_warning(&format!("ratelimit: {why}"));
        }
    }
    // RL.POLICY's shape depends on `policies`, which a config line may set
    // (it wins over the load argument): the configs are loaded first.
    settings::apply(settings);
    if !config::register(ctx, &settings::CONFIGS) {
        return Err("the server refused the module's configs (ratelimit.*)".into());
    }
    if settings::policies_carried() {
        // Also with `policies no`: changes from the primary and AOF
        // replays are applied (clients are refused).
        register_policy_container(ctx, own_category)?;
    } else {
        // `policies unloadable`: RL.POLICY is one command that refuses:
        // Redis 8 and Valkey 8 keep about half a kilobyte of a container's
        // subcommands at every MODULE UNLOAD, and only a module without
        // a data type can be unloaded.
        let spec = &policy::OFF_SPEC;
        if !registry::create_command(ctx, spec.name, rl_policy_off, spec.flags, spec.doc.keys) {
            return Err("could not register rl.policy".into());
        }
        if let Err(why) = registry::document(ctx, spec.name, spec.doc, own_category) {
            ctx.log_warning(&format!("ratelimit: {why}"));
        }
    }
    // Policies ride in RDB files as module auxiliary data, which takes a
    // data type (registered at load only; see `settings`).
    if settings::policies_carried()
        && !rdb::register_aux_type(ctx, c"rl-policy", policy::RDB_ENCVER, &policy::AUX_HOOKS)
    {
        return Err("the server refused the module's data type (for policies)".into());
    }
    info::register_info(ctx);
    // Last: it subscribes to server events, and Redis 7.0 does not remove a
    // failed load's subscriptions (the next event would call unloaded code).
    propagate::init(ctx, settings::propagate_always());
    if settings::policies_carried() && !info::subscribe_loading(ctx) {
        return Err("could not subscribe to dataset loads (for policies)".into());
    }
    // An AOF rewrite without the RDB preamble gets the policies from the
    // fork event (see `policy_aof`).
    if settings::policies_carried() && !aof::subscribe_fork(ctx) {
        return Err("could not subscribe to fork events (for policies in the AOF)".into());
    }
    Ok(())
}

/// Registers `RL.POLICY` as a container with its subcommands (policies on).
fn register_policy_container(
    ctx: Ctx,
    own_category: Option<&'static CStr>,
) -> std::result::Result<(), String> {
    if !registry::create_container(ctx, c"rl.policy") {
        return Err("could not register rl.policy".into());
    }
    if let Err(why) = registry::document(ctx, c"rl.policy", &policy::CONTAINER_DOC, None) {
        ctx.log_warning(&format!("ratelimit: {why}"));
    }
    for (sub, entry) in policy::SUBCOMMANDS.iter().zip(SUBCOMMAND_ENTRIES) {
        if !registry::create_subcommand(ctx, c"rl.policy", sub.name, entry, sub.flags) {
            return Err(format!(
                "could not register {}",
                sub.full_name.to_string_lossy()
            ));
        }
        // The changing subcommands are @admin @dangerous only: not in the
        // module's own category (a `+@ratelimit` user must not change them).
        let own = if sub.changes { None } else { own_category };
        if let Err(why) = registry::document(ctx, sub.full_name, sub.doc, own) {
            ctx.log_warning(&format!("ratelimit: {why}"));
        }
    }
    Ok(())
}

/// Frees what [`load`] created (at `MODULE UNLOAD`, or after a refused load).
pub fn unload(_ctx: Ctx) {
    effects::free_constants();
    policy::clear();
    rdb::forget_aux_type();
    // The server removes a module's filters and subscriptions itself.
    info::forget_sync_filter();
}
