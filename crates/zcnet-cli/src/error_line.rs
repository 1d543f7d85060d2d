//! An error as the command prints it: its whole cause chain on one line (`cannot listen on
//! [::1]:9000: Address in use`). A leaf that every subcommand, the benches and `main` share.

/// The error chain on one line: every error's `Display` says its own layer's part only (the rule
/// of docs/api.md), so the causes are joined with ": " as they come, each once.
pub fn one_line(e: &anyhow::Error) -> String {
    chain(e.as_ref())
}

/// [`one_line`] for any error: "`setns(/run/netns/x)` failed: Operation not permitted".
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line.replace('\n', " ")
}
