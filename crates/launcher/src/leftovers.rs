//! Finding what ranks leave behind, and waiting for ranks without reaping
//! them (Linux: `/proc`, `waitid(WNOWAIT)`, `PR_SET_CHILD_SUBREAPER`).
//!
//! NOTE [leftover processes]: a rank may start children (a data loader,
//! `sh -c 'worker &'`) and exit or be killed before them. They stay in the
//! rank's process group unless they make a group of their own. So that the
//! group can still be signalled after the rank has exited, the launcher
//! learns of a rank's exit with `waitid(WNOWAIT)` and reaps it only at the
//! very end: while the rank's zombie exists, its pid, and so its group id,
//! cannot be reused, and every live process in that group is one the rank
//! left. The launcher is also a child subreaper, so processes that left
//! the group and lost their parent are re-parented to it rather than to
//! init, and are found as its children that are not ranks. When the job
//! ends, however it ends, both kinds get SIGTERM, then SIGKILL after the
//! grace period, and the summary names them.
//!
//! While the job runs, orphans that exit are reaped as they go (on every
//! SIGCHLD: [`reap_orphans`]), so a rank that starts thousands of
//! short-lived background jobs leaves no zombies piling up under the
//! launcher (they counted against the user's process limit). Ranks
//! themselves are never reaped there: the caller passes their pids, and
//! holds the same lock while it starts a rank, so a rank that exits at once
//! is known as one before the reaper can see it.
//!
//! When `/proc` cannot be read (out of descriptors, a restricted mount),
//! [`scan`] says so instead of reporting nothing, and the sweep falls back
//! to signalling every rank's group and reports that it could not look.
//!
//! On other systems the waiter reaps as before and nothing is swept.

use crate::exit::RankExit;

/// What a scan of the process table found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Scan {
    /// `(group id, pid)` of every live process in one of the groups asked
    /// about, rank leaders excluded.
    pub(crate) members: Vec<(u32, u32)>,
    /// Live children of the launcher that are not ranks (re-parented
    /// orphans).
    pub(crate) strays: Vec<u32>,
}

impl Scan {
    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty() && self.strays.is_empty()
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use nix::errno::Errno;
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
    use nix::unistd::Pid;

    use super::Scan;
    use crate::exit::RankExit;

    pub(crate) fn become_subreaper() -> Result<(), Errno> {
        nix::sys::prctl::set_child_subreaper(true)
    }

    /// Blocks until `pid` exits and reports how, leaving it unreaped.
    pub(crate) fn wait_for_exit(pid: u32) -> RankExit {
        let Ok(raw) = i32::try_from(pid) else {
            return RankExit::Unknown(format!("pid {pid} out of range"));
        };
        loop {
            match waitid(
                Id::Pid(Pid::from_raw(raw)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            ) {
                Ok(WaitStatus::Exited(_, code)) => return RankExit::Code(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => return RankExit::Signal(signal as i32),
                // Only exits were asked for; anything else, wait again.
                Ok(_) | Err(Errno::EINTR) => {}
                Err(err) => return RankExit::Unknown(format!("wait failed: {err}")),
            }
        }
    }

    /// `(state, ppid, pgrp)` from the text of `/proc/<pid>/stat`. The
    /// command name may hold spaces and parentheses, so fields are counted
    /// from the last `)`.
    pub(crate) fn parse_stat(stat: &str) -> Option<(char, u32, u32)> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        Some((state, ppid, pgrp))
    }

    pub(crate) fn scan(launcher: u32, groups: &[u32], ranks: &[u32]) -> std::io::Result<Scan> {
        let mut found = Scan::default();
        let dir = std::fs::read_dir("/proc")?;
        for entry in dir {
            let entry = entry?;
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if ranks.contains(&pid) {
                continue;
            }
            // Gone since the listing: nothing to do.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let Some((state, ppid, pgrp)) = parse_stat(&stat) else {
                continue;
            };
            let ours = ppid == launcher;
            if state == 'Z' {
                if ours && let Ok(raw) = i32::try_from(pid) {
                    // A re-parented orphan that has exited: reap it. It is
                    // our child, so this cannot take anyone else's.
                    let _ = waitpid(Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG));
                }
                continue;
            }
            if groups.contains(&pgrp) {
                found.members.push((pgrp, pid));
            } else if ours {
                found.strays.push(pid);
            }
        }
        found.members.sort_unstable();
        found.strays.sort_unstable();
        Ok(found)
    }

    /// Reaps the exited children of this process that are not in `ranks`.
    /// Children are listed from `/proc/self/task/<pid>/children`: ranks are
    /// started from the main thread, and orphans are re-parented to it (the
    /// first live thread of the subreaper). Where that file is missing,
    /// the whole process table is read instead.
    pub(crate) fn reap_orphans(ranks: &[u32]) {
        let me = std::process::id();
        let children: Vec<u32> =
            match std::fs::read_to_string(format!("/proc/self/task/{me}/children")) {
                Ok(text) => text
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect(),
                // `scan` reaps our exited non-rank children as it goes.
                Err(_) => {
                    let _ = scan(me, &[], ranks);
                    return;
                }
            };
        for pid in children {
            if ranks.contains(&pid) {
                continue;
            }
            if let Ok(raw) = i32::try_from(pid) {
                // Our own child, not a rank: it cannot be anyone else's.
                let _ = waitpid(Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG));
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use nix::errno::Errno;
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::Pid;

    use super::Scan;
    use crate::exit::RankExit;

    pub(crate) fn become_subreaper() -> Result<(), Errno> {
        Ok(())
    }

    /// Blocks until `pid` exits and reaps it: without `waitid(WNOWAIT)`
    /// the group cannot be held, so it is not swept either.
    pub(crate) fn wait_for_exit(pid: u32) -> RankExit {
        let Ok(raw) = i32::try_from(pid) else {
            return RankExit::Unknown(format!("pid {pid} out of range"));
        };
        loop {
            match waitpid(Pid::from_raw(raw), None) {
                Ok(WaitStatus::Exited(_, code)) => return RankExit::Code(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => return RankExit::Signal(signal as i32),
                Ok(_) | Err(Errno::EINTR) => {}
                Err(err) => return RankExit::Unknown(format!("wait failed: {err}")),
            }
        }
    }

    pub(crate) fn scan(_launcher: u32, _groups: &[u32], _ranks: &[u32]) -> std::io::Result<Scan> {
        Ok(Scan::default())
    }

    /// Without a subreaper no orphan comes to us.
    pub(crate) fn reap_orphans(_ranks: &[u32]) {}
}

/// Makes orphaned descendants of the ranks children of the launcher.
pub(crate) fn become_subreaper() -> Result<(), nix::errno::Errno> {
    imp::become_subreaper()
}

/// Blocks until the rank `pid` exits and reports how (on Linux leaving it
/// unreaped: NOTE [leftover processes]).
pub(crate) fn wait_for_exit(pid: u32) -> RankExit {
    imp::wait_for_exit(pid)
}

/// Live processes in `groups` (rank leaders `ranks` excluded) and live
/// children of `launcher` that are not ranks; reaps exited ones of the
/// latter. Fails when the process table cannot be read.
pub(crate) fn scan(launcher: u32, groups: &[u32], ranks: &[u32]) -> std::io::Result<Scan> {
    imp::scan(launcher, groups, ranks)
}

/// Reaps exited children that are not `ranks` (re-parented orphans).
pub(crate) fn reap_orphans(ranks: &[u32]) {
    imp::reap_orphans(ranks);
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::imp::parse_stat;

    #[test]
    fn stat_fields_after_odd_command_names() {
        let stat = "1234 (we ird) (name)) S 17 1200 1200 0 -1 4194560";
        assert_eq!(parse_stat(stat), Some(('S', 17, 1200)));
        assert_eq!(parse_stat("1 (init) Z 0 1 1"), Some(('Z', 0, 1)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S nope 1"), None);
    }

    #[test]
    fn finds_a_child_in_a_group() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let me = std::process::id();
        // The leader is excluded as a rank; as a group member it is found.
        let found = super::scan(me, &[pid], &[]).unwrap();
        assert_eq!(found.members, vec![(pid, pid)]);
        let found = super::scan(me, &[pid], &[pid]).unwrap();
        assert!(found.members.is_empty(), "{found:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
