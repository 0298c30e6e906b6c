//! The socket directory and the socket files in it: private to us, and
//! freed of sockets that no live process holds.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use nix::unistd::geteuid;

use crate::IpcError;

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
