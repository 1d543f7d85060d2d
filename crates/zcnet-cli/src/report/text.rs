//! The words of the page: HTML escaping and how a condition and a setting are named, shared by
//! the page and the comparison (a leaf: it imports only the input's types).

use std::fmt::Write as _;

use super::input::Set;

/// `s` for HTML text and attributes.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A value as a label shows it: strings without quotes; `None` for null (left out).
pub fn shown(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        v => Some(v.to_string()),
    }
}

/// A condition: lab, family and parameters, as the page names it.
pub fn condition(set: &Set) -> String {
    let mut s = format!("{} {}", set.lab, set.family);
    for (k, v) in &set.params {
        if let Some(v) = shown(v) {
            let _ = write!(s, " {k}={v}");
        }
    }
    s
}
