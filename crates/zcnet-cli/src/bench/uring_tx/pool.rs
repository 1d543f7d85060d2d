//! The buffers `uring-tx` sends from: the pool condition ([`PoolSpec`]: hot, cold or a size),
//! the pool made for a size ([`make_pool`]), with the one page-aligned buffer the hot
//! condition's copy and zc send over and over, and the heat measured on it.

use anyhow::Context;
use netlab::pattern;
use zcnet::uring::{Mode, Pool};

use super::ring::CONFIG;

/// Buffers of a `hot` pool: two batches, one in the kernel while the other comes back.
pub const HOT_BUFFERS: usize = 2 * CONFIG.batch;

/// MiB of a `cold` pool.
pub const COLD_MIB: usize = 256;

/// MiB of the largest pool: `IORING_REGISTER_BUFFERS` takes at most 1 GiB per buffer (the
/// kernel answers `EFAULT` beyond), and the pool is registered as one.
pub const MAX_MIB: usize = 1024;

/// The pool a run sends from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolSpec {
    /// [`HOT_BUFFERS`] buffers.
    Hot,
    /// This many MiB of buffers (at least [`HOT_BUFFERS`] of them); `cold` is [`COLD_MIB`].
    Mib(usize),
}

impl PoolSpec {
    /// `hot`, `cold` or a whole number of MiB from 1 to [`MAX_MIB`].
    pub fn parse(s: &str) -> Result<PoolSpec, String> {
        match s {
            "hot" => Ok(PoolSpec::Hot),
            "cold" => Ok(PoolSpec::Mib(COLD_MIB)),
            _ => match s.parse::<usize>() {
                Ok(m) if (1..=MAX_MIB).contains(&m) => Ok(PoolSpec::Mib(m)),
                _ => Err(format!(
                    "{s:?}: give hot, cold (256 MiB) or a size in MiB from 1 to {MAX_MIB} (io_uring \
                     registers at most 1 GiB as one buffer)"
                )),
            },
        }
    }

    /// How the report names it: `hot`, `cold` (256 MiB) or `N MiB`.
    pub fn name(self) -> String {
        match self {
            PoolSpec::Hot => "hot".into(),
            PoolSpec::Mib(COLD_MIB) => "cold".into(),
            PoolSpec::Mib(m) => format!("{m} MiB"),
        }
    }

    /// Buffers of `size` bytes in this pool.
    pub fn buffers(self, size: usize) -> usize {
        let n = match self {
            PoolSpec::Hot => HOT_BUFFERS,
            PoolSpec::Mib(m) => (m << 20) / size.max(1),
        };
        n.max(HOT_BUFFERS)
    }
}

/// A pool and the window its buffers allow.
#[derive(Clone, Debug)]
pub(crate) struct SendPool {
    /// The buffers.
    pub pool: Pool,
    /// Requests in flight at most: the ring's window, and one less than the pool holds, so that
    /// a buffer is always back in hand when the window has room (the sender then waits for
    /// completions in the ring, never by polling for a free buffer).
    pub window: usize,
    /// In the `hot` condition: one buffer (the pool's first) that copy and zc send over and
    /// over, several requests of it in flight at once, as `io_uring_zerocopy_tx.c` sends its one
    /// buffer. zc-fixed (and auto, which registers the pool) send from the pool: their payload is
    /// never read by the CPU, so its heat does not enter their cost.
    pub shared: Option<&'static [u8]>,
}

impl SendPool {
    /// What `mode` sends from: the shared buffer or the pool.
    pub(super) fn shares(&self, mode: Mode) -> Option<&'static [u8]> {
        self.shared
            .filter(|_| matches!(mode, Mode::Copy | Mode::ZeroCopy))
    }
}

/// The pool for `size`-byte requests: `spec`'s buffers, filled with the pattern.
pub(crate) fn make_pool(size: usize, spec: PoolSpec) -> anyhow::Result<SendPool> {
    let count = spec.buffers(size);
    let pool = Pool::new(count, size).context("allocating the buffer pool")?;
    // Fill every buffer once (FIFO: acquiring them all and dropping them keeps the order).
    let all: Vec<_> = std::iter::from_fn(|| pool.acquire()).collect();
    for mut b in all {
        let off = (b.index() * size) as u64;
        let mut at = 0;
        while at < size {
            let chunk = pattern::chunk_at(off + at as u64, (size - at).min(pattern::MAX_CHUNK));
            b[at..at + chunk.len()].copy_from_slice(chunk);
            at += chunk.len();
        }
    }
    let shared = (spec == PoolSpec::Hot).then(|| {
        let first = pool.acquire().expect("a new pool has its buffers");
        let one = page_aligned(&first);
        drop(first);
        // Back in the pool's order: the first buffer goes last now, as after any send.
        one
    });
    Ok(SendPool {
        pool,
        window: CONFIG.window.min(count - 1),
        shared,
    })
}

/// The heat of `pool`, measured on its buffers in the order they are handed out.
pub(super) fn pool_heat(pool: &Pool) -> crate::bench::heat::PoolHeat {
    // Every buffer, then all back in the same order (FIFO: the order is kept).
    let all: Vec<_> = std::iter::from_fn(|| pool.acquire()).collect();
    let bufs: Vec<&[u8]> = all.iter().map(|b| &b[..]).collect();
    crate::bench::heat::PoolHeat::measure(pool.region_len().div_ceil(1 << 20), &bufs)
}

/// A page-aligned copy of `bytes` that lives as long as the process, made once per content: the
/// buffer the hot condition's copy and zc send. Aligned as `io_uring_zerocopy_tx.c` aligns its
/// one buffer: a zero-copy send pins and maps every page the buffer touches, and 8000 bytes at
/// an allocator's offset touch three pages where aligned they touch two.
fn page_aligned(bytes: &[u8]) -> &'static [u8] {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static MADE: Mutex<Option<HashMap<Vec<u8>, &'static [u8]>>> = Mutex::new(None);
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let made = made.get_or_insert_with(HashMap::new);
    if let Some(&one) = made.get(bytes) {
        return one;
    }
    const PAGE: usize = 4096;
    let room: &'static mut [u8] = Box::leak(vec![0u8; bytes.len() + PAGE].into_boxed_slice());
    let skip = (PAGE - room.as_ptr() as usize % PAGE) % PAGE;
    let one = &mut room[skip..skip + bytes.len()];
    one.copy_from_slice(bytes);
    let one: &'static [u8] = one;
    made.insert(bytes.to_vec(), one);
    one
}
