//! What leaves a pull for the host: events, results and errors, with the Hugging Face token
//! scrubbed from each. Below every other part of the pull (hub, download, the flow in mod.rs),
//! which all report through [`Events`]; it uses none of them.

use crate::error::{bail, Error, Result};
use serde_json::{json, Value};

/// The event callback, with the token scrubbed from everything it sees. A `false` from the
/// callback becomes a `cancelled` error.
pub(super) struct Events<'a> {
    sink: &'a dyn Fn(&Value) -> bool,
    secret: Option<&'a str>,
}

impl<'a> Events<'a> {
    /// Events for `sink`, with `secret` (the token in use, if any) scrubbed from each.
    pub fn new(sink: &'a dyn Fn(&Value) -> bool, secret: Option<&'a str>) -> Self {
        Events { sink, secret }
    }

    /// Sends `v`, scrubbed; `cancelled` when the callback says stop.
    pub fn emit(&self, mut v: Value) -> Result<()> {
        if let Some(s) = self.secret {
            redact(&mut v, s);
        }
        if (self.sink)(&v) {
            Ok(())
        } else {
            bail!(Cancelled, "the pull was cancelled by the event callback")
        }
    }

    /// Sends a `pull_warning` event.
    pub fn warning(&self, code: &str, message: String) -> Result<()> {
        self.emit(json!({"type": "pull_warning", "code": code, "message": message}))
    }
}

/// Replaces the token in every string of `v` (keys too): belt and braces, since no code path
/// puts it in a message.
pub(super) fn redact(v: &mut Value, secret: &str) {
    if secret.len() < 4 {
        return;
    }
    match v {
        Value::String(s) if s.contains(secret) => *s = s.replace(secret, "***"),
        Value::Array(a) => a.iter_mut().for_each(|x| redact(x, secret)),
        Value::Object(m) => {
            if m.keys().any(|k| k.contains(secret)) {
                *m = std::mem::take(m).into_iter().map(|(k, v)| (k.replace(secret, "***"), v)).collect();
            }
            m.values_mut().for_each(|x| redact(x, secret));
        }
        _ => {}
    }
}

/// `e` with the token replaced in its message and extra fields.
pub(super) fn redact_error(mut e: Error, secret: Option<&str>) -> Error {
    if let Some(s) = secret.filter(|s| s.len() >= 4) {
        e.message = e.message.replace(s, "***");
        if let Some(extra) = &mut e.extra {
            let mut v = Value::Object(std::mem::take(extra));
            redact(&mut v, s);
            if let Value::Object(m) = v {
                *extra = m;
            }
        }
    }
    e
}
