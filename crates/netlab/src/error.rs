//! The errors of building or using a lab ([`LabError`]).

/// Errors of building or using a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The process lacks the privilege to create namespaces or devices.
    #[error("network labs need root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create namespaces: {0}")]
    NotPrivileged(String),
    /// `ip` is not installed.
    #[error("the `ip` command (Debian package iproute2) is needed to build labs")]
    NoIpCommand(#[source] std::io::Error),
    /// An `ip` command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A system call or file operation failed.
    #[error("{op} failed")]
    Io {
        /// What was being done.
        op: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io_err(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let op = op.into();
    move |source| LabError::Io { op, source }
}
