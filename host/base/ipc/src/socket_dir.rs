//! The socket directory and the socket files in it: private to us, and
//! freed of sockets that no live process holds.
//!
//! NOTE [hijacked socket directory]: the default directory,
//! `/tmp/intranode-<euid>` without `XDG_RUNTIME_DIR`, has a name anyone
//! can predict, and anyone can create it first: as their own directory, as
//! a symbolic link, or open to all. Such a directory is never used (it
//! would let another user bind or connect where our ranks do), but
//! failing the job would let any user stop every job of ours. So the job
//! falls back to a directory of its own beside it,
//! `<parent>/intranode-<euid>-<job id>`: nobody can prepare it in advance
//! without guessing the id (rank 0's pid, the time in nanoseconds and a
//! counter). One rank decides which directory the job uses ([`job_dir`],
//! before it publishes the job id) and every rank binds where it says: if
//! each rank looked at the default directory for itself, an attacker who
//! removed a squat at the right moment would split a job across two
//! directories and every rank would time out (7 of 20 jobs under a
//! flapping squat). Every rank checks the directory it is given with
//! `lstat` (ours, a directory, no group or other bits), creating it
//! 0700 if absent. The job's own directory is removed when the last
//! channel of the job drops; those of jobs killed before that are removed
//! by a later [`job_dir`] once no live socket is left in them and they are
//! older than [`STALE_DIR_AGE`]. Socket files that no live socket is bound
//! to (jobs that were killed) are removed from the directory when a
//! channel binds there.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use nix::unistd::geteuid;

use crate::error::IpcError;

/// A job's own directory older than this with no live socket in it
/// belongs to a job that was killed ([`job_dir`] removes it). Far longer
/// than the time between one rank choosing the directory and the ranks
/// binding in it.
pub(crate) const STALE_DIR_AGE: Duration = Duration::from_secs(600);

/// ASCII letters, digits, `-`, `_` and `.`, at least one.
pub(crate) fn valid_job_id(job_id: &str) -> bool {
    !job_id.is_empty()
        && job_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What the job's own directory beside `default` is called.
fn own_dir_name(job_id: &str) -> String {
    format!("intranode-{}-{job_id}", geteuid().as_raw())
}

/// The job's own directory beside the default one `default`.
pub(crate) fn own_dir(default: &Path, job_id: &str) -> PathBuf {
    default
        .parent()
        .unwrap_or(Path::new("/"))
        .join(own_dir_name(job_id))
}

/// NOTE [hijacked socket directory]: the directory every channel of
/// `job_id` binds in, decided once: `default` when it passes
/// [`ensure_private_dir`] (created if absent), else the job's own beside
/// it (created, if it can be; a rank that then cannot use it says why).
/// Removes the own directories of killed jobs beside it first.
pub(crate) fn job_dir(default: &Path, job_id: &str) -> PathBuf {
    // A job id `IpcChannel::new` refuses must not name a path here.
    if !valid_job_id(job_id) {
        return default.to_path_buf();
    }
    if let Some(parent) = default.parent() {
        remove_stale_job_dirs(parent);
    }
    let refused = match ensure_private_dir(default, 0) {
        Ok(()) => return default.to_path_buf(),
        Err(e) => e,
    };
    let own = own_dir(default, job_id);
    tracing::warn!(fallback = %own.display(), "{refused}; this job uses a directory of its own instead");
    if let Err(e) = ensure_private_dir(&own, 0) {
        tracing::debug!(error = %e, "could not prepare the job's own socket directory");
    }
    own
}

/// Removes the own directories (`intranode-<euid>-<job id>`) of jobs
/// killed before their channels could: ours, private, older than
/// [`STALE_DIR_AGE`], and empty once their dead socket files are gone. A
/// live job's directory holds a live socket, so `rmdir` leaves it.
pub(crate) fn remove_stale_job_dirs(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    let prefix = own_dir_name("");
    let euid = geteuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with(&prefix)) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age >= STALE_DIR_AGE);
        if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o077 != 0 || !old {
            continue;
        }
        remove_dead_sockets(&path);
        // Fails when not empty: a live job, or files not ours to judge.
        if fs::remove_dir(&path).is_ok() {
            tracing::debug!(path = %path.display(), "removed the socket directory of a killed job");
        }
    }
}

/// The directory a channel of `job_id` binds in: `dir` when it passes
/// [`ensure_private_dir`]. When `dir` is the job's own directory beside
/// `default` (as [`job_dir`] chose it), it is returned as the second
/// value too, so that the channel removes it when done. The default
/// directory refused is an error naming [`job_dir`]'s way out: a rank
/// never falls back by itself (NOTE [hijacked socket directory]).
pub(crate) fn choose_dir(
    dir: &Path,
    job_id: &str,
    rank: usize,
    default: &Path,
) -> Result<(PathBuf, Option<PathBuf>), IpcError> {
    match ensure_private_dir(dir, rank) {
        Ok(()) => {}
        Err(IpcError::InsecureDir { rank, path, reason }) if dir == default => {
            return Err(IpcError::InsecureDir {
                rank,
                path,
                reason: format!(
                    "{reason}; one rank should choose the job's directory with \
                     IpcChannel::job_dir and publish it with the job id"
                ),
            });
        }
        Err(e) => return Err(e),
    }
    let own = (dir == own_dir(default, job_id)).then(|| dir.to_path_buf());
    Ok((dir.to_path_buf(), own))
}

/// Removes the socket files in `dir` that no live socket is bound to:
/// those of jobs that were killed before their channels could clean up.
/// Only sockets are touched, and only ours (the directory is private).
pub(crate) fn remove_dead_sockets(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let euid = geteuid().as_raw();
    for entry in entries.flatten() {
        let path = entry.path();
        let is_ours =
            fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket() && m.uid() == euid);
        if !is_ours || path.extension().is_none_or(|e| e != "sock") {
            continue;
        }
        let Ok(addr) = UnixAddr::new(&path) else {
            continue;
        };
        // Live ones answer "in use": that is the normal case, not an error.
        match remove_stale_socket(&path, &addr, 0) {
            Ok(()) | Err(IpcError::SocketInUse { .. }) => {}
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "could not check a socket file")
            }
        }
    }
}

/// Creates `dir` (mode 0700) when absent; refuses it unless it is a real
/// directory owned by our effective uid with no group or other bits.
pub(crate) fn ensure_private_dir(dir: &Path, rank: usize) -> Result<(), IpcError> {
    let io_err = |op: &'static str, source: io::Error| IpcError::Io {
        rank,
        op,
        path: dir.to_path_buf(),
        source,
    };
    match fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| io_err("create directory", e))?;
        }
        Err(e) => return Err(io_err("stat directory", e)),
    }
    // Checked again after creating: another process may have won the race
    // and created it with other permissions.
    let meta = fs::symlink_metadata(dir).map_err(|e| io_err("stat directory", e))?;
    let insecure = |reason: String| IpcError::InsecureDir {
        rank,
        path: dir.to_path_buf(),
        reason,
    };
    if meta.file_type().is_symlink() {
        return Err(insecure("it is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(insecure("it is not a directory".into()));
    }
    let euid = geteuid().as_raw();
    if meta.uid() != euid {
        return Err(insecure(format!(
            "owned by uid {}, not by us (uid {euid})",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(insecure(format!(
            "mode {mode:04o} lets group or others in; expected 0700"
        )));
    }
    Ok(())
}

/// Removes a socket file at `path` that no live socket is bound to.
pub(crate) fn remove_stale_socket(
    path: &Path,
    addr: &UnixAddr,
    rank: usize,
) -> Result<(), IpcError> {
    let io_err = |op: &'static str, source: io::Error| IpcError::Io {
        rank,
        op,
        path: path.to_path_buf(),
        source,
    };
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("stat socket path", e)),
    };
    if !meta.file_type().is_socket() {
        return Err(IpcError::InvalidArgument {
            rank,
            detail: format!(
                "{} exists and is not a socket; not removing it",
                path.display()
            ),
        });
    }
    // A datagram connect succeeds only while some socket is bound there.
    let probe = socket::socket(
        AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| io_err("socket to probe", e.into()))?;
    match socket::connect(probe.as_raw_fd(), addr) {
        Ok(()) => Err(IpcError::SocketInUse {
            rank,
            path: path.to_path_buf(),
        }),
        Err(Errno::ECONNREFUSED) => match fs::remove_file(path) {
            Ok(()) => {
                tracing::debug!(rank, path = %path.display(), "removed stale socket file");
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove stale socket", e)),
        },
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(io_err("probe socket", e.into())),
    }
}
