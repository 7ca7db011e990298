//! How many threads the kernel's live-thread map holds when `--max-threads` is not given: room
//! for twice the threads alive now (at least [`FLOOR`]), as far as the system lets threads be
//! (`threads-max`, `pid_max`) and as far as a share of memory goes. The map is an array, so
//! every slot costs its memory from the start; threads beyond it are charged to scratch space
//! and counted as a full map. Its index by tid is sized by [`tid_index_size`].

use std::fs;

use topdown_common::thread::ThreadTotals;

use crate::pmu::sysfs::SysRoot;

/// The smallest map: what a desktop or a small server needs, 14 MB.
pub const FLOOR: u32 = 16_384;

/// The kernel's largest pid count (`PID_MAX_LIMIT` on 64-bit).
pub const PID_MAX_LIMIT: u32 = 4_194_304;

/// The map takes at most this share of the machine's memory by default (1/64: 1.6 %).
const MEMORY_SHARE: u64 = 64;

/// What one entry takes in the kernel: its slot of the array and its entry in the stack of
/// free slots (the index by tid is sized by `pid_max`, 4 bytes a tid, whatever the map's size).
const ENTRY_BYTES: u64 = size_of::<ThreadTotals>() as u64 + 4;

/// How many tids the kernel's index of thread slots holds: every tid below `kernel.pid_max`
/// and every tid alive now (threads born while `pid_max` was higher keep their tids when it is
/// lowered), at most [`PID_MAX_LIMIT`]. A tid beyond it is charged to scratch space and
/// counted as a full map.
pub fn tid_index_size() -> u32 {
    let pid_max = fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .unwrap_or(PID_MAX_LIMIT);
    let above_live = highest_live_tid().map_or(0, |tid| tid.saturating_add(1));
    pid_max.max(above_live).clamp(1, PID_MAX_LIMIT)
}

/// The highest tid alive now (`/proc/PID/task`), `None` where `/proc` cannot be read.
fn highest_live_tid() -> Option<u32> {
    let numbered = |dir: &str| -> Vec<u32> {
        fs::read_dir(dir).map_or_else(
            |_| Vec::new(),
            |entries| {
                entries
                    .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            },
        )
    };
    numbered("/proc")
        .into_iter()
        .flat_map(|pid| numbered(&format!("/proc/{pid}/task")))
        .max()
}

/// The map's size, and why when the default could not give the room it wanted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Entries of the live-thread map.
    pub threads: u32,
    /// Said on the first line when the room wanted did not fit (`None`: it did, or the user
    /// chose).
    pub short: Option<String>,
}

impl Capacity {
    /// `requested` as given, or the default for the system `sys` describes. A request for
    /// more threads than the system lets live (`threads-max`, `pid_max`), or whose map would
    /// take over half of the memory available, is refused with the most it could be.
    pub fn of(requested: Option<u32>, sys: &SysRoot) -> anyhow::Result<Self> {
        let read = |path: &str| -> Option<u64> {
            let text = fs::read_to_string(sys.path(path)).ok()?;
            text.split_whitespace().next()?.parse().ok()
        };
        let meminfo = |field: &str| -> Option<u64> {
            let text = fs::read_to_string(sys.path("proc/meminfo")).ok()?;
            let line = text.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        };
        let limit = [
            read("proc/sys/kernel/threads-max"),
            read("proc/sys/kernel/pid_max"),
            Some(u64::from(PID_MAX_LIMIT)),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(u64::from(PID_MAX_LIMIT));
        if let Some(threads) = requested {
            let threads_u64 = u64::from(threads);
            if threads_u64 > limit.max(u64::from(FLOOR)) {
                anyhow::bail!(
                    "--max-threads {threads}: this host lets at most {limit} threads live \
                     (kernel.threads-max, kernel.pid_max): give at most {limit}"
                );
            }
            if let Some(available_kb) = meminfo("MemAvailable:") {
                let most = available_kb * 1024 / 2 / ENTRY_BYTES;
                if threads_u64 > most.max(u64::from(FLOOR)) {
                    anyhow::bail!(
                        "--max-threads {threads}: its map would take {} MiB of kernel memory, \
                         over half of the {} MiB available: give at most {most}",
                        (threads_u64 * ENTRY_BYTES) >> 20,
                        available_kb >> 10
                    );
                }
            }
            return Ok(Self {
                threads,
                short: None,
            });
        }
        // /proc/loadavg's fourth field: runnable/total threads.
        let alive = fs::read_to_string(sys.path("proc/loadavg"))
            .ok()
            .and_then(|text| {
                let (_, total) = text.split_whitespace().nth(3)?.split_once('/')?;
                total.parse::<u64>().ok()
            });
        let memory_kb = meminfo("MemTotal:");
        let wanted = alive
            .map_or(u64::from(FLOOR), |n| (2 * n).next_multiple_of(1024))
            .clamp(u64::from(FLOOR), limit.max(u64::from(FLOOR)));
        let fits = memory_kb.map_or(u64::from(FLOOR), |kb| {
            kb * 1024 / MEMORY_SHARE / ENTRY_BYTES
        });
        if wanted <= fits {
            return Ok(Self {
                threads: wanted as u32,
                short: None,
            });
        }
        let threads = fits.max(u64::from(FLOOR)) as u32;
        let alive = alive.map_or_else(|| "?".to_owned(), |n| n.to_string());
        Ok(Self {
            threads,
            short: Some(format!(
                "the thread map holds {threads} threads ({alive} alive now, twice that would \
                 take over 1/{MEMORY_SHARE} of memory): threads beyond it are counted as a full \
                 map; --max-threads N for more"
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index holds this thread's tid and every tid below `pid_max`.
    #[test]
    fn the_tid_index_holds_every_live_tid_and_pid_max() {
        let size = tid_index_size();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert!(size > tid, "index of {size} tids, this thread is {tid}");
        let pid_max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            size >= pid_max.min(PID_MAX_LIMIT),
            "{size} < pid_max {pid_max}"
        );
        assert!(highest_live_tid().is_some_and(|high| high >= tid));
    }

    /// A system with `alive` threads, these limits and `memory_kb` of memory.
    fn system(alive: u64, threads_max: u64, pid_max: u64, memory_kb: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let kernel = dir.path().join("proc/sys/kernel");
        fs::create_dir_all(&kernel).unwrap();
        fs::write(
            dir.path().join("proc/loadavg"),
            format!("0.50 0.40 0.30 3/{alive} 12345\n"),
        )
        .unwrap();
        fs::write(kernel.join("threads-max"), format!("{threads_max}\n")).unwrap();
        fs::write(kernel.join("pid_max"), format!("{pid_max}\n")).unwrap();
        fs::write(
            dir.path().join("proc/meminfo"),
            format!("MemTotal:       {memory_kb} kB\nMemFree: 1 kB\n"),
        )
        .unwrap();
        dir
    }

    fn capacity(alive: u64, threads_max: u64, pid_max: u64, memory_kb: u64) -> Capacity {
        let dir = system(alive, threads_max, pid_max, memory_kb);
        Capacity::of(None, &SysRoot::at(dir.path())).unwrap()
    }

    const GIB_KB: u64 = 1 << 20;

    #[test]
    fn the_default_is_twice_the_threads_alive_within_the_systems_limits() {
        // A small machine: the floor.
        assert_eq!(capacity(300, 15_000, 32_768, 2 * GIB_KB).threads, FLOOR);
        // 100,000 threads on a large host: room for 200,704.
        let big = capacity(100_000, 2_000_000, 4_194_304, 256 * GIB_KB);
        assert_eq!((big.threads, big.short), (200_704, None));
        // Never beyond what the system lets live.
        assert_eq!(
            capacity(100_000, 150_000, 4_194_304, 256 * GIB_KB).threads,
            150_000
        );
        assert_eq!(
            capacity(100_000, 2_000_000, 131_072, 256 * GIB_KB).threads,
            131_072
        );
        // As given, within what the system lets live and half of the memory available.
        let dir = system(100_000, 150_000, 4_194_304, GIB_KB);
        let sys = SysRoot::at(dir.path());
        assert_eq!(Capacity::of(Some(7), &sys).unwrap().threads, 7);
        let error = Capacity::of(Some(4_194_304), &sys).unwrap_err().to_string();
        assert!(error.contains("give at most 150000"), "{error}");
        fs::write(
            dir.path().join("proc/meminfo"),
            "MemTotal: 1048576 kB\nMemAvailable: 262144 kB\n",
        )
        .unwrap();
        let most = 262_144 * 1024 / 2 / ENTRY_BYTES;
        let error = Capacity::of(Some(149_000), &sys).unwrap_err().to_string();
        assert!(
            error.contains(&format!("give at most {most}")) && error.contains("256 MiB"),
            "{error}"
        );
        assert!(Capacity::of(Some(most as u32), &sys).is_ok());
    }

    #[test]
    fn a_map_that_would_take_too_much_memory_is_cut_and_says_so() {
        // 60,000 threads on 4 GiB: 120,832 entries would take 114 MB, over 64 MB.
        let short = capacity(60_000, 2_000_000, 4_194_304, 4 * GIB_KB);
        let fits = (4 * GIB_KB * 1024 / MEMORY_SHARE / ENTRY_BYTES) as u32;
        assert_eq!(short.threads, fits);
        assert!(short.threads < 120_832 && short.threads > FLOOR);
        let line = short.short.expect("it says the map is short");
        assert!(
            line.contains(&format!("holds {fits} threads")) && line.contains("60000 alive"),
            "{line}"
        );
        assert!(line.contains("--max-threads"), "{line}");
        // Never under the floor, however little memory.
        assert_eq!(
            capacity(60_000, 2_000_000, 4_194_304, 256 * 1024).threads,
            FLOOR
        );
    }

    #[test]
    fn an_unreadable_system_gets_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let capacity = Capacity::of(None, &SysRoot::at(dir.path())).unwrap();
        assert_eq!(capacity.threads, FLOOR);
    }
}
