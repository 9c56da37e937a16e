//! Resource limits of this process.

/// Caps this process's address space at `bytes` (`RLIMIT_AS`): an
/// allocation beyond it fails (Rust then aborts) instead of growing into
/// the host's swap. The fuzzers use it so that an input that makes memory
/// grow without bound ends the run at once, on a shared host.
pub fn limit_address_space(bytes: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass; it changes only this
    // process's limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
