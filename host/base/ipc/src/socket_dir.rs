//! The socket directory and the socket files in it: private to us, and
//! freed of sockets that no live process holds.
//!
//! NOTE [hijacked socket directory]: the default directory,
//! `/tmp/intranode-<euid>` without `XDG_RUNTIME_DIR`, has a name anyone
//! can predict, and anyone can create it first: as their own directory, as
//! a symbolic link, or open to all. Such a directory is never used (it
//! would let another user bind or connect where our ranks do); every job
//! then used to fail. Now the ranks fall back to a directory of the job's
//! own beside it, `<parent>/intranode-<euid>-<job id>`: the job id (rank
//! 0's pid, the time in nanoseconds and a counter) reaches every rank
//! through the store, so all of them name the same directory, and nobody
//! can prepare it in advance without guessing the id. The first rank
//! creates it 0700; every rank checks it with `lstat` (ours, a directory,
//! no group or other bits) exactly as the default one. It is removed when
//! the last channel of the job drops. Socket files that no live socket is
//! bound to (jobs that were killed) are removed from the directory when a
//! channel binds there.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use nix::unistd::geteuid;

use crate::IpcError;

/// The directory a channel of `job_id` binds in: `dir` when it passes
/// [`ensure_private_dir`]; when it does not and `fall_back` is set (it is
/// the default directory), the job's own directory beside it (NOTE
/// [hijacked socket directory]), returned as the second value so that the
/// channel removes it when done.
pub(crate) fn choose_dir(
    dir: &Path,
    job_id: &str,
    rank: usize,
    fall_back: bool,
) -> Result<(PathBuf, Option<PathBuf>), IpcError> {
    let refused = match ensure_private_dir(dir, rank) {
        Ok(()) => return Ok((dir.to_path_buf(), None)),
        Err(e @ IpcError::InsecureDir { .. }) if fall_back => e,
        Err(e) => return Err(e),
    };
    let parent = dir.parent().unwrap_or(Path::new("/"));
    let own = parent.join(format!("intranode-{}-{job_id}", geteuid().as_raw()));
    // Once per job would do; every rank says it, so keep it at debug for
    // all but rank 0.
    if rank == 0 {
        tracing::warn!(rank, fallback = %own.display(), "{refused}; using a directory of this job's own instead");
    } else {
        tracing::debug!(rank, fallback = %own.display(), "{refused}; using a directory of this job's own instead");
    }
    ensure_private_dir(&own, rank)?;
    Ok((own.clone(), Some(own)))
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
