//! `ratelimit-rls`: see `rls/README.md`; `ratelimit-rls --help` lists the settings.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use ratelimit_rls::settings::{LogFormat, Settings};

fn main() -> std::process::ExitCode {
    let settings = Settings::parse();
    match ratelimit_rls::runtime::build() {
        Ok(runtime) => runtime.block_on(serve(settings)),
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(settings: Settings) -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_new(&settings.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match settings.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let mut running = match ratelimit_rls::start(&settings).await {
        Ok(running) => running,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            return std::process::ExitCode::FAILURE;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; draining"),
        _ = terminate => tracing::info!("terminated; draining"),
        _ = running.wait() => {
            tracing::error!("the gRPC server ended");
            return std::process::ExitCode::FAILURE;
        }
    }
    let drained = running.shutdown(settings.drain_timeout()).await;
    tracing::info!(drained, "stopped");
    std::process::ExitCode::SUCCESS
}
