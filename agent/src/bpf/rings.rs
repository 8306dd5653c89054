//! The kernel's event ring buffers (bpf/*.bpf.h `*_events`) and their drain: the one way
//! events reach the agent. The CPU samples' ring is handed to the Profiler.
use std::{os::fd::AsRawFd as _, time::Duration};

use anyhow::Result;
use aya::{
    maps::{MapData, RingBuf},
    Ebpf,
};

use super::{conn as cn, handshake as hs, loader::take, proc::proc_notice, read_record, wire::WireEvent};

/// What the kernel reported since the last drain.
#[derive(Default)]
pub struct Events {
    pub wire: Vec<WireEvent>,
    pub handshakes: Vec<hs::hs_event>,
    pub conns: Vec<cn::conn_event>,
    pub notices: Vec<proc_notice>,
}

pub struct Rings {
    handshakes: RingBuf<MapData>,
    notices: RingBuf<MapData>,
    conns: RingBuf<MapData>,
    wire: RingBuf<MapData>,
    /// Handed to the Profiler (take_samples).
    samples: Option<RingBuf<MapData>>,
}

impl Rings {
    pub(super) fn open(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(Self {
            handshakes: take(ebpf, "hs_events")?,
            notices: take(ebpf, "proc_events")?,
            conns: take(ebpf, "conn_events")?,
            wire: take(ebpf, "wire_events")?,
            samples: Some(take(ebpf, "cpu_samples")?),
        })
    }

    /// Everything the ring buffers hold now.
    pub fn drain(&mut self) -> Events {
        Events {
            wire: drain_ring(&mut self.wire, WireEvent::decode),
            handshakes: drain_ring(&mut self.handshakes, read_record),
            conns: drain_ring(&mut self.conns, read_record),
            notices: drain_ring(&mut self.notices, read_record),
        }
    }

    /// Waits until a ring buffer has something to say, at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        let mut fds = [&self.handshakes, &self.notices, &self.conns, &self.wire].map(|r| libc::pollfd {
            fd: r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        // rounded up: a wait cut short of its deadline would find nothing due yet, and spin
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: fds is a valid array of pollfd for the length given.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    /// The CPU samples' ring buffer, for the Profiler (once).
    pub fn take_samples(&mut self) -> Option<RingBuf<MapData>> {
        self.samples.take()
    }
}

/// Reads every record of a ring buffer.
fn drain_ring<T>(ring: &mut RingBuf<MapData>, decode: impl Fn(&[u8]) -> Option<T>) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(item) = ring.next() {
        out.extend(decode(&item));
    }
    out
}
