//! Where a bench's runs happen: the labs it names, or the one lab `remote` of a `--remote`
//! session (with that host's family and congestion control), and threads started inside a
//! lab's namespace.

use crate::measure::Report;

/// With a `--remote` session: records the far host and address in `report` and returns the
/// remote's family and the one lab, `remote`; else `family` and `labs` as given.
pub(crate) fn remote_labs<'a>(
    report: &mut Report,
    remote: Option<&crate::remote::Remote>,
    family: netlab::Family,
    labs: &[&'a str],
) -> (netlab::Family, Vec<&'a str>) {
    match remote {
        None => (family, labs.to_vec()),
        Some(r) => {
            report.remote_host = Some(r.host.clone());
            if let serde_json::Value::Object(m) = &mut report.settings {
                m.insert("remote".into(), r.addr().to_string().into());
            }
            (netlab::Family::of(r.addr().ip()), vec!["remote"])
        }
    }
}

/// The TCP congestion control of `lab`: the labs set [`netlab::CONGESTION`]; a `--remote` run
/// uses this host's default (`net.ipv4.tcp_congestion_control`), which is not ours to change.
pub(crate) fn congestion(lab: &str) -> Option<String> {
    if lab != "remote" {
        return Some(netlab::CONGESTION.to_owned());
    }
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .ok()
        .map(|c| c.trim().to_owned())
}

/// [`remote_labs`] for a bench of one lab: its name in the results, `remote` with a session.
pub(crate) fn remote_lab<'a>(
    report: &mut Report,
    remote: Option<&crate::remote::Remote>,
    lab: &'a str,
) -> &'a str {
    remote_labs(report, remote, netlab::Family::V4, &[lab]).1[0]
}

/// Starts `f` on a new thread inside `ns`, or in this namespace where `ns` is `None` (the
/// near side of a `--remote` run).
///
/// # Errors
/// The thread cannot enter `ns`.
pub(crate) fn spawn_in<T, F>(
    ns: Option<&netlab::Netns>,
    f: F,
) -> anyhow::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Ok(match ns {
        Some(ns) => ns.spawn(f)?,
        None => std::thread::spawn(f),
    })
}
