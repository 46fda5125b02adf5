//! `server.pin_workers`: each thread of the runtime pinned to a core of
//! its own, in turn, so that on a machine whose few cores foldgate shares
//! (with a local model server, a load generator) two workers never queue
//! for the same core while holding requests: the largest part of
//! foldgate's p99 on two busy cores (`docs/benchmarks.md`, "Passthrough
//! overhead").

use std::sync::atomic::{AtomicUsize, Ordering};

/// What a runtime thread calls when it starts: pins it to the next of
/// the cores the process may run on (workers start first, so with as many
/// workers as cores each has its own). Does nothing where pinning is not
/// supported or the allowed cores cannot be read.
pub fn pinning() -> impl Fn() + Send + Sync + 'static {
    let cores = allowed_cores();
    let next = AtomicUsize::new(0);
    move || {
        if cores.is_empty() {
            return;
        }
        let core = cores[next.fetch_add(1, Ordering::Relaxed) % cores.len()];
        if let Err(e) = pin_current_thread(core) {
            tracing::warn!(core, error = %e, "a runtime thread could not be pinned to its core");
        }
    }
}

/// The cores this process may run on (its affinity mask, which a
/// container's cpuset narrows), in order.
#[cfg(target_os = "linux")]
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain bits, valid zeroed; `sched_getaffinity`
    // writes at most `size_of::<cpu_set_t>()` bytes into it, and CPU_ISSET
    // reads it within bounds for every index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        let all = usize::try_from(libc::CPU_SETSIZE).unwrap_or(0);
        (0..all).filter(|&cpu| libc::CPU_ISSET(cpu, &set)).collect()
    }
}

/// Not on this platform: no cores to pin to.
#[cfg(not(target_os = "linux"))]
pub fn allowed_cores() -> Vec<usize> {
    Vec::new()
}

#[cfg(target_os = "linux")]
fn pin_current_thread(core: usize) -> std::io::Result<()> {
    // SAFETY: as in `allowed_cores`; `core` comes from the allowed set, so
    // below CPU_SETSIZE. Pid 0 is the calling thread.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if set == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn pin_current_thread(_core: usize) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn threads_are_pinned_in_turn_to_the_allowed_cores() {
        let allowed = allowed_cores();
        assert!(!allowed.is_empty(), "this process may run somewhere");
        let pin = std::sync::Arc::new(pinning());
        let seen: Vec<Vec<usize>> = (0..allowed.len() + 1)
            .map(|_| {
                let pin = pin.clone();
                std::thread::spawn(move || {
                    pin();
                    allowed_cores()
                })
                .join()
                .unwrap_or_default()
            })
            .collect();
        let mut expected: Vec<Vec<usize>> = allowed.iter().map(|&c| vec![c]).collect();
        expected.push(vec![allowed[0]]);
        assert_eq!(seen, expected, "one core each, in turn, then round again");
        assert_eq!(allowed_cores(), allowed, "the calling thread is untouched");
    }
}
