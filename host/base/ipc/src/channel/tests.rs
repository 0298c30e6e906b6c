// (Over 700 lines, 945: 22 tests, each a whole exchange between real sockets
// and processes, sharing the helpers at the top.)

//! Unit tests: threads as ranks, forked and spawned processes as ranks
//! and as intruders.

use std::fs::{DirBuilder, File};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::sys::socket::MsgFlags;

use super::*;
use crate::wire::encode_header;

const LONG: Duration = Duration::from_secs(10);

/// A private scratch directory, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new(name: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("intranode-ipc-{}-{name}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .expect("create test dir");
        Self(p)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// An unlinked read-write file holding `text` at offset 0.
fn marker_file(dir: &Path, text: &str) -> File {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // The pid too: the ranks of `separate_processes_exchange_fds` are
    // processes with counters of their own, creating files in one
    // directory, and `create_new` must not race between them.
    let p = dir.join(format!("file-{}-{n}", std::process::id()));
    let f = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .expect("create marker file");
    fs::remove_file(&p).expect("unlink marker file");
    f.write_all_at(format!("{text:<32}").as_bytes(), 0)
        .expect("write marker");
    f
}

fn read_marker(fd: OwnedFd) -> (File, String) {
    let f = File::from(fd);
    let mut buf = [0u8; 32];
    f.read_exact_at(&mut buf, 0).expect("read marker");
    let text = String::from_utf8_lossy(&buf).trim_end().to_string();
    (f, text)
}

/// Runs `f` on `world` threads, each with its own channel (rank = index).
fn with_ranks<T: Send>(
    dir: &Path,
    job: &str,
    world: usize,
    timeout: Duration,
    f: impl Fn(&mut IpcChannel) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let f = &f;
                s.spawn(move || {
                    let mut ch =
                        IpcChannel::new(dir, job, rank, world, timeout).expect("create channel");
                    f(&mut ch)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// Each rank writes its marker into slot `rank` of the file behind `fd`.
fn stamp(fd: &File, rank: usize, round: usize) {
    let text = format!("{rank}:{round:<6}");
    fd.write_all_at(text.as_bytes(), 64 + 8 * rank as u64)
        .expect("stamp");
}

fn check_stamps(f: &File, world: usize, round: usize, skip: Option<usize>) {
    for r in (0..world).filter(|&r| Some(r) != skip) {
        let mut buf = [0u8; 8];
        f.read_exact_at(&mut buf, 64 + 8 * r as u64)
            .expect("read stamp");
        assert_eq!(
            buf,
            *format!("{r}:{round:<6}").as_bytes(),
            "stamp of rank {r}"
        );
    }
}

#[test]
fn all_gather_delivers_working_fds_over_rounds() {
    let dir = TestDir::new("allgather");
    let world = 4;
    with_ranks(&dir.0, "ag", world, LONG, |ch| {
        let rank = ch.rank();
        for round in 0..12 {
            // Uneven pacing so that fast ranks run rounds ahead.
            std::thread::sleep(Duration::from_millis(((rank * 7 + round * 3) % 5) as u64));
            let mine = marker_file(&dir.0, &format!("round {round} rank {rank}"));
            let fds = ch.all_gather_fds(mine.as_fd()).expect("all_gather");
            assert_eq!(fds.len(), world);
            for (src, fd) in fds.into_iter().enumerate() {
                let (f, text) = read_marker(fd);
                assert_eq!(text, format!("round {round} rank {src}"));
                stamp(&f, rank, round);
            }
            // Second gather doubles as a barrier: after it, every rank
            // has written through its descriptor for our file.
            ch.all_gather_fds(mine.as_fd()).expect("barrier");
            check_stamps(&mine, world, round, None);
        }
    });
}

#[test]
fn broadcast_delivers_working_fds_with_rotating_root() {
    let dir = TestDir::new("bcast");
    let world = 4;
    with_ranks(&dir.0, "bc", world, LONG, |ch| {
        let rank = ch.rank();
        for round in 0..8 {
            let root = round % world;
            std::thread::sleep(Duration::from_millis(((rank + round) % 3) as u64));
            let mine = (rank == root).then(|| marker_file(&dir.0, &format!("bcast {round}")));
            let fd = ch
                .broadcast_fds(root, mine.as_ref().map(|f| f.as_fd()))
                .expect("broadcast");
            let (f, text) = read_marker(fd);
            assert_eq!(text, format!("bcast {round}"));
            stamp(&f, rank, round);
            let dummy = File::open("/dev/null").expect("open /dev/null");
            ch.all_gather_fds(dummy.as_fd()).expect("barrier");
            if let Some(mine) = &mine {
                check_stamps(mine, world, round, None);
            }
        }
    });
}

#[test]
fn send_recv_pipe_ring_with_collectives_interleaved() {
    let dir = TestDir::new("p2p");
    let world = 4;
    with_ranks(&dir.0, "p2p", world, LONG, |ch| {
        let rank = ch.rank();
        let next = (rank + 1) % world;
        let prev = (rank + world - 1) % world;
        for round in 0..5 {
            // Send the write end of a pipe to `next`; it writes back.
            let (mut reader, writer) = io::pipe().expect("pipe");
            let payload = format!("ring {round} from {rank}");
            ch.send_fd(next, writer.as_fd(), payload.as_bytes())
                .expect("send_fd");
            drop(writer);
            // A collective in between: the send_fd message from `prev`
            // is buffered while it runs.
            let dummy = File::open("/dev/null").expect("open /dev/null");
            ch.all_gather_fds(dummy.as_fd()).expect("all_gather");
            let (src, fd, got) = ch.recv_fd().expect("recv_fd");
            assert_eq!(src, prev);
            assert_eq!(got, format!("ring {round} from {prev}").as_bytes());
            let mut w = File::from(fd);
            w.write_all(format!("hello {prev} from {rank}").as_bytes())
                .expect("write pipe");
            drop(w);
            let mut back = String::new();
            reader.read_to_string(&mut back).expect("read pipe");
            assert_eq!(back, format!("hello {rank} from {next}"));
        }
    });
}

#[test]
fn send_waits_for_late_peer() {
    let dir = TestDir::new("late");
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            let mut ch = IpcChannel::new(&dir.0, "late", 0, 2, LONG).expect("rank 0");
            let f = marker_file(&dir.0, "late");
            ch.send_fd(1, f.as_fd(), b"x").expect("send to late peer");
        });
        std::thread::sleep(Duration::from_millis(200));
        let mut ch = IpcChannel::new(&dir.0, "late", 1, 2, LONG).expect("rank 1");
        let (src, fd, payload) = ch.recv_fd().expect("recv");
        assert_eq!((src, payload.as_slice()), (0, &b"x"[..]));
        assert_eq!(read_marker(fd).1, "late");
        sender.join().expect("sender");
    });
}

#[test]
fn all_gather_times_out_naming_the_silent_rank() {
    let dir = TestDir::new("timeout");
    let timeout = Duration::from_millis(300);
    let mut r0 = IpcChannel::new(&dir.0, "to", 0, 3, timeout).expect("rank 0");
    let _r1 = IpcChannel::new(&dir.0, "to", 1, 3, timeout).expect("rank 1");
    let mut r2 = IpcChannel::new(&dir.0, "to", 2, 3, timeout).expect("rank 2");
    // Rank 2 contributes (it cannot complete either: rank 1 is silent).
    let f = marker_file(&dir.0, "t");
    let err = r2
        .all_gather_fds(f.as_fd())
        .expect_err("rank 2 must time out");
    assert!(matches!(err, IpcError::Timeout { rank: 2, .. }), "{err}");
    let start = Instant::now();
    let err = r0
        .all_gather_fds(f.as_fd())
        .expect_err("rank 0 must time out");
    let elapsed = start.elapsed();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            IpcError::Timeout {
                rank: 0,
                timeout_ms: 300,
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("all_gather_fds round 0"), "{text}");
    assert!(text.contains("rank(s) [1]"), "{text}");
    assert!(
        elapsed >= timeout && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
}

#[test]
fn recv_and_send_time_out() {
    let dir = TestDir::new("timeout2");
    let timeout = Duration::from_millis(300);
    let mut r0 = IpcChannel::new(&dir.0, "to2", 0, 2, timeout).expect("rank 0");
    let start = Instant::now();
    let err = r0.recv_fd().expect_err("nothing was sent");
    assert!(start.elapsed() >= timeout);
    assert!(
        err.to_string().contains("send_fd message from any rank"),
        "{err}"
    );
    // Rank 1 never binds: the send gives up after the timeout.
    let f = marker_file(&dir.0, "t");
    let err = r0.send_fd(1, f.as_fd(), b"").expect_err("peer never binds");
    let text = err.to_string();
    assert!(
        text.contains("to rank 1") && text.contains("to2-1.sock"),
        "{text}"
    );
}

#[test]
fn pid_check_rejects_and_closes_the_fd() {
    let dir = TestDir::new("pid");
    let mut r0 = IpcChannel::new(&dir.0, "pid", 0, 2, LONG).expect("rank 0");
    let mut r1 = IpcChannel::new(&dir.0, "pid", 1, 2, LONG).expect("rank 1");
    // Our own pid is allowed: accepted.
    let me = std::process::id() as i32;
    r0.set_allowed_pids(vec![me]);
    let (_reader, writer) = io::pipe().expect("pipe");
    r1.send_fd(0, writer.as_fd(), b"ok").expect("send");
    assert_eq!(r0.recv_fd().expect("allowed pid").0, 1);
    // Not in the set: rejected, and the passed write end is closed.
    r0.set_allowed_pids(vec![me + 1_000_000]);
    let (mut reader, writer) = io::pipe().expect("pipe");
    r1.send_fd(0, writer.as_fd(), b"no").expect("send");
    drop(writer);
    let err = r0.recv_fd().expect_err("pid not allowed");
    let text = err.to_string();
    assert!(matches!(err, IpcError::Rejected { rank: 0, .. }), "{text}");
    assert!(text.contains("not a process of this job"), "{text}");
    let mut buf = [0u8; 1];
    assert_eq!(
        reader.read(&mut buf).expect("read"),
        0,
        "write end must be closed"
    );
}

#[test]
fn mismatched_collectives_are_a_protocol_error() {
    let dir = TestDir::new("mismatch");
    // Both channels stay bound until both calls have returned.
    let done = std::sync::Barrier::new(2);
    let results = with_ranks(&dir.0, "mm", 2, Duration::from_secs(2), |ch| {
        let f = File::open("/dev/null").expect("open /dev/null");
        let result = if ch.rank() == 0 {
            ch.all_gather_fds(f.as_fd()).map(drop)
        } else {
            ch.broadcast_fds(1, Some(f.as_fd())).map(drop)
        };
        done.wait();
        result
    });
    let err = results[0]
        .as_ref()
        .expect_err("rank 0 must see the mismatch");
    assert!(
        matches!(
            err,
            IpcError::Protocol {
                rank: 0,
                peer: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("broadcast_fds"), "{err}");
}

#[test]
fn invalid_arguments() {
    let dir = TestDir::new("args");
    let t = Duration::from_millis(100);
    for (job, rank, world) in [("j", 2, 2), ("j", 0, 0), ("a/b", 0, 1), ("", 0, 1)] {
        let err = IpcChannel::new(&dir.0, job, rank, world, t).expect_err("invalid");
        assert!(matches!(err, IpcError::InvalidArgument { .. }), "{err}");
    }
    let mut ch = IpcChannel::new(&dir.0, "j", 0, 2, t).expect("channel");
    let f = File::open("/dev/null").expect("open /dev/null");
    let big = vec![0u8; MAX_PAYLOAD_BYTES + 1];
    assert!(matches!(
        ch.send_fd(1, f.as_fd(), &big),
        Err(IpcError::InvalidArgument { .. })
    ));
    assert!(matches!(
        ch.send_fd(2, f.as_fd(), b""),
        Err(IpcError::InvalidArgument { .. })
    ));
    assert!(matches!(
        ch.broadcast_fds(0, None),
        Err(IpcError::InvalidArgument { .. })
    ));
}

#[test]
fn directory_permissions() {
    let base = TestDir::new("perm");
    // Absent (with a missing parent): created with mode 0700.
    let fresh = base.0.join("a").join("b");
    let ch = IpcChannel::new(&fresh, "j", 0, 1, LONG).expect("create dir");
    let mode = fs::metadata(&fresh).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    drop(ch);
    // World-accessible: refused.
    let open = base.0.join("open");
    fs::create_dir(&open).expect("mkdir");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod");
    let err = IpcChannel::new(&open, "j", 0, 1, LONG).expect_err("0777 must be refused");
    assert!(matches!(err, IpcError::InsecureDir { .. }), "{err}");
    assert!(err.to_string().contains("0777"), "{err}");
    // Group-readable: refused too.
    fs::set_permissions(&open, fs::Permissions::from_mode(0o740)).expect("chmod");
    assert!(IpcChannel::new(&open, "j", 0, 1, LONG).is_err());
    // Not a directory: refused.
    let file = base.0.join("file");
    fs::write(&file, b"").expect("write");
    assert!(matches!(
        IpcChannel::new(&file, "j", 0, 1, LONG),
        Err(IpcError::InsecureDir { .. })
    ));
    // A symlink to a private directory: refused.
    let link = base.0.join("link");
    std::os::unix::fs::symlink(&fresh, &link).expect("symlink");
    assert!(matches!(
        IpcChannel::new(&link, "j", 0, 1, LONG),
        Err(IpcError::InsecureDir { .. })
    ));
}

#[test]
fn stale_socket_is_replaced_and_own_socket_removed_on_drop() {
    let dir = TestDir::new("stale");
    let path = dir.0.join("st-0.sock");
    drop(UnixDatagram::bind(&path).expect("bind stale"));
    assert!(path.exists(), "std leaves the socket file behind");
    let ch = IpcChannel::new(&dir.0, "st", 0, 1, LONG).expect("replace stale socket");
    assert_eq!(
        ch.socket_path(),
        fs::canonicalize(&dir.0).expect("canon").join("st-0.sock")
    );
    drop(ch);
    assert!(!path.exists(), "drop removes our socket file");

    // A live socket at our path is not stolen.
    let live = UnixDatagram::bind(&path).expect("bind live");
    let err = IpcChannel::new(&dir.0, "st", 0, 1, LONG).expect_err("live socket");
    assert!(
        matches!(err, IpcError::SocketInUse { rank: 0, .. }),
        "{err}"
    );
    drop(live);
    fs::remove_file(&path).expect("cleanup");

    // A regular file at our path is not removed.
    fs::write(&path, b"keep").expect("write");
    assert!(IpcChannel::new(&dir.0, "st", 0, 1, LONG).is_err());
    assert_eq!(fs::read(&path).expect("read"), b"keep");
}

#[test]
fn socket_file_and_directory_are_private() {
    let base = TestDir::new("private");
    let dir = base.0.join("sockets");
    let ch = IpcChannel::new(&dir, "priv", 0, 2, LONG).expect("channel");
    let euid = geteuid().as_raw();
    let dir_meta = fs::metadata(&dir).expect("stat dir");
    assert_eq!(dir_meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(dir_meta.uid(), euid);
    let sock = fs::symlink_metadata(ch.socket_path()).expect("stat socket");
    assert!(sock.file_type().is_socket());
    assert_eq!(sock.permissions().mode() & 0o777, 0o600);
    assert_eq!(sock.uid(), euid);
}

/// A process of another user: root drops to uid 65534 in a forked
/// child. It cannot even reach the socket through the private
/// directory; and a socket it connected while still root (as a
/// process that slipped past the directory would be) carries its new
/// uid in SCM_CREDENTIALS, and the message is rejected.
#[test]
fn other_users_are_kept_out() {
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::{ForkResult, Uid, fork, setresuid};

    if !geteuid().is_root() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED other_users_are_kept_out: switching to another uid needs root"
        );
        return;
    }
    let dir = TestDir::new("uid");
    let mut r0 = IpcChannel::new(&dir.0, "uid", 0, 2, Duration::from_secs(5)).expect("rank 0");
    let target = r0.peer_addrs[0];
    let message = encode_header(Kind::PointToPoint, 1, 2, 0);
    let nobody = Uid::from_raw(65534);
    // Prepared before fork: the child allocates nothing.
    let probe = socket::socket(
        AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    socket::connect(probe.as_raw_fd(), &target).expect("connect as root");
    let late = socket::socket(
        AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    // SAFETY: the child only makes system calls (setresuid, sendto,
    // send, _exit) on values prepared before the fork: no allocation,
    // no lock, nothing another thread of the harness could hold.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = (|| {
                if setresuid(nobody, nobody, nobody).is_err() {
                    return 10;
                }
                // Through the 0700 directory: no entry.
                match socket::sendto(late.as_raw_fd(), &message, &target, MsgFlags::empty()) {
                    Err(Errno::EACCES) => {}
                    Ok(_) => return 11,
                    Err(_) => return 12,
                }
                // Over the socket connected before dropping root.
                match socket::send(probe.as_raw_fd(), &message, MsgFlags::empty()) {
                    Ok(_) => 0,
                    Err(_) => 13,
                }
            })();
            // SAFETY: ends the forked child without running the
            // parent's exit handlers or destructors.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            let status = waitpid(child, None).expect("waitpid");
            assert_eq!(
                status,
                WaitStatus::Exited(child, 0),
                "child of uid 65534: 10 setresuid, 11/12 the directory let it in, 13 send failed"
            );
            let err = r0.recv_fd().expect_err("another uid must be rejected");
            let text = err.to_string();
            assert!(matches!(err, IpcError::Rejected { rank: 0, .. }), "{text}");
            assert!(text.contains("uid 65534 is not ours"), "{text}");
        }
    }
}

/// A datagram from a socket without a name (a same-user process that
/// never bound one) is rejected, not a panic inside nix.
#[test]
fn unnamed_sender_is_rejected_not_a_panic() {
    let dir = TestDir::new("unnamed");
    let mut r0 = IpcChannel::new(&dir.0, "un", 0, 2, LONG).expect("rank 0");
    let sender = UnixDatagram::unbound().expect("socket");
    let header = encode_header(Kind::PointToPoint, 1, 2, 0);
    sender
        .send_to(&header, r0.socket_path())
        .expect("send from an unnamed socket");
    let err = r0.recv_fd().expect_err("no sender address");
    let text = err.to_string();
    assert!(matches!(err, IpcError::Rejected { rank: 0, .. }), "{text}");
    assert!(text.contains("not from rank 1's socket"), "{text}");
    // The channel still works afterwards.
    let mut r1 = IpcChannel::new(&dir.0, "un", 1, 2, LONG).expect("rank 1");
    let f = File::open("/dev/null").expect("open /dev/null");
    r1.send_fd(0, f.as_fd(), b"ok").expect("send");
    assert_eq!(r0.recv_fd().expect("a real peer").0, 1);
}

const FOREIGN_ENV: &str = "INTRANODE_IPC_TEST_FOREIGN";

/// The sender of `a_process_outside_the_job_is_rejected`; a no-op
/// unless that test started this process.
#[test]
fn foreign_process_child() {
    let Ok(dir) = std::env::var(FOREIGN_ENV) else {
        return;
    };
    let mut ch = IpcChannel::new(Path::new(&dir), "foreign", 1, 2, LONG).expect("channel");
    let (_reader, writer) = io::pipe().expect("pipe");
    ch.send_fd(0, writer.as_fd(), b"let me in").expect("send");
}

/// Same user, right socket path, right rank, but a pid outside the
/// job's (as exchanged through the store): rejected, with its
/// descriptor closed.
#[test]
fn a_process_outside_the_job_is_rejected() {
    if std::env::var_os(FOREIGN_ENV).is_some() || std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = TestDir::new("foreign");
    let mut r0 = IpcChannel::new(&dir.0, "foreign", 0, 2, LONG).expect("rank 0");
    // The job is this process alone (plus a pid that is not the child).
    r0.set_allowed_pids(vec![std::process::id() as i32, 1]);
    let exe = std::env::current_exe().expect("current exe");
    let child = std::process::Command::new(exe)
        .args(["--exact", "channel::tests::foreign_process_child"])
        .args(["--nocapture", "--test-threads=1"])
        .env(FOREIGN_ENV, &dir.0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the foreign process");
    let child_pid = child.id();
    let err = r0.recv_fd().expect_err("a foreign pid must be rejected");
    let text = err.to_string();
    assert!(matches!(err, IpcError::Rejected { rank: 0, .. }), "{text}");
    assert!(
        text.contains(&format!("pid {child_pid}")) && text.contains("not a process of this job"),
        "{text}"
    );
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
}

#[test]
fn default_dir_is_absolute() {
    assert!(IpcChannel::default_dir().is_absolute());
}

const CHILD_ENV: &str = "INTRANODE_IPC_TEST_CHILD";

/// Rank `k > 0` of `separate_processes_exchange_fds`; a no-op unless
/// that test spawned this process.
#[test]
fn separate_process_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, ':');
    let rank: usize = parts.next().and_then(|s| s.parse().ok()).expect("rank");
    let world: usize = parts.next().and_then(|s| s.parse().ok()).expect("world");
    let dir = PathBuf::from(parts.next().expect("dir"));
    let mut ch = IpcChannel::new(&dir, "proc", rank, world, LONG).expect("child channel");
    let mine = marker_file(&dir, &format!("pid {}", std::process::id()));
    let fds = ch.all_gather_fds(mine.as_fd()).expect("child all_gather");
    // Every peer's file reads as "pid <something>"; ours as our pid.
    for (src, fd) in fds.into_iter().enumerate() {
        let (_, text) = read_marker(fd);
        assert!(text.starts_with("pid "), "rank {src}: {text}");
    }
    let fd = ch.broadcast_fds(0, None).expect("child broadcast");
    stamp(&File::from(fd), rank, 0);
    let dummy = File::open("/dev/null").expect("open /dev/null");
    ch.all_gather_fds(dummy.as_fd()).expect("child barrier");
}

#[test]
fn separate_processes_exchange_fds() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = TestDir::new("proc");
    let world = 4;
    let exe = std::env::current_exe().expect("current exe");
    let children: Vec<_> = (1..world)
        .map(|rank| {
            std::process::Command::new(&exe)
                .args(["--exact", "channel::tests::separate_process_child"])
                .args(["--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, format!("{rank}:{world}:{}", dir.0.display()))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn child rank")
        })
        .collect();
    let mut ch = IpcChannel::new(&dir.0, "proc", 0, world, LONG).expect("rank 0");
    let mut pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
    pids.push(std::process::id() as i32);
    ch.set_allowed_pids(pids.clone());

    let mine = marker_file(&dir.0, &format!("pid {}", std::process::id()));
    let fds = ch.all_gather_fds(mine.as_fd()).expect("all_gather");
    for (src, fd) in fds.into_iter().enumerate() {
        let (_, text) = read_marker(fd);
        // Rank k's file names rank k's pid: the descriptors crossed
        // process boundaries intact and in rank order.
        let expected = if src == 0 {
            pids[world - 1]
        } else {
            pids[src - 1]
        };
        assert_eq!(text, format!("pid {expected}"));
    }
    let shared = marker_file(&dir.0, "shared");
    let own = ch
        .broadcast_fds(0, Some(shared.as_fd()))
        .expect("broadcast");
    stamp(&File::from(own), 0, 0);
    let dummy = File::open("/dev/null").expect("open /dev/null");
    ch.all_gather_fds(dummy.as_fd()).expect("barrier");
    // Each child wrote its stamp through the descriptor it received.
    check_stamps(&shared, world, 0, None);

    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("wait child");
        assert!(
            out.status.success(),
            "child rank {} failed:\n{}\n{}",
            i + 1,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Set in the child process of [`a_hijacked_default_dir_falls_back`].
const HIJACK_CHILD_ENV: &str = "INTRANODE_IPC_HIJACK_CHILD";

/// Two ranks exchanging a descriptor through the default directory of
/// this process (`TMPDIR` set by the parent), then reporting where they
/// bound and whether the job's own directory went away afterwards.
#[test]
fn hijacked_default_dir_child() {
    if std::env::var_os(HIJACK_CHILD_ENV).is_none() {
        return;
    }
    let job = format!("hijack-{}", std::process::id());
    // Rank 0's choice, published with the job id.
    let dir = IpcChannel::job_dir(&job);
    let scratch = std::env::temp_dir();
    let bound = with_ranks(&dir, &job, 2, LONG, |ch| {
        let file = marker_file(&scratch, &format!("rank {}", ch.rank()));
        let fds = ch.all_gather_fds(file.as_fd()).expect("all_gather_fds");
        let (_, text) = read_marker(fds.into_iter().nth(1 - ch.rank()).expect("peer fd"));
        assert_eq!(text, format!("rank {}", 1 - ch.rank()));
        ch.socket_path().parent().expect("dir").to_path_buf()
    });
    assert_eq!(bound[0], bound[1]);
    println!("bound-in {}", bound[0].display());
    println!("left-behind {}", bound[0].exists());
}

/// Attack: another user (or a careless one) pre-creates the predictable
/// default directory, as their own, as a symbolic link, open to everyone,
/// or as a file. The job must not fail: the ranks bind in a directory of
/// the job's own and remove it when done (NOTE [hijacked socket
/// directory]), and the planted entry is left alone.
#[test]
fn a_hijacked_default_dir_falls_back() {
    if std::env::var_os(HIJACK_CHILD_ENV).is_some() {
        return;
    }
    let euid = geteuid().as_raw();
    let name = format!("intranode-{euid}");
    type Plant<'a> = &'a dyn Fn(&Path);
    let cases: [(&str, Plant); 4] = [
        ("symlink", &|p: &Path| {
            let target = p.with_file_name("elsewhere");
            fs::create_dir(&target).expect("mkdir target");
            std::os::unix::fs::symlink(&target, p).expect("symlink");
        }),
        ("open to all", &|p: &Path| {
            fs::create_dir(p).expect("mkdir");
            fs::set_permissions(p, fs::Permissions::from_mode(0o777)).expect("chmod");
        }),
        ("a file", &|p: &Path| {
            fs::write(p, b"planted").expect("write")
        }),
        ("another user's", &|p: &Path| {
            fs::create_dir(p).expect("mkdir");
            fs::set_permissions(p, fs::Permissions::from_mode(0o700)).expect("chmod");
            if geteuid().is_root() {
                std::os::unix::fs::chown(p, Some(65534), None).expect("chown");
            }
        }),
    ];
    for (what, plant) in cases {
        if what == "another user's" && !geteuid().is_root() {
            let _ = writeln!(
                io::stderr(),
                "SKIPPED the case of another user's directory: chown needs root"
            );
            continue;
        }
        let base = TestDir::new("hijack");
        let planted = base.0.join(&name);
        plant(&planted);
        let before = fs::symlink_metadata(&planted).expect("planted");
        let stdout = run_child(
            "channel::tests::hijacked_default_dir_child",
            HIJACK_CHILD_ENV,
            &base.0,
            what,
        );
        let bound = stdout
            .lines()
            // The harness prints the test's name on the same line.
            .find_map(|l| l.split_once("bound-in ").map(|(_, p)| p))
            .unwrap_or_else(|| panic!("{what}: {stdout}"));
        let own = fs::canonicalize(&base.0)
            .expect("canon")
            .join(format!("{name}-hijack-"));
        assert!(
            bound.starts_with(own.to_str().expect("utf-8")),
            "{what}: bound in {bound}"
        );
        assert!(stdout.contains("left-behind false"), "{what}: {stdout}");
        let after = fs::symlink_metadata(&planted).expect("planted entry still there");
        assert_eq!(
            (before.ino(), before.uid()),
            (after.ino(), after.uid()),
            "{what}"
        );
    }
}

/// Socket files of killed jobs do not pile up: binding in a directory
/// removes those no live socket holds, and leaves live ones.
#[test]
fn sockets_of_dead_jobs_are_removed() {
    let dir = TestDir::new("dead");
    let dead: Vec<PathBuf> = (0..3)
        .map(|r| dir.0.join(format!("killed-job-{r}.sock")))
        .collect();
    for p in &dead {
        drop(UnixDatagram::bind(p).expect("bind"));
    }
    let live_path = dir.0.join("running-job-0.sock");
    let live = UnixDatagram::bind(&live_path).expect("bind live");
    let other = dir.0.join("notes.txt");
    fs::write(&other, b"keep").expect("write");
    let ch = IpcChannel::new(&dir.0, "fresh", 0, 1, LONG).expect("channel");
    for p in &dead {
        assert!(!p.exists(), "{} survived", p.display());
    }
    assert!(live_path.exists(), "a live socket was removed");
    assert!(other.exists(), "a file that is not a socket was removed");
    drop(ch);
    drop(live);
}

/// Set in the child process of [`a_flapping_squat_cannot_split_a_job`].
const FLAP_CHILD_ENV: &str = "INTRANODE_IPC_FLAP_CHILD";

/// In a process whose temp dir is the test's: a squat on the default
/// directory when rank 0 chooses, gone when the other ranks bind (issue
/// 36: each rank decided alone, so such a job split across two
/// directories and every rank timed out, 7 of 20 jobs). Then killed jobs'
/// own directories: old and dead ones go, a live one and a young one stay.
#[test]
fn flapping_squat_child() {
    if std::env::var_os(FLAP_CHILD_ENV).is_none() {
        return;
    }
    let default = IpcChannel::default_dir();
    let parent = default.parent().expect("parent").to_path_buf();
    let scratch = std::env::temp_dir();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    let age = |p: &Path| {
        File::open(p)
            .expect("open dir")
            .set_modified(old)
            .expect("set mtime");
    };
    let euid = geteuid().as_raw();
    // A killed job's own directory with its dead socket, one with a live
    // socket (a job still running), and a young empty one (a job that
    // is binding right now).
    let dead = parent.join(format!("intranode-{euid}-killed"));
    DirBuilder::new().mode(0o700).create(&dead).expect("mkdir");
    drop(std::os::unix::net::UnixDatagram::bind(dead.join("killed-0.sock")).expect("bind"));
    age(&dead);
    let live = parent.join(format!("intranode-{euid}-running"));
    DirBuilder::new().mode(0o700).create(&live).expect("mkdir");
    let _held = std::os::unix::net::UnixDatagram::bind(live.join("running-0.sock")).expect("bind");
    age(&live);
    let young = parent.join(format!("intranode-{euid}-starting"));
    DirBuilder::new().mode(0o700).create(&young).expect("mkdir");

    fs::create_dir(&default).expect("squat");
    fs::set_permissions(&default, fs::Permissions::from_mode(0o777)).expect("chmod");
    let job = format!("flap-{}", std::process::id());
    let dir = IpcChannel::job_dir(&job);
    // The squat goes before any rank binds.
    fs::remove_dir(&default).expect("unsquat");
    let bound = with_ranks(&dir, &job, 3, LONG, |ch| {
        let file = marker_file(&scratch, &format!("rank {}", ch.rank()));
        let fds = ch.all_gather_fds(file.as_fd()).expect("all_gather_fds");
        assert_eq!(fds.len(), 3);
        ch.socket_path().parent().expect("dir").to_path_buf()
    });
    println!("chosen {}", dir.display());
    for b in &bound {
        println!("bound-in {}", b.display());
    }
    println!("own-left-behind {}", dir.exists());
    println!("dead-left-behind {}", dead.exists());
    println!("live-left-behind {}", live.exists());
    println!("young-left-behind {}", young.exists());
    // A rank handed the default directory while it is squatted is refused,
    // naming the way out, instead of falling back alone.
    fs::create_dir(&default).expect("squat again");
    fs::set_permissions(&default, fs::Permissions::from_mode(0o777)).expect("chmod");
    let err = IpcChannel::new(&default, &job, 0, 2, LONG).expect_err("squatted default");
    println!("alone: {err}");
}

#[test]
fn a_flapping_squat_cannot_split_a_job() {
    if std::env::var_os(FLAP_CHILD_ENV).is_some() {
        return;
    }
    let base = TestDir::new("flap");
    let stdout = run_child(
        "channel::tests::flapping_squat_child",
        FLAP_CHILD_ENV,
        &base.0,
        "flapping squat",
    );
    let chosen = stdout
        .lines()
        .find_map(|l| l.split_once("chosen ").map(|(_, p)| p.to_owned()))
        .unwrap_or_else(|| panic!("{stdout}"));
    let euid = geteuid().as_raw();
    assert!(
        chosen.contains(&format!("intranode-{euid}-flap-")),
        "rank 0 chose {chosen}"
    );
    let bound: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once("bound-in ").map(|(_, p)| p))
        .collect();
    assert_eq!(bound.len(), 3, "{stdout}");
    let canon = fs::canonicalize(&base.0).expect("canon");
    for b in &bound {
        assert!(
            b.starts_with(canon.to_str().expect("utf-8")) && b.contains("-flap-"),
            "a rank bound in {b}, not the published {chosen}"
        );
    }
    for (what, left) in [
        ("own", false),
        ("dead", false),
        ("live", true),
        ("young", true),
    ] {
        assert!(
            stdout.contains(&format!("{what}-left-behind {left}")),
            "{what}: {stdout}"
        );
    }
    assert!(
        stdout.contains("alone: ") && stdout.contains("IpcChannel::job_dir"),
        "{stdout}"
    );
}

/// Runs the test `name` of this executable in a child process with
/// `child_env` set and `TMPDIR` at `tmpdir` (no `XDG_RUNTIME_DIR`), so the
/// default socket directory lies where the parent planted it; asserts it
/// passed and returns what it printed.
fn run_child(name: &str, child_env: &str, tmpdir: &std::path::Path, what: &str) -> String {
    let out = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(child_env, "1")
        .env("TMPDIR", tmpdir)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
