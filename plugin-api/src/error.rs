//! Errors: the plain Rust [`Error`] plugin authors return, and the ABI-stable
//! [`PluginError`] that crosses the boundary with plugin, component and method attached.

use std::any::Any;
use std::fmt;

use abi_stable::std_types::RString;
use abi_stable::StableAbi;

/// What went wrong, as far as the host needs to tell cases apart.
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The component returned an error (including a failed libtorch call).
    Failed = 0,
    /// The component panicked; the panic was caught at the boundary.
    Panicked = 1,
    /// The component's configuration was rejected (unknown, missing or invalid field).
    Config = 2,
    /// The component does not support what was asked (e.g. state on a stateless op).
    Unsupported = 3,
}

/// The error a plugin author returns. Converts from libtorch errors (cut to their first line),
/// from strings, and from any `std::error::Error`.
///
/// ```
/// use fe_plugin_api::{Error, Result};
/// fn check_rank(rank: usize) -> Result<()> {
///     if rank != 2 {
///         return Err(Error::msg(format!("expected a rank-2 tensor, got rank {rank}")));
///     }
///     Ok(())
/// }
/// assert!(check_rank(3).is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    field: String,
    message: String,
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failure described by `message`.
    pub fn msg(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Failed,
            field: String::new(),
            message: message.into(),
        }
    }

    /// A configuration error about `field` (a dotted path inside the component's table).
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Config,
            field: field.into(),
            message: message.into(),
        }
    }

    /// The component does not support the requested operation.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Unsupported,
            field: String::new(),
            message: message.into(),
        }
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The configuration field this error is about, or `""`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn panicked(message: String) -> Self {
        Self {
            kind: ErrorKind::Panicked,
            field: String::new(),
            message,
        }
    }

    /// Attaches the plugin, component and method names for the trip across the boundary.
    pub fn into_plugin_error(self, plugin: &str, component: &str, method: &str) -> PluginError {
        PluginError {
            kind: self.kind,
            plugin: plugin.into(),
            component: component.into(),
            method: method.into(),
            field: self.field.into(),
            message: self.message.into(),
        }
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for Error {
    fn from(error: E) -> Self {
        if let Some(tch::TchError::Torch(message)) = (&error as &dyn Any).downcast_ref() {
            return Error::msg(first_line(message));
        }
        Error::msg(error.to_string())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self)
    }
}

/// An error that crossed the plugin boundary: which plugin, which component (op, trace, ...),
/// which method, and what happened. The host adds the step before reporting it.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct PluginError {
    /// What kind of error.
    pub kind: ErrorKind,
    /// The plugin's crate name.
    pub plugin: RString,
    /// The component's registered name, e.g. `CrossEntropy`.
    pub component: RString,
    /// The method that failed, e.g. `forward`.
    pub method: RString,
    /// For configuration errors, the field path inside the component's table; else empty.
    pub field: RString,
    /// The message, libtorch errors cut to their first line.
    pub message: RString,
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ErrorKind::Panicked => "panicked",
            _ => "failed",
        };
        write!(
            f,
            "{}::{} {} in {}: {}",
            self.plugin, self.component, what, self.method, self.message
        )
    }
}

impl std::error::Error for PluginError {}

/// The first line of a (libtorch) message, without the C++ backtrace that follows it.
pub fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or("").trim_end().to_owned()
}

/// Turns a panic payload into a readable message. A panic from a non-`f_` tch method carries
/// `Torch("<libtorch message>\n<backtrace>")` in Debug form; only the libtorch message is kept.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    let raw = if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-string payload".to_owned()
    };
    match raw.find("Torch(\"") {
        Some(start) => {
            let inner = &raw[start + "Torch(\"".len()..];
            let end = inner
                .find("\\n")
                .or_else(|| inner.find("\")"))
                .unwrap_or(inner.len());
            inner[..end].replace("\\\"", "\"").replace("\\'", "'")
        }
        None => first_line(&raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tch_panic_payload_is_cut_to_the_libtorch_message() {
        let payload: Box<dyn Any + Send> = Box::new(String::from(
            "called `Result::unwrap()` on an `Err` value: Torch(\"The size of tensor a (3) must match the size of tensor b (4)\\nException raised from infer_size at /pytorch/x.cpp:31\")",
        ));
        assert_eq!(
            panic_message(payload.as_ref()),
            "The size of tensor a (3) must match the size of tensor b (4)"
        );
    }

    #[test]
    fn plain_panic_keeps_its_first_line() {
        let payload: Box<dyn Any + Send> = Box::new("boom\nsecond line");
        assert_eq!(panic_message(payload.as_ref()), "boom");
    }

    #[test]
    fn torch_error_converts_to_its_first_line() {
        let err: Error = tch::TchError::Torch("bad shape\nException raised from".into()).into();
        assert_eq!(err.message(), "bad shape");
        assert_eq!(err.kind(), ErrorKind::Failed);
    }
}
