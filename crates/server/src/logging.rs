//! The server's log: what a `loglevel` means and changing it while the server runs.
//!
//! A level is one of Redis' names (`debug`, `verbose`, `notice`, `warning`, `nothing`), one of
//! tracing's (`error`, `warn`, `info`, `debug`, `trace`), or a tracing env-filter expression
//! (`gradus_server=debug,info`). The binary installs the subscriber ([`init`]) with the filter
//! behind a reload handle, so `CONFIG SET loglevel` ([`set`]) takes effect at once, as in Redis.
//!
//! May import: `tracing_subscriber`; nothing else of the server.

use std::sync::OnceLock;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

type Reload = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// Puts a new filter in force; set once by [`init`] (absent in a server run inside another
/// program, such as the tests, which installs its own subscriber or none).
static RELOAD: OnceLock<Reload> = OnceLock::new();

/// Why a level is refused (Redis' words for its own names, then the rest Gradus takes).
const LEVELS: &str = "argument(s) must be one of the following: debug, verbose, notice, warning, \
                      nothing (or error, warn, info, trace, or a tracing filter expression)";

/// The filter a `loglevel` names: Redis' `verbose` logs as `debug`, `notice` as `info`,
/// `warning` as `warn`, `nothing` nothing.
pub fn filter(level: &str) -> Result<EnvFilter, String> {
    let level = level.trim();
    let expression = match level.to_ascii_lowercase().as_str() {
        "verbose" => "debug".to_string(),
        "notice" => "info".to_string(),
        "warning" => "warn".to_string(),
        "nothing" => "off".to_string(),
        name @ ("error" | "warn" | "info" | "debug" | "trace" | "off") => name.to_string(),
        // An expression (`target=level`, or several): a bare word would be a target name, a
        // misspelt level taken as "everything from that target".
        _ if level.contains(['=', ',']) => level.to_string(),
        _ => return Err(LEVELS.into()),
    };
    EnvFilter::try_new(expression).map_err(|_| LEVELS.into())
}

/// Install the process' subscriber: lines on stderr, filtered by `level` (`info` if it is not
/// one: the configuration is checked before this).
pub fn init(level: &str) {
    let filter = filter(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    let _ = RELOAD.set(Box::new(move |filter| {
        handle.reload(filter).map_err(|e| e.to_string())
    }));
}

/// Filter the log by `level` from now on (CONFIG SET loglevel). Without [`init`] nothing is
/// filtered here, but the level is still checked.
pub fn set(level: &str) -> Result<(), String> {
    let filter = filter(level)?;
    match RELOAD.get() {
        Some(reload) => reload(filter),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_and_tracing_level_names_are_filters_and_others_are_refused() {
        for level in [
            "debug",
            "verbose",
            "notice",
            "warning",
            "nothing",
            "NOTICE",
            "error",
            "warn",
            "info",
            "trace",
            "gradus_server=debug,info",
        ] {
            assert!(filter(level).is_ok(), "{level}");
        }
        for level in ["", "loud", "notice,,==", "gradus_server=loud"] {
            assert!(filter(level).is_err(), "{level}");
        }
        assert_eq!(filter("notice").unwrap().to_string(), "info");
        assert_eq!(filter("warning").unwrap().to_string(), "warn");
        assert_eq!(filter("nothing").unwrap().to_string(), "off");
    }
}
