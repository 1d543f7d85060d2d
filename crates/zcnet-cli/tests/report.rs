//! `zcnet report` (issue 21): the page of a suite's JSON, two hosts side by side, every chart a
//! well-formed SVG, rendered by a real browser (headless Chromium) into a screenshot that is not
//! blank; a bad or foreign file is one line naming the file and the field, exit 2.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::zcnet;

/// A suite's JSON from `zcnet bench --json --runs 1 --seconds 0.3` on the development machine.
const SUITE: &str = include_str!("fixtures/suite.json");

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zcnet-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The suite as if run on `host`.
fn as_host(host: &str) -> PathBuf {
    let mut v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    for r in v["reports"].as_array_mut().unwrap() {
        r["host"]["hostname"] = host.into();
    }
    let p = temp(&format!("{host}.json"));
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// Every `<svg>...</svg>` of the page, parsed as XML.
fn svgs(page: &str) -> usize {
    let mut n = 0;
    let mut rest = page;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").expect("an svg element ends") + start + 6;
        roxmltree::Document::parse(&rest[start..end]).expect("each chart is well-formed SVG");
        n += 1;
        rest = &rest[end..];
    }
    n
}

/// `zcnet report INPUTS... -o PAGE`, which must succeed: the page.
fn render(inputs: &[&Path], page: &Path) -> String {
    let r = zcnet()
        .arg("report")
        .args(inputs)
        .arg("-o")
        .arg(page)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::read_to_string(page).unwrap()
}

#[test]
fn two_hosts_in_one_page_of_well_formed_charts() {
    let (a, b) = (as_host("alpha"), as_host("beta"));
    let out = temp("two.html");
    let page = render(&[&a, &b], &out);
    let v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    let benches: Vec<&str> = v["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bench"].as_str().unwrap())
        .collect();
    for bench in &benches {
        assert!(
            page.contains(&format!("<h2 id=\"{bench}\">")),
            "{bench} has its section"
        );
    }
    // Both hosts label the series of the same charts, and each probe has its table.
    assert!(page.contains("alpha: ") && page.contains("beta: "));
    assert!(page.contains("<h2>Probe: alpha</h2>") && page.contains("<h2>Probe: beta</h2>"));
    // At least CPU and throughput per bench; nothing fetched from elsewhere.
    assert!(svgs(&page) >= 2 * benches.len(), "{} charts", svgs(&page));
    for fetch in ["src=\"http", "href=\"http", "<link", "<script", "@import"] {
        assert!(!page.contains(fetch), "the page fetches nothing ({fetch})");
    }
}

#[test]
fn a_tuned_profile_marks_its_break_even_sizes_on_the_sweeps() {
    use zcnet::auto::{Profile, Route, SendPath, Threshold};
    let mut p = Profile::builtin();
    p.kernel = "test".into();
    for e in p.entries.iter_mut() {
        if e.route == Route::Device {
            e.threshold = match e.path {
                SendPath::UringZc => Threshold::From(4800),
                SendPath::UringZcFixed => Threshold::From(900),
                _ => e.threshold,
            };
        }
    }
    let profile = temp("profile.toml");
    std::fs::write(&profile, p.to_toml()).unwrap();
    let out = temp("marks.html");
    let r = zcnet()
        .arg("report")
        .arg(as_host("delta"))
        .arg("-o")
        .arg(&out)
        .arg("--profile")
        .arg(&profile)
        .env_remove("ZCNET_PROFILE")
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let page = std::fs::read_to_string(&out).unwrap();
    // uring-tx sweeps 600, 8000 and 64000 B in the sink lab: both of its paths are marked.
    assert!(
        page.contains("tune: uring_zc device from 4800 B"),
        "uring_zc mark"
    );
    assert!(
        page.contains("tune: uring_zc_fixed device from 900 B"),
        "zc-fixed mark"
    );
    // Without a profile (none installed in this environment's config), no marks.
    let empty = temp("xdg");
    std::fs::create_dir_all(&empty).unwrap();
    let r = zcnet()
        .arg("report")
        .arg(as_host("delta"))
        .arg("-o")
        .arg(&out)
        .env("XDG_CONFIG_HOME", &empty)
        .env_remove("ZCNET_PROFILE")
        .output()
        .unwrap();
    assert!(r.status.success());
    assert!(!std::fs::read_to_string(&out).unwrap().contains("tune: "));
}

#[test]
fn the_page_renders_in_chromium_and_is_not_blank() {
    let Some(chromium) = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| netlab::skip::on_path(b))
    else {
        netlab::skip::skip("chromium is not installed (Debian: apt install chromium)");
        return;
    };
    let input = as_host("gamma");
    let out = temp("page.html");
    render(&[&input], &out);
    let png = temp("page.png");
    let shot = screenshot(chromium, &out, &png);
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let (w, h, bands) = ink(&png);
    // The width asked for; the height is the window's or the page's, by chromium's version.
    assert_eq!(w, 1400);
    assert!(h >= 2000, "{w}x{h}");
    // Text, bars and lines cover a good part of the page; a blank or failed render is white.
    let drawn: f64 = bands.iter().sum::<f64>() / bands.len() as f64;
    assert!(
        drawn > 0.02,
        "only {:.2} % of the pixels are drawn",
        100.0 * drawn
    );
    // Down to the page's end, no 400-pixel band is empty: every bench's charts were drawn (a
    // chart that failed would leave its space white).
    let last = bands.iter().rposition(|&b| b > 0.0).unwrap();
    assert!(
        last * 400 > 6000,
        "the page ends after {} pixels",
        last * 400
    );
    for (i, &b) in bands[..=last].iter().enumerate() {
        assert!(b > 0.003, "pixels {}-{} are blank", i * 400, (i + 1) * 400);
    }
}

fn screenshot(chromium: &str, page: &Path, png: &Path) -> std::process::Output {
    // A profile of its own, in a directory this user can write (HOME may be another user's, or
    // read-only), and nothing fetched from the network.
    let profile = temp("chromium-profile");
    std::fs::create_dir_all(&profile).unwrap();
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,12000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .env("HOME", &profile)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    out
}

/// Width, height and, per band of 400 rows, the share of its pixels that are not near-white.
fn ink(png: &Path) -> (u32, u32, Vec<f64>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let row = info.line_size;
    let bands = buf[..info.buffer_size()]
        .chunks(row * 400)
        .map(|band| {
            let dark = band
                .chunks(px)
                .filter(|p| p.iter().take(3).any(|&c| c < 200))
                .count();
            dark as f64 / (band.len() / px) as f64
        })
        .collect();
    (info.width, info.height, bands)
}

#[test]
fn a_page_that_cannot_be_written_is_one_line_and_leaves_nothing() {
    let input = as_host("epsilon");
    let dir = temp("out-dir");
    std::fs::create_dir_all(&dir).unwrap();
    for (out, says) in [
        (dir.clone(), "it is a directory"),
        (dir.join("missing/page.html"), "No such file or directory"),
    ] {
        let r = zcnet()
            .arg("report")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("writing {}", out.display())) && err.contains(says),
            "{err}"
        );
    }
    // No temporary left beside the outputs.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let r = zcnet().args(["report", "-o", "x.html"]).output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        err.trim_end().ends_with("<RUN.json>..."),
        "names what is missing: {err}"
    );
}

#[test]
fn a_bad_or_foreign_file_is_one_line_naming_the_file_and_the_field() {
    let missing = temp("missing.json");
    let foreign = temp("foreign.json");
    std::fs::write(&foreign, r#"{"name": "not ours"}"#).unwrap();
    let truncated = temp("truncated.json");
    std::fs::write(&truncated, &SUITE[..SUITE.len() / 2]).unwrap();
    let wrong = temp("wrong.json");
    let mut v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    v["reports"][1]["results"][0]["runs"][0]["gbit"] = "fast".into();
    std::fs::write(&wrong, v.to_string()).unwrap();
    // Issue 62 items 5 and 9: a finite figure near f64::MAX hung the chart's ticks for ever at
    // 100 % CPU; a negative one was drawn as a change of -120.9 %.
    let huge = temp("huge.json");
    let mut v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    v["reports"][1]["results"][0]["runs"][0]["gbit"] = 1.7e308.into();
    std::fs::write(&huge, v.to_string()).unwrap();
    let huge_cpu = temp("huge_cpu.json");
    let mut v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    v["reports"][0]["results"][0]["runs"][0]["cpu_us_per_mb"] = 1.7e308.into();
    std::fs::write(&huge_cpu, v.to_string()).unwrap();
    let negative = temp("negative.json");
    let mut v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    v["reports"][1]["results"][0]["runs"][0]["gbit"] = (-5.0).into();
    std::fs::write(&negative, v.to_string()).unwrap();
    for (file, says) in [
        (&missing, "No such file or directory"),
        (&foreign, "not a zcnet bench report: missing field `bench`"),
        (&truncated, "not JSON: EOF while parsing"),
        (
            &wrong,
            "reports[1].results[0].runs[0].gbit: invalid type: string \"fast\", expected f64",
        ),
        (
            &huge,
            "reports[1].results[0].runs[0].gbit: 170000000000000000",
        ),
        (
            &huge_cpu,
            "reports[0].results[0].runs[0].cpu_us_per_mb: 1700000",
        ),
        (
            &negative,
            "reports[1].results[0].runs[0].gbit: -5: a figure is a number from 0",
        ),
    ] {
        let out = temp("bad.html");
        // Bounded: a hang is a failure, not a stuck test.
        let mut child = zcnet()
            .arg("report")
            .arg(file)
            .arg("-o")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("report {} hung", file.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let r = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&file.display().to_string()) && err.contains(says),
            "{err}"
        );
        assert!(!out.exists(), "no page for a bad input");
    }
}

/// Issue 35 item 11: inputs were read whole (`report /dev/zero`, `--profile /dev/zero`: 2 GB in
/// 3 s), and a 200 MB host name took 61 s and 7 GB and was drawn into a 3.5 GB page. A report
/// input is read up to 64 MiB and 5000 sets, a profile up to 1 MiB (past a cap: one line naming
/// the file and the cap, exit 2, no page); a name is drawn cut to 100 characters, with a mark.
#[test]
fn oversized_inputs_are_refused_and_long_names_cut() {
    let mut suite: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    let many = temp("many-sets.json");
    let mut one = suite["reports"][0].clone();
    one["results"] = vec![one["results"][0].clone(); 5001].into();
    std::fs::write(&many, one.to_string()).unwrap();
    let short = as_host("eta");
    let out = temp("capped.html");
    for (input, profile, says) in [
        (
            Path::new("/dev/zero"),
            None,
            "/dev/zero: larger than 64 MiB, the cap for a report input",
        ),
        (
            &many,
            None,
            "sets (results of all reports): 5001, more than the 5000 a page draws",
        ),
        (
            &short,
            Some("/dev/zero"),
            "the profile /dev/zero is larger than 1 MiB, the cap for a profile",
        ),
    ] {
        let mut cmd = zcnet();
        cmd.arg("report").arg(input).arg("-o").arg(&out);
        if let Some(p) = profile {
            cmd.args(["--profile", p]);
        }
        let r = common::output_bounded(&cmd);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!out.exists(), "no page for a bad input");
    }
    // A host name of 4 MB: cut where it is drawn, and the page the size of a short name's.
    for r in suite["reports"].as_array_mut().unwrap() {
        r["host"]["hostname"] = "h".repeat(4 << 20).into();
    }
    let long = temp("long-host.json");
    std::fs::write(&long, suite.to_string()).unwrap();
    let page = |input: &Path| {
        let out = temp(&format!(
            "{}.html",
            input.file_stem().unwrap().to_str().unwrap()
        ));
        let mut cmd = zcnet();
        cmd.arg("report").arg(input).arg("-o").arg(&out);
        let r = common::output_bounded(&cmd);
        let page = std::fs::read_to_string(&out);
        let _ = std::fs::remove_file(&out);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        page.unwrap()
    };
    let pages = (page(&long), page(&short));
    // Its inputs are large: gone before anything is checked.
    for f in [&many, &long, &short] {
        let _ = std::fs::remove_file(f);
    }
    let (long, short) = pages;
    assert!(
        long.contains(&format!("{}…[cut]", "h".repeat(100))),
        "no cut name"
    );
    assert!(!long.contains(&"h".repeat(101)), "a name drawn whole");
    assert!(
        long.len() < short.len() + (64 << 10),
        "{} bytes of page for {} with a short name",
        long.len(),
        short.len()
    );
}

/// Every change of `changes` is within noise but those of the first udp-tx set at `lab` and
/// `mode`, scaled by 0.7: throughput regressed, CPU per MB improved, by 30 %.
fn only_the_scaled_cell_moved(
    changes: &[serde_json::Value],
    lab: &serde_json::Value,
    mode: &serde_json::Value,
) {
    for c in changes {
        let this = c["bench"] == "udp-tx"
            && c["mode"] == *mode
            && c["condition"]
                .as_str()
                .unwrap()
                .starts_with(lab.as_str().unwrap());
        let want = match (this, c["metric"].as_str().unwrap()) {
            (true, "cpu_us_per_mb") => "improved",
            (true, _) => "regressed",
            (false, _) => "within_noise",
        };
        // Other udp-tx cells share lab and mode; only the first set was scaled.
        if this && c["change"].as_f64().unwrap() == 0.0 {
            continue;
        }
        assert_eq!(c["verdict"], want, "{c}");
        if want != "within_noise" {
            assert!((c["change"].as_f64().unwrap() + 0.3).abs() < 1e-9, "{c}");
        }
    }
}

/// `zcnet report a.json b.json`, b being a with one cell's figures scaled by 0.7: that cell's
/// throughput is flagged regressed (and its CPU per MB improved), every other figure is within
/// noise; the changes open the page; `--fail-on-regression` exits 3 beyond its percentage and
/// 0 below it.
#[test]
fn a_regressed_cell_is_flagged_and_fails_a_ci_job() {
    let base = as_host("base");
    let mut v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    let udp = v["reports"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["bench"] == "udp-tx")
        .unwrap();
    let cell = &mut udp["results"][0];
    let (lab, mode) = (cell["lab"].clone(), cell["mode"].clone());
    for run in cell["runs"].as_array_mut().unwrap() {
        for k in ["gbit", "requests_per_s", "cpu_us_per_mb"] {
            run[k] = (run[k].as_f64().unwrap() * 0.7).into();
        }
    }
    let new = temp("new.json");
    std::fs::write(&new, v.to_string()).unwrap();
    let page = temp("compare.html");
    let run = |extra: &[&str]| {
        zcnet()
            .arg("report")
            .args([&base, &new])
            .arg("-o")
            .arg(&page)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let changes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changes = changes.as_array().unwrap();
    assert!(
        changes.len() > 50,
        "every figure of every shared cell: {}",
        changes.len()
    );
    only_the_scaled_cell_moved(changes, &lab, &mode);
    let html = std::fs::read_to_string(&page).unwrap();
    let h2: Vec<&str> = html.split("<h2").skip(1).take(2).collect();
    assert!(
        h2[0].starts_with(" id=\"verdicts\">"),
        "the verdicts come first"
    );
    assert!(h2[1].starts_with(" id=\"changes\">"), "then what changed");
    assert!(
        html.contains("2 regressed, 1 improved"),
        "the count of verdicts"
    );
    // A CI job's exit status.
    let strict = run(&["--fail-on-regression", "20"]);
    assert_eq!(
        strict.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&strict.stderr)
    );
    let err = String::from_utf8_lossy(&strict.stderr);
    assert!(err.contains("regressed by more than 20 %"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let lax = run(&["--fail-on-regression", "40"]);
    assert!(
        lax.status.success(),
        "{}",
        String::from_utf8_lossy(&lax.stderr)
    );
    // The same file twice: nothing moved.
    let same = zcnet()
        .arg("report")
        .args([&base, &base])
        .arg("-o")
        .arg(&page)
        .args(["--fail-on-regression", "0.01"])
        .output()
        .unwrap();
    assert!(same.status.success());
    assert!(
        std::fs::read_to_string(&page)
            .unwrap()
            .contains("No figure moved beyond the noise.")
    );
    for bad in ["nan", "-1", "x"] {
        let out = run(&["--noise", bad]);
        assert_eq!(out.status.code(), Some(2), "--noise {bad}");
    }
}

/// No two labels' boxes of a chart meet, and none leaves it: width from the widest glyphs of
/// their font size.
fn labels_do_not_overlap(doc: &roxmltree::Document, nodes: &[roxmltree::Node]) {
    let num = |n: &roxmltree::Node, a: &str| n.attribute(a).and_then(|v| v.parse::<f64>().ok());
    let mut boxes: Vec<(f64, f64, f64, f64, &str)> = Vec::new();
    for t in nodes.iter().filter(|n| n.has_tag_name("text")) {
        let (Some(x), Some(y), Some(size)) = (num(t, "x"), num(t, "y"), num(t, "font-size")) else {
            continue;
        };
        let text = t.text().unwrap_or("").trim();
        let w = text.chars().count() as f64 * size * 0.62;
        let x0 = match t.attribute("text-anchor") {
            Some("middle") => x - w / 2.0,
            Some("end") => x - w,
            _ => x,
        };
        // Rotated axis titles run vertically: left out.
        if t.attribute("transform").is_some() {
            continue;
        }
        boxes.push((x0, y, x0 + w, y + size, text));
    }
    let width: f64 = doc
        .root_element()
        .attribute("width")
        .unwrap()
        .parse()
        .unwrap();
    for (i, a) in boxes.iter().enumerate() {
        assert!(
            a.0 >= -1.0 && a.2 <= width + 1.0,
            "{:?} leaves the chart",
            a.4
        );
        for b in &boxes[i + 1..] {
            let overlap = a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3;
            assert!(!overlap, "labels overlap: {:?} and {:?}", a.4, b.4);
        }
    }
}

/// The `<svg>` elements of a page, as text.
fn svg_texts(page: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").unwrap() + start + 6;
        out.push(&rest[start..end]);
        rest = &rest[end..];
    }
    out
}

/// A report of one bench with `n` conditions of long parameters and three modes.
fn wide_report(n: usize) -> String {
    let mut results = Vec::new();
    for i in 0..n {
        for (k, mode) in ["copy", "zc", "auto"].iter().enumerate() {
            results.push(serde_json::json!({
                "lab": "sink", "family": "ipv4", "congestion": null,
                "params": {"proto": "udp", "segment": 1472, "segments": 42 + i,
                           "a_long_parameter_name_without_spaces": format!("value-{i}-and-more")},
                "mode": mode,
                "runs": [{"gbit": 10.0 + i as f64 + k as f64, "cpu_us_per_mb": 50.0,
                          "requests_per_s": 1000.0, "zero_copy_share": 1.0}],
                "median": {}, "min": {}, "max": {}
            }));
        }
    }
    serde_json::json!({
        "bench": "udp-gso", "zcnet_version": "0.1.0",
        "host": {"hostname": "wide", "date": "2026-11-24T00:00:00Z", "kernel": "6.18",
                 "cpus": 2, "page_size": 4096},
        "settings": {"runs": 1, "pool": {"heat": "hot", "mib": 1}, "modes": ["copy", "zc", "auto"]},
        "results": results, "comparisons": []
    })
    .to_string()
}

/// Issue 33: the page opens with the verdicts (MISSes first), each mode has one colour in every
/// chart's legend and every table's swatch, no two labels of a chart overlap by their
/// computed extents (the label font's widest characters), and settings are a table.
#[test]
fn the_page_reads_at_a_glance() {
    let suite = as_host("glance");
    let wide = temp("wide.json");
    std::fs::write(&wide, wide_report(14)).unwrap();
    for (input, hosts) in [(&suite, 1), (&wide, 1)] {
        let page = temp("glance.html");
        let html = render(&[input], &page);
        let first = html.find("<h2").unwrap();
        assert!(
            html[first..].starts_with("<h2 id=\"verdicts\">"),
            "verdicts first"
        );
        assert!(
            !html.contains("<pre>"),
            "settings as a table, not a JSON line"
        );
        assert!(html.contains("<table class=\"settings\">"));
        if input == &suite {
            // The suite's MISS rows come before its ok rows, each a link to its bench.
            let summary = &html[html.find("<table class=\"summary\">").unwrap()..];
            let miss = summary.find(">MISS").unwrap();
            let ok = summary.find(">ok").unwrap();
            assert!(miss < ok, "MISSes first");
            assert!(summary.contains("<a href=\"#udp-tx\">"));
            assert!(
                html.contains("<table class=\"pays\">"),
                "where zero copy pays"
            );
        }
        // One colour per mode: in every legend (a swatch or a line sample on the text's row)
        // and in the tables' swatches.
        let mut colour: std::collections::BTreeMap<String, String> = Default::default();
        let mut see = |mode: &str, c: &str, at: &str| {
            let c = c.to_ascii_lowercase();
            let was = colour.entry(mode.to_owned()).or_insert_with(|| c.clone());
            assert_eq!(*was, c, "{mode} drawn in two colours ({at})");
        };
        let svgs = svg_texts(&html);
        assert!(!svgs.is_empty());
        for svg in &svgs {
            let doc = roxmltree::Document::parse(svg).unwrap();
            let nodes: Vec<roxmltree::Node> =
                doc.descendants().filter(|n| n.is_element()).collect();
            let num =
                |n: &roxmltree::Node, a: &str| n.attribute(a).and_then(|v| v.parse::<f64>().ok());
            for t in nodes.iter().filter(|n| n.has_tag_name("text")) {
                let (Some(x), Some(y)) = (num(t, "x"), num(t, "y")) else {
                    continue;
                };
                let name = t.text().unwrap_or("").trim();
                // The legend's sample sits just left of its text, on its row.
                let sample = nodes.iter().find_map(|n| {
                    if n.has_tag_name("rect")
                        && num(n, "y") == Some(y)
                        && num(n, "x") == Some(x - 18.0)
                    {
                        return n.attribute("fill");
                    }
                    let points = n.attribute("points")?;
                    let first = points.split_whitespace().next()?;
                    let (px, py) = first.split_once(',')?;
                    let (px, py): (f64, f64) = (px.parse().ok()?, py.parse().ok()?);
                    (n.has_tag_name("polyline") && py == y + 6.0 && (x - 20.0..x).contains(&px))
                        .then(|| n.attribute("stroke"))
                        .flatten()
                });
                if let Some(c) = sample {
                    let mode = name.rsplit(' ').next().unwrap();
                    see(mode, c, "a legend");
                }
            }
            labels_do_not_overlap(&doc, &nodes);
        }
        for sw in html.split("<span class=\"sw\" style=\"background:").skip(1) {
            let (c, rest) = sw.split_once("\"></span>").unwrap();
            let mode: String = rest.chars().take_while(|ch| *ch != '<').collect();
            see(mode.trim(), c, "a table");
        }
        assert!(colour.len() >= 3, "{colour:?} ({hosts} host)");
        let distinct: std::collections::BTreeSet<&String> = colour.values().collect();
        assert_eq!(
            distinct.len(),
            colour.len(),
            "no two modes share a colour: {colour:?}"
        );
    }
}

/// `zcnet bench ... --baseline BASE.json`: a baseline that is not a report fails before any run
/// (exit 2); against a baseline whose throughput is four times this run's, every throughput
/// figure is a regression on stderr (stdout stays one JSON document), the page opens with them, and
/// `--fail-on-regression` exits 3.
#[test]
fn a_bench_against_its_baseline() {
    let bad = temp("not-a-report.json");
    std::fs::write(&bad, "{}").unwrap();
    let started = std::time::Instant::now();
    let out = zcnet()
        .args(["bench", "udp-tx", "--lab", "sink", "--baseline"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--baseline"));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "refused before the runs"
    );
    if let Err(e) = netlab::check_privileges() {
        return netlab::skip::skip(&e.to_string());
    }
    let args = [
        "bench",
        "udp-tx",
        "--lab",
        "sink",
        "--size",
        "8000",
        "--mode",
        "copy",
        "--mode",
        "zc",
        "--runs",
        "2",
        "--seconds",
        "0.2",
        "--json",
    ];
    let first = zcnet().args(args).output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let mut base: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    for set in base["results"].as_array_mut().unwrap() {
        for run in set["runs"].as_array_mut().unwrap() {
            for k in ["gbit", "requests_per_s"] {
                run[k] = (run[k].as_f64().unwrap() * 4.0).into();
            }
        }
    }
    let base_path = temp("baseline.json");
    std::fs::write(&base_path, base.to_string()).unwrap();
    let page = temp("against.html");
    let out = zcnet()
        .args(args)
        .arg("--baseline")
        .arg(&base_path)
        .args(["--fail-on-regression", "20", "--report"])
        .arg(&page)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    // The CPU figures were not scaled: whatever they did is this machine's noise.
    for mode in ["copy", "zc"] {
        for figure in ["gbit", "requests_per_s"] {
            let line = format!("regressed: udp-tx sink ipv4 proto=udp size=8000 {mode} {figure}:");
            assert!(err.contains(&line), "{line} in {err}");
        }
    }
    assert!(err.contains("regressed by more than 20 %"), "{err}");
    let _: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is still the run's JSON");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("<h2 id=\"changes\">Changes: baseline → "),
        "the page compares"
    );
}

/// A suite's summary row whose ratio had no median (serde_json writes NaN as `null`) reads,
/// and is drawn as "-": the suite's own `--report` and `--baseline` take what `--json` printed.
#[test]
fn a_summary_ratio_of_null_reads() {
    let mut v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    v["summary"][0]["ratio"] = serde_json::Value::Null;
    let input = temp("null-ratio.json");
    std::fs::write(&input, v.to_string()).unwrap();
    let page = temp("null-ratio.html");
    assert!(render(&[&input], &page).contains("<td>-</td>"));
}

/// Issue 46: a verdict carries its interval and the machine its load. The page shows the
/// interval in a column, the unsure after the MISSes and before the rest, the machine of each
/// host (CPU, the cache a copy finds, the virtualization, the load at the start) and, per bench,
/// what others took of the CPU during its runs. Files from before have none of it and still load.
#[test]
fn verdicts_carry_their_interval_and_hosts_their_machine() {
    let mut v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    let rows = v["summary"].as_array_mut().unwrap();
    rows[0]["verdict"] =
        "unsure (>= 1.6: 1.620 (95 % 0.900-1.100); --runs 9 would likely decide)".into();
    rows[0]["decision"] = "unsure".into();
    rows[0]["ratio_low"] = 0.9.into();
    rows[0]["ratio_high"] = 1.1.into();
    rows[0]["load"] = "others took 49 % of the CPU (spinner 14.93 s), steal 0 %".into();
    for r in v["reports"].as_array_mut().unwrap() {
        r["host"]["cpu_model"] = "Test CPU 9000".into();
        r["host"]["llc_measured_bytes"] = (16u64 << 20).into();
        r["host"]["virtualization"] = "kvm, docker".into();
        r["host"]["load_average"] = serde_json::json!([1.25, 1.0, 0.5]);
        r["host"]["competing"] = serde_json::json!({
            "seconds": 10.0, "others_cpu_s": 9.8, "others_share": 0.49, "steal_share": 0.0,
            "top": [{"command": "spinner", "cpu_s": 9.8}], "busy_if_share_above": 0.1,
            "busy": true
        });
    }
    let input = temp("machine.json");
    std::fs::write(&input, v.to_string()).unwrap();
    let html = render(&[&input], &temp("machine.html"));
    for want in [
        "Test CPU 9000",
        "16 MiB",
        "kvm, docker",
        "1.25",
        "0.900-1.100",
    ] {
        assert!(html.contains(want), "{want} on the page");
    }
    assert!(html.contains("others 49 % (spinner 9.80 s), steal 0 %: busy"));
    assert!(html.contains("others took 49 % of the CPU (spinner 14.93 s)"));
    let summary = &html[html.find("<table class=\"summary\">").unwrap()..];
    let (miss, unsure, ok) = (
        summary.find("class=\"miss\"").unwrap(),
        summary.find("class=\"unsure\"").unwrap(),
        summary.find("class=\"ok\"").unwrap(),
    );
    assert!(
        miss < unsure && unsure < ok,
        "MISS, then unsure, then the rest"
    );
}

/// Issue 62 item 9: the same cells, every figure 0, said that no cell of the new run was in the
/// base. Zero against zero is compared, and no change.
fn zero_against_zero_is_no_change(a: &serde_json::Value) {
    let mut zeros = a.clone();
    for set in zeros["results"].as_array_mut().unwrap() {
        for run in set["runs"].as_array_mut().unwrap() {
            for key in [
                "gbit",
                "cpu_us_per_mb",
                "requests_per_s",
                "remote_cpu_us_per_mb",
            ] {
                if run.get(key).is_some_and(|v| !v.is_null()) {
                    run[key] = 0.0.into();
                }
            }
        }
    }
    let (fz, fz2) = (temp("gate-z.json"), temp("gate-z2.json"));
    std::fs::write(&fz, zeros.to_string()).unwrap();
    std::fs::write(&fz2, zeros.to_string()).unwrap();
    let out = zcnet()
        .arg("report")
        .args([&fz, &fz2])
        .args(["-o"])
        .arg(temp("gate-z.html"))
        .args(["--fail-on-regression", "10"])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!said.contains("compared nothing"), "{said}");
    let page = std::fs::read_to_string(temp("gate-z.html")).unwrap();
    assert!(
        !page.contains("Nothing compared"),
        "the page says nothing was compared"
    );
    assert!(
        page.contains("0 regressed, 0 improved"),
        "no verdict counts on the page"
    );
}

/// Issue 48 items 4 and 15: a regression gate that compared nothing (another bench, empty
/// results) printed "No figure moved beyond the noise" and exited 0; one file with a gate
/// ignored it; `-o` naming an input replaced it with the page. Each is refused now, exit 2, the
/// input as it was.
#[test]
fn a_gate_that_compared_nothing_fails_and_no_page_replaces_its_input() {
    let v: serde_json::Value = serde_json::from_str(SUITE).unwrap();
    let reports = v["reports"].as_array().unwrap();
    let (a, b) = (&reports[0], &reports[1]);
    assert_ne!(a["bench"], b["bench"]);
    let (fa, fb, fe) = (
        temp("gate-a.json"),
        temp("gate-b.json"),
        temp("gate-e.json"),
    );
    std::fs::write(&fa, a.to_string()).unwrap();
    std::fs::write(&fb, b.to_string()).unwrap();
    let mut empty = a.clone();
    empty["results"] = serde_json::json!([]);
    std::fs::write(&fe, empty.to_string()).unwrap();
    let run = |args: &[&Path]| {
        let out = zcnet()
            .arg("report")
            .args(args)
            .args(["-o"])
            .arg(temp("gate.html"))
            .args(["--fail-on-regression", "1"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (base, new) in [(&fa, &fb), (&fa, &fe)] {
        let (code, err) = run(&[base, new]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            common::error_line(&err).contains("compared nothing"),
            "{err}"
        );
    }
    let (code, err) = run(&[&fa]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("give two files or more"), "{err}");
    zero_against_zero_is_no_change(a);
    // The same file as input and page, by another path too.
    let before = std::fs::read(&fa).unwrap();
    let other_path = fa.parent().unwrap().join(".").join(fa.file_name().unwrap());
    for page in [&fa, &other_path] {
        let out = zcnet()
            .arg("report")
            .arg(&fa)
            .arg("-o")
            .arg(page)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("the page would replace it"), "{err}");
        assert_eq!(
            std::fs::read(&fa).unwrap(),
            before,
            "the input is as it was"
        );
    }
}

#[test]
fn a_report_with_the_old_size_keys_reads_as_one_with_size() {
    // The fixture was written when packet said frame_bytes and async-serve file_bytes.
    for old in ["\"frame_bytes\":", "\"file_bytes\":"] {
        assert!(SUITE.contains(old), "the fixture has {old}");
    }
    let new = SUITE
        .replace("\"frame_bytes\":", "\"size\":")
        .replace("\"file_bytes\":", "\"size\":");
    let page_of = |dir: &str, text: &str| {
        let d = temp(dir);
        std::fs::create_dir_all(&d).unwrap();
        let input = d.join("suite.json");
        std::fs::write(&input, text).unwrap();
        render(&[&input], &d.join("page.html"))
    };
    let (old_page, new_page) = (page_of("old-keys", SUITE), page_of("new-keys", &new));
    assert!(
        old_page.contains("against message size"),
        "the sweeps are drawn"
    );
    assert_eq!(old_page, new_page);
    // And an old file compares with a new one cell by cell: nothing is left unmatched.
    let (old, new_file) = (temp("old-keys/suite.json"), temp("new-keys/suite.json"));
    let r = zcnet()
        .args(["report", "--json"])
        .arg(&old)
        .arg(&new_file)
        .arg("-o")
        .arg(temp("both.html"))
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let changes: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let benches: Vec<&str> = changes
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["bench"].as_str())
        .collect();
    for bench in ["packet", "async-serve"] {
        assert!(benches.contains(&bench), "{bench} compared: {benches:?}");
    }
}
