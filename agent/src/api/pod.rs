//! The pod of a peer process, for `socket.isolate: pod`: read once, when
//! its connection is accepted, from `/proc/<pid>/cgroup`, as SPIRE's node
//! agent tells the workloads on its socket apart (peer credentials, then
//! the pod from the process's cgroup).
//!
//! ## What is trusted
//! - The pid is the kernel's (`SO_PEERCRED`), in the agent's pid
//!   namespace. A peer in a pid namespace the agent does not see (another
//!   pod, unless the agent runs in the host's: `hostPID`) is reported as
//!   pid 0, and has no pod here.
//! - A pid is reused once its process is gone, so the pid alone could
//!   name another process by the time its cgroup is read. The kernel's
//!   pidfd of the peer (`SO_PEERPIDFD`, Linux 6.5 and later) pins the
//!   process that connected: its cgroup is read, then the pidfd must still
//!   name a process (running or not yet reaped, so the pid was not
//!   reused), else the connection has no pod. On older kernels the read is
//!   best effort: a peer that exits before its connection is accepted
//!   could lend its pid to a process of another pod.
//! - Only the kubelet's layouts count, from the top of the cgroup tree as
//!   the agent sees it: after any leading `..` (the agent has a cgroup
//!   namespace of its own, and sees other pods' paths relative to its
//!   cgroup), nothing but `kubepods` and what the kubelet puts under it (a
//!   QoS class, a slice) up to the pod, then the container. A pod-like name
//!   anywhere else (in a cgroup tree delegated to a user, who may name
//!   cgroups freely) is not a pod.
//!
//! The layouts, in cgroup v1 (one line per hierarchy; every line that
//! names a pod must name the same one) and v2 (the `0::` line):
//! - cgroupfs driver: `/kubepods/burstable/pod<uid>/<container>`,
//!   `/kubepods/besteffort/pod<uid>/<container>`, and guaranteed pods
//!   directly under `/kubepods`;
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/`
//!   `kubepods-burstable-pod<uid>.slice/cri-containerd-<container>.scope`
//!   (the UID with `_` for `-`; `crio-` and `docker-` scopes too), and the
//!   same with `kubelet.slice/kubelet-kubepods.slice` on top (kind).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use tokio::net::UnixStream;

use crate::lock::isolation::{ContainerId, Pod, PodUid};

/// Where the agent reads its peers' cgroups.
pub const PROC: &str = "/proc";

/// Why a peer has no pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoPod {
    #[error("its pid is 0: it runs in a pid namespace the agent does not see (run the agent in the host's, hostPID)")]
    NoPid,
    #[error("it exited before its pod could be read")]
    Gone,
    #[error("its cgroup could not be read: {0}")]
    Unreadable(String),
    #[error("its cgroup is not a Kubernetes pod's: {0:?}")]
    NotAPod(String),
    #[error("its cgroup names two pods, {0} and {1}")]
    TwoPods(PodUid, PodUid),
}

/// The pod of the process at the other end of `stream`, whose pid the
/// kernel reported as `pid`, reading `<proc_root>/<pid>/cgroup`
/// (`proc_root` is [`PROC`] but in tests).
///
/// # Errors
/// Why the pod cannot be told ([`NoPod`]).
pub fn of_peer(stream: &UnixStream, pid: Option<u32>, proc_root: &Path) -> Result<Pod, NoPod> {
    let pid = pid.filter(|&pid| pid != 0).ok_or(NoPod::NoPid)?;
    // Pinned before the read, so that the check after it proves the pid
    // still named the peer while its cgroup was read.
    let pinned = pidfd(stream);
    let path = proc_root.join(pid.to_string()).join("cgroup");
    let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => NoPod::Gone,
        _ => NoPod::Unreadable(e.to_string()),
    })?;
    if pinned.as_ref().is_some_and(|fd| !alive(fd)) {
        return Err(NoPod::Gone);
    }
    parse(&text)
}

/// The pod named by the text of a `/proc/<pid>/cgroup` file.
///
/// # Errors
/// [`NoPod::NotAPod`] with the path (the v2 line's, else the first), or
/// [`NoPod::TwoPods`] when two lines disagree.
pub fn parse(cgroup: &str) -> Result<Pod, NoPod> {
    let mut found: Option<Pod> = None;
    let mut shown: Option<&str> = None;
    for line in cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(hierarchy), Some(_controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if hierarchy == "0" || shown.is_none() {
            shown = Some(path);
        }
        let Some(pod) = in_path(path) else {
            continue;
        };
        match found {
            Some(first) if first.uid != pod.uid => {
                return Err(NoPod::TwoPods(first.uid, pod.uid));
            }
            Some(first) if first.container.is_some() => {}
            _ => found = Some(pod),
        }
    }
    found.ok_or_else(|| NoPod::NotAPod(shown.unwrap_or_default().to_string()))
}

/// The pod of one cgroup path, if the path is the kubelet's from its top.
fn in_path(path: &str) -> Option<Pod> {
    let mut parts = path
        .split('/')
        .filter(|part| !part.is_empty())
        .skip_while(|part| *part == "..");
    while let Some(part) = parts.next() {
        if let Some(uid) = pod_uid(part) {
            let container = parts.next().and_then(container_id);
            return Some(Pod { uid, container });
        }
        if !kubepods(part) {
            return None;
        }
    }
    None
}

/// What the kubelet puts above a pod: `kubepods`, a QoS class (cgroupfs
/// driver), a slice naming `kubepods` (systemd driver), kind's
/// `kubelet.slice`.
fn kubepods(part: &str) -> bool {
    matches!(
        part,
        "kubepods" | "burstable" | "besteffort" | "kubelet.slice"
    ) || part
        .strip_suffix(".slice")
        .is_some_and(|slice| slice.split('-').any(|word| word == "kubepods"))
}

/// A pod's cgroup: `pod<uid>` (cgroupfs) or
/// `...kubepods-<class>-pod<uid_with_underscores>.slice` (systemd).
fn pod_uid(part: &str) -> Option<PodUid> {
    if let Some(uid) = part.strip_prefix("pod") {
        return PodUid::parse(uid);
    }
    let slice = part.strip_suffix(".slice")?;
    let (above, uid) = slice.rsplit_once("-pod")?;
    if !above.split('-').any(|word| word == "kubepods") {
        return None;
    }
    PodUid::parse(uid)
}

/// A container's cgroup: `<id>` (cgroupfs) or `<runtime>-<id>.scope`
/// (systemd: `cri-containerd-`, `crio-`, `docker-`).
fn container_id(part: &str) -> Option<ContainerId> {
    let id = match part.strip_suffix(".scope") {
        Some(scope) => scope.rsplit('-').next().unwrap_or(scope),
        None => part,
    };
    ContainerId::parse(id)
}

/// The kernel's pidfd of `stream`'s peer (`SO_PEERPIDFD`), where the
/// kernel has it (Linux 6.5 and later).
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn pidfd(stream: &UnixStream) -> Option<OwnedFd> {
    // <asm-generic/socket.h>, the value on these architectures.
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).ok()?;
    // SAFETY: getsockopt writes at most `len` bytes (one int) into `fd`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            std::ptr::from_mut(&mut fd).cast(),
            &mut len,
        )
    };
    if rc != 0 || fd < 0 {
        return None;
    }
    // SAFETY: the kernel has just opened `fd` for this process, and nothing
    // else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn pidfd(_stream: &UnixStream) -> Option<OwnedFd> {
    None
}

/// Whether the process `fd` pins has not been reaped: its pid cannot have
/// been reused. Signal 0 sends nothing; a process the agent may not signal
/// (another uid) answers EPERM, and exists.
#[cfg(target_os = "linux")]
fn alive(fd: &OwnedFd) -> bool {
    // SAFETY: pidfd_send_signal with signal 0 and no siginfo only checks
    // that the process exists and may be signalled; it touches no memory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(target_os = "linux"))]
fn alive(_fd: &OwnedFd) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
    const UNDERSCORED: &str = "0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0";

    fn container() -> String {
        "4a3b2c1d".repeat(8)
    }

    /// A cgroup v1 file: one line per hierarchy, `path` in each of them
    /// but `memory`'s (a container runtime may place that one elsewhere).
    fn v1(path: &str) -> String {
        let mut text = String::new();
        for (i, controllers) in [
            "name=systemd",
            "pids",
            "blkio",
            "freezer",
            "devices",
            "cpu,cpuacct",
            "cpuset",
        ]
        .iter()
        .enumerate()
        {
            text.push_str(&format!("{}:{controllers}:{path}\n", 12 - i));
        }
        text.push_str("5:memory:/\n");
        text
    }

    fn pod_of(text: &str) -> (String, Option<String>) {
        let pod = parse(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        (pod.uid.to_string(), pod.container.map(|c| c.to_string()))
    }

    #[test]
    fn the_kubelets_layouts_name_the_pod_and_its_container() {
        let id = container();
        let expected = (UID.to_string(), Some(id.clone()));
        for path in [
            // cgroupfs driver: burstable, besteffort, guaranteed.
            format!("/kubepods/burstable/pod{UID}/{id}"),
            format!("/kubepods/besteffort/pod{UID}/{id}"),
            format!("/kubepods/pod{UID}/{id}"),
            // systemd driver, with each runtime's scope.
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UNDERSCORED}.slice/cri-containerd-{id}.scope"),
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UNDERSCORED}.slice/crio-{id}.scope"),
            format!("/kubepods.slice/kubepods-pod{UNDERSCORED}.slice/docker-{id}.scope"),
            // kind's nodes.
            format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UNDERSCORED}.slice/cri-containerd-{id}.scope"),
            // Seen from an agent with a cgroup namespace of its own.
            format!("/../../kubepods-besteffort.slice/kubepods-besteffort-pod{UNDERSCORED}.slice/cri-containerd-{id}.scope"),
            format!("/../../pod{UID}/{id}"),
        ] {
            assert_eq!(pod_of(&format!("0::{path}\n")), expected, "v2: {path}");
            assert_eq!(pod_of(&v1(&path)), expected, "v1: {path}");
        }
    }

    #[test]
    fn a_pods_own_cgroup_or_an_unknown_runtime_gives_the_pod_alone() {
        for path in [
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UNDERSCORED}.slice"),
            format!("/kubepods/burstable/pod{UID}/not-a-container"),
            format!("/kubepods/burstable/pod{UID}/{}", &container()[..12]),
        ] {
            assert_eq!(pod_of(&format!("0::{path}\n")), (UID.to_string(), None), "{path}");
        }
    }

    #[test]
    fn a_static_pods_uid_is_32_hex_digits() {
        let uid = "e3b0c44298fc1c149afbf4c8996fb924";
        let text = format!("0::/kubepods/burstable/pod{uid}/{}\n", container());
        assert_eq!(pod_of(&text).0, uid);
    }

    #[test]
    fn processes_outside_pods_have_none() {
        for text in [
            "0::/\n".to_string(),
            "0::/system.slice/containerd.service\n".to_string(),
            "0::/user.slice/user-1000.slice/session-3.scope\n".to_string(),
            v1("/"),
            v1("/system.slice/sshd.service"),
            "0::/kubepods.slice\n".to_string(),
            "0::/kubepods/burstable\n".to_string(),
            // A sibling container of the agent's own pod, as the agent's
            // cgroup namespace shows it.
            format!("0::/../cri-containerd-{}.scope\n", container()),
            String::new(),
            "garbage".to_string(),
        ] {
            assert!(
                matches!(parse(&text), Err(NoPod::NotAPod(_))),
                "{text:?}: {:?}",
                parse(&text)
            );
        }
        assert_eq!(
            parse("1:name=systemd:/\n0::/system.slice/cron.service\n"),
            Err(NoPod::NotAPod("/system.slice/cron.service".into())),
            "the v2 path is the one shown"
        );
    }

    #[test]
    fn pod_names_outside_the_kubelets_tree_are_not_pods() {
        for path in [
            // A user's delegated tree may name its cgroups anything.
            format!(
                "/user.slice/user-1000.slice/user@1000.service/pod{UID}/{}",
                container()
            ),
            format!("/user.slice/user-1000.slice/user@1000.service/kubepods/burstable/pod{UID}"),
            format!("/../../user.slice/kubepods-besteffort-pod{UNDERSCORED}.slice"),
            // A slice that only looks like a pod's.
            format!("/kubepods.slice/app-pod{UNDERSCORED}.slice"),
            format!("/system.slice/kubepods-besteffort-pod{UNDERSCORED}.slice"),
        ] {
            assert!(
                matches!(parse(&format!("0::{path}\n")), Err(NoPod::NotAPod(_))),
                "{path}"
            );
        }
    }

    #[test]
    fn lines_that_name_two_pods_name_none() {
        let other = "00000000-0000-0000-0000-000000000001";
        let text = format!(
            "1:name=systemd:/kubepods/besteffort/pod{UID}\n0::/kubepods/besteffort/pod{other}\n"
        );
        assert!(
            matches!(parse(&text), Err(NoPod::TwoPods(_, _))),
            "{:?}",
            parse(&text)
        );
        // Lines that agree, one with the container and one without: the
        // container is kept.
        let text = format!(
            "1:name=systemd:/kubepods/besteffort/pod{UID}\n0::/kubepods/besteffort/pod{UID}/{}\n",
            container()
        );
        assert_eq!(pod_of(&text), (UID.to_string(), Some(container())));
    }

    /// A fake proc tree: `<root>/<pid>/cgroup` for this test's own pid,
    /// over a real connection, so that the pidfd check runs too.
    #[tokio::test]
    async fn a_peer_is_read_from_its_pids_cgroup_under_the_proc_root() {
        let root = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        let (agent_end, _client_end) = UnixStream::pair().unwrap();

        let dir = root.path().join(pid.to_string());
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(
            dir.join("cgroup"),
            format!("0::/kubepods/besteffort/pod{UID}/{}\n", container()),
        )
        .unwrap();
        let pod = of_peer(&agent_end, Some(pid), root.path()).unwrap();
        assert_eq!(pod.uid.to_string(), UID);

        assert_eq!(of_peer(&agent_end, Some(0), root.path()), Err(NoPod::NoPid));
        assert_eq!(of_peer(&agent_end, None, root.path()), Err(NoPod::NoPid));
        assert_eq!(
            of_peer(&agent_end, Some(pid + 1), root.path()),
            Err(NoPod::Gone),
            "no cgroup file: the process is gone"
        );
        // The real /proc has this process's cgroup (in a pod or not,
        // depending on where the test runs).
        let real = of_peer(&agent_end, Some(pid), Path::new(PROC));
        assert!(matches!(real, Ok(_) | Err(NoPod::NotAPod(_))), "{real:?}");
    }

    #[test]
    fn a_reaped_process_is_not_alive_and_a_running_one_is() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
        // SAFETY: pidfd_open has just opened it for this test alone.
        let fd = unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).unwrap()) };
        assert!(alive(&fd));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!alive(&fd), "reaped: its pid may be reused");
    }
}
