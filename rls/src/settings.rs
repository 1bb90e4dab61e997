//! The service's settings: command-line flags, each also read from an
//! environment variable (see `rls/README.md`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::Charge;

/// What to answer when Redis fails or does not answer within the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailureMode {
    /// gRPC `UNAVAILABLE`, as envoy's service: Envoy's `failure_mode_deny`
    /// decides, and Envoy counts the failure (`ratelimit.error`).
    Unavailable,
    /// Allow the request (`OK`), as if no limit applied.
    Open,
    /// Refuse the request (`OVER_LIMIT`).
    Closed,
}

/// Which engine decides (issue 31; the clients' `engine` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineSetting {
    /// The module when the server has it (`COMMAND INFO rl.all`), else the
    /// Functions library (loaded or replaced where absent or older), else the
    /// library's code through `EVALSHA`.
    Auto,
    /// The module's `RL.ALL` only.
    Module,
    /// The Functions library only (`FCALL rl_all`), loaded where needed.
    Functions,
    /// The library's code through `EVALSHA` only (`EVAL` on `NOSCRIPT`).
    Eval,
}

/// Whose clock the library reads (the clients' `clock` option; the module
/// always reads the server's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockSetting {
    /// The server's `TIME`; the service's own clock (`NOW <unix_µs>`, logged
    /// once) where the server refuses `TIME` inside scripts.
    Auto,
    /// The server's `TIME` only.
    Server,
    /// Always the service's clock (`NOW <unix_µs>`): keep it NTP-synchronized.
    Caller,
}

/// The output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "ratelimit-rls",
    version,
    about = "Envoy rate limit service backed by the redis-ratelimit module (or its Functions library)"
)]
pub struct Settings {
    /// The rate limit configuration: a YAML file, or a directory of them
    /// (every *.yaml and *.yml file), in envoyproxy/ratelimit's format.
    #[arg(long, env = "RLS_CONFIG")]
    pub config: PathBuf,

    /// The gRPC address (envoy.service.ratelimit.v3.RateLimitService).
    #[arg(long, env = "RLS_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    pub grpc_addr: SocketAddr,

    /// The HTTP address of /metrics (Prometheus) and /healthcheck.
    #[arg(long, env = "RLS_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,

    /// Redis: a redis:// URL; with --redis-cluster, a comma-separated list of
    /// seed nodes' URLs.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,

    /// The engine: auto (the module when the server has it, else the Functions
    /// library, else its code through EVALSHA), or one of them only.
    #[arg(long, env = "RLS_ENGINE", value_enum, default_value_t = EngineSetting::Auto)]
    pub engine: EngineSetting,

    /// Whose clock the Functions library reads: auto (the server's; this
    /// process's where the server refuses TIME inside scripts), server, caller.
    #[arg(long, env = "RLS_CLOCK", value_enum, default_value_t = ClockSetting::Auto)]
    pub clock: ClockSetting,

    /// Redis is a Redis Cluster.
    #[arg(long, env = "REDIS_CLUSTER", default_value_t = false)]
    pub redis_cluster: bool,

    /// The most one decision waits for Redis (connecting included), in ms; then
    /// the failure mode applies.
    #[arg(long, env = "REDIS_TIMEOUT_MS", default_value_t = 100)]
    pub redis_timeout_ms: u64,

    /// When Redis fails or times out: unavailable (a gRPC UNAVAILABLE error, as
    /// envoy's service; Envoy's failure_mode_deny decides), or answer ourselves:
    /// open (OK) or closed (OVER_LIMIT).
    #[arg(long, env = "RLS_FAILURE_MODE", value_enum, default_value_t = FailureMode::Unavailable)]
    pub failure_mode: FailureMode,

    /// The prefix of every Redis key.
    #[arg(long, env = "RLS_KEY_PREFIX", default_value = "rls:")]
    pub key_prefix: String,

    /// Descriptor keys whose value becomes the keys' hash tag (comma-separated,
    /// e.g. `user`): one user's limits then share a Redis Cluster slot.
    #[arg(long, env = "RLS_HASH_TAG_KEYS", value_delimiter = ',')]
    pub hash_tag_keys: Vec<String>,

    /// The configuration is watched for changes (inotify); where the system
    /// cannot watch it, it is read again at this interval, in ms.
    #[arg(long, env = "RLS_RELOAD_INTERVAL_MS", default_value_t = 1000)]
    pub reload_interval_ms: u64,

    /// On SIGTERM or Ctrl-C: the most the requests in flight are waited for,
    /// in ms (health turns NOT_SERVING and /healthcheck 503 meanwhile).
    #[arg(long, env = "RLS_DRAIN_TIMEOUT_MS", default_value_t = 10_000)]
    pub drain_timeout_ms: u64,

    /// The near_limit statistic counts hits above this share of a limit.
    #[arg(long, env = "NEAR_LIMIT_RATIO", default_value_t = 0.8)]
    pub near_limit_ratio: f64,

    /// Every request is answered OK (limits are still decided and counted).
    #[arg(long, env = "SHADOW_MODE", default_value_t = false)]
    pub global_shadow_mode: bool,

    /// Add the IETF `RateLimit` and `RateLimit-Policy` response headers
    /// (of the descriptor closest to its limit).
    #[arg(long, env = "LIMIT_RESPONSE_HEADERS_ENABLED", default_value_t = false)]
    pub response_headers: bool,

    /// The local over-limit cache's size in bytes (0: off, the default): a
    /// limit that refused is answered OVER_LIMIT from memory until its
    /// retry time is over, without a Redis call.
    #[arg(long, env = "LOCAL_CACHE_SIZE_IN_BYTES", default_value_t = 0)]
    pub local_cache_size_in_bytes: u64,

    /// When the hits of a rule without `charge:` are recorded: admitted (only
    /// for admitted requests: a refused request takes nothing) or always
    /// (every hit, with FORCE, past the limit too: a debt, as
    /// envoyproxy/ratelimit counts every hit).
    #[arg(long, env = "RLS_CHARGE", value_enum, default_value_t = Charge::Admitted)]
    pub charge: Charge,

    /// The log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The log level or filter (tracing's EnvFilter syntax: info, debug, ratelimit_rls=debug).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

impl Settings {
    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms.max(1))
    }

    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }
}
