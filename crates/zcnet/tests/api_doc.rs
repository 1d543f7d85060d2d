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
