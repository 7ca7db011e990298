//! CPU stalls the kernel books per cgroup: time throttled by its `cpu.max` (`cpu.stat`'s
//! `nr_throttled`, `throttled_usec`: cgroup2 with the cpu controller) and CPU pressure
//! (`cpu.pressure`'s `some` and `full` totals: PSI). Each is the kernel's own count for the
//! cgroup's subtree, read from its directory once per window for every cgroup charged in the
//! window and each of its ancestors (so any grouping of a recording finds its roots), as deltas
//! since the previous read. A field the kernel does not provide (no cpu controller in the
//! unified hierarchy, no PSI, the root cgroup) is `None`: no number, never 0.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fs,
    path::Path,
    time::Duration,
};

use super::{Window, cgroups::CgroupNames};

/// One cgroup's CPU stalls: cumulative as read, or a window's growth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStalls {
    /// Periods in which its `cpu.max` quota ran out (`cpu.stat` `nr_throttled`).
    pub nr_throttled: Option<u64>,
    /// Time its runnable tasks were held back by that quota (`cpu.stat` `throttled_usec`).
    pub throttled: Option<Duration>,
    /// Time at least one of its tasks was runnable and waiting for a CPU (`cpu.pressure`
    /// `some` total).
    pub pressure_some: Option<Duration>,
    /// Time all of its non-idle tasks were runnable and waiting for a CPU at once
    /// (`cpu.pressure` `full` total; Linux 5.13 and newer).
    pub pressure_full: Option<Duration>,
}

impl CpuStalls {
    /// The stalls in `cpu_stat` and `cpu_pressure`, the texts of a cgroup's two files (`None`:
    /// the file is not there).
    pub fn parse(cpu_stat: Option<&str>, cpu_pressure: Option<&str>) -> Self {
        let stat = |key: &str| {
            cpu_stat?.lines().find_map(|line| {
                line.strip_prefix(key)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
        };
        let pressure = |kind: &str| {
            cpu_pressure?.lines().find_map(|line| {
                let rest = line.strip_prefix(kind)?.strip_prefix(' ')?;
                rest.split_whitespace()
                    .find_map(|field| field.strip_prefix("total=")?.parse().ok())
                    .map(Duration::from_micros)
            })
        };
        Self {
            nr_throttled: stat("nr_throttled"),
            throttled: stat("throttled_usec").map(Duration::from_micros),
            pressure_some: pressure("some"),
            pressure_full: pressure("full"),
        }
    }

    /// Whether the kernel provides any of them here.
    pub const fn any(&self) -> bool {
        self.nr_throttled.is_some()
            || self.throttled.is_some()
            || self.pressure_some.is_some()
            || self.pressure_full.is_some()
    }

    /// The growth from `before` to `self` (a counter that went back, a cgroup removed and made
    /// again at its path, starts over from 0); `None` where either lacks the field.
    pub fn since(&self, before: &Self) -> Self {
        fn grown<T: Copy + PartialOrd + std::ops::Sub<Output = T>>(
            now: Option<T>,
            before: Option<T>,
        ) -> Option<T> {
            let (now, before) = (now?, before?);
            Some(if now >= before { now - before } else { now })
        }
        Self {
            nr_throttled: grown(self.nr_throttled, before.nr_throttled),
            throttled: grown(self.throttled, before.throttled),
            pressure_some: grown(self.pressure_some, before.pressure_some),
            pressure_full: grown(self.pressure_full, before.pressure_full),
        }
    }

    /// Adds a later window's stalls (a field one of them lacks is the other's).
    pub fn add(&mut self, other: &Self) {
        fn sum<T: std::ops::Add<Output = T>>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            }
        }
        *self = Self {
            nr_throttled: sum(self.nr_throttled, other.nr_throttled),
            throttled: sum(self.throttled, other.throttled),
            pressure_some: sum(self.pressure_some, other.pressure_some),
            pressure_full: sum(self.pressure_full, other.pressure_full),
        };
    }
}

/// The most of a cgroup's `cpu.stat` or `cpu.pressure` read (each is a few hundred bytes).
const MOST_BYTES: usize = 16 * 1024;

/// Reads cgroups' two files relative to the cgroup2 mount's directory, which it holds open
/// (the files are opened and closed at each read): every window opens two
/// files of every charged cgroup and its ancestors (10,000 a second at 5,000 cgroups), and a
/// path walked from `/` with a `statx` before it was most of `serve`'s CPU (BENCHMARKS.md).
/// The files themselves are not kept open: each holds a page of the kernel's memory once read.
#[derive(Debug)]
struct StallFiles {
    mount: fs::File,
    /// The two files' texts, read into the same buffers every time.
    stat: Vec<u8>,
    pressure: Vec<u8>,
}

impl StallFiles {
    fn open(mount: &Path) -> Option<Self> {
        Some(Self {
            mount: fs::File::open(mount).ok()?,
            stat: Vec::with_capacity(1024),
            pressure: Vec::with_capacity(256),
        })
    }

    /// The stalls of the cgroup at `path` (`/`-rooted under the mount); a file that cannot be
    /// read (the cgroup was removed, no cpu controller, no PSI) is `None`.
    fn read(&mut self, path: &str) -> CpuStalls {
        let stat = read_at(&self.mount, path, "cpu.stat", &mut self.stat);
        let pressure = read_at(&self.mount, path, "cpu.pressure", &mut self.pressure);
        CpuStalls::parse(stat, pressure)
    }
}

/// `file` of the cgroup at `path` under `mount` (opened relative to it), at most
/// [`MOST_BYTES`] of it, read into `text`.
fn read_at<'t>(mount: &fs::File, path: &str, file: &str, text: &'t mut Vec<u8>) -> Option<&'t str> {
    use std::{
        io::Read as _,
        os::fd::{AsRawFd as _, FromRawFd as _},
    };
    let relative = match path.trim_start_matches('/') {
        "" => file.to_owned(),
        dir => format!("{dir}/{file}"),
    };
    let relative = std::ffi::CString::new(relative).ok()?;
    // SAFETY: a directory descriptor we hold and a NUL-terminated path.
    let fd = unsafe {
        libc::openat(
            mount.as_raw_fd(),
            relative.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor just opened, owned by nothing else: the File closes it.
    let opened = unsafe { fs::File::from_raw_fd(fd) };
    text.clear();
    opened.take(MOST_BYTES as u64).read_to_end(text).ok()?;
    std::str::from_utf8(text).ok()
}

/// Reads cgroups' stalls window by window, as deltas, and keeps their sums for the run.
#[derive(Debug)]
pub struct StallReader {
    files: Option<StallFiles>,
    /// Each path's latest cumulative reading.
    last: HashMap<String, CpuStalls>,
    /// Each path's stalls over the run so far (none kept for a session that never reports
    /// the run's totals).
    run: Option<BTreeMap<String, CpuStalls>>,
}

impl StallReader {
    /// Starts at the cgroup2 tree mounted at `mount` (none: nothing is read): every cgroup
    /// there now is read once, so a cgroup's first window counts from the start of the run,
    /// and one made later counts from its creation. With `run_totals`, each cgroup's sum over
    /// the run is kept for [`StallReader::run_totals`].
    pub fn start(mount: Option<&Path>, run_totals: bool) -> Self {
        let mut reader = Self {
            files: mount.and_then(StallFiles::open),
            last: HashMap::new(),
            run: run_totals.then(BTreeMap::new),
        };
        if let (Some(mount), Some(files)) = (mount, reader.files.as_mut()) {
            let mut dirs = vec![mount.to_path_buf()];
            while let Some(dir) = dirs.pop() {
                let path = relative(mount, &dir);
                let stalls = files.read(&path);
                reader.last.insert(path, stalls);
                if let Ok(entries) = fs::read_dir(&dir) {
                    dirs.extend(
                        entries
                            .flatten()
                            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                            .map(|e| e.path()),
                    );
                }
            }
        }
        reader
    }

    /// Fills `window.stalls` with the window's stalls of every cgroup it charged and each of
    /// their ancestors (named by `names`); a cgroup already removed has no directory and no
    /// entry, and its latest reading is dropped (memory holds live cgroups only).
    pub fn window(&mut self, window: &mut Window, names: &mut CgroupNames) {
        let Some(files) = self.files.as_mut() else {
            return;
        };
        for id in &window.removed_cgroups {
            self.last.remove(&*names.name(*id));
        }
        // Each path once, however many charged cgroups share an ancestor.
        let mut paths: BTreeSet<String> = BTreeSet::new();
        for cgroup in &window.cgroups {
            let mut path = names.name(cgroup.id).to_string();
            if !path.starts_with('/') {
                continue;
            }
            loop {
                if !paths.insert(path.clone()) {
                    break;
                }
                match path.rsplit_once('/') {
                    Some(("", rest)) if !rest.is_empty() => path = "/".to_owned(),
                    Some((parent, _)) if !parent.is_empty() => path = parent.to_owned(),
                    _ => break,
                }
            }
        }
        for path in paths {
            // A removed cgroup's files are gone: nothing is read, as where they never were.
            let now = files.read(&path);
            if !now.any() {
                continue;
            }
            let grown = self.last.get(&path).map_or(now, |before| now.since(before));
            self.last.insert(path.clone(), now);
            if let Some(run) = self.run.as_mut() {
                run.entry(path.clone()).or_default().add(&grown);
            }
            window.stalls.insert(path, grown);
        }
    }

    /// Fills the run's totals with each cgroup's stalls over the run (nothing when the reader
    /// keeps no totals).
    pub fn run_totals(&self, totals: &mut Window) {
        if let Some(run) = &self.run {
            totals.stalls.clone_from(run);
        }
    }
}

/// `dir`'s path under `mount`, `/`-rooted.
fn relative(mount: &Path, dir: &Path) -> String {
    let rest = dir.strip_prefix(mount).unwrap_or(dir);
    format!("/{}", rest.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 40\n\
                        nr_throttled 12\nthrottled_usec 800000\nnr_bursts 0\nburst_usec 0\n";
    const PRESSURE: &str = "some avg10=1.00 avg60=0.50 avg300=0.10 total=900000\n\
                            full avg10=0.00 avg60=0.00 avg300=0.00 total=300\n";

    #[test]
    fn the_kernels_files_parse_and_what_they_lack_is_none() {
        let stalls = CpuStalls::parse(Some(STAT), Some(PRESSURE));
        assert_eq!(stalls.nr_throttled, Some(12));
        assert_eq!(stalls.throttled, Some(Duration::from_millis(800)));
        assert_eq!(stalls.pressure_some, Some(Duration::from_millis(900)));
        assert_eq!(stalls.pressure_full, Some(Duration::from_micros(300)));
        // No cpu controller: cpu.stat has usage only; 5.10 has no `full` line for the cpu.
        let bare = CpuStalls::parse(
            Some("usage_usec 1\nuser_usec 1\nsystem_usec 0\n"),
            Some("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"),
        );
        assert_eq!((bare.nr_throttled, bare.throttled), (None, None));
        assert_eq!(bare.pressure_some, Some(Duration::from_micros(7)));
        assert_eq!(bare.pressure_full, None);
        assert!(!CpuStalls::parse(None, None).any());
        // A prefix is not a key: `nr_throttled_x` is not `nr_throttled`.
        let odd = CpuStalls::parse(Some("nr_throttled_x 5\n"), None);
        assert_eq!(odd.nr_throttled, None);
    }

    #[test]
    fn windows_are_growths_and_sum_back_to_the_run() {
        let first = CpuStalls::parse(Some(STAT), Some(PRESSURE));
        let later = CpuStalls::parse(
            Some("nr_throttled 20\nthrottled_usec 1000000\n"),
            Some("some total=1000000\n"),
        );
        let grown = later.since(&first);
        assert_eq!(grown.nr_throttled, Some(8));
        assert_eq!(grown.throttled, Some(Duration::from_millis(200)));
        assert_eq!(grown.pressure_some, Some(Duration::from_millis(100)));
        assert_eq!(grown.pressure_full, None, "not in the later reading");
        let mut run = first;
        run.add(&grown);
        assert_eq!(run.nr_throttled, later.nr_throttled);
        assert_eq!(run.throttled, later.throttled);
        // A cgroup made again at its path starts over.
        let remade = CpuStalls::parse(Some("nr_throttled 3\n"), None);
        assert_eq!(remade.since(&first).nr_throttled, Some(3));
    }

    #[test]
    fn a_window_reads_its_cgroups_and_their_ancestors_as_growth_since_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let leaf = dir.path().join("a/b");
        fs::create_dir_all(&leaf).unwrap();
        fs::write(leaf.join("cpu.stat"), "nr_throttled 1\nthrottled_usec 10\n").unwrap();
        fs::write(
            dir.path().join("a/cpu.stat"),
            "nr_throttled 5\nthrottled_usec 50\n",
        )
        .unwrap();
        let mut reader = StallReader::start(Some(dir.path()), true);
        fs::write(leaf.join("cpu.stat"), "nr_throttled 4\nthrottled_usec 40\n").unwrap();
        fs::write(
            dir.path().join("a/cpu.stat"),
            "nr_throttled 9\nthrottled_usec 90\n",
        )
        .unwrap();
        let id = CgroupId(std::os::unix::fs::MetadataExt::ino(
            &fs::metadata(&leaf).unwrap(),
        ));
        let mut names = CgroupNames::at(Some(dir.path().to_path_buf()));
        let mut window = Window {
            length: Duration::from_secs(1),
            threads: Vec::new(),
            cgroups: vec![super::super::usage::CgroupUsage::new(id, 0)],
            waits_measured: true,
            neighbours_measured: true,
            ..Window::default()
        };
        reader.window(&mut window, &mut names);
        assert_eq!(window.stalls["/a/b"].nr_throttled, Some(3));
        assert_eq!(
            window.stalls["/a"].throttled,
            Some(Duration::from_micros(40))
        );
        assert!(
            !window.stalls.contains_key("/"),
            "the root has no cpu.stat here"
        );
        let mut totals = window.clone();
        totals.stalls.clear();
        reader.run_totals(&mut totals);
        assert_eq!(totals.stalls, window.stalls);
    }

    use topdown_common::cgroup::CgroupId;
}
