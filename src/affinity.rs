//! `server.pin_workers`: each thread of the runtime pinned to a core of
//! its own, in turn, so that on a machine whose few cores foldgate shares
//! (with a local model server, a load generator) two workers never queue
//! for the same core while holding requests: the largest part of
//! foldgate's p99 on two busy cores (`docs/benchmarks.md`, "Passthrough
//! overhead").

use core_affinity::CoreId;
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
        if !core_affinity::set_for_current(CoreId { id: core }) {
            tracing::warn!(core, "a runtime thread could not be pinned to its core");
        }
    }
}

/// The cores the calling thread may run on (the process' affinity mask,
/// which a container's cpuset narrows), in order; none where that cannot
/// be read.
pub fn allowed_cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|core| core.id)
        .collect()
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
