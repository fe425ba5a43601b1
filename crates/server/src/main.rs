//! The `gradus` binary: parse flags, load config, start logging, run the server.
//!
//! May import: the library (`gradus_server`) only.

use clap::Parser;
use gradus_server::{Cli, Config, Server};

/// mimalloc instead of the system allocator: every stored value is its own allocation, and
/// glibc's per-thread arenas grow by `mprotect` calls that dominated recovery time in profiles;
/// mimalloc is also faster on the request path's small allocations. Counted, so INFO's
/// `used_memory` is what the allocator really handed out (`gradus_server::alloc`).
#[global_allocator]
static GLOBAL: gradus_server::alloc::CountingAlloc<gradus_server::alloc::Mimalloc> =
    gradus_server::alloc::CountingAlloc(gradus_server::alloc::Mimalloc);

fn main() -> std::process::ExitCode {
    GLOBAL.activate();
    let cli = Cli::parse();
    if let Some(gradus_server::config::Command::Passwd { password }) = &cli.command {
        return passwd(password.clone());
    }
    let config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gradus: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if cli.print_config {
        return match gradus_server::settings::render_toml(&config) {
            Ok(text) => {
                print!("{text}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("gradus: cannot print the configuration: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    gradus_server::logging::init(&config.loglevel);
    if config.disable_thp {
        if let Err(e) = gradus_server::alloc::disable_thp() {
            tracing::warn!(
                "disable-thp: the kernel refused to turn transparent huge pages off: {e}"
            );
        }
    }
    // One worker: a single-threaded scheduler, so connections are served in the order their
    // requests arrive, as in redis-server. The multi-threaded one polls the task woken *last*
    // first (its LIFO slot): a PUBLISH sent after another connection's PUNSUBSCRIBE could run
    // before it (regression: `test_raw_protocol.py::
    // test_requests_on_two_connections_run_in_the_order_they_arrive`).
    let threads = config.effective_threads();
    let mut runtime = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    let runtime = match runtime.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gradus: cannot start runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let signals = gradus_server::server::Signals::install()?;
        let server = Server::bind(config, cli.config.clone(), cli.repair).await?;
        signals.forward_to(server.shared());
        server.run().await
    });
    // A script past busy-reply-threshold still runs on one of the runtime's threads (SHUTDOWN
    // NOSAVE does not wait for it, as in Redis): exit without joining that thread.
    if gradus_server::command::scripting::busy_error().is_some() {
        runtime.shutdown_background();
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gradus: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `gradus passwd [PASSWORD]`: print the stored form of a password (from stdin when not given).
fn passwd(password: Option<String>) -> std::process::ExitCode {
    let password = match password {
        Some(p) => p,
        None => {
            let mut line = String::new();
            if let Err(e) = std::io::stdin().read_line(&mut line) {
                eprintln!("gradus passwd: cannot read stdin: {e}");
                return std::process::ExitCode::FAILURE;
            }
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    if password.is_empty() {
        eprintln!("gradus passwd: empty password");
        return std::process::ExitCode::from(2);
    }
    println!("{}", gradus_server::tenancy::hash_password(&password));
    std::process::ExitCode::SUCCESS
}
