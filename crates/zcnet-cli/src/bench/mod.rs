//! `zcnet bench`: each bench in its own module, all sharing the flags and the report of
//! [`crate::measure`]. Without a name, the suite: every bench in a short mode, then one summary
//! table, a row per seed experiment.
//!
//! This module only dispatches. What the benches share lives in leaf modules that they import,
//! never here (a bench that used its parent would close an import cycle with this dispatch):
//! [`common`] (the flags), [`outcome`] (the report and the summary rows, as shown), `labs`
//! (labs or a remote host), [`sweep`] (the labs of the send benches, which `zcnet tune`
//! shares), [`engine`] (what the sending benches share: the plan, the settings, the
//! alternation, the results and the summary rows) and [`heat`] (whether a pool is hot).

pub mod async_serve;
pub mod common;
pub mod engine;
pub mod file_tx;
pub mod heat;
pub mod iperf3;
mod labs;
pub mod outcome;
pub mod packet;
pub mod packet_tx;
pub mod peek;
pub mod reference;
pub mod relay;
mod suite;
pub mod sweep;
pub mod tcp_rx;
mod tcpdump;
pub mod tx;
pub mod udp_gso;
pub mod uring_tx;
pub mod verdict;

use common::Common;
pub use heat::{Heat, PoolHeat};

/// Options of `zcnet bench`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Opt {
    #[command(subcommand)]
    name: Option<Name>,
    #[command(flatten)]
    common: Common,
    /// The suite only: a directory holding builds of the kernel's own programs (`.ci/selftests
    /// DIR` builds them: tcp_mmap, msg_zerocopy, io_uring_zerocopy_tx, udpgso_bench_tx), run
    /// beside the steps of their seeds with a summary row per mode, zcnet's CPU per MB over the
    /// program's. tcp-rx then does not read the bytes, as tcp_mmap does not.
    #[arg(long, value_name = "DIR")]
    selftests: Option<std::path::PathBuf>,
}

/// The benches.
#[derive(Debug, clap::Subcommand)]
enum Name {
    /// TCP zero-copy receive (TCP_ZEROCOPY_RECEIVE) vs recv into a 512 KiB buffer.
    TcpRx(tcp_rx::Opt),
    /// UDP MSG_ZEROCOPY sends vs plain sends (sink, veth, loopback labs).
    UdpTx(tx::Opt),
    /// TCP MSG_ZEROCOPY sends vs plain sends, with the adaptive policy (loopback, veth labs).
    TcpTx(tx::Opt),
    /// A file in page cache over loopback: sendfile, splice, mmap + MSG_ZEROCOPY vs read + send.
    FileTx(file_tx::Opt),
    /// io_uring SEND vs SEND_ZC vs SEND_ZC with registered buffers (UDP into the sink, TCP over
    /// loopback and veth).
    UringTx(uring_tx::Opt),
    /// UDP GSO trains (UDP_SEGMENT) by copy, MSG_ZEROCOPY and io_uring SEND_ZC vs one send
    /// per datagram and sendmmsg (sink, sink without segmentation offload, veth to a GRO
    /// receiver); --reference PATH runs the kernel's udpgso_bench_tx beside it.
    UdpGso(udp_gso::Opt),
    /// The SO_PEEK_OFF relay against the discard-buffer fallback, rate-limited veth lab.
    Peek(peek::Opt),
    /// `zcnet relay`'s event loops against a tokio copy_bidirectional relay and the relay
    /// before them: CPU per MB, round trips, memory and descriptors, 1 to the descriptor
    /// ceiling's worth of connections (loopback).
    Relay(relay::Opt),
    /// Packet capture in the veth lab: the TPACKET_V3 RX ring vs recvfrom per packet vs
    /// tcpdump, frames of 64, 512 and 1500 bytes.
    Packet(packet::Opt),
    /// Sending frames: sendmmsg vs the TPACKET_V3 TX ring (with and without the qdisc bypass)
    /// vs AF_XDP TX, frames of 64, 512 and 1500 bytes counted where they arrive, veth lab.
    PacketTx(packet_tx::Opt),
    /// `zcnet iperf3` beside iperf3 itself: the receiver's CPU per MB against `iperf3 -s`,
    /// the sender's (auto, -Z, copy, zc, zc-fixed) against `iperf3 -c` and `iperf3 -c -Z`, in
    /// a namespace whose loopback has MTU 61512.
    Iperf3(iperf3::Opt),
    /// An async (tokio) HTTP file server: zcnet's FileSender vs tokio::io::copy, 64 clients
    /// fetching 64 KiB and 16 MiB files across the veth lab.
    AsyncServe(async_serve::Opt),
}

impl Opt {
    /// Whether the bench builds labs (private namespaces): not with `--remote`, whose near side
    /// runs in this host's own namespace.
    pub fn builds_labs(&self) -> bool {
        self.common().remote.is_none()
    }

    fn common(&self) -> &Common {
        match &self.name {
            Some(Name::TcpRx(o)) => &o.common,
            Some(Name::UdpTx(o) | Name::TcpTx(o)) => &o.flags.sweep.common,
            Some(Name::FileTx(o)) => &o.common,
            Some(Name::UringTx(o)) => &o.flags.sweep.common,
            Some(Name::UdpGso(o)) => &o.common,
            Some(Name::Peek(o)) => &o.common,
            Some(Name::Relay(o)) => &o.common,
            Some(Name::Packet(o)) => &o.sweep.common,
            Some(Name::PacketTx(o)) => &o.common,
            Some(Name::AsyncServe(o)) => &o.common,
            Some(Name::Iperf3(o)) => &o.common,
            None => &self.common,
        }
    }
}

/// Runs one bench, or the suite.
pub fn run(opt: Opt) -> anyhow::Result<()> {
    let common = opt.common();
    common.use_profile()?;
    common.read_baseline()?;
    common.open_page()?;
    match opt.name {
        Some(Name::TcpRx(o)) => tcp_rx::run(o),
        Some(Name::UdpTx(o)) => tx::run(sweep::Proto::Udp, o),
        Some(Name::TcpTx(o)) => tx::run(sweep::Proto::Tcp, o),
        Some(Name::FileTx(o)) => file_tx::run(o),
        Some(Name::UringTx(o)) => uring_tx::run(o),
        Some(Name::UdpGso(o)) => udp_gso::run(o),
        Some(Name::Peek(o)) => peek::run(o),
        Some(Name::Relay(o)) => relay::run(o),
        Some(Name::Packet(o)) => packet::run(o),
        Some(Name::PacketTx(o)) => packet_tx::run(o),
        Some(Name::AsyncServe(o)) => async_serve::run(o),
        Some(Name::Iperf3(o)) => iperf3::run(o),
        None => suite::run(opt.common, opt.selftests.as_deref()),
    }
}
