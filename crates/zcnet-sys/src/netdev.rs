//! A device's name and offload features: `ioctl(SIOCGIFNAME)` and `ioctl(SIOCETHTOOL)` with
//! `ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS` and `ETHTOOL_GFEATURES` (`linux/ethtool.h`, the
//! features since Linux 2.6.39), asked on a socket so that the names are its network
//! namespace's.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::abi;
use super::cvt;

/// More feature bits than any kernel has (6.x has about 70): a reply beyond is not believed.
const MAX_FEATURES: u32 = 4096;

/// The features of a device, as the kernel reports them: the names (`ETH_GSTRING_LEN` bytes
/// each, NUL-padded, in bit order) and one `active` word per 32 bits.
#[derive(Debug)]
pub struct Features {
    pub names: Vec<u8>,
    pub active: Vec<u32>,
}

/// `ifr` naming `iface`, or `InvalidInput` for a name the kernel cannot hold.
fn ifreq(iface: &str) -> io::Result<libc::ifreq> {
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name",
        ));
    }
    // SAFETY: ifreq is plain data for which all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &b) in ifr.ifr_name.iter_mut().zip(name) {
        *d = b as libc::c_char;
    }
    Ok(ifr)
}

/// One `SIOCETHTOOL` call on `fd` for `iface` with the command buffer at `data`, whose first
/// word is the command.
///
/// # Safety
/// `data` must be writable for everything the kernel writes for that command, which is the
/// kernel's to size, not the caller's (`ETHTOOL_GSTRINGS` writes as many names as the kernel
/// counts in the set, whatever `len` says): the callers size it from the kernel's own counts.
pub unsafe fn ethtool<T>(fd: BorrowedFd<'_>, iface: &str, data: *mut T) -> io::Result<()> {
    let mut ifr = ifreq(iface)?;
    ifr.ifr_ifru.ifru_data = data.cast();
    // SAFETY: `ifr` names the interface (NUL-terminated, zeroed) and points at `data`, which
    // the caller guarantees holds what the command writes; both live across the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), abi::SIOCETHTOOL, &mut ifr) }).map(drop)
}

/// `struct ethtool_sset_info` with room for one count (`data[]`), asked for one string set.
#[repr(C)]
struct SsetInfo {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    data: [u32; 1],
}

/// The features of `iface` in the namespace of the socket `fd`.
pub fn ethtool_features(fd: BorrowedFd<'_>, iface: &str) -> io::Result<Features> {
    let mask = 1u64 << abi::ETH_SS_FEATURES;
    let mut info = SsetInfo {
        cmd: abi::ETHTOOL_GSSET_INFO,
        reserved: 0,
        sset_mask: mask,
        data: [0],
    };
    // SAFETY: the kernel writes the header and one count per bit set in `sset_mask` (one),
    // which `SsetInfo` holds.
    unsafe { ethtool(fd, iface, &mut info) }?;
    if info.sset_mask & mask == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no feature names (abi::ETHTOOL_GSSET_INFO)",
        ));
    }
    let count = info.data[0];
    if count == 0 || count > MAX_FEATURES {
        return Err(io::Error::other(format!(
            "abi::ETHTOOL_GSSET_INFO says {count} features"
        )));
    }
    let n = count as usize;
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    let mut strings = vec![0u32; 3 + n * abi::ETH_GSTRING_LEN / 4];
    strings[0] = abi::ETHTOOL_GSTRINGS;
    strings[1] = abi::ETH_SS_FEATURES;
    strings[2] = count;
    // SAFETY: the kernel writes the 12-byte header and as many names as the set has, the
    // count it gave just above (the features set is fixed when the kernel is built), which
    // `strings` holds.
    unsafe { ethtool(fd, iface, strings.as_mut_ptr()) }?;
    let got = (strings[2] as usize).min(n);
    let names: Vec<u8> = strings[3..]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .take(got * abi::ETH_GSTRING_LEN)
        .collect();
    // struct ethtool_gfeatures { u32 cmd; u32 size; struct { u32 available, requested,
    // active, never_changed; } features[]; }: `size` blocks in, the kernel's count out.
    let words = n.div_ceil(32);
    let mut features = vec![0u32; 2 + 4 * words];
    features[0] = abi::ETHTOOL_GFEATURES;
    features[1] = words as u32;
    // SAFETY: the kernel writes the 8-byte header and at most `size` (`words`) blocks of four
    // words, which `features` holds.
    unsafe { ethtool(fd, iface, features.as_mut_ptr()) }?;
    let blocks = (features[1] as usize).min(words);
    let active = (0..blocks).map(|b| features[2 + 4 * b + 2]).collect();
    Ok(Features { names, active })
}

/// `ioctl(SIOCGIFNAME)`: the name of device `index` in the namespace of the socket `fd`.
pub fn if_name(fd: BorrowedFd<'_>, index: u32) -> io::Result<String> {
    // SAFETY: ifreq is plain data for which all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    ifr.ifr_ifru.ifru_ifindex = index as libc::c_int;
    // SAFETY: `ifr` is a valid ifreq the kernel fills (its name) for SIOCGIFNAME; it lives
    // across the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), abi::SIOCGIFNAME, &mut ifr) })?;
    Ok(super::process::c_string(&ifr.ifr_name))
}
