//! The kernel's thread records (exits, cgroup moves), drained from their ring buffer as it
//! fills by a thread of their own, so a slow renderer or a burst of exits never fills it.

use std::{
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, AtomicU8, Ordering},
    },
    thread::JoinHandle,
};

use anyhow::{Context as _, Result};
use aya::maps::{MapData, RingBuf};

use topdown_common::neighbours::WaitBehind;

use super::snapshot::ThreadRecord;
use crate::privileges::Phase;

/// How long the drain thread sleeps when neither the kernel nor [`RecordStream`] wakes it. The
/// kernel wakes it once a quarter of the ring waits, so this only bounds how long a few records
/// sit there; each snapshot drains the ring itself. Every wake-up costs the tool CPU whether or
/// not anything came (20 ms, 50 wake-ups a second, was a tenth of its CPU on a host with 30,000
/// mostly idle threads: BENCHMARKS.md). Requests (drop privileges, stop) wake it at once.
const POLL_MS: i32 = 100;

/// The ring and what was drained from it, behind one lock: the drain thread and
/// [`RecordStream::take`] are its two consumers, never at the same time.
struct Inner {
    ring: RingBuf<MapData>,
    pending: Vec<ThreadRecord>,
    /// Each pending record's split of its waits, by its place in `pending`.
    pending_splits: Vec<WaitBehind>,
    /// Slots per record.
    nr: usize,
}

// SAFETY: the ring's memory maps are owned by `ring` and only touched through it, with the
// mutex held; nothing in it is tied to the thread that created it.
unsafe impl Send for Inner {}

impl Inner {
    fn drain(&mut self) {
        while let Some(item) = self.ring.next() {
            // A record shorter than the set's is not ours to guess at; the kernel writes whole
            // records, so this does not happen.
            if let Some((record, split)) = ThreadRecord::decode(&item, self.nr) {
                self.pending.push(record);
                self.pending_splits.push(split);
            }
        }
    }
}

/// `RecordStream::drop_asked`: no request, or the [`Phase`] asked for.
const NOTHING_ASKED: u8 = 0;
const BOUNDING: u8 = 1;
const ALL: u8 = 2;

/// Records the kernel sent, collected in the background.
pub struct RecordStream {
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Asks the thread to drop its capabilities; it answers on `privileges_gone`.
    drop_asked: Arc<AtomicU8>,
    privileges_gone: std::sync::mpsc::Receiver<Result<()>>,
    /// Wakes the thread for a request (an eventfd it polls beside the ring).
    wake: Arc<OwnedFd>,
}

impl RecordStream {
    /// Starts draining `ring`, whose records carry `nr` slots each.
    pub fn start(ring: RingBuf<MapData>, nr: usize) -> Result<Self> {
        let fd = ring.as_raw_fd();
        // SAFETY: eventfd takes no pointers; the result is checked.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(std::io::Error::last_os_error())
                .context("creating the record thread's wake-up eventfd");
        }
        // SAFETY: a new descriptor nothing else owns.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(wake) });
        let inner = Arc::new(Mutex::new(Inner {
            ring,
            pending: Vec::new(),
            pending_splits: Vec::new(),
            nr,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let drop_asked = Arc::new(AtomicU8::new(NOTHING_ASKED));
        let (dropped, privileges_gone) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("topdown-records".into())
            .spawn({
                let inner = Arc::clone(&inner);
                let stop = Arc::clone(&stop);
                let drop_asked = Arc::clone(&drop_asked);
                let wake = Arc::clone(&wake);
                move || {
                    // One atomic load per wake-up: the request is rare, the wake-ups are not.
                    drain_until_stopped([fd, wake.as_raw_fd()], &inner, &stop, || {
                        let phase = match drop_asked.swap(NOTHING_ASKED, Ordering::Relaxed) {
                            NOTHING_ASKED => return,
                            BOUNDING => Phase::Bounding,
                            _ => Phase::All,
                        };
                        let _ = dropped.send(crate::privileges::drop_this_thread(phase));
                    });
                }
            })
            .context("starting the thread that drains the kernel's thread records")?;
        Ok(Self {
            inner,
            stop,
            thread: Some(thread),
            drop_asked,
            privileges_gone,
            wake,
        })
    }

    /// Wakes the thread now (for a request it should not wait out a poll period for).
    fn wake(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. The thread empties it at each
        // wake; a refusal (EAGAIN, a counter near 2^64) would only lose this wake-up.
        unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Has the draining thread give up its capabilities of `phase` (it polls and reads mapped
    /// memory: it needs none); returns once it has (the thread is woken for it).
    pub fn drop_privileges(&self, phase: Phase) -> Result<()> {
        let asked = match phase {
            Phase::Bounding => BOUNDING,
            Phase::All => ALL,
        };
        self.drop_asked.store(asked, Ordering::Relaxed);
        self.wake();
        self.privileges_gone
            // Generous: an emulated guest beside others can stall a thread's wake-up for seconds.
            .recv_timeout(std::time::Duration::from_secs(10))
            .context("the record thread did not drop its privileges")?
            .context("the record thread")
    }

    /// Every record sent so far and not yet taken, in the order the kernel sent them, and
    /// their splits (by place).
    pub fn take(&self) -> (Vec<ThreadRecord>, Vec<WaitBehind>) {
        let mut inner = lock(&self.inner);
        inner.drain();
        (
            std::mem::take(&mut inner.pending),
            std::mem::take(&mut inner.pending_splits),
        )
    }
}

impl Drop for RecordStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic while draining leaves plain data behind: keep using it.
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits for the kernel's wake-up on `fds[0]`, a request's on `fds[1]` (an eventfd, emptied
/// here), or `POLL_MS`; drains, and again, until told to stop; `between` runs at every turn.
fn drain_until_stopped(
    fds: [RawFd; 2],
    inner: &Mutex<Inner>,
    stop: &AtomicBool,
    mut between: impl FnMut(),
) {
    while !stop.load(Ordering::Relaxed) {
        between();
        let mut poll = fds.map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: two valid pollfds; the fds stay open while `inner` holds the ring and the
        // caller the eventfd.
        unsafe { libc::poll(poll.as_mut_ptr(), 2, POLL_MS) };
        if poll[1].revents & libc::POLLIN != 0 {
            let mut count = 0u64;
            // SAFETY: reads the eventfd's 8-byte counter into a live u64.
            unsafe { libc::read(fds[1], (&raw mut count).cast(), 8) };
        }
        lock(inner).drain();
    }
}
