//! Error kinds that decide the exit code.
//!
//! Everything is an `anyhow::Error`; two marker types travel inside it:
//! [`Invalid`] (exit 2: bad input or unsupported host, nothing changed) and [`Hint`]
//! (what the user should do, shown next to the error).

use std::fmt;

/// Invalid input or an unsupported host: exit code 2, and nothing on the host was changed.
#[derive(Debug)]
pub struct Invalid(pub String);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

/// Shorthand: `return Err(invalid!("..."))`.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => { anyhow::Error::new($crate::error::Invalid(format!($($arg)*))) };
}

/// An error with advice: the message says what failed, the hint says what to do.
#[derive(Debug)]
pub struct Hint {
    pub message: String,
    pub hint: String,
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.message, self.hint)
    }
}

impl std::error::Error for Hint {}

/// Build an error that carries a hint.
pub fn hinted(message: impl Into<String>, hint: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Hint {
        message: message.into(),
        hint: hint.into(),
    })
}

/// True when the error (or anything in its chain, contexts included) is an [`Invalid`].
pub fn is_invalid(err: &anyhow::Error) -> bool {
    err.downcast_ref::<Invalid>().is_some()
        || err.chain().any(|e| e.downcast_ref::<Invalid>().is_some())
}

/// Mark an error as invalid input (exit 2: nothing was changed), keeping its message and hint:
/// what a check found wrong with what the user gave (the driver file, a mirror directory). An
/// interruption (a command not started after SIGTERM/SIGINT) is left as it is.
pub fn as_invalid(err: anyhow::Error) -> anyhow::Error {
    // A signal is never bad input: an interrupted check stays an interruption (130/143).
    if is_invalid(&err) || crate::interrupt::is_interrupted(&err) {
        err
    } else {
        err.context(Invalid("invalid input".to_string()))
    }
}

/// The same error for another reader (one failure of a transaction reported by each step it
/// served): the whole message, and the markers that decide the exit code and what the user is
/// told (an [`Invalid`], a [`Hint`]), kept as markers, never flattened into text.
pub fn duplicate(err: &anyhow::Error) -> anyhow::Error {
    let hint = err.chain().find_map(|e| e.downcast_ref::<Hint>());
    let copy = match hint {
        Some(h) => hinted(h.message.clone(), h.hint.clone()).context(format!("{err:#}")),
        None => anyhow::anyhow!("{err:#}"),
    };
    if is_invalid(err) {
        copy.context(Invalid("invalid input".to_string()))
    } else {
        copy
    }
}

/// The hint carried by the error, if any.
pub fn hint_of(err: &anyhow::Error) -> Option<&str> {
    err.chain()
        .find_map(|e| e.downcast_ref::<Hint>())
        .map(|h| h.hint.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interruption_is_never_made_invalid_input() {
        let e = anyhow::Error::new(crate::interrupt::Interrupted(
            "interrupted by SIGTERM: `rpm` was not started".into(),
        ));
        let e = as_invalid(e.context("reading the driver file"));
        assert!(!is_invalid(&e));
        assert!(crate::interrupt::is_interrupted(&e));
        assert!(is_invalid(&as_invalid(anyhow::anyhow!("not an RPM"))));
    }

    #[test]
    fn a_duplicate_keeps_the_markers_and_the_message() {
        let e = as_invalid(hinted(
            "gpgkey=file:///etc/shadow",
            "use the package as shipped",
        ))
        .context("the first converge");
        let d = duplicate(&e);
        assert!(is_invalid(&d));
        assert_eq!(hint_of(&d), Some("use the package as shipped"));
        assert!(format!("{d:#}").contains("the first converge"));
        assert!(format!("{d:#}").contains("gpgkey=file:///etc/shadow"));
        let plain = duplicate(&anyhow::anyhow!("dnf could not start"));
        assert!(!is_invalid(&plain) && hint_of(&plain).is_none());
    }
}
