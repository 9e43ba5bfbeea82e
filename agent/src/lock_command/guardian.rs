//! The guardian: a small process between `lock` and the command, so that
//! nothing of the command's tree outlives `lock`, even when `lock` is
//! killed with SIGKILL and can do nothing more.
//!
//! `lock` starts it by running its own binary again (`redlock-agent
//! lock-guardian`, hidden) once it holds the lock, in a process group of
//! its own, with one end of a socket pair. The guardian makes itself a
//! child subreaper, starts the command (in a new process group, or in
//! `lock`'s when `lock` is the foreground job of a terminal), and from
//! then on signals the command's whole tree when `lock` says so: the group
//! and every descendant that left it ([`super::tree`]). It exits only
//! when no descendant is left, with the command's status.
//!
//! The guardian keeps the lock's deadline itself, so that the tree never
//! outlives the lock's validity even when `lock` cannot act (stopped with
//! SIGSTOP or by a debugger, wedged, starved): `lock` tells it the last
//! moment the tree may run (`--until` at the start, an `until` line at each
//! renewal), and when the last moment told passes, the guardian SIGKILLs
//! the tree as `kill` would.
//!
//! ## Behavior
//! - `term` from `lock`: SIGTERM to the tree, once. `kill`: SIGKILL to the
//!   tree, again every 10 ms, until it is gone.
//! - `until <ms>` from `lock`: the new last moment, on `CLOCK_MONOTONIC`
//!   in milliseconds ([`monotonic_ms`]), which both processes read alike.
//!   Once it passes with the tree still running: SIGKILL to the tree until
//!   it is gone, as for `kill`, said on stderr.
//! - `lock` gone (its end of the socket closes, which the kernel does
//!   however `lock` died): SIGKILL to the tree until it is gone, then the
//!   lock is released through the agent's socket. `lock` asks for its hold
//!   to be left to expire if its connection closes, so the lock stays held
//!   until the tree is dead; if the release fails, it expires at the end
//!   of its validity.
//! - The command exits while processes of its tree remain: the guardian
//!   tells `lock` (`left <status>`), which stops them as it stops the
//!   command on a loss, and releases once they are gone.
//! - SIGTERM, SIGINT, SIGHUP and SIGQUIT to the guardian itself are
//!   ignored (blocked; the command's mask is emptied before it starts):
//!   `lock` decides. Killed itself, the guardian takes its direct child
//!   along (`PR_SET_PDEATHSIG`), and `lock`, a subreaper too, inherits and
//!   kills the rest.
//! - With the test-only switch off ([`super::TREE_SWITCH`]) it does what
//!   `lock` did before it existed: signals the command's process alone,
//!   is no subreaper, and exits as soon as the command does.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use super::{exit, shell_code, tree};

/// What `lock` asks of its guardian: the hidden `lock-guardian` command's
/// arguments.
#[derive(Debug, Clone)]
pub struct Guardian {
    /// The agent's socket, to release the lock when `lock` died.
    pub socket: PathBuf,
    /// The guardian's end of the socket pair `lock` holds the other end of.
    pub control_fd: RawFd,
    /// Stop the whole tree (false only under the test switch).
    pub tree: bool,
    /// Put the command in this process group (`lock`'s, when `lock` is the
    /// foreground job of a terminal) instead of a new one.
    pub join_group: Option<i32>,
    /// The last moment the tree may run unless `lock` tells a later one,
    /// in [`monotonic_ms`]; `None` (only under the test switch) keeps no
    /// deadline here.
    pub until: Option<u64>,
    pub command: Vec<OsString>,
}

/// A line `lock` sends its guardian.
pub(super) const TERM: &[u8] = b"term\n";
/// A line `lock` sends its guardian.
pub(super) const KILL: &[u8] = b"kill\n";

/// The line `lock` sends its guardian when it learns a new validity: the
/// tree may run until `until`, in [`monotonic_ms`], and no longer.
pub(super) fn until_line(until: u64) -> Vec<u8> {
    format!("until {until}\n").into_bytes()
}

/// Reads an `until` line (see [`until_line`]).
fn parse_until(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"until ")?;
    std::str::from_utf8(rest).ok()?.trim_end().parse().ok()
}

/// Now on `CLOCK_MONOTONIC`, in milliseconds: the one clock `lock` and its
/// guardian share (the boot's, not changed by setting the time).
pub fn monotonic_ms() -> u64 {
    // SAFETY: timespec is plain data that clock_gettime fills; the pointer
    // is to a local.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; CLOCK_MONOTONIC is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let millis = u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000_000;
    secs.saturating_mul(1000).saturating_add(millis)
}

/// A line the guardian sends `lock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Report {
    /// The command runs as this pid (and, in a new group, pgid).
    Started { pid: i32 },
    /// The command exited with this shell status, leaving processes of its
    /// tree behind.
    Left { code: u8 },
    /// The command could not be started.
    Error(String),
}

impl Report {
    fn line(&self) -> String {
        match self {
            Report::Started { pid } => format!("started {pid}\n"),
            Report::Left { code } => format!("left {code}\n"),
            Report::Error(error) => format!("error {}\n", error.replace('\n', " ")),
        }
    }

    pub(super) fn parse(line: &str) -> Option<Report> {
        let (word, rest) = line.split_once(' ')?;
        match word {
            "started" => rest.parse().ok().map(|pid| Report::Started { pid }),
            "left" => rest.parse().ok().map(|code| Report::Left { code }),
            "error" => Some(Report::Error(rest.to_string())),
            _ => None,
        }
    }
}

/// How long the guardian waits for the agent to answer its release.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the tree is SIGKILLed again while some of it is left.
const KILL_AGAIN: Duration = Duration::from_millis(10);

/// Runs the guardian; returns the command's shell status (see
/// [`shell_code`]), or [`exit::CANNOT_RUN`] when it could not start.
pub fn run(guardian: Guardian) -> u8 {
    let fd = guardian.control_fd;
    // SAFETY: F_GETFD only asks whether the number is an open descriptor.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        eprintln!(
            "redlock-agent lock-guardian: started by `redlock-agent lock` only \
             (descriptor {fd} is not open)"
        );
        return exit::USAGE;
    }
    // SAFETY: the descriptor is open (checked above), and `lock` passed it
    // for this process alone: nothing else here owns it.
    let control = unsafe { UnixStream::from_raw_fd(fd) };
    if let Err(e) = prepare(&control) {
        eprintln!("redlock-agent lock: cannot set up the command's guardian: {e}");
        return exit::CANNOT_RUN;
    }
    let children = match child_signals() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("redlock-agent lock: cannot set up the command's guardian: {e}");
            return exit::CANNOT_RUN;
        }
    };
    if guardian.tree {
        if let Err(e) = tree::become_subreaper() {
            eprintln!(
                "redlock-agent lock: cannot become a subreaper ({e}): processes that leave \
                 the command's process group will not be found"
            );
        }
    }
    let pid = match spawn(&guardian) {
        Ok(pid) => pid,
        Err(e) => {
            report(&control, &Report::Error(e.to_string()));
            return exit::CANNOT_RUN;
        }
    };
    report(&control, &Report::Started { pid });
    let watch = Watch {
        me: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        pid,
        tree: guardian.tree,
        group: (guardian.join_group.is_none()).then_some(pid),
        until: guardian.until,
    };
    let (status, lock_gone) = watch.run(&control, &children);
    let code = status.map_or(1, shell_code);
    if lock_gone {
        release(&guardian.socket);
    }
    code
}

/// The control socket: not inherited by the command, and read without
/// blocking.
fn prepare(control: &UnixStream) -> io::Result<()> {
    let fd = control.as_raw_fd();
    // SAFETY: fcntl(2) on a descriptor this process owns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    control.set_nonblocking(true)
}

/// Blocks the signals the guardian must outlive (see the module doc) and
/// SIGCHLD, and returns a signalfd that reads SIGCHLD.
fn child_signals() -> io::Result<OwnedFd> {
    // SAFETY: sigset_t is plain data that sigemptyset initialises; the
    // calls get valid pointers to locals.
    unsafe {
        let mut blocked: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut blocked);
        for signal in [
            libc::SIGCHLD,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            // Writing to a terminal from a background group with `tostop`.
            libc::SIGTTOU,
        ] {
            libc::sigaddset(&mut blocked, signal);
        }
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        let mut child: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut child);
        libc::sigaddset(&mut child, libc::SIGCHLD);
        let fd = libc::signalfd(-1, &child, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Starts the command: in its process group, killed if the guardian dies.
fn spawn(guardian: &Guardian) -> io::Result<i32> {
    let (program, args) = guardian
        .command
        .split_first()
        .ok_or_else(|| io::Error::other("no command given"))?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .process_group(guardian.join_group.unwrap_or(0));
    // SAFETY: getpid(2) cannot fail.
    let me = unsafe { libc::getpid() };
    // SAFETY: sigemptyset, pthread_sigmask, prctl and getppid are
    // async-signal-safe, and the closure allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // The child starts with the guardian's mask (SIGTERM and the
            // rest blocked): the command gets an empty one, as a shell
            // would give it.
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The guardian died before the line above: nobody would kill
            // this process with it.
            if libc::getppid() != me {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    // The child is reaped with waitpid(-1) below, never through `child`.
    Ok(i32::try_from(child.id()).unwrap_or(i32::MAX))
}

/// Writes one line to `lock`; lost if `lock` is gone, which the guardian
/// learns from the socket's end anyway.
fn report(mut control: &UnixStream, report: &Report) {
    let _ = control.write_all(report.line().as_bytes());
}

/// The command's tree and how to signal it.
struct Watch {
    /// The guardian's pid: the root of the tree.
    me: i32,
    /// The command's pid.
    pid: i32,
    tree: bool,
    /// The command's own process group, when it has one.
    group: Option<i32>,
    /// The last moment the tree may run, as first told.
    until: Option<u64>,
}

impl Watch {
    /// Serves `lock` until no descendant is left. Returns the command's
    /// status and whether `lock` went away.
    fn run(&self, control: &UnixStream, children: &OwnedFd) -> (Option<ExitStatus>, bool) {
        let mut status = None;
        let mut told_left = false;
        let mut termed = false;
        let mut killing = false;
        let mut lock_gone = false;
        let mut until = self.until;
        let mut input = Vec::new();
        loop {
            let none_left = tree::reap(|pid, ended| {
                if pid == self.pid {
                    status = Some(ended);
                }
            });
            if none_left {
                return (status, lock_gone);
            }
            if let (Some(ended), false) = (status, told_left) {
                told_left = true;
                report(
                    control,
                    &Report::Left {
                        code: shell_code(ended),
                    },
                );
            }
            // The deadline is checked on every wake-up, whatever woke the
            // guardian: a stream of lines from `lock` cannot put it off.
            let left_ms = until.map(|until| until.saturating_sub(monotonic_ms()));
            if !killing && left_ms == Some(0) {
                eprintln!(
                    "redlock-agent lock: the lock's last validity ran out and `lock` did not \
                     stop the command; killing the command's processes"
                );
                killing = true;
            }
            if killing {
                self.signal(libc::SIGKILL, status.is_some());
            }
            let mut fds = [
                libc::pollfd {
                    fd: if lock_gone { -1 } else { control.as_raw_fd() },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: children.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let timeout = if killing {
                i32::try_from(KILL_AGAIN.as_millis()).unwrap_or(10)
            } else {
                left_ms.map_or(-1, |ms| i32::try_from(ms).unwrap_or(i32::MAX))
            };
            // SAFETY: poll(2) on an array of two initialised pollfds.
            // EINTR (a signal that is not blocked) just loops.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if fds[0].revents != 0 {
                match read_control(control, &mut input) {
                    Ok(()) => {}
                    Err(_) => {
                        lock_gone = true;
                        killing = true;
                    }
                }
                while let Some(end) = input.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = input.drain(..=end).collect();
                    if line == TERM && !termed {
                        termed = true;
                        self.signal(libc::SIGTERM, status.is_some());
                    } else if line == KILL {
                        killing = true;
                    } else if let Some(told) = parse_until(&line) {
                        // The last validity told is the one that counts,
                        // but never when the switch turned it off.
                        until = until.map(|_| told);
                    }
                }
            }
            if fds[1].revents != 0 {
                drain(children);
            }
        }
    }

    /// `signal` to the tree, or, under the test switch, to the command
    /// alone while it is not reaped (its pid cannot be reused until then).
    fn signal(&self, signal: i32, reaped: bool) {
        if self.tree {
            tree::Tree {
                root: self.me,
                command: (!reaped).then_some(self.pid),
                group: self.group,
            }
            .signal(signal);
        } else if !reaped {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(self.pid, signal) };
        }
    }
}

/// Reads what `lock` sent into `input`. An error means `lock` is gone:
/// its end closed (however it died) or the socket failed.
fn read_control(mut control: &UnixStream, input: &mut Vec<u8>) -> io::Result<()> {
    let mut buffer = [0u8; 256];
    loop {
        match control.read(&mut buffer) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => input.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Empties the signalfd; the reap that follows looks at every child.
fn drain(children: &OwnedFd) {
    let mut buffer = [0u8; 128 * 8];
    loop {
        // SAFETY: read(2) into a local buffer of the size given.
        let n = unsafe {
            libc::read(
                children.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
            )
        };
        if n <= 0 {
            return;
        }
    }
}

/// After `lock` died and the tree is gone: releases the lock, whose hold
/// was left to expire when `lock`'s connection closed.
fn release(socket: &Path) {
    let (Ok(resource), Ok(token)) = (
        std::env::var("REDLOCK_RESOURCE"),
        std::env::var("REDLOCK_TOKEN"),
    ) else {
        return;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!(
                "redlock-agent lock: `lock` died and the command's processes were killed; \
                 cannot release the lock on {resource} ({e}): it expires at the end of its validity"
            );
            return;
        }
    };
    let client = redlock_client::Client::new(socket).with_timeout(RELEASE_TIMEOUT);
    // Several resources (`REDLOCK_RESOURCES`, one a line): their token
    // releases them all through the agent that granted it.
    let released = match std::env::var_os("REDLOCK_RESOURCES") {
        Some(_) => runtime.block_on(client.release_many(&token)),
        None => runtime.block_on(client.release(&resource, &token)),
    };
    match released {
        Ok(_) => eprintln!(
            "redlock-agent lock: `lock` died; the command's processes were killed and the \
             lock on {resource} released"
        ),
        Err(e) => eprintln!(
            "redlock-agent lock: `lock` died and the command's processes were killed; \
             cannot release the lock on {resource} ({e}): it expires at the end of its validity"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_read_back_as_sent() {
        for report in [
            Report::Started { pid: 4242 },
            Report::Left { code: 137 },
            Report::Error("No such file or directory (os error 2)".into()),
        ] {
            let line = report.line();
            assert_eq!(Report::parse(line.trim_end()), Some(report), "{line}");
        }
        assert_eq!(
            Report::parse("error two\nlines".replace('\n', " ").as_str()),
            Some(Report::Error("two lines".into()))
        );
        assert_eq!(parse_until(&until_line(1234)), Some(1234));
        assert_eq!(parse_until(b"until x\n"), None);
        assert_eq!(Report::parse("left"), None);
        assert_eq!(Report::parse("what 1"), None);
    }
}
