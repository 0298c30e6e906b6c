// (Over 700 lines, 1432: one attack per test against a real server process,
// sharing the process and measurement helpers at the bottom.)

//! The server against hostile and careless clients: each attack
//! runs against a server in a process of its own, and the test asserts the
//! bounded outcome (peak RSS from `/proc/<pid>/status`, descriptor and
//! thread counts, the refusal message), never a time. Waits for the server
//! to settle are bounded only to keep a broken server from hanging CI.
//!
//! NOTE [rss bound]: the server's peak RSS (`VmHWM`) must stay within
//! `idle + max_buffered_bytes + stored + connections x
//! PER_CONNECTION_BYTES + SLACK_BYTES`: the bound of NOTE [memory budget]
//! in `src/limits.rs`, with room for the allocator and the test binary's
//! own pages.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use intranode_store::wire::{self, PROTOCOL_VERSION, Request, Response};
use intranode_store::{
    ClientConfig, DEFAULT_HANDSHAKE_TIMEOUT, ServerConfig, ServerLimits, Store, StoreError,
    TOKEN_ENV, TcpStore, TcpStoreServer,
};
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;

/// Set in the child process that hosts a server: `name=value` pairs
/// overriding [`ServerLimits`] defaults.
const SERVER_CHILD_ENV: &str = "INTRANODE_STORE_LIMITS_SERVER";

/// Set in the child process that reports how the token variable is taken.
const TOKEN_CHILD_ENV: &str = "INTRANODE_STORE_TOKEN_CHILD";

/// Per-connection allowance in the RSS bound: a client thread's touched
/// stack and thread-local allocator state, and its hello buffer.
const PER_CONNECTION_BYTES: u64 = 64 << 10;

/// Room for the allocator's slack and pages the test binary touches.
const SLACK_BYTES: u64 = 32 * MIB;

/// Longest the tests wait for the server to settle (a hang guard only).
const SETTLE: Duration = Duration::from_secs(60);

fn limits_from(spec: &str) -> ServerLimits {
    let mut limits = ServerLimits::default();
    for pair in spec.split(',').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').expect("name=value");
        let n: u64 = value.parse().expect("number");
        let bytes = usize::try_from(n).expect("fits usize");
        match name {
            "max_connections" => limits.max_connections = bytes,
            "login_timeout_ms" => limits.login_timeout = Duration::from_millis(n),
            "max_stored_bytes" => limits.max_stored_bytes = bytes,
            "max_value_bytes" => limits.max_value_bytes = bytes,
            "max_frame_bytes" => limits.max_frame_bytes = bytes,
            "max_response_bytes" => limits.max_response_bytes = bytes,
            "max_buffered_bytes" => limits.max_buffered_bytes = bytes,
            "frame_timeout_ms" => limits.frame_timeout = Duration::from_millis(n),
            other => panic!("unknown limit {other}"),
        }
    }
    limits
}

/// Splits `open_files=N` (the server process's `ulimit -n`, not a
/// [`ServerLimits`] field) off a limits spec.
fn open_files_from(spec: &str) -> (Option<u64>, String) {
    let mut open_files = None;
    let rest: Vec<&str> = spec
        .split(',')
        .filter(|pair| match pair.strip_prefix("open_files=") {
            Some(n) => {
                open_files = Some(n.parse().expect("number"));
                false
            }
            None => true,
        })
        .collect();
    (open_files, rest.join(","))
}

/// Lowers this process's soft limit on open files to `n`, as `ulimit -n`
/// would.
fn lower_open_files_limit(n: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live, exclusive rlimit that getrlimit only
    // writes.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(rc, 0, "getrlimit: {}", std::io::Error::last_os_error());
    limit.rlim_cur = limit.rlim_max.min(n as libc::rlim_t);
    // SAFETY: `limit` is a live rlimit that setrlimit only reads.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// The server of these tests, in a process of its own; a no-op unless a
/// test started this process. Lives until its stdin closes (the parent is
/// done or gone).
#[test]
fn server_child() {
    let Ok(spec) = std::env::var(SERVER_CHILD_ENV) else {
        return;
    };
    let (open_files, spec) = open_files_from(&spec);
    if let Some(n) = open_files {
        lower_open_files_limit(n);
    }
    let server = TcpStoreServer::bind(ServerConfig {
        limits: limits_from(&spec),
        ..ServerConfig::default()
    })
    .expect("bind");
    println!("store-port {}", server.local_addr().port());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(server);
}

/// The server's process, killed on drop.
struct ServerProcess {
    child: Child,
    _stdin: ChildStdin,
    addr: SocketAddr,
}

impl ServerProcess {
    fn start(spec: &str) -> Self {
        let exe = std::env::current_exe().expect("current exe");
        let mut child = Command::new(exe)
            .args(["--exact", "server_child", "--nocapture", "--test-threads=1"])
            .env(SERVER_CHILD_ENV, spec)
            .env_remove(TOKEN_ENV)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn server process");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port: u16 = loop {
            let line = lines
                .next()
                .expect("server process ended before printing its port")
                .expect("read");
            if let Some((_, p)) = line.split_once("store-port ") {
                break p.trim().parse().expect("port");
            }
        };
        Self {
            child,
            _stdin: stdin,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn status_field(&self, field: &str) -> u64 {
        let path = format!("/proc/{}/status", self.child.id());
        let text = std::fs::read_to_string(&path).expect("read status");
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {path}"))
    }

    /// Peak resident memory so far, in bytes.
    fn peak_rss_bytes(&self) -> u64 {
        self.status_field("VmHWM") * 1024
    }

    fn rss_bytes(&self) -> u64 {
        self.status_field("VmRSS") * 1024
    }

    fn threads(&self) -> u64 {
        self.status_field("Threads")
    }

    fn fds(&self) -> u64 {
        let dir = format!("/proc/{}/fd", self.child.id());
        std::fs::read_dir(dir).expect("read fd dir").count() as u64
    }

    /// Waits (bounded by [`SETTLE`]) until `ok` holds, then returns whether
    /// it did.
    fn settles(&self, mut ok: impl FnMut(&Self) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < SETTLE {
            if ok(self) {
                return true;
            }
            thread::sleep(Duration::from_millis(50));
        }
        ok(self)
    }

    fn client(&self) -> TcpStore {
        TcpStore::connect(self.addr, client_config()).expect("connect")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client_config() -> ClientConfig {
    ClientConfig {
        timeout: Duration::from_secs(120),
        connect_timeout: Duration::from_secs(60),
        // A debug server on two cores behind a thousand connecting
        // clients may take seconds to answer a hello.
        handshake_timeout: Duration::from_secs(60),
        token: None,
    }
}

/// NOTE [rss bound], with `stored_bytes` of data held and `connections`
/// served.
fn rss_bound(idle_bytes: u64, stored_bytes: u64, connections: u64) -> u64 {
    let limits = ServerLimits::default();
    idle_bytes
        + limits.max_buffered_bytes as u64
        + stored_bytes
        + connections * PER_CONNECTION_BYTES
        + SLACK_BYTES
}

fn report(what: &str, server: &ServerProcess, bound: u64) {
    let peak = server.peak_rss_bytes();
    println!(
        "{what}: peak RSS {:.1} MiB (bound {:.1} MiB), RSS now {:.1} MiB, {} fds, {} threads",
        peak as f64 / MIB as f64,
        bound as f64 / MIB as f64,
        server.rss_bytes() as f64 / MIB as f64,
        server.fds(),
        server.threads()
    );
    assert!(
        peak <= bound,
        "{what}: peak RSS {peak} over the bound {bound}"
    );
}

/// A raw socket, for speaking the protocol by hand.
struct Raw(TcpStream);

impl Raw {
    fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(SETTLE)).expect("timeout");
        Raw(s)
    }

    fn send_body(&mut self, body: &[u8]) {
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(body);
        self.0.write_all(&frame).expect("write");
    }

    fn send(&mut self, req: &Request) {
        self.send_body(&wire::encode_request(req).expect("encode"));
    }

    fn recv(&mut self) -> Response {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).expect("reply header");
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        self.0.read_exact(&mut body).expect("reply body");
        wire::decode_response(&body).expect("decode")
    }

    fn hello(addr: SocketAddr) -> Self {
        let mut raw = Self::connect(addr);
        raw.send(&Request::Hello {
            version: PROTOCOL_VERSION,
            token: None,
        });
        assert_eq!(
            raw.recv(),
            Response::Hello {
                version: PROTOCOL_VERSION
            }
        );
        raw
    }
}

fn refusal(resp: Response) -> String {
    match resp {
        Response::Refused(msg) => msg,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn error(resp: Response) -> String {
    match resp {
        Response::Error(msg) => msg,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// Large frames before login are refused from their header: 64 clients
/// announcing 64 MiB each (12 times the data in RSS if buffered) cost
/// the server nothing. After login, 16 clients sending 16 MiB values at
/// once share the buffer budget instead of each holding two copies.
#[test]
fn large_frames_before_and_after_login_stay_within_the_budget() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let server = ServerProcess::start("");
    let idle = server.peak_rss_bytes();
    let chunk = vec![0xabu8; 1 << 20];
    let before: Vec<_> = (0..64)
        .map(|_| {
            let mut raw = Raw::connect(server.addr);
            let mut frame = (64u32 << 20).to_le_bytes().to_vec();
            frame.extend_from_slice(&chunk);
            // The server may refuse and close before it is all sent.
            let _ = raw.0.write_all(&frame);
            raw
        })
        .collect();
    for mut raw in before {
        let msg = refusal(raw.recv());
        assert!(msg.contains("before login"), "{msg}");
    }
    report(
        "64 x 64 MiB frames before login",
        &server,
        rss_bound(idle, 0, 64),
    );

    let value = Arc::new(
        wire::encode_request(&Request::Set {
            key: "big".into(),
            value: vec![7u8; 16 << 20],
        })
        .expect("encode"),
    );
    let start = Arc::new(Barrier::new(16));
    let senders: Vec<_> = (0..16)
        .map(|_| {
            let value = Arc::clone(&value);
            let start = Arc::clone(&start);
            let addr = server.addr;
            thread::spawn(move || {
                let mut raw = Raw::hello(addr);
                start.wait();
                raw.send_body(&value);
                raw.recv()
            })
        })
        .collect();
    for s in senders {
        assert_eq!(s.join().expect("sender"), Response::Ok);
    }
    let stored = 16 * MIB;
    report(
        "16 x 16 MiB SET after login",
        &server,
        rss_bound(idle, stored, 80),
    );
}

/// A client trickling its hello a byte at a time is dropped at the login
/// deadline, not one timeout reset with every byte.
#[test]
fn trickling_clients_are_dropped_at_the_login_deadline() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let server = ServerProcess::start("login_timeout_ms=1000");
    let idle_fds = server.fds();
    let tricklers: Vec<_> = (0..100)
        .map(|_| {
            let addr = server.addr;
            thread::spawn(move || {
                let mut raw = Raw::connect(addr);
                // A hello of 4000 bytes, at 10 bytes a second: 400 s.
                let mut pending = 4000u32.to_le_bytes().to_vec();
                pending.extend_from_slice(&[0u8; 4000]);
                raw.0.set_nonblocking(true).expect("nonblocking");
                let mut sent = 0;
                let mut reply = Vec::new();
                let start = Instant::now();
                loop {
                    if raw.0.write(&pending[sent..sent + 1]).is_ok() {
                        sent += 1;
                    }
                    let mut buf = [0u8; 4096];
                    match raw.0.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => reply.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => break,
                    }
                    assert!(start.elapsed() < SETTLE, "never dropped");
                    thread::sleep(Duration::from_millis(100));
                }
                assert!(sent < pending.len());
                wire::decode_response(&reply[4..]).expect("a refusal")
            })
        })
        .collect();
    for t in tricklers {
        let msg = refusal(t.join().expect("trickler"));
        assert!(msg.contains("login_timeout"), "{msg}");
    }
    assert!(
        server.settles(|s| s.fds() <= idle_fds),
        "{} fds left, {idle_fds} when idle",
        server.fds()
    );
}

/// Past `max_connections` a client is refused with a message saying so;
/// a flood of connections holds no more descriptors than the cap (it ran
/// the server out of descriptors at 510 connections before).
#[test]
fn connections_over_the_cap_are_refused_with_a_message() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let server = ServerProcess::start("max_connections=32");
    let idle_fds = server.fds();
    let held: Vec<TcpStore> = (0..32).map(|_| server.client()).collect();
    held[0].set("k", b"v").expect("set");
    // Over the cap, a client retries within its connect timeout (it gave
    // up at the first refusal before), then names the limit.
    let short = ClientConfig {
        connect_timeout: Duration::from_millis(500),
        ..client_config()
    };
    let err = TcpStore::connect(server.addr, short).expect_err("over the cap");
    assert!(matches!(err, StoreError::Connect { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("too many connections") && text.contains("at most 32"),
        "{text}"
    );
    // A client that arrives at the cap gets in once a slot frees.
    let addr = server.addr;
    let waiting = thread::spawn(move || TcpStore::connect(addr, client_config()));
    thread::sleep(Duration::from_millis(300));
    let mut held = held;
    drop(held.pop());
    let late = waiting
        .join()
        .expect("thread")
        .expect("connects once a slot frees");
    assert_eq!(late.get("k").expect("get"), b"v");
    held.push(late);
    // A flood of silent connections: refused or closed, never served.
    let flood: Vec<TcpStream> = (0..600)
        .filter_map(|_| TcpStream::connect(server.addr).ok())
        .collect();
    let peak_fds = (0..20)
        .map(|_| {
            thread::sleep(Duration::from_millis(20));
            server.fds()
        })
        .max()
        .unwrap_or(0);
    println!("600 extra connections: server fds peaked at {peak_fds} ({idle_fds} idle)");
    // 32 clients, at most 8 being refused, one being accepted.
    assert!(peak_fds <= idle_fds + 32 + 8 + 1, "{peak_fds}");
    drop(flood);
    // The served clients never noticed.
    assert_eq!(held[31].get("k").expect("get"), b"v");
    drop(held);
    assert!(server.settles(|s| s.fds() <= idle_fds));
    server.client().set("after", b"1").expect("room again");
}

/// MULTI_GET naming one key thousands of times (an 8.5 GiB reply before)
/// gets an error naming the limit; so do too many keys, an oversize key
/// and an oversize value. The connection stays usable.
#[test]
fn oversize_requests_and_replies_get_errors() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let server = ServerProcess::start("");
    let idle = server.peak_rss_bytes();
    let mut raw = Raw::hello(server.addr);
    raw.send(&Request::Set {
        key: "v".into(),
        value: vec![1u8; 2 << 20],
    });
    assert_eq!(raw.recv(), Response::Ok);
    raw.send(&Request::MultiGet {
        keys: vec!["v".into(); 4096],
        timeout_ms: 1000,
    });
    let msg = error(raw.recv());
    assert!(msg.contains("max_response_bytes"), "{msg}");
    let cases = [
        (
            Request::MultiGet {
                keys: vec!["v".into(); 4097],
                timeout_ms: 1000,
            },
            "max_keys_per_request",
        ),
        (
            Request::Get {
                key: "k".repeat(5000),
                timeout_ms: 1,
            },
            "max_key_bytes",
        ),
        (
            Request::Append {
                key: "v".into(),
                value: vec![0u8; (16 << 20) + 1],
            },
            "max_value_bytes",
        ),
    ];
    for (req, limit) in cases {
        raw.send(&req);
        let msg = error(raw.recv());
        assert!(msg.contains(limit), "{msg}");
    }
    // Still usable, and the value is what it was.
    raw.send(&Request::MultiGet {
        keys: vec!["v".into(); 8],
        timeout_ms: 1000,
    });
    match raw.recv() {
        Response::List(values) => {
            assert_eq!(values.len(), 8);
            assert!(values.iter().all(|v| v.len() == 2 << 20));
        }
        other => panic!("{other:?}"),
    }
    report(
        "MULTI_GET of one key 4096 times",
        &server,
        rss_bound(idle, 2 * MIB, 1),
    );
}

/// APPEND stops at `max_value_bytes` (1 GiB was accepted before), and the
/// table stops at `max_stored_bytes`.
#[test]
fn append_and_stored_bytes_are_capped() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let max_stored = 48 * MIB;
    let server = ServerProcess::start(&format!("max_stored_bytes={max_stored}"));
    let idle = server.peak_rss_bytes();
    let store = server.client();
    let chunk = vec![3u8; 1 << 20];
    let mut appended = 0;
    let err = loop {
        match store.append("log", &chunk) {
            Ok(()) => appended += 1,
            Err(e) => break e,
        }
        assert!(appended <= 64, "append never stopped");
    };
    assert!(err.to_string().contains("max_value_bytes"), "{err}");
    assert_eq!(appended, 16);
    assert_eq!(store.get("log").expect("get").len(), 16 << 20);
    let mut stored = 0;
    let err = loop {
        match store.set(&format!("k{stored}"), &chunk) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored <= 64, "the store never filled up");
    };
    let text = err.to_string();
    assert!(
        text.contains("store is full") && text.contains("max_stored_bytes"),
        "{text}"
    );
    // Deleting makes room again.
    assert!(store.delete_key("log").expect("delete"));
    store.set("again", &chunk).expect("room after delete");
    report(
        "APPEND to the limit, SET until full",
        &server,
        rss_bound(idle, max_stored, 1),
    );
}

/// A parked WAIT whose client closes its socket is dropped with its
/// thread and descriptor, long before its key or its timeout.
#[test]
fn parked_waits_of_gone_clients_are_dropped() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let server = ServerProcess::start("");
    let idle_fds = server.fds();
    let idle_threads = server.threads();
    let waiters: Vec<Raw> = (0..200)
        .map(|i| {
            let mut raw = Raw::hello(server.addr);
            raw.send(&Request::Wait {
                keys: vec![format!("never/{i}")],
                timeout_ms: 600_000,
            });
            raw
        })
        .collect();
    assert!(server.settles(|s| s.threads() >= idle_threads + 200));
    let parked_fds = server.fds();
    println!(
        "200 parked waits: {parked_fds} fds, {} threads",
        server.threads()
    );
    // A waiter that stays is still served.
    let mut stays = Raw::hello(server.addr);
    stays.send(&Request::Get {
        key: "soon".into(),
        timeout_ms: 600_000,
    });
    drop(waiters);
    assert!(
        server.settles(|s| s.fds() <= idle_fds + 1 && s.threads() <= idle_threads + 1),
        "{} fds ({idle_fds} idle), {} threads ({idle_threads} idle)",
        server.fds(),
        server.threads()
    );
    server.client().set("soon", b"here").expect("set");
    assert_eq!(stays.recv(), Response::Bytes(b"here".to_vec()));
}

/// Prints how `intranode_store` takes the token variable of this process;
/// a no-op unless a test started this process.
#[test]
fn token_child() {
    if std::env::var_os(TOKEN_CHILD_ENV).is_none() {
        return;
    }
    println!("client: {:?}", ClientConfig::try_from_env().map(drop));
    println!("server: {:?}", ServerConfig::try_from_env().map(drop));
    let bound = TcpStoreServer::bind(ServerConfig::from_env()).map(drop);
    println!(
        "bind: {}",
        bound.map_or_else(|e| e.to_string(), |()| "ok".into())
    );
    let connect = TcpStore::connect("127.0.0.1:1", ClientConfig::from_env()).map(drop);
    println!(
        "connect: {}",
        connect.map_or_else(|e| e.to_string(), |()| "ok".into())
    );
}

/// A token that is set but empty or not UTF-8 is a startup error naming
/// the variable, for server and client, through every entry point (it
/// was silently ignored before: the server ran open).
#[test]
fn unusable_tokens_are_startup_errors() {
    if std::env::var_os(TOKEN_CHILD_ENV).is_some() || std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    let cases: [(&[u8], &str); 2] = [
        (b"s3cr3t\xff\xfe", "is not valid UTF-8"),
        (b"", "is set but empty"),
    ];
    for (value, why) in cases {
        let out = Command::new(&exe)
            .args(["--exact", "token_child", "--nocapture", "--test-threads=1"])
            .env(TOKEN_CHILD_ENV, "1")
            .env(TOKEN_ENV, std::ffi::OsStr::from_bytes(value))
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&out.stdout);
        for entry in ["client", "server", "bind", "connect"] {
            let line = text
                .lines()
                .find_map(|l| l.split_once(&format!("{entry}: ")).map(|(_, r)| r))
                .unwrap_or_else(|| panic!("no {entry} line in {text}"));
            // `from_env` cannot fail, so it hands bind and connect an
            // empty token, which they refuse with a message covering both.
            let why = match entry {
                "bind" | "connect" => "is empty or not valid UTF-8",
                _ => why,
            };
            assert!(
                line.contains(TOKEN_ENV) && line.contains(why),
                "{entry}: {line}"
            );
            assert!(!line.contains("s3cr3t"), "the value leaked: {line}");
        }
    }
}

/// Many clients doing set/get/wait/append/multi_get with random sizes for
/// a while; the server's peak RSS stays within NOTE [rss bound], and
/// every operation succeeds or fails with an expected error.
///
/// 1000 clients on two cores in a debug build: each does a few hundred
/// operations, enough to keep the budget, the waiter index and the
/// allocator busy.
#[test]
fn load_many_clients_hold_the_memory_bound() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    const RUN: Duration = Duration::from_secs(15);
    // The test process and the server each hold one descriptor per
    // client; under a small `ulimit -n` run fewer and say so.
    let fd_limit = open_files_soft_limit();
    let client_count = 1000.min(fd_limit.saturating_sub(128) as usize);
    if client_count < 1000 {
        println!(
            "load: descriptor limit {fd_limit}, running {client_count} clients instead of 1000"
        );
    }
    let max_stored = 64 * MIB;
    let server = ServerProcess::start(&format!(
        "max_connections={},max_stored_bytes={max_stored}",
        client_count + 16
    ));
    let idle = server.peak_rss_bytes();
    let ops = Arc::new(AtomicU64::new(0));
    let full = Arc::new(AtomicU64::new(0));
    let timeouts = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(client_count + 1));
    let handles: Vec<_> = (0..client_count)
        .map(|i| {
            let (ops, full, timeouts, stop, ready) = (
                Arc::clone(&ops),
                Arc::clone(&full),
                Arc::clone(&timeouts),
                Arc::clone(&stop),
                Arc::clone(&ready),
            );
            let addr = server.addr;
            thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    let store = TcpStore::connect(addr, client_config());
                    ready.wait();
                    let store = store.expect("connect");
                    load_client(i, client_count, &store, &stop, &ops, &full, &timeouts);
                })
                .expect("spawn client")
        })
        .collect();
    ready.wait();
    let start = Instant::now();
    let mut samples = HashMap::new();
    while start.elapsed() < RUN {
        thread::sleep(Duration::from_millis(500));
        samples.insert(start.elapsed().as_millis(), server.rss_bytes());
    }
    let threads_at_load = server.threads();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("client");
    }
    let ops = ops.load(Ordering::Relaxed);
    println!(
        "load: {client_count} clients, {ops} operations in {:.1} s ({:.0}/s), {} store-full errors, {} wait timeouts, {threads_at_load} server threads",
        start.elapsed().as_secs_f64(),
        ops as f64 / start.elapsed().as_secs_f64(),
        full.load(Ordering::Relaxed),
        timeouts.load(Ordering::Relaxed),
    );
    assert!(
        threads_at_load as usize > client_count,
        "all clients were served at once"
    );
    assert!(ops > client_count as u64, "{ops}");
    report(
        "load",
        &server,
        rss_bound(idle, max_stored, client_count as u64),
    );
}

/// The soft limit on open files of this process (children inherit it).
fn open_files_soft_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(1024)
}

fn load_client(
    i: usize,
    clients: usize,
    store: &TcpStore,
    stop: &AtomicBool,
    ops: &AtomicU64,
    full: &AtomicU64,
    timeouts: &AtomicU64,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
    let mut round = 0u64;
    let mut log_bytes = 0usize;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let size = if rng.random_ratio(1, 100) {
            rng.random_range(0..512 << 10)
        } else {
            rng.random_range(0..16 << 10)
        };
        let result = match rng.random_range(0..6) {
            0 => store.set(&format!("v/{i}"), &vec![i as u8; size]),
            1 => store
                .get_with_timeout(
                    &format!("v/{}", rng.random_range(0..clients)),
                    Duration::from_millis(200),
                )
                .map(drop)
                .or_else(|e| match e {
                    StoreError::Timeout { .. } => Ok(()),
                    e => Err(e),
                }),
            2 => {
                // Wait on a neighbour's round key, set our own.
                let mine = format!("r/{i}/{round}");
                store.set(&mine, b"1").and_then(|()| {
                    let other = format!("r/{}/{round}", (i + 1) % clients);
                    store.wait(&[&other], Some(Duration::from_millis(200)))
                })
            }
            3 => {
                let tail = vec![1u8; rng.random_range(0..1024)];
                log_bytes += tail.len();
                if log_bytes > 16 << 10 {
                    log_bytes = 0;
                    store.delete_key(&format!("log/{i}")).map(drop)
                } else {
                    store.append(&format!("log/{i}"), &tail)
                }
            }
            4 => {
                let keys: Vec<String> = (0..rng.random_range(1..8))
                    .map(|_| format!("v/{}", rng.random_range(0..clients)))
                    .collect();
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                store.check(&keys).and_then(|present| {
                    if present {
                        store.multi_get(&keys).map(drop)
                    } else {
                        Ok(())
                    }
                })
            }
            _ => store.add("counter", 1).map(drop),
        };
        // Round keys pile up; drop the old ones.
        if round > 2 {
            let _ = store.delete_key(&format!("r/{i}/{}", round - 2));
        }
        match result {
            Ok(()) => {}
            Err(StoreError::Timeout { .. }) => {
                timeouts.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.to_string().contains("store is full") => {
                full.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("client {i}: {e}"),
        }
        ops.fetch_add(1, Ordering::Relaxed);
    }
}

/// Keys for a `WAIT` whose frame is exactly `frame_bytes` long, none of
/// which will ever be set.
fn wait_of_frame_bytes(frame_bytes: usize, tag: &str) -> Request {
    let key_bytes = ServerLimits::default().max_key_bytes;
    let count = ServerLimits::default().max_keys_per_request;
    let mut lens = vec![key_bytes - 8; count];
    let build = |lens: &[usize]| Request::Wait {
        keys: lens
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let head = format!("{tag}/{i}/");
                format!("{head}{}", "x".repeat(n - head.len()))
            })
            .collect(),
        timeout_ms: 600_000,
    };
    let encoded = |lens: &[usize]| wire::encode_request(&build(lens)).expect("encode").len();
    // Every length here takes the same varint prefix, so each byte added
    // to a key adds one to the frame.
    let mut short = frame_bytes.saturating_sub(encoded(&lens));
    for len in &mut lens {
        let grow = short.min(key_bytes - *len);
        *len += grow;
        short -= grow;
    }
    assert_eq!(encoded(&lens), frame_bytes, "cannot size the WAIT");
    build(&lens)
}

/// Attack: two clients park a `WAIT` whose frames take the whole buffer
/// budget, send one more byte and close. A server that saw the unread
/// byte and counted them as present would keep their budget forever, and
/// every later request would get "server busy" after 30 s. They must be
/// dropped (NOTE [hung-up waiters] in `src/server/connection.rs`) and the
/// store serve on; a half-closed waiter is told why.
#[test]
fn hung_up_waiters_with_unread_bytes_do_not_wedge_the_store() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let server = ServerProcess::start("");
    let idle_threads = server.threads();
    let idle_fds = server.fds();
    // Each reserves twice its frame: the two together, the whole budget.
    let frame_bytes = ServerLimits::default().max_buffered_bytes / 4;
    for tag in ["a", "b"] {
        let mut raw = Raw::hello(server.addr);
        raw.send(&wait_of_frame_bytes(frame_bytes, tag));
        raw.0.write_all(&[0]).expect("one more byte");
        // Closed with the WAIT parked and a byte unread on the server.
    }
    // Served at once, not after frame_timeout with "server busy".
    let mut after = Raw::hello(server.addr);
    after.send(&Request::Set {
        key: "after".into(),
        value: b"1".to_vec(),
    });
    assert_eq!(after.recv(), Response::Ok);
    assert!(
        server.settles(|s| s.threads() <= idle_threads + 1 && s.fds() <= idle_fds + 1),
        "{} threads ({idle_threads} idle), {} fds ({idle_fds} idle)",
        server.threads(),
        server.fds()
    );
    // Half-closed (SHUT_WR) while parked: a refusal saying why.
    let mut half = Raw::hello(server.addr);
    half.send(&Request::Wait {
        keys: vec!["never".into()],
        timeout_ms: 600_000,
    });
    half.0
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let msg = refusal(half.recv());
    assert!(msg.contains("closed for sending"), "{msg}");
}

/// Attack: a reply that finds no buffer space within `frame_timeout` gets
/// a "server busy" refusal, not a connection closed without a word.
#[test]
fn no_room_for_a_reply_is_a_busy_refusal() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let server = ServerProcess::start(
        "max_value_bytes=65536,max_frame_bytes=131072,max_response_bytes=131072,\
         max_buffered_bytes=262144,frame_timeout_ms=500",
    );
    let mut setter = Raw::hello(server.addr);
    setter.send(&Request::Set {
        key: "v".into(),
        value: vec![5u8; 65536],
    });
    assert_eq!(setter.recv(), Response::Ok);
    // A live, parked WAIT of about 100 KiB holds twice that of the 256 KiB
    // budget, leaving less than the 64 KiB reply needs.
    let mut holder = Raw::hello(server.addr);
    holder.send(&Request::Wait {
        keys: (0..25)
            .map(|i| format!("{i}/{}", "k".repeat(4000)))
            .collect(),
        timeout_ms: 600_000,
    });
    // Until the WAIT is parked, GETs are answered; then one is refused.
    let mut getter = Raw::hello(server.addr);
    let start = Instant::now();
    let msg = loop {
        getter.send(&Request::Get {
            key: "v".into(),
            timeout_ms: 1000,
        });
        match getter.recv() {
            Response::Bytes(v) => assert_eq!(v.len(), 65536),
            Response::Refused(msg) => break msg,
            other => panic!("{other:?}"),
        }
        assert!(start.elapsed() < SETTLE, "the reply always found room");
    };
    assert!(
        msg.contains("server busy") && msg.contains("reply") && msg.contains("max_buffered_bytes"),
        "{msg}"
    );
    drop(holder);
}

/// Attack: a store filled with tiny keys until "store is full" stays
/// within `max_stored_bytes` of RSS (NOTE [entry cost] in
/// `src/limits.rs`: counting 128 bytes a key where about 190 are spent
/// lets RSS reach 1,356 MiB under a 1 GiB limit), and gives most of it
/// back once the keys are deleted.
#[test]
fn tiny_keys_stay_within_max_stored_bytes() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let max_stored = 64 * MIB;
    let server = ServerProcess::start(&format!("max_stored_bytes={max_stored}"));
    let idle = server.peak_rss_bytes();
    let mut raw = Raw::hello(server.addr);
    let mut keys = 0u64;
    let mut batch = ServerLimits::default().max_keys_per_request as u64;
    while batch > 0 {
        raw.send(&Request::MultiSet {
            pairs: (keys..keys + batch)
                .map(|i| (format!("{i:x}"), vec![1u8]))
                .collect(),
        });
        match raw.recv() {
            Response::Ok => keys += batch,
            Response::Error(msg) if msg.contains("store is full") => batch /= 2,
            other => panic!("{other:?}"),
        }
    }
    let peak = server.peak_rss_bytes();
    println!(
        "{keys} tiny keys until full: peak RSS {:.1} MiB over {:.1} MiB idle, limit {:.1} MiB ({:.0} bytes a key)",
        (peak - idle) as f64 / MIB as f64,
        idle as f64 / MIB as f64,
        max_stored as f64 / MIB as f64,
        (peak - idle) as f64 / keys as f64
    );
    // In flight: one 4096-pair request at a time, well under 1 MiB.
    let slack = 4 * MIB;
    assert!(
        peak <= idle + max_stored + slack,
        "peak RSS {peak} over idle {idle} + max_stored_bytes {max_stored} + {slack}"
    );
    // Delete them all, pipelined (a reader drains the replies).
    let mut reader = Raw(raw.0.try_clone().expect("clone"));
    let replies = thread::spawn(move || {
        for _ in 0..keys {
            assert_eq!(reader.recv(), Response::Bool(true));
        }
    });
    let mut frames = Vec::new();
    for i in 0..keys {
        let body = wire::encode_request(&Request::DeleteKey {
            key: format!("{i:x}"),
        })
        .expect("encode");
        frames.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frames.extend_from_slice(&body);
        if frames.len() > 1 << 16 || i + 1 == keys {
            raw.0.write_all(&frames).expect("write");
            frames.clear();
        }
    }
    replies.join().expect("replies");
    let after = server.rss_bytes();
    println!(
        "after deleting them: RSS {:.1} MiB over idle",
        after.saturating_sub(idle) as f64 / MIB as f64
    );
    assert!(
        after <= idle + max_stored / 4,
        "RSS {after} after deleting every key, {idle} idle"
    );
}

/// A store out of file descriptors (`ulimit -n 64` and 100 idle clients):
/// a new client's connect succeeds into the listen backlog, but an
/// acceptor that cannot take it leaves its hello unread, and the client
/// fails for good after its handshake timeout, "is another kind of server
/// listening there?" (5.06 s; with a 30 s handshake timeout it got in
/// after 6.75 s). So the acceptor keeps a spare descriptor to take such a
/// connection and refuse it (NOTE [out of descriptors] in
/// `src/server/accept.rs`): a client that runs out of time is told the
/// server is out of descriptors, and one with time left retries and gets
/// in once descriptors free up.
#[test]
fn a_store_out_of_descriptors_refuses_clients_and_lets_them_in_once_freed() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let open_files = 64;
    let server = ServerProcess::start(&format!("open_files={open_files}"));
    // Idle clients, more than the server has descriptors for; their
    // replies are never read.
    let idle: Vec<Raw> = (0..100)
        .map(|_| {
            let mut raw = Raw::connect(server.addr);
            raw.send(&Request::Hello {
                version: PROTOCOL_VERSION,
                token: None,
            });
            raw
        })
        .collect();
    assert!(
        server.settles(|s| s.fds() + 2 >= open_files),
        "the server holds {} descriptors of {open_files}",
        server.fds()
    );
    // The default handshake timeout, shorter than the time the server is
    // out of descriptors below: a client must not take a full backlog for
    // a silent server.
    let handshake_timeout = DEFAULT_HANDSHAKE_TIMEOUT;
    let err = TcpStore::connect(
        server.addr,
        ClientConfig {
            connect_timeout: Duration::from_secs(2),
            handshake_timeout,
            ..client_config()
        },
    )
    .expect_err("no descriptor to serve it");
    assert!(matches!(err, StoreError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("out of file descriptors"), "{err}");
    println!("out of descriptors, a client with 2 s to connect: {err}");

    let addr = server.addr;
    let start = Instant::now();
    let waiting = thread::spawn(move || {
        TcpStore::connect(
            addr,
            ClientConfig {
                connect_timeout: Duration::from_secs(60),
                handshake_timeout,
                ..client_config()
            },
        )
    });
    let out_of_descriptors = handshake_timeout + Duration::from_secs(1);
    thread::sleep(out_of_descriptors);
    drop(idle);
    let store = waiting
        .join()
        .expect("thread")
        .expect("gets in once descriptors free up");
    println!(
        "out of descriptors for {out_of_descriptors:?}: the client got in after {:?}",
        start.elapsed()
    );
    store.set("k", b"v").expect("set");
    assert_eq!(store.get("k").expect("get"), b"v");
}

/// Attack: a burst of clients against a small connection cap all get in
/// within their connect timeout (were "too many connections" final, 744
/// of 1000 would fail at once).
#[test]
fn a_connect_burst_over_the_cap_is_retried() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let server = ServerProcess::start("max_connections=16");
    let clients: Vec<_> = (0..200)
        .map(|i| {
            let addr = server.addr;
            thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    let store = TcpStore::connect(addr, client_config())?;
                    store.set(&format!("burst/{i}"), b"1")?;
                    store.get(&format!("burst/{i}"))
                })
                .expect("spawn")
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().expect("client").expect("served"), b"1");
    }
}

/// Attack: fill with 200 KiB values, SET every key to an empty value,
/// refill, a new connection each round. The counted bytes fall to almost
/// nothing after each overwrite; unless overwrites count toward malloc's
/// trim (NOTE [trim on overwrite] in `src/hash.rs`), RSS grows by one
/// fill per round (1.0 -> 4.0 GiB under a 1 GiB limit).
#[test]
fn overwriting_with_empty_values_keeps_rss_within_the_bound() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let max_stored = 64 * MIB;
    let server = ServerProcess::start(&format!("max_stored_bytes={max_stored}"));
    let idle = server.peak_rss_bytes();
    let value = vec![7u8; 200 << 10];
    let rounds = 6;
    for round in 0..rounds {
        let store = server.client();
        let mut keys = 0;
        loop {
            match store.set(&format!("k{keys}"), &value) {
                Ok(()) => keys += 1,
                Err(e) if e.to_string().contains("store is full") => break,
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        for i in 0..keys {
            store.set(&format!("k{i}"), b"").expect("overwrite");
        }
        let rss = server.rss_bytes();
        println!(
            "round {round}: {keys} values overwritten, RSS {:.1} MiB ({:.1} MiB idle)",
            rss as f64 / MIB as f64,
            idle as f64 / MIB as f64
        );
        // Freed values are given back as deletes are (at most 16 MiB wait
        // for the next trim); without it all 64 MiB would stay.
        assert!(
            rss <= idle + max_stored / 2,
            "round {round}: RSS {rss} after overwriting every value, {idle} idle"
        );
    }
    // One fill at a time is stored; six would be 384 MiB.
    report(
        "fill, overwrite with empty values, refill x6",
        &server,
        rss_bound(idle, max_stored, 1),
    );
}

/// Set in the child process that hosts a token-guarded server logging to
/// its stderr, which the parent never reads.
const LOGGING_CHILD_ENV: &str = "INTRANODE_STORE_LOGGING_SERVER";

/// A server with a token and a tracing subscriber on stderr, as the
/// launcher hosts it; a no-op unless a test started this process.
#[test]
fn logging_server_child() {
    let Ok(token) = std::env::var(LOGGING_CHILD_ENV) else {
        return;
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .init();
    let server = TcpStoreServer::bind(ServerConfig {
        token: Some(token),
        ..ServerConfig::default()
    })
    .expect("bind");
    println!("store-port {}", server.local_addr().port());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    // Not dropped: with stderr stalled, the summary at shutdown would
    // block; the parent kills this process.
    std::mem::forget(server);
}

/// Attack: clients without the right token, thousands of them, against a
/// server whose stderr nobody reads (a stalled log collector: the pipe
/// fills after 64 KiB). Were each refusal written as a line at once (the
/// over-the-cap ones by the acceptor), then once the pipe was full every
/// client thread, and then the acceptor, would block in that write and no
/// rank could log in. Refusals are counted and summarised at most once a
/// second by one thread (NOTE [refusal log] in
/// `src/server/refusal_log.rs`): the rank with the token gets in.
#[test]
fn a_refusal_flood_with_stderr_stalled_keeps_the_store_open() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() || std::env::var_os(LOGGING_CHILD_ENV).is_some()
    {
        return;
    }
    let token = "the-job-token";
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "logging_server_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LOGGING_CHILD_ENV, token)
        .env_remove(TOKEN_ENV)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server process");
    let _stdin = child.stdin.take().expect("stdin");
    // Held, never read: the stalled log collector.
    let _stderr = child.stderr.take().expect("stderr");
    let stdout = child.stdout.take().expect("stdout");
    let port: u16 = BufReader::new(stdout)
        .lines()
        .find_map(|l| {
            l.expect("read")
                .split_once("store-port ")
                .map(|(_, p)| p.trim().parse().expect("port"))
        })
        .expect("server process ended before printing its port");
    let server = ServerProcess {
        child,
        _stdin,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    // 4000 refusals: about 800 KiB of warning lines if each wrote one,
    // twelve times what the pipe holds.
    let per_thread = 500;
    // A hang guard only: a blocked server would hold each attacker for its
    // read timeout.
    let give_up = Instant::now() + Duration::from_secs(30);
    let attackers: Vec<_> = (0..8)
        .map(|t| {
            let addr = server.addr;
            thread::spawn(move || {
                for i in 0..per_thread {
                    if Instant::now() > give_up {
                        break;
                    }
                    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
                    else {
                        continue;
                    };
                    let token = (i % 2 == 0).then(|| format!("guess-{t}-{i}").into_bytes());
                    let body = wire::encode_request(&Request::Hello {
                        version: PROTOCOL_VERSION,
                        token,
                    })
                    .expect("encode");
                    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
                    frame.extend_from_slice(&body);
                    let _ = s.write_all(&frame);
                    let _ = s.shutdown(std::net::Shutdown::Write);
                    // Reads the refusal, so the server's drain ends at once.
                    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                    let mut sink = Vec::new();
                    let _ = s.read_to_end(&mut sink);
                }
            })
        })
        .collect();
    for a in attackers {
        a.join().expect("attacker");
    }
    let store = TcpStore::connect(
        server.addr,
        ClientConfig {
            token: Some(token.into()),
            connect_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(20),
            ..client_config()
        },
    )
    .expect("the rank with the token gets in after the flood");
    store.set("after", b"flood").expect("set");
    assert_eq!(store.get("after").expect("get"), b"flood");
}

/// Attack: WAITs of 4096 one-byte keys, a 20 KiB frame each, decode to
/// about 229 KiB and hold it while parked; reserving only twice the frame
/// would let 2000 of them take RSS far past the formula (and all 30 here
/// would park). Each key reserves what it decodes to (NOTE [decoded
/// items] in `src/limits.rs`): under a 2 MiB buffer budget, at most
/// 2 MiB / 229 KiB such waits park at once and the rest are told the
/// server is busy.
#[test]
fn many_tiny_keys_in_parked_waits_are_accounted() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let budget = 2 * MIB;
    let server = ServerProcess::start(&format!(
        "max_value_bytes=65536,max_frame_bytes=131072,max_response_bytes=131072,\
         max_buffered_bytes={budget},frame_timeout_ms=1000"
    ));
    let waiters = 30;
    let mut conns: Vec<Raw> = (0..waiters)
        .map(|w| {
            let mut raw = Raw::hello(server.addr);
            raw.send(&Request::Wait {
                keys: (0..4096)
                    .map(|i| format!("{}", (w * 4096 + i) % 10))
                    .collect(),
                // Parked ones end with TimedOut, so every connection
                // answers and nothing here waits on a guess. Long past
                // every frame's deadline (frame_timeout after its send),
                // so no parked wait ends while a later frame still waits
                // for room: every TimedOut then parked beside the others.
                // At 3 s a slow set-up on a busy 2-core machine let late
                // frames park after the first waits had ended (12 TimedOut
                // of 30; 2026-11-27, 9926c57).
                timeout_ms: 15_000,
            });
            raw
        })
        .collect();
    let mut busy = 0;
    for raw in &mut conns {
        match raw.recv() {
            Response::TimedOut => {}
            Response::Refused(msg) if msg.contains("server busy") => busy += 1,
            // Room came just before the deadline, too late to read the
            // body in time: turned away for want of room all the same.
            Response::Refused(msg) if msg.contains("(frame_timeout)") => busy += 1,
            other => panic!("{other:?}"),
        }
    }
    let decoded_per_wait = 4096 * (24 + 32) as u64;
    let fit = budget / decoded_per_wait;
    println!("{waiters} waits of 4096 one-byte keys: {busy} refused as busy, at most {fit} fit");
    assert!(
        busy >= waiters - fit,
        "{} parked at once under a {budget}-byte budget; {fit} fit",
        waiters - busy
    );
}
