//! docs/api.md's table of the shape is checked against the code (issue 32): each row's traits
//! are exactly those the compiler sees implemented, and every mechanism module has a row.

use std::collections::{BTreeMap, BTreeSet};

/// `(type, traits)` for every type of the shape. Each entry is checked by the compiler: a type
/// that loses one of its traits does not build this test.
macro_rules! shape {
    ($($name:literal => $ty:ty : $($tr:path),*;)*) => {{
        #[allow(unused_imports)]
        use zcnet::mechanism::*;
        let mut m: BTreeMap<&'static str, BTreeSet<&'static str>> = BTreeMap::new();
        $(
            $( { fn check<T: ?Sized + $tr>() {} check::<$ty>(); } )*
            m.insert($name, BTreeSet::from([$(stringify!($tr)),*]));
        )*
        m
    }};
}

type Buf = Vec<u8>;
type Tcp = std::net::TcpStream;

fn code() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    #[allow(unused_mut)]
    let mut m = shape! {
        "msg_zerocopy::ZeroCopySender" => zcnet::msg_zerocopy::ZeroCopySender<Tcp, Buf>: Mechanism, LoaningSender<Buf>;
        "uring::UringSender" => zcnet::uring::UringSender<Tcp, Buf>: Mechanism, LoaningSender<Buf>;
        "tcp_rx::TcpZeroCopyReceiver" => zcnet::tcp_rx::TcpZeroCopyReceiver<Tcp>: Mechanism, LendingReceiver;
        "peek::PeekCursor" => zcnet::peek::PeekCursor<Tcp>: Mechanism, LendingReceiver;
        "file::FileSender" => zcnet::file::FileSender<Tcp>: Mechanism;
        "packet::Capture" => zcnet::packet::Capture: Mechanism, FrameSource;
        "packet::TxRing" => zcnet::packet::TxRing: FrameSink;
        "xdp::XdpSocket" => zcnet::xdp::XdpSocket: Mechanism, FrameSource, FrameSink;
        "xdp::Queues" => zcnet::xdp::Queues: Mechanism, FrameSource;
        "relay::relay" => ():;
    };
    #[cfg(feature = "tokio")]
    m.extend(shape! {
        "tokio::ZeroCopySender" => zcnet::tokio::ZeroCopySender<Tcp, Buf>: Mechanism, AsyncLoaningSender<Buf>;
        "tokio::UringSender" => zcnet::tokio::UringSender<Tcp, Buf>: Mechanism, AsyncLoaningSender<Buf>;
        "tokio::TcpZeroCopyReceiver" => zcnet::tokio::TcpZeroCopyReceiver<Tcp>: Mechanism, AsyncLendingReceiver;
        "tokio::PeekCursor" => zcnet::tokio::PeekCursor<Tcp>: Mechanism, AsyncLendingReceiver;
        "tokio::FileSender" => zcnet::tokio::FileSender<Tcp>: Mechanism;
    });
    m
}

/// The table between `<!-- shape:begin -->` and `<!-- shape:end -->`: type, traits, and the
/// reason given for the traits a type does not have.
fn doc() -> BTreeMap<String, (BTreeSet<String>, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md");
    let text = std::fs::read_to_string(path).unwrap();
    let start = text
        .find("<!-- shape:begin -->")
        .expect("docs/api.md: shape:begin");
    let end = text
        .find("<!-- shape:end -->")
        .expect("docs/api.md: shape:end");
    text[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 3, "docs/api.md shape row: {l}");
            let traits = cells[1]
                .split(',')
                .map(|t| t.trim().trim_matches('`').to_owned())
                .filter(|t| !t.is_empty())
                .collect();
            (
                cells[0].trim_matches('`').to_owned(),
                (traits, cells[2].to_owned()),
            )
        })
        .collect()
}

#[test]
fn api_table_matches_the_code() {
    let code = code();
    let doc = doc();
    for (ty, traits) in &code {
        let strip = |t: &&str| t.split('<').next().unwrap().trim().to_owned();
        let want: BTreeSet<String> = traits.iter().map(strip).collect();
        let (got, _) = doc
            .get(*ty)
            .unwrap_or_else(|| panic!("docs/api.md has no row for `{ty}`"));
        assert_eq!(got, &want, "docs/api.md's traits of `{ty}`");
    }
    for (ty, (traits, why)) in &doc {
        if cfg!(feature = "tokio") || !ty.starts_with("tokio::") {
            assert!(
                code.contains_key(ty.as_str()),
                "docs/api.md lists `{ty}`, the code does not"
            );
        }
        // A type with neither a sending nor a receiving trait says why.
        let kinds = [
            "LoaningSender",
            "LendingReceiver",
            "FrameSource",
            "FrameSink",
        ];
        let moves_data = traits.iter().any(|t| kinds.iter().any(|k| t.ends_with(k)));
        assert!(
            moves_data || !why.is_empty(),
            "docs/api.md: `{ty}` needs a reason"
        );
    }
}

#[test]
fn every_mechanism_module_has_a_row() {
    // The crate's public modules that are not mechanisms: shared vocabulary and reports.
    let not_mechanisms = [
        "auto",
        "counters",
        "errqueue",
        "loan",
        "mechanism",
        "probe",
        "support",
        "tcp_info",
        "tokio",
        // GSO trains are a way the UDP senders send (their `Config::segment`), not a mechanism.
        "udp_gso",
    ];
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let doc = doc();
    for line in lib.lines() {
        let Some(module) = line.trim().strip_prefix("pub mod ") else {
            continue;
        };
        let module = module.trim_end_matches(';');
        if not_mechanisms.contains(&module) {
            continue;
        }
        assert!(
            doc.keys().any(|ty| ty.starts_with(&format!("{module}::"))),
            "docs/api.md's shape table has no row for the module `{module}`"
        );
    }
}

/// One vocabulary (issue 49): the crate's public names spell zero copy `zero_copy` (or
/// `ZeroCopy`), never `zerocopy` or `zc`, name kernel statistics `statistics`, and put the
/// counted thing last (`mapped_bytes`, not `bytes_mapped`). What is sent with the kernel's
/// zero-copy flag is `loaned`; what the kernel really did not copy is `zero_copy`. The kernel's
/// own names are kept where a field mirrors one (listed below with the kernel's name).
#[test]
fn public_names_keep_one_vocabulary() {
    // (file, name): fields named as the kernel names them.
    let kernel_names = [
        ("tcp_info.rs", "bytes_received"),  // tcpi_bytes_received
        ("tcp_info.rs", "bytes_sent"),      // tcpi_bytes_sent
        ("uring/support.rs", "send_zc"),    // IORING_OP_SEND_ZC
        ("uring/support.rs", "sendmsg_zc"), // IORING_OP_SENDMSG_ZC
    ];
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for file in rust_files(&src) {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        // The kernel's ABI, named as in its headers, is crate-private.
        if rel.starts_with("sys/") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for name in public_names(line) {
                if kernel_names.contains(&(rel.as_str(), name.as_str())) {
                    continue;
                }
                if let Some(why) = breaks_vocabulary(&name) {
                    broken.push(format!("src/{rel}:{}: `{name}`: {why}", i + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "names that break the vocabulary:\n{}",
        broken.join("\n")
    );
}

/// Why `name` breaks the vocabulary, or `None`.
fn breaks_vocabulary(name: &str) -> Option<&'static str> {
    let words: Vec<&str> = name.split('_').collect();
    if name != "msg_zerocopy" && name.contains("zerocopy") || name.contains("Zerocopy") {
        return Some("spell it zero_copy / ZeroCopy");
    }
    if words.contains(&"zc") || camel_words(name).contains(&"Zc") {
        return Some("spell it zero_copy / ZeroCopy, not zc");
    }
    if words.contains(&"stats") || camel_words(name).contains(&"Stats") {
        return Some("kernel statistics are `statistics` / `Statistics`");
    }
    let counted = ["bytes", "pages", "calls"];
    let how = ["mapped", "copied", "sent", "received", "loaned", "returned"];
    if words
        .windows(2)
        .any(|w| counted.contains(&w[0]) && how.contains(&w[1]))
    {
        return Some("the counted thing goes last: mapped_bytes, not bytes_mapped");
    }
    None
}

/// The words of a CamelCase name.
fn camel_words(name: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = 0;
    for (i, c) in name.char_indices().skip(1) {
        if c.is_ascii_uppercase() {
            words.push(&name[start..i]);
            start = i;
        }
    }
    words.push(&name[start..]);
    words
}

/// The public names a line declares: `pub fn`, `pub` fields, types, traits and constants.
fn public_names(line: &str) -> Vec<String> {
    let Some(mut rest) = line.trim_start().strip_prefix("pub ") else {
        return Vec::new();
    };
    let ident = |s: &str| {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        s[..end].to_owned()
    };
    // Qualifiers before `fn` (`const` only there: `pub const NAME` is a constant).
    for q in ["const ", "async ", "unsafe "] {
        if let Some(r) = rest.strip_prefix(q)
            && (q != "const " || r.starts_with("fn ") || r.starts_with("unsafe fn "))
        {
            rest = r;
        }
    }
    for kw in [
        "fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "mod ",
    ] {
        if let Some(r) = rest.strip_prefix(kw) {
            return vec![ident(r)];
        }
    }
    // A field: `pub name: Type`.
    let name = ident(rest);
    if !name.is_empty() && rest[name.len()..].starts_with(':') {
        return vec![name];
    }
    Vec::new()
}

fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn the_vocabulary_check_catches_what_it_should() {
    for bad in [
        "zerocopy_bytes",
        "zc_calls",
        "send_zc_x",
        "Stats",
        "stats",
        "bytes_mapped",
        "ZcCounters",
    ] {
        assert!(breaks_vocabulary(bad).is_some(), "{bad}");
    }
    for good in [
        "zero_copy_bytes",
        "loaned_calls",
        "mapped_bytes",
        "msg_zerocopy",
        "ZeroCopySender",
        "statistics",
    ] {
        assert!(breaks_vocabulary(good).is_none(), "{good}");
    }
    assert_eq!(public_names("    pub mapped_bytes: u64,"), ["mapped_bytes"]);
    assert_eq!(
        public_names("    pub async fn wait_returned(&mut self)"),
        ["wait_returned"]
    );
    assert_eq!(public_names("pub const fn new(x: u8)"), ["new"]);
    assert!(public_names("pub(crate) fn x()").is_empty());
}
