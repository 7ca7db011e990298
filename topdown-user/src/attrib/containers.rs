//! Who a cgroup path belongs to: a container (docker, containerd / CRI, CRI-O, podman), a
//! Kubernetes pod, a systemd service or a user's slice. Read from the path alone, the way the
//! runtimes and the kubelet name their cgroups; no runtime is ever asked.

use std::fmt;

/// Kubernetes QoS class, from the `kubepods` level of the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Qos {
    /// `kubepods-pod<uid>` / `kubepods/pod<uid>`: requests equal limits.
    Guaranteed,
    /// `kubepods-burstable-…`.
    Burstable,
    /// `kubepods-besteffort-…`.
    BestEffort,
}

impl Qos {
    /// The class as Kubernetes spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
            Self::BestEffort => "BestEffort",
        }
    }
}

/// A Kubernetes pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pod {
    /// Pod UID with dashes (`kubepods-…-pod<uid>.slice` spells them as underscores).
    pub uid: String,
    /// QoS class.
    pub qos: Qos,
}

/// What a cgroup belongs to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    /// A container: its runtime and full id.
    Container {
        /// `docker`, `containerd`, `crio` or `podman`.
        runtime: &'static str,
        /// Full container id (64 hex digits).
        id: String,
        /// The pod it runs in, under Kubernetes.
        pod: Option<Pod>,
    },
    /// A pod's own cgroup (not one of its containers).
    Pod(Pod),
    /// A systemd service (`nginx.service`), outside any container.
    Service(String),
    /// A user's slice (`user-1000.slice`, with its sessions and user services).
    User(u32),
    /// Anything else (the root, `system.slice` itself, hand-made cgroups).
    Other,
}

impl Owner {
    /// Reads the owner of the cgroup at `path` (relative to the cgroup2 mount).
    pub fn of(path: &str) -> Self {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let pod = parts
            .iter()
            .enumerate()
            .find_map(|(i, part)| pod(part, i.checked_sub(1).map(|p| parts[p])));
        let bare_docker = parts
            .windows(2)
            .find(|w| w[0] == "docker" && is_container_id(w[1]))
            .map(|w| ("docker", w[1].to_owned()));
        if let Some((runtime, id)) = parts
            .iter()
            .find_map(|part| container(part))
            .or(bare_docker)
        {
            return Self::Container { runtime, id, pod };
        }
        if let Some(pod) = pod {
            // cgroupfs driver: `/kubepods/<qos>/pod<uid>/<container id>`.
            let last = parts.last().copied().unwrap_or_default();
            if is_container_id(last) {
                return Self::Container {
                    runtime: "cri",
                    id: last.to_owned(),
                    pod: Some(pod),
                };
            }
            return Self::Pod(pod);
        }
        if let Some(uid) = parts.iter().find_map(|part| {
            part.strip_prefix("user-")?
                .strip_suffix(".slice")?
                .parse()
                .ok()
        }) {
            return Self::User(uid);
        }
        parts
            .iter()
            .find(|part| part.ends_with(".service"))
            .map_or(Self::Other, |unit| Self::Service((*unit).to_owned()))
    }

    /// The key `--per-container` groups by: `docker:1a2b3c4d5e6f`, `pod:<uid>`, the service,
    /// `user-1000.slice`; `None` for [`Owner::Other`] (grouped by its own path).
    pub fn key(&self) -> Option<String> {
        match self {
            Self::Container { runtime, id, .. } => Some(format!("{runtime}:{}", short_id(id))),
            Self::Pod(pod) => Some(format!("pod:{}", pod.uid)),
            Self::Service(unit) => Some(unit.clone()),
            Self::User(uid) => Some(format!("user-{uid}.slice")),
            Self::Other => None,
        }
    }

    /// The pod, for containers in one and for pods.
    pub const fn pod(&self) -> Option<&Pod> {
        match self {
            Self::Container { pod, .. } => pod.as_ref(),
            Self::Pod(pod) => Some(pod),
            _ => None,
        }
    }

    /// `container`, `pod`, `service`, `user` or `other`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Container { .. } => "container",
            Self::Pod(_) => "pod",
            Self::Service(_) => "service",
            Self::User(_) => "user",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key().as_deref().unwrap_or("-"))
    }
}

/// The first 12 hex digits, as `docker ps` shows an id.
pub fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// `docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`, `libpod-<id>.scope`.
fn container(part: &str) -> Option<(&'static str, String)> {
    const SCOPES: [(&str, &str); 4] = [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "crio"),
        ("libpod-", "podman"),
    ];
    let scope = part.strip_suffix(".scope")?;
    SCOPES.iter().find_map(|(prefix, runtime)| {
        let id = scope.strip_prefix(prefix)?;
        is_container_id(id).then(|| (*runtime, id.to_owned()))
    })
}

/// A pod level: `kubepods-<qos>-pod<uid>.slice`, `kubepods-pod<uid>.slice` (systemd driver) or
/// `pod<uid>` under `kubepods`, `burstable` or `besteffort` (cgroupfs driver).
fn pod(part: &str, parent: Option<&str>) -> Option<Pod> {
    if let Some(rest) = part
        .strip_prefix("kubepods-")
        .and_then(|p| p.strip_suffix(".slice"))
    {
        let (qos, uid) = if let Some(uid) = rest.strip_prefix("burstable-pod") {
            (Qos::Burstable, uid)
        } else if let Some(uid) = rest.strip_prefix("besteffort-pod") {
            (Qos::BestEffort, uid)
        } else {
            (Qos::Guaranteed, rest.strip_prefix("pod")?)
        };
        return is_uid(uid).then(|| Pod {
            uid: uid.replace('_', "-"),
            qos,
        });
    }
    let uid = part.strip_prefix("pod")?;
    let qos = match parent? {
        "kubepods" => Qos::Guaranteed,
        "burstable" => Qos::Burstable,
        "besteffort" => Qos::BestEffort,
        _ => return None,
    };
    is_uid(uid).then(|| Pod {
        uid: uid.to_owned(),
        qos,
    })
}

/// 64 lowercase hex digits.
fn is_container_id(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A UUID with dashes or (systemd driver) underscores.
fn is_uid(text: &str) -> bool {
    text.len() == 36
        && text
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e1d2c5b6a79880f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978";

    fn container_of(path: &str) -> (&'static str, String, Option<Pod>) {
        match Owner::of(path) {
            Owner::Container { runtime, id, pod } => (runtime, id, pod),
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn docker_with_either_cgroup_driver() {
        let (runtime, id, pod) = container_of(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!((runtime, id.as_str(), pod), ("docker", ID, None));
        // cgroupfs driver: `/docker/<id>`, and a container's own nested cgroups.
        let (runtime, id, _) = container_of(&format!("/docker/{ID}"));
        assert_eq!((runtime, id.as_str()), ("docker", ID));
        assert_eq!(Owner::of(&format!("/elsewhere/{ID}")), Owner::Other);
        let (runtime, ..) = container_of(&format!("/system.slice/docker-{ID}.scope/init.scope"));
        assert_eq!(runtime, "docker");
        assert_eq!(
            Owner::of(&format!("/system.slice/docker-{ID}.scope")).key(),
            Some(format!("docker:{}", &ID[..12]))
        );
    }

    #[test]
    fn kubernetes_pods_with_the_systemd_driver() {
        let uid = "0a1b2c3d_4e5f_6789_abcd_ef0123456789";
        let path = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/\
             cri-containerd-{ID}.scope"
        );
        let (runtime, id, pod) = container_of(&path);
        assert_eq!((runtime, id.as_str()), ("containerd", ID));
        let pod = pod.unwrap();
        assert_eq!(pod.uid, "0a1b2c3d-4e5f-6789-abcd-ef0123456789");
        assert_eq!(pod.qos, Qos::Burstable);

        let crio = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice/\
             crio-{ID}.scope"
        );
        let (runtime, _, pod) = container_of(&crio);
        assert_eq!((runtime, pod.unwrap().qos), ("crio", Qos::BestEffort));

        let guaranteed = format!("/kubepods.slice/kubepods-pod{uid}.slice");
        assert_eq!(
            Owner::of(&guaranteed),
            Owner::Pod(Pod {
                uid: "0a1b2c3d-4e5f-6789-abcd-ef0123456789".into(),
                qos: Qos::Guaranteed
            })
        );
        assert_eq!(
            Owner::of(&guaranteed).key().unwrap(),
            "pod:0a1b2c3d-4e5f-6789-abcd-ef0123456789"
        );
    }

    #[test]
    fn kubernetes_pods_with_the_cgroupfs_driver() {
        let uid = "0a1b2c3d-4e5f-6789-abcd-ef0123456789";
        let (runtime, id, pod) = container_of(&format!("/kubepods/besteffort/pod{uid}/{ID}"));
        assert_eq!((runtime, id.as_str()), ("cri", ID));
        assert_eq!(pod.unwrap().qos, Qos::BestEffort);
        let (_, _, pod) = container_of(&format!("/kubepods/pod{uid}/{ID}"));
        assert_eq!(pod.unwrap().qos, Qos::Guaranteed);
        assert_eq!(
            Owner::of(&format!("/kubepods/burstable/pod{uid}"))
                .pod()
                .unwrap()
                .qos,
            Qos::Burstable
        );
    }

    #[test]
    fn podman_rootful_and_rootless() {
        let (runtime, ..) = container_of(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(runtime, "podman");
        let rootless =
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope");
        assert_eq!(
            container_of(&rootless).0,
            "podman",
            "a container before its user"
        );
        // conmon runs beside the container, not in it.
        assert_eq!(
            Owner::of(&format!("/machine.slice/libpod-conmon-{ID}.scope")),
            Owner::Other
        );
    }

    #[test]
    fn services_users_and_the_rest() {
        assert_eq!(
            Owner::of("/system.slice/nginx.service"),
            Owner::Service("nginx.service".into())
        );
        assert_eq!(
            Owner::of("/user.slice/user-1000.slice/session-3.scope"),
            Owner::User(1000)
        );
        assert_eq!(
            Owner::of("/user.slice/user-1000.slice/user@1000.service/app.slice")
                .key()
                .unwrap(),
            "user-1000.slice"
        );
        assert_eq!(Owner::of("/"), Owner::Other);
        assert_eq!(Owner::of("/system.slice"), Owner::Other);
        assert_eq!(Owner::of("/docker-notanid.scope"), Owner::Other);
    }
}
