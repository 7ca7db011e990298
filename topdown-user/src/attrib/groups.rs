//! cgroup usage grouped the way the user asked: per cgroup (optionally rolled up so a parent
//! includes its descendants, as the kernel's hierarchy has it) or per container, kept to the
//! `-G` subtrees.

use std::collections::BTreeMap;
use topdown_common::cgroup::CgroupId;

use super::{cgroups::CgroupNames, containers::Owner, usage::CgroupUsage};

/// What a group row stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// One row per cgroup (`--per-cgroup`).
    Cgroup,
    /// One row per container, pod, service or user slice (`--per-container`).
    Container,
}

/// How cgroup usage is grouped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupOptions {
    /// Rows per cgroup or per container.
    pub by: GroupBy,
    /// A cgroup row includes its descendants (`--rollup`).
    pub rollup: bool,
    /// Only these subtrees (paths from the cgroup2 root, `-G`); empty: all.
    pub keep: Vec<String>,
}

/// One group's usage over a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The cgroup's path, or the container key (`docker:1a2b3c4d5e6f`, `nginx.service`; the
    /// path for cgroups that belong to nothing more specific).
    pub label: String,
    /// The cgroup's path; for a container, the path of its outermost cgroup.
    pub path: String,
    /// The cgroup's id (0 for an ancestor that was never charged and is no longer there).
    pub id: CgroupId,
    /// Who the cgroup belongs to.
    pub owner: Owner,
    /// Usage of the group's cgroups, summed.
    pub usage: CgroupUsage,
}

/// Normalizes a `-G` argument to a path from the cgroup2 root: `/a/b` for `a/b`, `/a/b/`, or
/// `/sys/fs/cgroup/a/b` when the mount is `/sys/fs/cgroup`.
pub fn normalize(path: &str, mount: Option<&std::path::Path>) -> String {
    let path = mount
        .and_then(|m| std::path::Path::new(path).strip_prefix(m).ok())
        .map_or_else(|| path.to_owned(), |rest| rest.display().to_string());
    let trimmed = path.trim_matches('/');
    format!("/{trimmed}")
}

/// Whether `path` is `root` or below it.
fn is_within(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `/a/b/c` → `/a/b/c`, `/a/b`, `/a`, `/`.
pub fn self_and_ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(path);
    std::iter::from_fn(move || {
        let current = next?;
        next = match current.rfind('/') {
            _ if current == "/" => None,
            Some(0) => Some("/"),
            Some(i) => Some(&current[..i]),
            None => None,
        };
        Some(current)
    })
}

/// Groups `cgroups` (each charged for itself) as `options` asks, sorted by path or label.
pub fn group(
    cgroups: &[CgroupUsage],
    names: &mut CgroupNames,
    options: &GroupOptions,
) -> Vec<Group> {
    let kept =
        |path: &str| options.keep.is_empty() || options.keep.iter().any(|k| is_within(path, k));
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for usage in cgroups {
        let path = names.name(usage.id).to_string();
        if !kept(&path) {
            continue;
        }
        let owner = Owner::of(&path);
        let targets: Vec<String> = match options.by {
            GroupBy::Container => vec![owner.key().unwrap_or_else(|| path.clone())],
            GroupBy::Cgroup if options.rollup && path.starts_with('/') => self_and_ancestors(&path)
                .filter(|p| kept(p))
                .map(str::to_owned)
                .collect(),
            GroupBy::Cgroup => vec![path.clone()],
        };
        for label in targets {
            let is_own = label == path;
            let entry = groups.entry(label.clone()).or_insert_with(|| {
                let (group_path, id) = if options.by == GroupBy::Cgroup && !is_own {
                    let id = names.id_of(&label).unwrap_or(CgroupId(0));
                    (label.clone(), id)
                } else {
                    (path.clone(), usage.id)
                };
                Group {
                    owner: if options.by == GroupBy::Container {
                        owner.clone()
                    } else {
                        Owner::of(&group_path)
                    },
                    label,
                    path: group_path,
                    id,
                    usage: CgroupUsage {
                        id,
                        switches: 0,
                        on_cpu: std::time::Duration::ZERO,
                        waited: std::time::Duration::ZERO,
                        behind: Default::default(),
                        counters: Vec::new(),
                    },
                }
            });
            if options.by == GroupBy::Container && path.len() < entry.path.len() {
                entry.path.clone_from(&path);
                entry.id = usage.id;
            } else if is_own && entry.path == path && usage.id > entry.id {
                // A cgroup removed and created again at the same path: the row names the
                // newer (cgroup2 ids grow with every creation).
                entry.id = usage.id;
            }
            entry.usage.absorb(usage);
        }
    }
    groups.into_values().collect()
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::MetadataExt as _};

    use super::*;
    use crate::attrib::usage::CounterValue;

    fn usage(id: u64, ns: u64) -> CgroupUsage {
        CgroupUsage {
            id: CgroupId(id),
            switches: 1,
            on_cpu: std::time::Duration::from_nanos(ns),
            waited: std::time::Duration::ZERO,
            behind: Default::default(),
            counters: vec![CounterValue::new(ns, ns, ns)],
        }
    }

    const ID: &str = "3f4e1d2c5b6a79880f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978";

    /// A cgroup tree in a temporary directory, and the ids (inode numbers) of its cgroups.
    fn tree(paths: &[&str]) -> (tempfile::TempDir, CgroupNames, Vec<u64>) {
        let dir = tempfile::tempdir().unwrap();
        for path in paths {
            fs::create_dir_all(dir.path().join(path.trim_start_matches('/'))).unwrap();
        }
        let ids = paths
            .iter()
            .map(|p| {
                fs::metadata(dir.path().join(p.trim_start_matches('/')))
                    .unwrap()
                    .ino()
            })
            .collect();
        let names = CgroupNames::at(Some(dir.path().to_path_buf()));
        (dir, names, ids)
    }

    #[test]
    fn rollup_sums_every_subtree_and_keeps_only_asked_subtrees() {
        let (_dir, mut names, ids) = tree(&["/test/a", "/test/a/x", "/test/b", "/other"]);
        let cgroups = [
            usage(ids[0], 10),
            usage(ids[1], 5),
            usage(ids[2], 7),
            usage(ids[3], 100),
        ];
        let by_label = |groups: &[Group], label: &str| {
            groups
                .iter()
                .find(|g| g.label == label)
                .map(|g| g.usage.on_cpu_ns())
        };

        let flat = GroupOptions {
            by: GroupBy::Cgroup,
            rollup: false,
            keep: vec![],
        };
        let groups = group(&cgroups, &mut names, &flat);
        assert_eq!(groups.len(), 4);
        assert_eq!(by_label(&groups, "/test/a"), Some(10));
        assert_eq!(by_label(&groups, "/test"), None, "never charged itself");

        let rolled = GroupOptions {
            by: GroupBy::Cgroup,
            rollup: true,
            keep: vec!["/test".into()],
        };
        let groups = group(&cgroups, &mut names, &rolled);
        assert_eq!(by_label(&groups, "/test"), Some(22));
        assert_eq!(by_label(&groups, "/test/a"), Some(15));
        assert_eq!(by_label(&groups, "/test/a/x"), Some(5));
        assert_eq!(by_label(&groups, "/other"), None, "outside -G");
        assert_eq!(by_label(&groups, "/"), None, "above -G");
        let test = groups.iter().find(|g| g.label == "/test").unwrap();
        assert_ne!(
            test.id.0, 0,
            "an ancestor that was never charged still has its id"
        );

        let all = GroupOptions {
            by: GroupBy::Cgroup,
            rollup: true,
            keep: vec![],
        };
        assert_eq!(by_label(&group(&cgroups, &mut names, &all), "/"), Some(122));
    }

    #[test]
    fn containers_gather_their_nested_cgroups() {
        let scope = format!("/system.slice/docker-{ID}.scope");
        let (_dir, mut names, ids) = tree(&[
            &scope,
            &format!("{scope}/init"),
            "/system.slice/cron.service",
        ]);
        let cgroups = [usage(ids[0], 10), usage(ids[1], 5), usage(ids[2], 1)];
        let options = GroupOptions {
            by: GroupBy::Container,
            rollup: false,
            keep: vec![],
        };
        let groups = group(&cgroups, &mut names, &options);
        assert_eq!(groups.len(), 2, "{groups:?}");
        let docker = groups
            .iter()
            .find(|g| g.label == format!("docker:{}", &ID[..12]))
            .unwrap();
        assert_eq!(docker.usage.on_cpu_ns(), 15);
        assert_eq!(docker.path, scope, "the container's outermost cgroup");
        assert_eq!(docker.usage.switches, 2);
        assert!(groups.iter().any(|g| g.label == "cron.service"));
    }

    #[test]
    fn cgroup_arguments_are_paths_from_the_root() {
        let mount = std::path::Path::new("/sys/fs/cgroup");
        assert_eq!(normalize("/sys/fs/cgroup/a/b/", Some(mount)), "/a/b");
        assert_eq!(normalize("a/b", Some(mount)), "/a/b");
        assert_eq!(normalize("/", None), "/");
        assert!(is_within("/a/b", "/a") && !is_within("/ab", "/a") && is_within("/x", "/"));
        assert_eq!(
            self_and_ancestors("/a/b").collect::<Vec<_>>(),
            ["/a/b", "/a", "/"]
        );
    }
}
