//! The server of the control protocol: one session at a time, every other client told it is
//! busy; a bad message ends its session with an `error` and the server accepts the next.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::far::{self, Signals};
use super::proto::{self, Limits, Message, ProtoError, VERSION};

/// How the server runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// What it accepts.
    pub limits: Limits,
    /// The shared token a client must send, if any.
    pub token: Option<String>,
    /// Longest wait for a client's next message between runs.
    pub idle: Duration,
    /// Stop after this many sessions (tests); `None`: serve forever.
    pub sessions: Option<u64>,
}

/// Serves clients on `listener` until `config.sessions` have been served (or forever).
///
/// # Errors
/// `accept` fails for a reason other than a client that went away.
pub fn serve(listener: &TcpListener, config: &Config) -> std::io::Result<()> {
    let busy = Arc::new(AtomicBool::new(false));
    let mut served = 0u64;
    let mut current: Option<std::thread::JoinHandle<()>> = None;
    loop {
        if config.sessions.is_some_and(|n| served >= n) {
            if let Some(h) = current.take() {
                let _ = h.join();
            }
            return Ok(());
        }
        let (conn, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EINTR)) => {
                continue;
            }
            Err(e) => return Err(e),
        };
        // A client that comes as the last one leaves (a bench's next invocation) is served.
        let since = std::time::Instant::now();
        while busy.load(Ordering::Acquire) && since.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if busy.swap(true, Ordering::AcqRel) {
            refuse(
                conn,
                peer,
                "busy: this server runs one client at a time; try again later",
            );
            continue;
        }
        if let Some(h) = current.take() {
            let _ = h.join();
        }
        served += 1;
        let (busy, config) = (Arc::clone(&busy), config.clone());
        current = Some(std::thread::spawn(move || {
            match session(conn, &config) {
                Ok(runs) => eprintln!("zcnet serve: [{peer}] done, {runs} runs"),
                Err(e) => eprintln!("zcnet serve: [{peer}] {e}"),
            }
            busy.store(false, Ordering::Release);
        }));
    }
}

/// Tells a client why it is not served, without waiting on it for long.
fn refuse(mut conn: TcpStream, peer: SocketAddr, why: &str) {
    let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = proto::write(
        &mut conn,
        &Message::Error {
            message: why.to_owned(),
        },
    );
    eprintln!("zcnet serve: [{peer}] refused: {why}");
}

/// Ends the session: sends `why` as an `error` (best effort) and returns it.
fn end(conn: &mut TcpStream, why: String) -> String {
    let _ = proto::write(
        conn,
        &Message::Error {
            message: why.clone(),
        },
    );
    why
}

/// One client: hello, then runs until `bye`, the end of the connection or an error.
fn session(mut conn: TcpStream, config: &Config) -> Result<u64, String> {
    let local = conn.local_addr().map_err(|e| e.to_string())?.ip();
    let peer = conn.peer_addr().map_err(|e| e.to_string())?.ip();
    let _ = conn.set_nodelay(true);
    let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
    // A client gets 10 s to say hello: a silent connection does not hold the server.
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    match proto::read(&mut conn) {
        Ok(Message::Hello { version, token }) => {
            if version != VERSION {
                return Err(end(
                    &mut conn,
                    format!("protocol version {version}: this server speaks {VERSION}"),
                ));
            }
            if let Some(want) = &config.token
                && !token.is_some_and(|t| proto::same_token(t.trim(), want))
            {
                return Err(end(
                    &mut conn,
                    "wrong or missing token (the server's --token-file)".to_owned(),
                ));
            }
        }
        Ok(other) => {
            return Err(end(
                &mut conn,
                format!("expected hello, got {}", name(&other)),
            ));
        }
        Err(e) => return Err(end(&mut conn, format!("hello: {e}"))),
    }
    let host = serde_json::to_value(crate::measure::HostInfo::this()).unwrap_or_default();
    let welcome = Message::Welcome {
        version: VERSION,
        host,
        limits: config.limits,
    };
    proto::write(&mut conn, &welcome).map_err(|e| e.to_string())?;
    let mut runs = 0u64;
    loop {
        let _ = conn.set_read_timeout(Some(config.idle));
        let (role, seconds) = match proto::read(&mut conn) {
            Ok(Message::Start { role, seconds }) => (role, seconds),
            Ok(Message::Bye) | Err(ProtoError::Closed) => return Ok(runs),
            Ok(other) => {
                return Err(end(
                    &mut conn,
                    format!("expected start or bye, got {}", name(&other)),
                ));
            }
            Err(e) => return Err(end(&mut conn, e.to_string())),
        };
        let prepared = far::prepare(&role, seconds, &config.limits, local, peer)
            .map_err(|e| end(&mut conn, crate::cli::one_line(&e)))?;
        proto::write(
            &mut conn,
            &Message::Ready {
                port: prepared.port,
            },
        )
        .map_err(|e| e.to_string())?;
        let signals = Signals::default();
        let max_bytes = config.limits.max_bytes;
        let outcome = std::thread::scope(|s| {
            let worker = s.spawn(|| prepared.run(seconds, max_bytes, &signals));
            // The client's finish comes when its side is over: within the run and its grace.
            let _ = conn.set_read_timeout(Some(
                Duration::from_secs_f64(seconds) + far::GRACE + Duration::from_secs(5),
            ));
            let told = proto::read(&mut conn);
            match &told {
                Ok(Message::Finish) => signals.finish.store(true, Ordering::Release),
                _ => signals.abort.store(true, Ordering::Release),
            }
            let far = worker
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the run's thread panicked")));
            (told, far)
        });
        match outcome {
            (Ok(Message::Finish), Ok(f)) => {
                runs += 1;
                eprintln!(
                    "zcnet serve: run {runs}: {} bytes, {} messages, {:.1} us/MB{}",
                    f.bytes,
                    f.messages,
                    f.cpu_us_per_mb,
                    match f.verified {
                        Some(true) => ", verified",
                        Some(false) => ", DIFFERENT BYTES",
                        None => "",
                    }
                );
                proto::write(&mut conn, &Message::Done(f)).map_err(|e| e.to_string())?;
            }
            (Ok(Message::Finish), Err(e)) => {
                return Err(end(&mut conn, crate::cli::one_line(&e)));
            }
            (Ok(other), _) => {
                return Err(end(
                    &mut conn,
                    format!("expected finish, got {}", name(&other)),
                ));
            }
            (Err(e), _) => return Err(end(&mut conn, format!("waiting for finish: {e}"))),
        }
    }
}

/// A message's name, for errors.
fn name(m: &Message) -> &'static str {
    match m {
        Message::Hello { .. } => "hello",
        Message::Welcome { .. } => "welcome",
        Message::Start { .. } => "start",
        Message::Ready { .. } => "ready",
        Message::Finish => "finish",
        Message::Done(_) => "done",
        Message::Error { .. } => "error",
        Message::Bye => "bye",
    }
}
