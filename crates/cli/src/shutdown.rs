//! The shutdown signal of `kestrel serve` and `kestrel gateway`, bounded in time: after the
//! first SIGINT/SIGTERM the server drains; a second signal exits at once, and a watchdog exits
//! the process if draining outlasts the shutdown timeout (plus a grace period) whatever
//! clients do.

use std::time::Duration;

/// Extra time the watchdog gives past the server's own bounded drain.
const WATCHDOG_GRACE: Duration = Duration::from_secs(5);

/// Resolves on the first signal, after arming the second-signal exit and the watchdog.
pub async fn bounded_signal(timeout: Duration) {
    kestrel_server::shutdown_signal().await;
    eprintln!("shutting down (a second Ctrl-C or SIGTERM exits at once)");
    tokio::spawn(async {
        kestrel_server::shutdown_signal().await;
        eprintln!("second signal: exiting now");
        std::process::exit(130);
    });
    let limit = timeout + kestrel_server::config::SHUTDOWN_GRACE + WATCHDOG_GRACE;
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("shutdown took longer than {limit:?}: exiting");
        std::process::exit(1);
    });
}
