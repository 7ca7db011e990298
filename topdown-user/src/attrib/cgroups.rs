//! cgroup2 ids to paths: the id `bpf_get_current_cgroup_id` returns is the inode number of the
//! cgroup's directory under the unified mount.

use topdown_common::cgroup::CgroupId;

use foldhash::{HashMap, HashMapExt as _};
use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::Arc,
};

/// Names cgroup ids by walking the cgroup2 mount; remembers paths of cgroups since removed.
#[derive(Debug)]
pub struct CgroupNames {
    mount: Option<PathBuf>,
    /// Shared with every row that names one (a row's copy is a reference count); looked up
    /// once per row, with foldhash.
    paths: HashMap<CgroupId, Arc<str>>,
    rescanned: bool,
}

impl CgroupNames {
    /// Names from the host's cgroup2 mount (none if cgroup2 is not mounted).
    pub fn host() -> Self {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Self::at(cgroup2_mount(&mountinfo))
    }

    /// Names from the cgroup2 tree mounted at `mount`.
    pub fn at(mount: Option<PathBuf>) -> Self {
        let mut names = Self {
            mount,
            paths: HashMap::new(),
            rescanned: false,
        };
        names.scan();
        names
    }

    /// The cgroup2 mount this names from (`None`: cgroup2 is not mounted).
    pub fn mount(&self) -> Option<&Path> {
        self.mount.as_deref()
    }

    /// Remembers the path of a cgroup the kernel saw removed.
    pub fn learn(&mut self, id: CgroupId, path: String) {
        self.paths.insert(id, path.into());
    }

    /// Remembers every path `other` knows (a later recording's names win).
    pub fn learn_all(&mut self, other: &CgroupNames) {
        for (id, path) in &other.paths {
            self.paths.insert(*id, Arc::clone(path));
        }
    }

    /// Remembers the paths of cgroups the kernel saw removed (`(id, path)`), so they are still
    /// reported by path.
    pub fn learn_removed(&mut self, removed: &[(CgroupId, String)]) {
        for (id, path) in removed {
            self.learn(*id, path.clone());
        }
    }

    /// The id of the cgroup at `path`: the live directory's, else a remembered one's.
    pub fn id_of(&self, path: &str) -> Option<CgroupId> {
        self.mount
            .as_ref()
            .and_then(|m| fs::metadata(m.join(path.trim_start_matches('/'))).ok())
            .map(|meta| CgroupId(meta.ino()))
            .or_else(|| {
                self.paths
                    .iter()
                    .find(|(_, p)| &***p == path)
                    .map(|(id, _)| *id)
            })
    }

    /// Lets the next unknown id trigger one more walk of the tree.
    pub const fn allow_rescan(&mut self) {
        self.rescanned = false;
    }

    /// The cgroup's path relative to the mount (`/` for the root), or `cgroup:<id>`.
    pub fn name(&mut self, id: CgroupId) -> Arc<str> {
        if !self.paths.contains_key(&id) && !self.rescanned {
            self.rescanned = true;
            self.scan();
        }
        self.paths
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("cgroup:{id}").into())
    }

    fn scan(&mut self) {
        let Some(mount) = self.mount.clone() else {
            return;
        };
        let mut stack = vec![mount.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(meta) = fs::metadata(&dir) else {
                continue;
            };
            self.paths
                .insert(CgroupId(meta.ino()), relative(&mount, &dir).into());
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            stack.extend(
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
}

fn relative(mount: &Path, dir: &Path) -> String {
    let rel = dir.strip_prefix(mount).unwrap_or(dir);
    format!("/{}", rel.display())
}

/// The mount point of the cgroup2 filesystem in a `/proc/self/mountinfo` text.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount_point))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_unified_mount_among_v1_hierarchies() {
        let info = "24 1 0:22 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                    30 24 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(info),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount("24 1 0:22 / /x rw - cgroup c rw\n"), None);
    }

    #[test]
    fn ids_are_directory_inodes() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        let ino = fs::metadata(dir.path().join("a/b")).unwrap().ino();
        let mut names = CgroupNames::at(Some(dir.path().to_path_buf()));
        assert_eq!(&*names.name(CgroupId(ino)), "/a/b");
        fs::create_dir_all(dir.path().join("late")).unwrap();
        let late = fs::metadata(dir.path().join("late")).unwrap().ino();
        assert_eq!(
            &*names.name(CgroupId(late)),
            "/late",
            "unknown ids trigger a rescan"
        );
        assert_eq!(
            *names.name(CgroupId(u64::MAX)),
            *format!("cgroup:{}", u64::MAX)
        );
    }
}
