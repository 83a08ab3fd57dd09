//! systemd notifications (sd_notify). Every call is a no-op when airlockd does not run
//! under systemd (`NOTIFY_SOCKET` unset), so the daemon behaves the same in a terminal.

use sd_notify::NotifyState;
use std::time::Duration;

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// Type=notify-reload: RELOADING=1 must carry the monotonic time of the reload request.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining runs")]);
}

pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// How often to send WATCHDOG=1: half of WatchdogSec, or never when it is not set.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled()
        .filter(|d| !d.is_zero())
        .map(|d| d / 2)
}

fn send(states: &[NotifyState]) {
    // A lost notification is not worth failing for: systemd's own timeouts catch a daemon
    // that stops notifying, which is the failure that matters.
    let _ = sd_notify::notify(states);
}
