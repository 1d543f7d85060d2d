//! The far side of `async-serve`: HTTP clients fetching the pattern file, every read bounded
//! by the run's time, bytes and session.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use netlab::pattern::Verifier;

use super::bounds::{Bounds, far, work};
use crate::measure::{Far, Meter};

/// How often a fetch looks at its time and its session while no read returns.
const WATCH: Duration = Duration::from_millis(50);

/// HTTP clients fetching the pattern file on one current-thread runtime (this thread). Every
/// read is bounded (see [`Bounded`]), and a watch ends the fetch while none returns: a client
/// whose server answers nothing, or never ends a body, holds `zcnet serve` no longer than the
/// run's time, bytes and session (it held it until the body's end, if ever, before).
pub(super) fn fetch(
    addr: SocketAddr,
    clients: usize,
    size: u64,
    bounds: &Bounds,
) -> anyhow::Result<Far> {
    use std::sync::atomic::AtomicU64;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let bytes = AtomicU64::new(0);
    let moved = AtomicU64::new(0);
    let files = AtomicU64::new(0);
    let bad = std::sync::Mutex::new(None::<u64>);
    let meter = Meter::start();
    let seconds = bounds.seconds;
    let result = rt.block_on(async {
        let one = || async {
            let s = tokio::net::TcpStream::connect(addr)
                .await
                .with_context(|| format!("connecting to {addr}"))?;
            let mut s = tokio::io::BufReader::new(Bounded {
                inner: s,
                moved: &moved,
                bounds,
            });
            let start = Instant::now();
            while start.elapsed().as_secs_f64() < seconds {
                let mut v = Verifier::new();
                let (code, len) = crate::file_server::fetch(&mut s, "f", |p| {
                    v.check(p);
                    bytes.fetch_add(p.len() as u64, Ordering::Relaxed);
                })
                .await?;
                anyhow::ensure!(code == 200, "the client's server answered {code}");
                anyhow::ensure!(len == size, "a body of {len} bytes, not {size}");
                if let Some(at) = v.first_bad() {
                    bad.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(at);
                }
                files.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        };
        let watch = async {
            loop {
                tokio::time::sleep(WATCH).await;
                if let Err(e) = bounds.check(moved.load(Ordering::Relaxed)) {
                    return e;
                }
            }
        };
        let all: Vec<_> = (0..clients).map(|_| one()).collect();
        // The watch ending drops every client: their connections close with them.
        tokio::select! {
            outcomes = join_all(all) => outcomes.into_iter().collect::<anyhow::Result<Vec<()>>>(),
            e = watch => Err(e),
        }
    });
    result?;
    let run = meter.finish(work(bytes.load(Ordering::Relaxed)));
    let first_bad = *bad.lock().unwrap_or_else(|e| e.into_inner());
    let mut f = far(&run, files.load(Ordering::Relaxed), None);
    f.verified = Some(first_bad.is_none());
    f.first_bad = first_bad;
    Ok(f)
}

/// A fetch's connection whose every read counts against the run's byte limit (heads
/// included: all a client's server sends is moved) and fails once the run is past its time
/// or bytes or its session broke: an endless body is cut at the limit, mid-file.
struct Bounded<'a> {
    inner: tokio::net::TcpStream,
    /// Bytes read by every connection of the fetch.
    moved: &'a std::sync::atomic::AtomicU64,
    bounds: &'a Bounds<'a>,
}

impl tokio::io::AsyncRead for Bounded<'_> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let moved = this.moved.load(Ordering::Relaxed);
        if let Err(e) = this.bounds.check(moved) {
            return std::task::Poll::Ready(Err(std::io::Error::other(format!("{e:#}"))));
        }
        // One byte past the limit at most: enough for the next read to say it was passed.
        let room = (this.bounds.max_bytes - moved).saturating_add(1);
        let want = buf
            .remaining()
            .min(usize::try_from(room).unwrap_or(usize::MAX));
        let mut part = tokio::io::ReadBuf::new(buf.initialize_unfilled_to(want));
        std::task::ready!(std::pin::Pin::new(&mut this.inner).poll_read(cx, &mut part))?;
        let n = part.filled().len();
        buf.advance(n);
        this.moved.fetch_add(n as u64, Ordering::Relaxed);
        std::task::Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Bounded<'_> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Awaits every future on this one task (they borrow the run's counters, so they are not
/// spawned); each wake polls those not done, few enough here (at most --max-clients).
async fn join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::with_capacity(futs.len());
    let mut pinned: Vec<_> = futs.into_iter().map(Box::pin).map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for slot in &mut pinned {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        out.push(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out
}
