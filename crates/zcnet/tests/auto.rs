//! `Mode::Auto` of the sending mechanisms follows the profile in use (issue 17): a profile file
//! written as `zcnet tune` writes it changes what each sender does, per route, and completions
//! flagged "copied" make it back off to copying.

use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use zcnet::auto::{self, Profile, Route, SendPath, Threshold};
use zcnet::msg_zerocopy::{self, ZeroCopySender};

/// The profile is process-wide: the tests that install one take turns.
static PROFILE: Mutex<()> = Mutex::new(());

fn profile_file(name: &str, entries: &[(SendPath, Route, Threshold)]) -> PathBuf {
    let mut p = Profile::builtin();
    p.kernel = "test".into();
    p.date = "2026-11-23T00:00:00Z".into();
    for &(path, route, threshold) in entries {
        let e = p
            .entries
            .iter_mut()
            .find(|e| e.path == path && e.route == route)
            .unwrap();
        e.threshold = threshold;
        e.lab = "test".into();
    }
    let dir = std::env::temp_dir().join(format!("zcnet-auto-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("profile.toml");
    std::fs::write(&f, p.to_toml()).unwrap();
    f
}

fn udp_pair() -> (UdpSocket, UdpSocket) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    (tx, rx)
}

/// A `Mode::Auto` MSG_ZEROCOPY sender on `sock`.
fn auto_sender(sock: UdpSocket) -> ZeroCopySender<UdpSocket, Vec<u8>> {
    let config = msg_zerocopy::Config {
        mode: msg_zerocopy::Mode::Auto,
        ..Default::default()
    };
    ZeroCopySender::new(sock, config).unwrap()
}

/// Sends `sizes` on a fresh auto sender; returns its counters.
fn send_auto(sizes: &[usize]) -> (msg_zerocopy::Counters, zcnet::auto::Choice) {
    let (sock, rx) = udp_pair();
    let mut tx = auto_sender(sock);
    let mut buf = vec![0u8; 70_000];
    for &n in sizes {
        tx.send(vec![1u8; n]).map_err(|e| e.error).unwrap();
        // Keep the receive queue short: a queued datagram holds its zero-copy pages.
        rx.recv(&mut buf).unwrap();
    }
    tx.drain(Duration::from_secs(5)).unwrap();
    let choice = tx.auto_choice().unwrap().clone();
    (tx.counters(), choice)
}

#[test]
fn msg_zerocopy_auto_follows_the_profile_file() {
    let _turn = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    if msg_zerocopy::support().udp.status != zcnet::support::Status::Available {
        netlab::skip::skip("MSG_ZEROCOPY on UDP is not available here");
        return;
    }
    // Built in: never zero copy to a local socket.
    auto::set_profile(Profile::builtin());
    let (c, choice) = send_auto(&[600, 20_000, 60_000]);
    assert_eq!(choice.route, Route::Local);
    assert_eq!(choice.threshold, Threshold::Never);
    assert!(choice.origin.contains("built-in"), "{}", choice.origin);
    assert_eq!(c.auto.copy_calls, 3);
    assert_eq!(c.loaned_calls, 0);

    // A profile that says zero copy pays from 10000 B on local routes: 600 B copies, the first
    // large one goes by zero copy; loopback flags it copied, so the next ones back off.
    let f = profile_file(
        "udp",
        &[(
            SendPath::MsgZerocopyUdp,
            Route::Local,
            Threshold::From(10_000),
        )],
    );
    auto::set_profile(Profile::load(&f).unwrap());
    let (c, choice) = send_auto(&[600, 20_000]);
    assert_eq!(choice.threshold, Threshold::From(10_000));
    assert!(
        choice.origin.contains(f.to_str().unwrap()),
        "{}",
        choice.origin
    );
    assert_eq!((c.auto.copy_calls, c.auto.copy_bytes), (1, 600));
    assert_eq!(
        (c.auto.zero_copy_calls, c.auto.zero_copy_bytes),
        (1, 20_000)
    );
    assert_eq!(c.loaned_calls, 1);
    assert_eq!(c.completed_calls, 1);
    assert_eq!(c.copied_calls, 1, "loopback copies MSG_ZEROCOPY data");
    // After that copied completion, large sends copy for a while.
    let (sock, rx) = udp_pair();
    let mut tx = auto_sender(sock);
    let mut buf = vec![0u8; 70_000];
    tx.send(vec![1u8; 20_000]).map_err(|e| e.error).unwrap();
    rx.recv(&mut buf).unwrap();
    tx.drain(Duration::from_secs(5)).unwrap();
    for _ in 0..3 {
        tx.send(vec![1u8; 20_000]).map_err(|e| e.error).unwrap();
        rx.recv(&mut buf).unwrap();
    }
    let c = tx.counters();
    assert_eq!(c.auto.zero_copy_calls, 1);
    assert_eq!(c.auto.backoff_calls, 3);
    std::fs::remove_dir_all(f.parent().unwrap()).unwrap();
    auto::set_profile(Profile::builtin());
}

#[test]
fn a_veth_peer_is_a_device_route() {
    netlab::require_lab!();
    let lab = netlab::VethLab::new(None).unwrap();
    let peer = netlab::VethLab::addr(netlab::Side::B, netlab::Family::V4);
    let route = lab
        .ns(netlab::Side::A)
        .run(move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.connect((peer, 9)).unwrap();
            Route::of(&s)
        })
        .unwrap();
    assert_eq!(route, Some(Route::Device));
    // Its own address, in A, is local.
    let own = netlab::VethLab::addr(netlab::Side::A, netlab::Family::V4);
    let route = lab.ns(netlab::Side::A).run(move || Route::to(own)).unwrap();
    assert_eq!(route, Route::Local);
}

#[test]
fn uring_auto_follows_the_profile() {
    use zcnet::uring::{self, UringSender};
    let _turn = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    if uring::support().send_zc.status != zcnet::support::Status::Available {
        netlab::skip::skip("io_uring SEND_ZC is not available here");
        return;
    }
    let f = profile_file(
        "uring",
        &[(SendPath::UringZc, Route::Local, Threshold::From(4000))],
    );
    auto::set_profile(Profile::load(&f).unwrap());
    let (sock, rx) = udp_pair();
    let mut tx = UringSender::<_, Vec<u8>>::new(
        sock,
        uring::Config {
            mode: uring::Mode::Auto,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(tx.auto_choice().unwrap().threshold, Threshold::From(4000));
    let mut buf = vec![0u8; 70_000];
    tx.send(vec![1u8; 1000]).map_err(|e| e.error).unwrap();
    tx.send(vec![1u8; 8000]).map_err(|e| e.error).unwrap();
    tx.drain(Duration::from_secs(5)).unwrap();
    for _ in 0..2 {
        rx.recv(&mut buf).unwrap();
    }
    let c = tx.counters();
    assert_eq!((c.auto.copy_calls, c.auto.zero_copy_calls), (1, 1));
    assert_eq!(c.zero_copy_requests, 1);
    assert_eq!(c.requests, 2);
    std::fs::remove_dir_all(f.parent().unwrap()).unwrap();
    auto::set_profile(Profile::builtin());
}

#[test]
fn file_auto_copies_files_below_the_sendfile_threshold() {
    use std::io::Read;
    use zcnet::file::{self, FileSender};
    let _turn = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    let f = profile_file(
        "file",
        &[(SendPath::Sendfile, Route::Local, Threshold::From(100_000))],
    );
    auto::set_profile(Profile::load(&f).unwrap());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        got
    });
    let small = f.with_file_name("small");
    let large = f.with_file_name("large");
    std::fs::write(&small, vec![3u8; 5000]).unwrap();
    std::fs::write(&large, vec![4u8; 200_000]).unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    let mut tx = FileSender::new(&sock, file::Config::default()).unwrap();
    if tx.mode() == file::Mode::Copy {
        netlab::skip::skip("neither sendfile nor splice works here");
        return;
    }
    tx.send_file(&std::fs::File::open(&small).unwrap(), 0, 5000)
        .unwrap();
    assert_eq!(tx.used(), file::Mode::Copy);
    tx.send_file(&std::fs::File::open(&large).unwrap(), 0, 200_000)
        .unwrap();
    assert_eq!(tx.used(), tx.mode());
    let c = tx.counters();
    assert_eq!((c.auto.copy_calls, c.auto.zero_copy_calls), (1, 1));
    assert_eq!(c.zero_copy_bytes, 200_000);
    drop(tx);
    sock.shutdown(std::net::Shutdown::Write).unwrap();
    let got = reader.join().unwrap();
    assert_eq!(got.len(), 205_000);
    assert!(got[..5000].iter().all(|&b| b == 3) && got[5000..].iter().all(|&b| b == 4));
    std::fs::remove_dir_all(f.parent().unwrap()).unwrap();
    auto::set_profile(Profile::builtin());
}

/// Sends `phases` of (size, count) into the sink with `send`, checking after each what the
/// sender's learner says; returns the choice after each phase.
fn size_switch(
    mut send: impl FnMut(usize),
    choice: &dyn Fn() -> auto::Choice,
    counters: &dyn Fn() -> auto::AutoCounters,
    phases: &[(usize, u64)],
) -> Vec<auto::Choice> {
    let class_of = |c: &auto::Choice, len: usize| {
        c.classes
            .iter()
            .find(|k| k.from <= len && k.to.is_none_or(|t| len < t))
            .cloned()
    };
    let mut out: Vec<auto::Choice> = Vec::new();
    let mut total = 0;
    for &(len, n) in phases {
        let before = out.last().and_then(|c| class_of(c, len));
        let round = (auto::LEARNING.round_bytes / len).clamp(
            auto::LEARNING.round_sends.0 as usize,
            auto::LEARNING.round_sends.1 as usize,
        ) as u64;
        // A pair dropped because the load changed across it (`DRIFT_MAX`: a noisy guest, or
        // another test's sender beside this one) is measured again: a class that has not
        // learned by the end of the phase gets two more rounds for each pair dropped in it,
        // up to four times the phase. On a 2-vCPU guest a pair of the 600 B class (its rounds
        // take a few ms) is dropped now and then; three of its first five, too many for the
        // fixed phase this test had, failed it once in a fresh-machine run, and once in 30 runs
        // of the file beside other load.
        let dropped_before = counters().discarded_pairs;
        let (mut sent, mut target) = (0, n);
        while sent < target {
            send(len);
            sent += 1;
            if sent == target && !class_of(&choice(), len).is_some_and(|k| k.learned) {
                let dropped = counters().discarded_pairs - dropped_before;
                target = (n + 2 * dropped * round).min(4 * n);
            }
        }
        total += sent;
        let n = sent;
        let c = choice();
        let k = class_of(&c, len).expect("the class that sent is reported");
        // A class learns within the first pairs: each an exploit and an explore round, the
        // exploit round that closes the last, and the send that measures it; two more rounds
        // for each pair dropped.
        let again = 2 * counters().discarded_pairs;
        let bound = (2 * auto::LEARNING.first_pairs as u64 + 1 + again) * round + 1;
        assert!(
            k.learned,
            "{len} B: not learned in {n} sends: {c}; {:?}",
            counters()
        );
        assert!(k.decided_after.unwrap() <= bound, "{len} B: {c}");
        match before {
            // A class that learned before keeps what it learned: nothing to learn again.
            Some(b) => {
                assert_eq!(k.decided_after, b.decided_after, "{len} B: {c}");
                assert_eq!(k.sends, b.sends + n);
            }
            None => assert_eq!(k.sends, n),
        }
        // The way agrees with the measure, within the hysteresis.
        let m = k.zero_copy_over_copy.unwrap();
        if k.zero_copy {
            assert!(m < 1.0 + auto::LEARNING.hysteresis, "{c}");
        } else {
            assert!(m > 1.0 - auto::LEARNING.hysteresis, "{c}");
        }
        let [lo, hi] = k.spread.unwrap();
        assert!(lo <= m && m <= hi);
        println!("after {n} sends of {len} B: {c}; {:?}", counters());
        out.push(c);
    }
    let a = counters();
    assert_eq!(a.zero_copy_calls + a.copy_calls + a.backoff_calls, total);
    let explored: u64 = out
        .last()
        .unwrap()
        .classes
        .iter()
        .map(|k| k.explore_sends)
        .sum();
    assert_eq!(a.explore_calls, explored);
    assert_eq!(a.backoffs, 0, "the sink does not copy: {a:?}");
    out
}

/// 600 B, then 64000 B, then 600 B again into the sink: each size class learns its way
/// within its first pairs, and a class met again sends as it learned.
#[test]
fn auto_follows_a_size_switch_in_the_sink() {
    netlab::require_lab!();
    let _turn = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    auto::set_profile(Profile::builtin());
    let lab = netlab::SinkLab::new().unwrap();
    let target = std::net::SocketAddr::new(netlab::SinkLab::target(netlab::Family::V4), 9);
    let socket = || {
        lab.ns
            .run(move || {
                let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                s.connect(target).unwrap();
                s
            })
            .unwrap()
    };
    let phases = [(600, 12_000), (64_000, 2_000), (600, 3_000)];
    static DATA: [u8; 64_000] = [0x5a; 64_000];

    if msg_zerocopy::support().udp.status == zcnet::support::Status::Available {
        let tx = std::cell::RefCell::new(
            ZeroCopySender::<_, &'static [u8]>::new(
                socket(),
                msg_zerocopy::Config {
                    mode: msg_zerocopy::Mode::Auto,
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        let mut sent = 0u64;
        size_switch(
            |len| {
                let mut t = tx.borrow_mut();
                t.send(&DATA[..len]).map_err(|e| e.error).unwrap();
                sent += 1;
                if sent % 32 == 0 {
                    t.reap().unwrap();
                    t.returned().for_each(drop);
                }
            },
            &|| tx.borrow().auto_choice().unwrap(),
            &|| tx.borrow().counters().auto,
            &phases,
        );
        tx.borrow_mut().drain(Duration::from_secs(5)).unwrap();
    } else {
        netlab::skip::skip("MSG_ZEROCOPY on UDP is not available here");
    }

    use zcnet::uring::{self, UringSender};
    if uring::support().send_zc.status == zcnet::support::Status::Available {
        let tx = std::cell::RefCell::new(
            UringSender::<_, &'static [u8]>::new(
                socket(),
                uring::Config {
                    mode: uring::Mode::Auto,
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        size_switch(
            |len| {
                let mut t = tx.borrow_mut();
                t.send(&DATA[..len]).map_err(|e| e.error).unwrap();
                t.returned().for_each(drop);
            },
            &|| tx.borrow().auto_choice().unwrap(),
            &|| tx.borrow().counters().auto,
            &phases,
        );
        tx.borrow_mut().drain(Duration::from_secs(5)).unwrap();
    } else {
        netlab::skip::skip("io_uring SEND_ZC is not available here");
    }
}

/// Issue 47: another process competing for the sender's CPU (a busy loop on the same CPU, and on
/// the other) makes no class flap between ways: 8000 B into the sink for three seconds, the
/// class changes its way at most once (from the prior to what it measures), explores no more
/// than its rule allows, and exploring costs about what it aims to. The learner measures the
/// sending thread's own CPU time, which a competitor takes turns with but does not add to; the
/// pairs cancel what it does to the caches, and a pair across a change of load is dropped.
#[test]
fn a_competing_busy_loop_makes_no_class_flap() {
    netlab::require_lab!();
    if msg_zerocopy::support().udp.status != zcnet::support::Status::Available {
        return netlab::skip::skip("MSG_ZEROCOPY on UDP is not available here");
    }
    let _turn = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    auto::set_profile(Profile::builtin());
    let lab = netlab::SinkLab::new().unwrap();
    let target = std::net::SocketAddr::new(netlab::SinkLab::target(netlab::Family::V4), 9);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The competitors: a process spinning on every CPU this test may run on, ended by its id.
    let spinners: Vec<std::process::Child> = (0..cpus.min(2))
        .map(|cpu| {
            std::process::Command::new("taskset")
                .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
                .spawn()
                .expect("taskset (util-linux)")
        })
        .collect();
    let (choice, counters) = lab
        .ns
        .run(move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.connect(target).unwrap();
            let config = msg_zerocopy::Config {
                mode: msg_zerocopy::Mode::Auto,
                ..Default::default()
            };
            let mut tx = ZeroCopySender::<_, &'static [u8]>::new(s, config).unwrap();
            static DATA: [u8; 8000] = [0x5a; 8000];
            let start = std::time::Instant::now();
            let mut sent = 0u64;
            while start.elapsed() < Duration::from_secs(3) {
                tx.send(&DATA[..]).map_err(|e| e.error).unwrap();
                sent += 1;
                if sent % 32 == 0 {
                    tx.reap().unwrap();
                    tx.returned().for_each(drop);
                }
            }
            tx.drain(Duration::from_secs(5)).unwrap();
            (tx.auto_choice().unwrap(), tx.counters().auto)
        })
        .unwrap();
    for mut s in spinners {
        let _ = s.kill();
        let _ = s.wait();
    }
    let k = choice
        .classes
        .iter()
        .find(|k| k.from <= 8000 && k.to.is_none_or(|t| 8000 < t))
        .unwrap();
    assert!(k.learned, "{choice}");
    assert!(
        k.switches <= 1,
        "a class flapped under a busy loop: {choice} {counters:?}"
    );
    // One round in `explore_every` explores, give or take the first pairs.
    let rounds = k.sends as f64 / (auto::LEARNING.round_bytes / 8000) as f64;
    let allowed =
        2.0 * auto::LEARNING.first_pairs as f64 + rounds / f64::from(k.explore_every) + 2.0;
    let explored = k.explore_sends as f64 / (auto::LEARNING.round_bytes / 8000) as f64;
    assert!(
        explored <= allowed,
        "{explored} rounds explored, {allowed} allowed: {choice}"
    );
    println!(
        "{choice}: exploring cost {:.2} % of the sending CPU, {} pairs dropped for a change of load",
        100.0 * counters.explore_cost_share().unwrap_or(0.0),
        counters.discarded_pairs
    );
}
