//! The `ip` command (iproute2) and where it keeps named namespaces: the leaf the namespaces, their
//! reaper and the privilege check share.

use std::process::Command;

use crate::LabError;

/// Runs `ip` with `args`; returns its stdout.
pub fn ip(args: &[&str]) -> Result<String, LabError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(LabError::NoIpCommand)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LabError::Command {
            cmd: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

pub(crate) const PREFIX: &str = "zcnet-";
pub(crate) const NETNS_DIR: &str = "/run/netns";
