//! The command's process tree as `lock` and its guardian see it: making a
//! process a child subreaper, finding its descendants in `/proc`,
//! signalling them, and reaping its children.
//!
//! A child subreaper (`PR_SET_CHILD_SUBREAPER`) adopts the orphans of its
//! descendants: a process that double-forks or calls `setsid` leaves its
//! process group but stays a descendant, so a walk from the subreaper down
//! the parent links of `/proc/<pid>/stat` still finds it. And the
//! subreaper has no children left only when no descendant is left at all
//! (a living descendant's chain of parents ends at a living child), which
//! is how "the tree is gone" is told without racing the walk.

use std::collections::HashMap;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// One descendant, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    /// Its parent.
    pub ppid: i32,
    /// Its process group.
    pub pgid: i32,
}

/// Makes this process a child subreaper (see the module doc).
///
/// # Errors
/// When the kernel refuses (Linux before 3.4).
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; it sets a flag of this
    // process.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Every process below `root`, parents before their children. A snapshot:
/// a process forked after its parent's line was read is missed, which is
/// why killing repeats the walk until the subreaper has no child left.
///
/// # Errors
/// When `/proc` cannot be listed (not mounted).
pub fn descendants(root: i32) -> io::Result<Vec<Proc>> {
    let mut children: HashMap<i32, Vec<Proc>> = HashMap::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        // A process may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((ppid, pgid)) = parse_stat(&stat) {
            children
                .entry(ppid)
                .or_default()
                .push(Proc { pid, ppid, pgid });
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for child in children.remove(&parent).unwrap_or_default() {
            next.push(child.pid);
            found.push(child);
        }
    }
    Ok(found)
}

/// `(ppid, pgid)` from the text of `/proc/<pid>/stat`: the fields after the
/// command name, which is in parentheses and may itself hold spaces and
/// parentheses (so the last `)` ends it).
fn parse_stat(stat: &str) -> Option<(i32, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some((ppid, pgid))
}

/// The command's tree, seen from its root (the guardian, or `lock` when
/// the guardian died).
#[derive(Debug, Clone, Copy)]
pub struct Tree {
    /// The guardian, or `lock`: every process of the tree descends from it.
    pub root: i32,
    /// The command's pid while it is not reaped: until then neither its
    /// pid nor the id of the group it leads can name another process.
    pub command: Option<i32>,
    /// The command's own process group, when it has one (not when it
    /// joined `lock`'s).
    pub group: Option<i32>,
}

impl Tree {
    /// Sends `signal` to the tree: to the command's group (one call reaches
    /// every member at once, even one forked a moment ago) and to every
    /// descendant of the root outside it (those that left: `setsid`, a
    /// double fork, groups of their own). Each process gets it once.
    ///
    /// While the command is unreaped its group (or, without one, its pid)
    /// is signalled before the walk through `/proc`, which takes a few ms
    /// on a busy machine; after that, the group only if the walk found a
    /// member, so a reused id is never signalled.
    ///
    /// A process the root may not signal (another user's, after a setuid
    /// `exec`) is skipped: the kernel refuses, and nothing else can be
    /// done. Returns how many descendants the walk found.
    pub fn signal(&self, signal: i32) -> usize {
        if let Some(command) = self.command {
            let target = self.group.map_or(command, |group| -group);
            // SAFETY: kill(2) on our unreaped child, or the group it leads.
            unsafe { libc::kill(target, signal) };
        }
        // Without /proc only what is signalled above is reached.
        let found = descendants(self.root).unwrap_or_default();
        if let (Some(group), None) = (self.group, self.command) {
            if found.iter().any(|p| p.pgid == group) {
                // SAFETY: kill(2) on a group a descendant is still in.
                unsafe { libc::kill(-group, signal) };
            }
        }
        for p in &found {
            let reached = Some(p.pgid) == self.group || Some(p.pid) == self.command;
            if !reached {
                // SAFETY: kill(2) on a descendant found just above; a pid
                // cannot be reused before its parent (one of ours, or the
                // root) reaps it.
                unsafe { libc::kill(p.pid, signal) };
            }
        }
        found.len()
    }

    /// SIGKILLs the tree over and over, reaping, until the root (this
    /// process) has no child left. Blocks: for `lock` when its guardian
    /// died and the tree fell to it (it is a subreaper too).
    pub fn kill_all(&self) {
        loop {
            self.signal(libc::SIGKILL);
            if reap(|_, _| {}) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Reaps every child of this process that has ended, handing each one's
/// pid and status to `ended`. Returns true when no child is left (for a
/// subreaper: no descendant at all).
pub fn reap(mut ended: impl FnMut(i32, ExitStatus)) -> bool {
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) with a valid pointer to a local.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            ended(pid, ExitStatus::from_raw(status));
            continue;
        }
        if pid == 0 {
            return false;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => {}
            // ECHILD: none left.
            _ => return true,
        }
    }
}

/// Whether `pid` names a living process (not a zombie).
pub fn alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks the pid.
    if unsafe { libc::kill(pid, 0) } != 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_stat_reads_past_a_command_name_with_spaces_and_parens() {
        let stat = "4242 (a (weird) name) S 17 4240 4240 0 -1 4194560 100 0";
        assert_eq!(parse_stat(stat), Some((17, 4240)));
        assert_eq!(parse_stat("12 (sh) R 1 12 12"), Some((1, 12)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn descendants_of_this_process_include_a_child_and_its_child() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        let found = descendants(me).unwrap();
        let pids: Vec<i32> = found.iter().map(|p| p.pid).collect();
        let child_pid = i32::try_from(child.id()).unwrap();
        assert!(pids.contains(&child_pid), "{found:?}");
        assert!(pids.contains(&grandchild), "{found:?}");
        let at = |pid| pids.iter().position(|&p| p == pid).unwrap();
        assert!(at(child_pid) < at(grandchild), "parents first: {found:?}");
        // SAFETY: kill(2) on the grandchild started above.
        unsafe { libc::kill(grandchild, libc::SIGKILL) };
        // sh's `wait` reaps the sleep before sh exits.
        child.wait().unwrap();
        assert!(!alive(grandchild));
    }
}
