//! Termination signals: undo every journalled change, then end as the
//! signal would have ended the process.
//!
//! # Mechanism
//!
//! [`install`] sets a handler for SIGINT, SIGTERM, SIGHUP and SIGQUIT that
//! only writes the signal's number to a pipe (the one thing a handler may
//! safely do), and starts a watcher thread that reads it. Restoring knobs
//! and removing tracefs instances means opening and writing files, which a
//! signal handler must not do, but an ordinary thread may.
//!
//! The watcher, for each signal:
//!
//! - while a workload's process group is registered ([`forward_to_group`],
//!   `mmlab record`): the first signal is forwarded to the group (the
//!   workload ends as it would have without mmlab, and the recording is
//!   completed), the second kills the group with SIGKILL (a workload that
//!   ignores SIGINT), the third ends mmlab;
//! - while a [`StopGuard`] lives (`mmlab fuzz`): the first signal only
//!   asks for a stop ([`stop_requested`]): the loop ends its current step
//!   and reports where it stopped; the next signal is handled as below;
//! - otherwise: undoes every change in the journal ([`crate::journal`],
//!   newest first, holding the journal's lock so that no change is made
//!   after the undo), restores the signal's default action and sends it to
//!   the process again, so that the exit status says which signal ended it
//!   (a shell shows 128 + its number).
//!
//! A child forked without `exec` inherits the handler; it checks whose pid
//! it runs in and takes the default action in a child. `exec` resets
//! handlers, so workloads see the signals as usual. SIGKILL cannot be
//! caught: after one, the next mmlab process restores the journal.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, Once};

/// The signals that end mmlab through the watcher.
pub const HANDLED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The pid that installed the handler; 0 before [`install`].
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// The write end of the watcher's pipe; -1 before [`install`].
static PIPE_W: AtomicI32 = AtomicI32::new(-1);
static INSTALL: Once = Once::new();

/// The registered workload group and how many signals it was sent.
#[derive(Debug)]
struct Forward {
    pgid: i32,
    nr_signals: u32,
    first: Option<libc::c_int>,
}

static FORWARD: Mutex<Option<Forward>> = Mutex::new(None);

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: getpid, signal, raise and write are async-signal-safe; the
    // byte written lives on this handler's stack.
    unsafe {
        if libc::getpid() != OWNER_PID.load(Ordering::Relaxed) {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
            return;
        }
        let b = sig as u8;
        let fd = PIPE_W.load(Ordering::Relaxed);
        if fd >= 0 {
            libc::write(fd, (&b as *const u8).cast(), 1);
        }
    }
}

/// Installs the handlers and starts the watcher (once per process; later
/// calls do nothing). The binary calls it first thing; a library never does.
pub fn install() -> std::io::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| result = install_once());
    result
}

fn install_once() -> std::io::Result<()> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // A full pipe must not block a handler: the signals already in it are
    // enough to act on.
    // SAFETY: F_SETFL on our own descriptor.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    OWNER_PID.store(std::process::id() as i32, Ordering::Relaxed);
    PIPE_W.store(fds[1], Ordering::Relaxed);
    let rd = fds[0];
    std::thread::Builder::new()
        .name("mmlab-signals".into())
        .spawn(move || watch(rd))?;
    for sig in HANDLED {
        // SAFETY: a zeroed sigaction is "no flags, empty mask"; the handler
        // only does async-signal-safe calls.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

fn watch(rd: libc::c_int) {
    loop {
        let mut b = 0u8;
        // SAFETY: reads one byte into b from our own pipe.
        let n = unsafe { libc::read(rd, (&mut b as *mut u8).cast(), 1) };
        if n != 1 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let sig = libc::c_int::from(b);
        if forwarded(sig) || deferred(sig) {
            continue;
        }
        terminate(sig);
    }
}

/// Forwards `sig` to the registered group, or kills it; `false` when mmlab
/// itself must end.
fn forwarded(sig: libc::c_int) -> bool {
    let mut g = FORWARD.lock().unwrap_or_else(|p| p.into_inner());
    let Some(f) = g.as_mut() else {
        return false;
    };
    f.nr_signals += 1;
    f.first.get_or_insert(sig);
    let (pgid, n) = (f.pgid, f.nr_signals);
    drop(g);
    match n {
        1 => {
            eprintln!("mmlab: {}: passed on to the workload", signal_name(sig));
            // SAFETY: kill with plain integers.
            unsafe { libc::kill(-pgid, sig) };
            true
        }
        2 => {
            eprintln!(
                "mmlab: {} again: killing the workload (another one ends mmlab)",
                signal_name(sig)
            );
            // SAFETY: kill with plain integers.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            true
        }
        _ => false,
    }
}

/// Undoes the journal and ends the process by `sig`.
fn terminate(sig: libc::c_int) -> ! {
    let (_journal, done) = crate::journal::undo_all_for_exit();
    // The workload group too, if one is registered and not yet journalled.
    if let Some(f) = FORWARD.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        // SAFETY: kill with plain integers.
        unsafe { libc::kill(-f.pgid, libc::SIGKILL) };
    }
    let failed: Vec<_> = done.iter().filter(|(_, r)| r.is_err()).collect();
    for (c, r) in &failed {
        if let Err(e) = r {
            eprintln!("mmlab: {}: COULD NOT RESTORE {c}: {e}", signal_name(sig));
        }
    }
    let nr_state = done
        .iter()
        .filter(|(c, _)| !matches!(c, crate::journal::Change::TempFile { .. }))
        .count();
    if nr_state > 0 {
        eprintln!(
            "mmlab: {}: restored {} change(s) to the system before exiting",
            signal_name(sig),
            nr_state - failed.len().min(nr_state)
        );
    }
    // SAFETY: restoring the default action and sending the signal to this
    // process; `_journal` stays locked until the process is gone.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::kill(libc::getpid(), sig);
        // The default action of every handled signal ends the process; this
        // is only reached if it was blocked in every other thread.
        libc::sleep(1);
        libc::_exit(128 + sig);
    }
}

/// The signal's name, e.g. `SIGTERM`.
pub fn signal_name(sig: libc::c_int) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGKILL => "SIGKILL".into(),
        n => format!("signal {n}"),
    }
}

/// While the returned guard lives, termination signals go to the process
/// group `pgid` first (see the module doc). Without [`install`] (a library
/// caller), nothing is forwarded: the caller's own handling applies.
#[must_use = "forwarding stops when the guard is dropped"]
pub struct ForwardGuard(());

/// Registers the workload's process group for forwarding.
pub fn forward_to_group(pgid: i32) -> ForwardGuard {
    *FORWARD.lock().unwrap_or_else(|p| p.into_inner()) = Some(Forward {
        pgid,
        nr_signals: 0,
        first: None,
    });
    ForwardGuard(())
}

impl ForwardGuard {
    /// The first signal forwarded so far, if any.
    pub fn interrupted_by(&self) -> Option<libc::c_int> {
        FORWARD
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|f| f.first)
    }
}

impl Drop for ForwardGuard {
    fn drop(&mut self) {
        *FORWARD.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// [`STOP`] while no [`StopGuard`] lives.
const STOP_OFF: i32 = 0;
/// [`STOP`] while a [`StopGuard`] lives and no signal came.
const STOP_ARMED: i32 = -1;
/// [`STOP_OFF`], [`STOP_ARMED`], or the signal that asked for a stop.
static STOP: AtomicI32 = AtomicI32::new(STOP_OFF);

/// Takes `sig` as a request to stop when a [`StopGuard`] lives and no
/// signal came before; `false` when mmlab must end now.
fn deferred(sig: libc::c_int) -> bool {
    let asked = STOP
        .compare_exchange(STOP_ARMED, sig, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    if asked {
        eprintln!(
            "mmlab: {}: stopping after the current step (send it again to stop at once)",
            signal_name(sig)
        );
    }
    asked
}

/// While the returned guard lives, the first termination signal only asks
/// the process to stop ([`stop_requested`]), so that a long loop (`mmlab
/// fuzz`) ends its current step and says where it stopped; a second one
/// ends the process as usual (the journal undone). Without [`install`], no
/// signal is seen here.
#[must_use = "signals end the process again when the guard is dropped"]
pub struct StopGuard(());

/// Arms the stop request (see [`StopGuard`]).
pub fn stop_on_signal() -> StopGuard {
    STOP.store(STOP_ARMED, Ordering::SeqCst);
    StopGuard(())
}

/// The signal that asked for a stop while a [`StopGuard`] lives, if any.
pub fn stop_requested() -> Option<libc::c_int> {
    let s = STOP.load(Ordering::SeqCst);
    (s > 0).then_some(s)
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        STOP.store(STOP_OFF, Ordering::SeqCst);
    }
}

/// Sends `sig` to the process `pid` (a negative `pid`: to the process group
/// `-pid`), as `kill(2)` does.
pub fn send(pid: i32, sig: libc::c_int) -> std::io::Result<()> {
    // SAFETY: kill with plain integers.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether [`install`] ran in this process.
pub fn installed() -> bool {
    OWNER_PID.load(Ordering::Relaxed) == std::process::id() as i32
}
