//! The memory of `AF_PACKET` `TPACKET_V3` rings (`Documentation/networking/packet_mmap.rst`),
//! classic BPF filters compiled by libpcap (`pcap_compile(3PCAP)`) and `SO_ATTACH_FILTER`.
//!
//! A ring is one shared mapping that the kernel writes into concurrently. Ownership passes by a
//! status word: an RX block is the application's while `block_status` has `TP_STATUS_USER`, a
//! TX frame while `tp_status` is `TP_STATUS_AVAILABLE` (or `WRONG_FORMAT`). Status words are read
//! with acquire and written with release ordering; a slice of a block or frame exists only
//! while the application owns it, borrowed from a guard that hands it back when dropped.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use super::abi::{self, SockFilter};
use super::mm::Mmap;

/// A mapped `TPACKET_V3` ring: `count` slots of `slot_size` bytes (RX blocks or TX frames).
#[derive(Debug)]
pub struct Ring {
    map: Mmap,
    slot_size: usize,
    count: usize,
}

impl Ring {
    /// Maps the ring set up on `fd` by `PACKET_RX_RING` or `PACKET_TX_RING` (`mmap(2)` of
    /// `slot_size * count` bytes, read-write, shared).
    ///
    /// # Safety
    /// At most one `Ring` may map a socket's ring: the guards it lends (`&mut` views of blocks
    /// and frames) assume no other mapping of the same pages in this process. The caller maps
    /// the ring of a packet socket it just created, once.
    pub unsafe fn map(fd: BorrowedFd<'_>, slot_size: usize, count: usize) -> io::Result<Ring> {
        if slot_size < abi::TPACKET_BLOCK_DESC_LEN || slot_size % 8 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring slots must be at least 48 bytes and 8-aligned",
            ));
        }
        let len = slot_size
            .checked_mul(count)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "ring too large"))?;
        let map = Mmap::shared(fd, len, libc::PROT_READ | libc::PROT_WRITE)?;
        Ok(Ring {
            map,
            slot_size,
            count,
        })
    }

    /// Number of slots.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Size of a slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// The status word at `offset` of slot `i`.
    fn status(&self, i: usize, offset: usize) -> &AtomicU32 {
        assert!(i < self.count && offset + 4 <= self.slot_size && offset % 4 == 0);
        let addr = self.map.addr() + i * self.slot_size + offset;
        // SAFETY: `addr` lies inside the mapping (checked above), is 4-aligned (the mapping is
        // page-aligned, slot sizes and offsets are multiples of 4), and the kernel accesses the
        // word atomically too; AtomicU32 has the layout of u32.
        unsafe { &*(addr as *const AtomicU32) }
    }

    /// RX: whether the kernel handed block `i` to the application (`TP_STATUS_USER`).
    pub fn is_user(&self, i: usize) -> bool {
        self.status(i, abi::TPACKET_BLOCK_STATUS_OFF)
            .load(Ordering::Acquire)
            & abi::TP_STATUS_USER
            != 0
    }

    /// RX: block `i` if the kernel handed it to the application; dropping the guard hands it
    /// back, so only take it to read it ([`Ring::is_user`] only looks).
    pub fn user_block(&mut self, i: usize) -> Option<UserBlock<'_>> {
        self.is_user(i).then_some(UserBlock { ring: self, i })
    }

    /// TX: frame `i` if it is free to fill (`TP_STATUS_AVAILABLE` or `TP_STATUS_WRONG_FORMAT`).
    pub fn free_frame(&mut self, i: usize) -> Option<TxFrame<'_>> {
        let status = self
            .status(i, abi::TPACKET3_STATUS_OFF)
            .load(Ordering::Acquire);
        matches!(status, abi::TP_STATUS_KERNEL | abi::TP_STATUS_WRONG_FORMAT)
            .then_some(TxFrame { ring: self, i })
    }

    /// TX: the status of frame `i` (`TP_STATUS_*`).
    pub fn frame_status(&self, i: usize) -> u32 {
        self.status(i, abi::TPACKET3_STATUS_OFF)
            .load(Ordering::Acquire)
    }
}

/// An RX block the application owns; handed back to the kernel (`TP_STATUS_KERNEL`) on drop.
#[derive(Debug)]
pub struct UserBlock<'a> {
    ring: &'a mut Ring,
    i: usize,
}

impl UserBlock<'_> {
    /// The whole block, header included.
    pub fn bytes(&self) -> &[u8] {
        let addr = self.ring.map.addr() + self.i * self.ring.slot_size;
        // SAFETY: the block lies inside the mapping; the kernel does not write a block while
        // its status says TP_STATUS_USER (read with acquire in `user_block`), and the status
        // goes back to the kernel only in `drop`, after every borrow of `self` ended.
        unsafe { std::slice::from_raw_parts(addr as *const u8, self.ring.slot_size) }
    }
}

impl Drop for UserBlock<'_> {
    fn drop(&mut self) {
        self.ring
            .status(self.i, abi::TPACKET_BLOCK_STATUS_OFF)
            .store(abi::TP_STATUS_KERNEL, Ordering::Release);
    }
}

/// A free TX frame; [`TxFrame::submit`] marks it `TP_STATUS_SEND_REQUEST`, dropping it leaves
/// it free.
#[derive(Debug)]
pub struct TxFrame<'a> {
    ring: &'a mut Ring,
    i: usize,
}

impl TxFrame<'_> {
    /// Room for the packet: the frame after its `tpacket3_hdr`.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let addr = self.ring.map.addr() + self.i * self.ring.slot_size + abi::TPACKET3_HDR_LEN;
        let len = self.ring.slot_size - abi::TPACKET3_HDR_LEN;
        // SAFETY: inside the mapping; the kernel does not touch a frame whose status is
        // AVAILABLE or WRONG_FORMAT (checked with acquire in `free_frame`) until `submit`
        // publishes it, which consumes this guard and so ends this borrow first.
        unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
    }

    /// Publishes the first `len` bytes of [`TxFrame::data_mut`] for the next send kick.
    pub fn submit(self, len: usize) {
        let len = len.min(self.ring.slot_size - abi::TPACKET3_HDR_LEN) as u32;
        let base = self.ring.map.addr() + self.i * self.ring.slot_size;
        // SAFETY: the header's first 24 bytes (tp_next_offset .. tp_status) lie inside the
        // frame this guard owns; u32 fields at 4-aligned offsets.
        unsafe {
            // tp_next_offset: 0, V3 TX takes fixed-size frames only.
            (base as *mut u32).write_volatile(0);
            // tp_snaplen and tp_len.
            ((base + 12) as *mut u32).write_volatile(len);
            ((base + 16) as *mut u32).write_volatile(len);
        }
        self.ring
            .status(self.i, abi::TPACKET3_STATUS_OFF)
            .store(abi::TP_STATUS_SEND_REQUEST, Ordering::Release);
    }
}

#[repr(C)]
struct BpfProgram {
    bf_len: u32,
    bf_insns: *mut SockFilter,
}

/// The libpcap sonames tried, newest first (Debian ships `libpcap.so.0.8` as a link to
/// `libpcap.so.1`'s implementation in package `libpcap0.8`).
pub const LIBPCAP_NAMES: [&str; 2] = ["libpcap.so.1", "libpcap.so.0.8"];

/// Environment variable naming the library to load instead (a path or soname); tests point it
/// at a missing name to exercise the "libpcap is not installed" path.
pub const LIBPCAP_ENV: &str = "ZCNET_LIBPCAP";

type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type Compile =
    unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
type GetErr = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type FreeCode = unsafe extern "C" fn(*mut BpfProgram);
type Close = unsafe extern "C" fn(*mut c_void);

/// The five libpcap functions the filter compiler needs, resolved from a library loaded at run
/// time (`dlopen(3)`), so that neither building nor running zcnet needs libpcap until a filter
/// expression is compiled.
struct Libpcap {
    open_dead: OpenDead,
    compile: Compile,
    geterr: GetErr,
    freecode: FreeCode,
    close: Close,
    /// Keeps the library loaded while the function pointers above are used.
    _lib: libloading::Library,
}

/// Why libpcap could not be loaded: the names tried and the loader's last message.
#[derive(Clone, Debug)]
pub struct LibpcapMissing {
    /// The names tried, in order.
    pub tried: Vec<String>,
    /// The loader's message for the last of them.
    pub message: String,
}

impl Libpcap {
    fn load() -> Result<Libpcap, LibpcapMissing> {
        let names: Vec<String> = match std::env::var(LIBPCAP_ENV) {
            Ok(v) if !v.is_empty() => vec![v],
            _ => LIBPCAP_NAMES.iter().map(|s| (*s).to_owned()).collect(),
        };
        let mut message = String::new();
        for name in &names {
            // SAFETY: loading libpcap runs its initializers, which have no preconditions; the
            // symbols below are looked up with the C signatures of pcap/pcap.h (libpcap 0.8+).
            let loaded = unsafe {
                libloading::Library::new(name).and_then(|lib| {
                    Ok(Libpcap {
                        open_dead: *lib.get::<OpenDead>(b"pcap_open_dead\0")?,
                        compile: *lib.get::<Compile>(b"pcap_compile\0")?,
                        geterr: *lib.get::<GetErr>(b"pcap_geterr\0")?,
                        freecode: *lib.get::<FreeCode>(b"pcap_freecode\0")?,
                        close: *lib.get::<Close>(b"pcap_close\0")?,
                        _lib: lib,
                    })
                })
            };
            match loaded {
                Ok(l) => return Ok(l),
                Err(e) => message = e.to_string(),
            }
        }
        Err(LibpcapMissing {
            tried: names,
            message,
        })
    }

    /// The process's libpcap: loaded on first use, then cached (also a failure).
    fn get() -> Result<&'static Libpcap, LibpcapMissing> {
        static LIB: std::sync::OnceLock<Result<Libpcap, LibpcapMissing>> =
            std::sync::OnceLock::new();
        LIB.get_or_init(Libpcap::load)
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Whether libpcap loads (cached like every use of it).
pub fn libpcap_loaded() -> Result<(), LibpcapMissing> {
    Libpcap::get().map(drop)
}

/// `PCAP_NETMASK_UNKNOWN`.
const PCAP_NETMASK_UNKNOWN: u32 = 0xffff_ffff;

/// Why a filter did not compile.
#[derive(Clone, Debug)]
pub enum CompileError {
    /// libpcap is not installed (or not loadable).
    Missing(LibpcapMissing),
    /// libpcap's message about the expression.
    Expression(String),
}

/// Compiles a tcpdump expression for Ethernet frames captured up to `snaplen` bytes with
/// libpcap's compiler (`pcap_open_dead` + `pcap_compile`, optimized), libpcap loaded at run time.
pub fn compile_filter(expr: &str, snaplen: u32) -> Result<Vec<SockFilter>, CompileError> {
    let c = CString::new(expr)
        .map_err(|_| CompileError::Expression("the expression contains a NUL byte".to_owned()))?;
    let pcap = Libpcap::get().map_err(CompileError::Missing)?;
    let snaplen = c_int::try_from(snaplen).unwrap_or(c_int::MAX);
    // SAFETY: plain call; the handle is checked for NULL and closed below.
    let p = unsafe { (pcap.open_dead)(abi::LINKTYPE_ETHERNET as c_int, snaplen) };
    if p.is_null() {
        return Err(CompileError::Expression("pcap_open_dead failed".to_owned()));
    }
    let mut prog = BpfProgram {
        bf_len: 0,
        bf_insns: std::ptr::null_mut(),
    };
    // SAFETY: `p` is a live handle, `prog` a valid out-parameter, `c` NUL-terminated.
    let r = unsafe { (pcap.compile)(p, &mut prog, c.as_ptr(), 1, PCAP_NETMASK_UNKNOWN) };
    let out = if r != 0 {
        // SAFETY: pcap_geterr returns the handle's NUL-terminated message, valid until close.
        Err(CompileError::Expression(
            unsafe { CStr::from_ptr((pcap.geterr)(p)) }
                .to_string_lossy()
                .into_owned(),
        ))
    } else if prog.bf_insns.is_null() {
        Err(CompileError::Expression(
            "pcap_compile returned no program".to_owned(),
        ))
    } else {
        // SAFETY: on success `bf_insns` points at `bf_len` instructions owned by `prog`,
        // copied out before pcap_freecode releases them. bpf_insn and sock_filter share
        // their layout (u16, u8, u8, u32).
        let v = unsafe { std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize) }.to_vec();
        // SAFETY: `prog` was filled by a successful pcap_compile.
        unsafe { (pcap.freecode)(&mut prog) };
        Ok(v)
    };
    // SAFETY: `p` came from pcap_open_dead and is closed once.
    unsafe { (pcap.close)(p) };
    out
}
