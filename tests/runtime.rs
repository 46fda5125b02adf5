//! The runtime's threads as `[server]` sets them, read from the running
//! binary's `/proc` entries: `pin_workers` gives each worker a core of
//! its own.

use crate::common;

/// Starts `foldgate serve` with `server` added to its `[server]` section,
/// waits until it answers, and returns the cores each of its runtime
/// threads may run on (`Cpus_allowed_list` of every `tokio-rt-worker`).
async fn runtime_thread_cores(server: &str) -> Vec<String> {
    let served = common::serve_minimal(server, |_| {}).await;
    let child = &served.child;
    let pid = child.id().unwrap();
    let mut cores = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.trim() != "tokio-rt-worker" {
            continue;
        }
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        if let Some(list) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            cores.push(list.trim().to_string());
        }
    }
    cores
}

/// This process's own `Cpus_allowed_list`: what an unpinned thread gets.
fn allowed() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test]
async fn pin_workers_gives_each_worker_a_core_of_its_own() {
    let two = "worker_threads = 2";
    let unpinned = runtime_thread_cores(two).await;
    assert!(unpinned.len() >= 2, "two workers: {unpinned:?}");
    assert!(
        unpinned.iter().all(|c| *c == allowed()),
        "unpinned threads may run anywhere: {unpinned:?}"
    );
    let pinned = runtime_thread_cores(&format!("{two}\npin_workers = true")).await;
    assert!(pinned.len() >= 2, "two workers: {pinned:?}");
    for cores in &pinned {
        assert!(
            cores.parse::<usize>().is_ok(),
            "one core per thread, got {cores:?} in {pinned:?}"
        );
    }
    let mut distinct = pinned.clone();
    distinct.sort();
    distinct.dedup();
    let machine = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(
        distinct.len(),
        pinned.len().min(machine),
        "the workers take different cores: {pinned:?}"
    );
}
