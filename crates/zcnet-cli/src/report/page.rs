//! The page: the verdicts, the hosts, each bench's charts, settings and table, in one
//! self-contained HTML document.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::charts::{Palette, bar_chart, sweep_chart};
use super::figures::{Bench, Figure, benches, spread};
use super::input;
use super::input::Input;
use super::text::{condition, esc, shown};
use super::verdicts::verdicts;

/// The reports' settings as a small table: a row per setting (nested objects one level down as
/// `key.sub`, lists joined), a column per report.
pub(super) fn settings_table(b: &Bench<'_>) -> String {
    let value = |v: &serde_json::Value| match v {
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(shown)
            .collect::<Vec<_>>()
            .join(", "),
        v => shown(v).unwrap_or_else(|| "-".into()),
    };
    // Every setting of every report, in first-seen order, flattened one level.
    let mut keys: Vec<String> = Vec::new();
    let mut columns: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    for (label, r, extra) in &b.reports {
        let mut col = BTreeMap::new();
        for (k, v) in r.settings.as_object().into_iter().flatten() {
            let flat: Vec<(String, String)> = match v.as_object() {
                Some(inner) => inner
                    .iter()
                    .map(|(k2, v2)| (format!("{k}.{k2}"), value(v2)))
                    .collect(),
                None => vec![(k.clone(), value(v))],
            };
            for (key, v) in flat {
                if !keys.contains(&key) {
                    keys.push(key.clone());
                }
                col.insert(key, v);
            }
        }
        // What competed for the CPU while it ran (issue 46): a busy machine's figures are its
        // load's as much as zcnet's.
        if let Some(c) = &r.host.competing {
            let key = "machine during the runs".to_owned();
            if !keys.contains(&key) {
                keys.push(key.clone());
            }
            col.insert(key, c.text());
        }
        columns.push((format!("{label}{extra}"), col));
    }
    if keys.is_empty() {
        return String::new();
    }
    let mut t = String::from("<table class=\"settings\"><tr><th>setting</th>");
    for (name, _) in &columns {
        let _ = write!(t, "<th>{}</th>", esc(name));
    }
    t.push_str("</tr>\n");
    for key in &keys {
        let _ = write!(t, "<tr><td>{}</td>", esc(key));
        for (_, col) in &columns {
            let _ = write!(
                t,
                "<td>{}</td>",
                esc(col.get(key).map_or("-", String::as_str))
            );
        }
        t.push_str("</tr>\n");
    }
    t.push_str("</table>\n");
    t
}

pub(super) fn table(b: &Bench<'_>, hosts: usize, palette: &Palette) -> String {
    let far = b.reports.iter().any(|(_, r, _)| r.remote_host.is_some());
    let mut t = String::from(
        "<table><tr><th>host</th><th>condition</th><th>mode</th><th>runs</th>\
         <th>Gbit/s</th><th>CPU us/MB</th><th>req/s</th><th>without a copy</th>",
    );
    t.push_str(if far {
        "<th>far host CPU us/MB</th></tr>\n"
    } else {
        "</tr>\n"
    });
    let cell = |s: Option<(f64, f64, f64)>, digits: usize| match s {
        Some((m, lo, hi)) => format!("{m:.digits$} <small>({lo:.digits$}-{hi:.digits$})</small>"),
        None => "-".into(),
    };
    for (label, r, extra) in &b.reports {
        for set in &r.results {
            let _ = write!(
                t,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
                if hosts > 1 {
                    esc(label)
                } else {
                    esc(&r.host.hostname)
                },
                esc(&(condition(set) + extra)),
                palette.swatch(label, &set.mode) + &esc(&set.mode),
                set.runs.len(),
                cell(spread(set, Figure::Gbit), 2),
                cell(spread(set, Figure::Cpu), 1),
                cell(spread(set, Figure::Requests), 0),
                cell(spread(set, Figure::Share), 1),
            );
            if far {
                let _ = write!(t, "<td>{}</td>", cell(spread(set, Figure::FarCpu), 1));
            }
            t.push_str("</tr>\n");
        }
    }
    t.push_str("</table>\n");
    t
}

pub(super) const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}\
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:13px;margin:8px 0}\
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}\
small{color:#666}.charts{display:flex;flex-direction:column;gap:8px;margin:8px 0}\
.charts svg{max-width:100%;height:auto}\
.available,.ok,.improved{color:#070}.unavailable,.failed,.blocked,.miss,.regressed{color:#a00}.unsure{color:#a60}\
.sw{display:inline-block;width:10px;height:10px;margin-right:6px;vertical-align:baseline}\
table.settings td{font-size:12px}a{color:#0060a0}\
@media (prefers-color-scheme:dark){body{background:#111;color:#ddd}th{background:#222}\
td,th{border-color:#444}small{color:#999}a{color:#6ab0ff}.charts svg{background:#fff}}\
@media print{body{margin:0;max-width:none}h2{break-before:auto;break-after:avoid}\
.charts>div,table{break-inside:avoid}}";

/// The head of the table of the page's hosts: what makes their figures comparable (issue 46).
pub(super) const HOSTS_TABLE: &str = "<table><tr><th>host</th><th>kernel</th><th>CPUs</th><th>CPU</th>\
                           <th>cache a copy finds</th><th>virtualization</th>\
                           <th>load at start</th><th>date</th><th>zcnet</th><th>benches</th>\
                           </tr>\n";

/// The machine columns of a host's row (CPU, measured cache, virtualization, load).
pub(super) fn machine_cells(h: &input::Host) -> String {
    let llc = match h.llc_measured_bytes {
        Some(0) => "< 1 MiB".to_owned(),
        Some(b) => format!("{} MiB", b >> 20),
        None => "-".to_owned(),
    };
    format!(
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        esc(h.cpu_model.as_deref().unwrap_or("-")),
        llc,
        esc(h.virtualization.as_deref().unwrap_or("-")),
        h.load_average
            .as_ref()
            .and_then(|l| l.first())
            .map_or("-".to_owned(), |l| format!("{l:.2}")),
    )
}

/// The page, without break-even marks.
///
/// # Errors
/// A chart that cannot be drawn.
pub fn page(inputs: &[Input]) -> anyhow::Result<String> {
    page_with(inputs, None)
}

/// The page; the size sweeps mark `profile`'s break-even sizes.
///
/// # Errors
/// A chart that cannot be drawn.
pub fn page_with(
    inputs: &[Input],
    profile: Option<&zcnet::auto::Profile>,
) -> anyhow::Result<String> {
    let hosts = inputs.len();
    let palette = Palette::of(inputs);
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>zcnet report</title><style>{STYLE}</style></head><body>\n<h1>zcnet report</h1>\n"
    );
    h.push_str(&verdicts(inputs, &palette));
    h.push_str(HOSTS_TABLE);
    for i in inputs {
        let r = &i.reports[0];
        let names: Vec<&str> = i.reports.iter().map(|r| r.bench.as_str()).collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&i.label),
            esc(&r.host.kernel),
            r.host.cpus,
            machine_cells(&r.host),
            esc(&r.host.date),
            esc(&r.zcnet_version),
            esc(&names.join(", "))
        );
        // The far hosts of its two-host runs, each once.
        let mut far: Vec<&input::Host> = Vec::new();
        for rh in i.reports.iter().filter_map(|r| r.remote_host.as_ref()) {
            if !far
                .iter()
                .any(|f| f.hostname == rh.hostname && f.kernel == rh.kernel)
            {
                far.push(rh);
            }
        }
        for f in far {
            let benches: Vec<&str> = i
                .reports
                .iter()
                .filter(|r| {
                    r.remote_host
                        .as_ref()
                        .is_some_and(|x| x.hostname == f.hostname)
                })
                .map(|r| r.bench.as_str())
                .collect();
            let _ = writeln!(
                h,
                "<tr><td>{} <small>(far host of {}: zcnet serve)</small></td><td>{}</td><td>{}</td>\
                 {}<td>{}</td><td></td><td>{}</td></tr>",
                esc(&f.hostname),
                esc(&i.label),
                esc(&f.kernel),
                f.cpus,
                machine_cells(f),
                esc(&f.date),
                esc(&benches.join(", "))
            );
        }
    }
    h.push_str("</table>\n");
    for i in inputs {
        let Some(p) = &i.probe else { continue };
        let _ = writeln!(
            h,
            "<h2>Probe: {}</h2>\n<table><tr><th>check</th><th>status</th><th>why</th></tr>",
            esc(&i.label)
        );
        for c in &p.checks {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
                esc(&c.id),
                esc(&c.status),
                esc(&c.status),
                esc(&c.reason)
            );
        }
        h.push_str("</table>\n");
    }
    for b in benches(inputs) {
        let _ = writeln!(h, "<h2 id=\"{0}\">{0}</h2>", esc(&b.name));
        h.push_str(&settings_table(&b));
        h.push_str("<div class=\"charts\">\n");
        let figures = [
            Figure::Cpu,
            Figure::Gbit,
            Figure::Requests,
            Figure::Share,
            Figure::FarCpu,
        ];
        for figure in figures {
            if let Some(svg) = bar_chart(&b, figure, hosts, &palette)? {
                let _ = writeln!(h, "<div>{svg}</div>");
            }
        }
        for figure in [Figure::Cpu, Figure::Gbit] {
            if let Some(svg) = sweep_chart(&b, figure, hosts, profile, &palette)? {
                let _ = writeln!(h, "<div>{svg}</div>");
            }
        }
        h.push_str("</div>\n");
        h.push_str(&table(&b, hosts, &palette));
    }
    h.push_str("</body></html>\n");
    Ok(h)
}
