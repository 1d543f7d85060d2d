//! The reply: what the destination sends, copied to the source as it comes by the same session,
//! without the peek cursor's guarantee (a reply cut by the destination's reset ends the
//! connection); its end passed on once read.

use std::io;
use std::net::Shutdown;
use std::os::fd::AsFd;

use super::super::ack::end_is_fin;
use super::Session;
use super::stash::{Flow, Reply, SCRATCH, Stash};
use crate::sys;

impl Session<'_> {
    /// Copies the destination's reply to the source until one side would block; passes the
    /// destination's FIN on once read. A destination's error is its failure (`failed`); a
    /// source that cannot be written to any more ended without its FIN (`source_reset`), which
    /// the forward direction passes on once every byte its TCP took is acknowledged.
    pub(super) fn backward(&mut self) {
        // Once the source has the destination's end, or its own connection is cut, nothing more
        // can reach it.
        if self.dest.is_none() || self.reply.done || self.source_reset.is_some() {
            return;
        }
        loop {
            if !self.reply.pending.is_empty() {
                let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
                let data = self.reply.pending.rest();
                let wrote = sys::net::sendto(self.cur.get_ref().as_fd(), data, flags, None);
                match self.source_wrote(wrote) {
                    Ok(w) => self.reply.pending.wrote(w),
                    Err(Flow::More) => {}
                    Err(Flow::Stop) => return,
                }
                continue;
            }
            // A short read took all there was: the next bytes bring an event of their own.
            if !self.reply_readable {
                return;
            }
            let flow = SCRATCH.with_borrow_mut(|buf| self.read_and_copy(buf));
            if let Flow::Stop = flow {
                return;
            }
        }
    }

    /// What a write of reply bytes to the source did: how many, or (`Err`) to try again
    /// (`More`) or stop (`Stop`: the source would block, or is cut, which `source_reset` keeps).
    fn source_wrote(&mut self, wrote: io::Result<usize>) -> Result<usize, Flow> {
        match wrote {
            Ok(w) => Ok(w),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(Flow::Stop),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(Flow::More),
            Err(e) => {
                self.source_reset = Some(e);
                self.reply.pending = Stash::default();
                Err(Flow::Stop)
            }
        }
    }

    /// Reads the reply into `buf` and writes it to the source; keeps what the write left.
    fn read_and_copy(&mut self, buf: &mut [u8]) -> Flow {
        let dest = self.dest.as_ref().expect("connected");
        let n = match sys::net::recv(dest.stream.as_fd(), buf, libc::MSG_DONTWAIT) {
            Ok(0) => {
                if end_is_fin(&dest.stream, self.destination_shut) {
                    self.source_shut = true;
                    self.reply = Reply {
                        done: true,
                        ..Reply::default()
                    };
                    let _ = self.cur.get_ref().shutdown(Shutdown::Write);
                } else {
                    self.failed = Some("connection reset".to_owned());
                }
                return Flow::Stop;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.reply_readable = false;
                return Flow::Stop;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Flow::More,
            Err(e) => {
                self.failed = Some(e.to_string());
                return Flow::Stop;
            }
        };
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        if n < buf.len() && !self.reply_end_seen {
            self.reply_readable = false;
        }
        let mut at = 0;
        while at < n {
            let wrote = sys::net::sendto(self.cur.get_ref().as_fd(), &buf[at..n], flags, None);
            match self.source_wrote(wrote) {
                Ok(w) => at += w,
                Err(Flow::More) => {}
                Err(Flow::Stop) if self.source_reset.is_some() => return Flow::Stop,
                Err(Flow::Stop) => break,
            }
        }
        if at < n {
            self.reply.pending = Stash {
                bytes: buf[at..n].to_vec(),
                at: 0,
            };
            return Flow::Stop;
        }
        Flow::More
    }
}
