//! The NVML probe helper's log: its messages on stderr, which `gpuhost status` passes on, at
//! the most verbose level the caller logs at (`GPUHOST_PROBE_LOG`, set by
//! [`crate::probe::exec`]). A few lines of `tracing::Subscriber` instead of tracing-subscriber:
//! the helper's own pages are what it adds to NVML's memory.

use std::fmt::Write;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{span, Event, Level, Metadata, Subscriber};

/// The variable that carries the caller's level to the helper.
pub(crate) const ENV: &str = "GPUHOST_PROBE_LOG";

/// The value of [`ENV`] for a helper started now: the most verbose level this process logs
/// at; None when it logs nothing.
pub(crate) fn caller_level() -> Option<&'static str> {
    LevelFilter::current().into_level().map(|l| l.as_str())
}

/// In the helper: log gpuhost's events at the level [`ENV`] names (none when unset).
pub(crate) fn init() {
    let max = std::env::var(ENV)
        .ok()
        .and_then(|v| v.parse::<Level>().ok());
    if let Some(max) = max {
        let _ = tracing::subscriber::set_global_default(Stderr { max });
    }
}

struct Stderr {
    max: Level,
}

impl Subscriber for Stderr {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= self.max && m.target().starts_with("gpuhost")
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::from_level(self.max))
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    /// One line, as `gpuhost` writes its own (level, message, fields), without the time.
    fn event(&self, e: &Event<'_>) {
        let mut line = format!("{:>5}", e.metadata().level().as_str());
        e.record(&mut Line(&mut line));
        eprintln!("{line}");
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

struct Line<'a>(&'a mut String);

impl Visit for Line<'_> {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        let _ = if f.name() == "message" {
            write!(self.0, " {v:?}")
        } else {
            write!(self.0, " {}={v:?}", f.name())
        };
    }
}
