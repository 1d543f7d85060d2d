//! rtnetlink requests (`netlink(7)`, `rtnetlink(7)`).

use std::io;
use std::os::fd::AsFd;

use super::abi;
use super::net::{recv, sendto, socket};

/// One request to rtnetlink (`netlink(7)`, `rtnetlink(7)`) from a new socket of the calling
/// thread's network namespace: sends `request` and reads the reply into `reply`, which the
/// kernel queues before `send` returns (it answers a `RTM_GET*` request in the sender's
/// context), so nothing waits. Returns the reply's length and the namespace's cookie
/// (`None` before Linux 5.14).
pub fn rtnetlink_ask(request: &[u8], reply: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let fd = socket(libc::AF_NETLINK, libc::SOCK_RAW, abi::NETLINK_ROUTE)?;
    let cookie = super::sockopt::netns_cookie(fd.as_fd()).ok();
    let sent = sendto(fd.as_fd(), request, 0, None)?;
    if sent != request.len() {
        return Err(io::Error::other("rtnetlink took part of the request"));
    }
    let n = recv(fd.as_fd(), reply, libc::MSG_DONTWAIT | libc::MSG_TRUNC)?;
    if n > reply.len() {
        return Err(io::Error::other(format!(
            "rtnetlink's reply of {n} bytes is larger than {}",
            reply.len()
        )));
    }
    Ok((n, cookie))
}
