//! The memory of an `AF_XDP` socket (`Documentation/networking/af_xdp.rst`): the UMEM, an area
//! of this process the kernel writes received frames into and reads sent frames from, and four
//! single-producer single-consumer rings shared with the kernel (fill and completion of UMEM
//! frame addresses; RX and TX of `struct xdp_desc`).
//!
//! Ownership of a UMEM frame passes through the rings, and [`Xsk`] keeps the safe side of it: a
//! frame is the application's only between leaving a ring (RX or completion) and entering one
//! (fill or TX). Slices of frames exist only then: received frames are borrowed from an
//! [`RxBatch`] that gives them to the fill ring when dropped, and a frame to send is written
//! while it is in the free list, before its descriptor enters the TX ring. A ring's producer and
//! consumer indices are read with acquire and written with release ordering, as libxdp does.

mod queues;
mod ring;
mod rx;
mod socket;
mod tx;
mod umem;

pub use queues::rx_queues;
pub use rx::RxBatch;
pub use socket::Xsk;
pub use umem::{Bound, Geometry, SocketError, Umem};
