//! The `main` of the small load-generator binaries (`src/bin/`): flags parsed, then one async
//! run on a current-thread runtime, with the binary's name on every error and exit codes 2 (bad
//! flags) and 1 (the run failed).
//!
//! May import: nothing of the crate.

use std::future::Future;

/// Parse the flags with `parse` and run `run` with them; exits the process on an error.
pub fn main<A, Fut>(
    name: &str,
    parse: impl FnOnce() -> Result<A, String>,
    run: impl FnOnce(A) -> Fut,
) where
    Fut: Future<Output = std::io::Result<()>>,
{
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run(args)) {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}
