//! `gpuhost status --wait-healthy`: the provisioning gate. Look until the node is healthy
//! (OK or WARNING) or the time is up.

use std::time::{Duration, Instant};

use crate::summary::healthy;
use crate::verdict::Severity;

/// The outcome of [`wait_healthy`].
pub(crate) struct Waited<T> {
    /// The last look's result.
    pub(crate) last: T,
    pub(crate) healthy: bool,
    /// How many looks were taken (what the progress lines say; the tests count them).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) looks: u32,
}

/// Look (`look` gets the time it may take and answers the verdict and whatever the caller
/// prints) until the verdict is healthy or `timeout` has passed, `every` apart; progress on
/// stderr at each unhealthy look.
pub(crate) fn wait_healthy<T>(
    timeout: Duration,
    every: Duration,
    mut look: impl FnMut(Duration) -> (Severity, String, T),
) -> Waited<T> {
    let start = Instant::now();
    let mut looks = 0;
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        // One look never takes more than 10 s (the NVML deadline) or what is left.
        let (sev, line, last) =
            look(left.clamp(Duration::from_millis(100), Duration::from_secs(10)));
        looks += 1;
        let waited = start.elapsed();
        if healthy(sev) {
            eprintln!(
                "gpuhost: healthy after {:.0} s ({looks} look(s)): {line}",
                waited.as_secs_f64()
            );
            return Waited {
                last,
                healthy: true,
                looks,
            };
        }
        let left = timeout.saturating_sub(waited);
        if left.is_zero() {
            eprintln!(
                "gpuhost: not healthy after {:.0} s ({looks} look(s)): {line}",
                waited.as_secs_f64()
            );
            return Waited {
                last,
                healthy: false,
                looks,
            };
        }
        eprintln!(
            "gpuhost: waiting for a healthy node ({:.0} of {:.0} s): {line}",
            waited.as_secs_f64(),
            timeout.as_secs_f64()
        );
        std::thread::sleep(every.min(left));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn wait_stops_at_the_first_healthy_look() {
        let mut n = 0;
        let w = wait_healthy(Duration::from_secs(5), Duration::from_millis(10), |_| {
            n += 1;
            let sev = if n < 3 {
                Severity::Critical
            } else {
                Severity::Warning
            };
            (sev, format!("look {n}"), n)
        });
        assert!(w.healthy);
        assert_eq!((w.looks, w.last), (3, 3));
    }

    #[test]
    fn wait_gives_up_at_the_timeout() {
        let t = Instant::now();
        let w = wait_healthy(
            Duration::from_millis(300),
            Duration::from_millis(50),
            |_| (Severity::Unknown, "no".into(), ()),
        );
        assert!(!w.healthy);
        assert!(w.looks >= 2, "{}", w.looks);
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
