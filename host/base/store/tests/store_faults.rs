//! Faults across processes: a store server that dies mid-call (SIGKILL of
//! the process hosting it), a call that must reconnect to a server that
//! went away, clients without the job's token, malformed timeout settings,
//! and ranks that never arrive at a collective over a real TCP store.
//! Bounds on elapsed time only guard against hangs, far looser than the
//! timeouts involved, except where the bound is the promise (a call's own
//! timeout bounds its reconnect: a few seconds of slack, against a 30 s
//! store timeout).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use intranode_store::{
    ClientConfig, STORE_TIMEOUT_ENV, ServerConfig, Store, StoreError, StoreExchange, TOKEN_ENV,
    TcpStore, TcpStoreServer,
};

/// Set in the child process that hosts the server.
const SERVER_CHILD_ENV: &str = "INTRANODE_STORE_TEST_SERVER";

/// The server of `server_killed_mid_call_fails_fast`, in a process of its
/// own; a no-op unless that test started this process.
#[test]
fn server_process_child() {
    let Ok(token) = std::env::var(SERVER_CHILD_ENV) else {
        return;
    };
    let server = TcpStoreServer::bind(ServerConfig {
        token: Some(token),
        ..ServerConfig::default()
    })
    .expect("bind");
    println!("store-port {}", server.local_addr().port());
    // Lives until the parent kills it; the bound keeps an orphan from
    // lingering if the parent dies first.
    thread::sleep(Duration::from_secs(120));
}

/// The server's process, killed on drop so a failing test leaves no
/// orphan behind.
struct ServerProcess(Child);

impl ServerProcess {
    /// SIGKILLs the process and reaps it.
    fn kill(&mut self) {
        self.0.kill().expect("SIGKILL the server");
        self.0.wait().expect("reap the server");
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the server process; returns it and its port.
fn spawn_server(token: &str) -> (ServerProcess, u16) {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args(["--exact", "server_process_child", "--nocapture"])
        .args(["--test-threads=1"])
        .env(SERVER_CHILD_ENV, token)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn server process");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let port = loop {
        let line = lines
            .next()
            .expect("server process ended before printing its port")
            .expect("read");
        // The harness may print `test name ... ` on the same line first.
        if let Some((_, p)) = line.split_once("store-port ") {
            break p.trim().parse().expect("port");
        }
    };
    (ServerProcess(child), port)
}

fn config(token: Option<&str>, timeout: Duration) -> ClientConfig {
    ClientConfig {
        timeout,
        connect_timeout: timeout,
        token: token.map(str::to_owned),
        ..ClientConfig::default()
    }
}

#[test]
fn server_killed_mid_call_fails_fast() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let (mut server, port) = spawn_server("tok");
    let addr = format!("127.0.0.1:{port}");
    let idle = TcpStore::connect(addr.as_str(), config(Some("tok"), Duration::from_secs(1)))
        .expect("connect");
    idle.set("k", b"v").expect("set");
    let waiter = TcpStore::connect(addr.as_str(), config(Some("tok"), Duration::from_secs(60)))
        .expect("connect");
    let parked = thread::spawn(move || {
        let start = Instant::now();
        (
            waiter.get_with_timeout("never", Duration::from_secs(60)),
            start.elapsed(),
        )
    });
    // Let the request park server-side, then kill the server's process.
    thread::sleep(Duration::from_millis(200));
    server.kill();

    let (result, waited) = parked.join().expect("waiter thread");
    let err = result.expect_err("the server is gone");
    // The kernel closes the dead process's sockets: the parked call ends
    // at once with an i/o error naming the store, not after its 60 s.
    assert!(matches!(err, StoreError::Io { op: "get", .. }), "{err}");
    assert!(err.to_string().contains(&addr), "{err}");
    assert!(waited < Duration::from_secs(30), "{waited:?}");

    // The next calls try to reconnect within the client's 1 s timeout and
    // fail with the reason, twice in a row (no state left half-broken).
    for _ in 0..2 {
        let start = Instant::now();
        let err = idle.set("k", b"w").expect_err("no server");
        assert!(err.to_string().contains(&addr), "{err}");
        assert!(start.elapsed() < Duration::from_secs(30), "reconnect hung");
    }
}

/// A call's own timeout bounds its reconnect: once the connection dropped
/// and the server went away, `get_with_timeout(1 s)` and `wait(.., 1 s)`
/// return within their own timeout and a little slack, saying the
/// reconnect failed, not after the store's (30 s here, 300 s by default).
#[test]
fn a_calls_own_timeout_bounds_its_reconnect_to_a_gone_server() {
    let server = TcpStoreServer::bind(ServerConfig::default()).expect("bind");
    let addr = server.local_addr().to_string();
    let long = Duration::from_secs(30);
    let store = TcpStore::connect(addr.as_str(), config(None, long)).expect("connect");
    store.set("k", b"v").expect("set");
    drop(server);
    // The connection is gone: the next call learns it at once.
    let start = Instant::now();
    store.check(&["k"]).expect_err("the server is gone");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );

    let timeout = Duration::from_secs(1);
    // The timeout, the handshake's floor of a second, and a loaded machine.
    let bound = timeout + Duration::from_secs(3);
    for op in ["get", "wait"] {
        let start = Instant::now();
        let err = match op {
            "get" => store.get_with_timeout("k", timeout).map(drop),
            _ => store.wait(&["k"], Some(timeout)),
        }
        .expect_err("the server is gone");
        let took = start.elapsed();
        assert!(
            took < bound,
            "{op} took {took:?} (store timeout {long:?}): {err}"
        );
        assert!(matches!(err, StoreError::Broken { .. }), "{op}: {err}");
        assert!(err.to_string().contains(&addr), "{op}: {err}");
    }
}

#[test]
fn store_refuses_clients_without_the_job_token() {
    if std::env::var_os(SERVER_CHILD_ENV).is_some() {
        return;
    }
    let (mut server, port) = spawn_server("job-secret");
    let addr = format!("127.0.0.1:{port}");
    let t = Duration::from_secs(5);
    for (token, why) in [(None, "missing token"), (Some("guess"), "wrong token")] {
        let err = TcpStore::connect(addr.as_str(), config(token, t)).expect_err("refused");
        assert!(matches!(err, StoreError::Handshake { .. }), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
    let ok = TcpStore::connect(addr.as_str(), config(Some("job-secret"), t)).expect("token");
    ok.set("k", b"v").expect("set");
    server.kill();
}

#[test]
fn timeout_comes_from_the_environment() {
    let vars = |timeout: &'static str| {
        move |name: &str| match name {
            STORE_TIMEOUT_ENV => Some(timeout.to_owned()),
            TOKEN_ENV => Some("t".to_owned()),
            _ => None,
        }
    };
    let c = ClientConfig::from_vars(vars("1500")).expect("valid");
    assert_eq!(c.timeout, Duration::from_millis(1500));
    assert_eq!(c.connect_timeout, Duration::from_millis(1500));
    assert_eq!(c.token.as_deref(), Some("t"));
    let c = ClientConfig::from_vars(vars(" ")).expect("blank means unset");
    assert_eq!(c.timeout, intranode_store::DEFAULT_TIMEOUT);
    for bad in ["0", "-1", "3s", "1.5"] {
        let err = ClientConfig::from_vars(vars(bad)).expect_err(bad);
        let text = err.to_string();
        assert!(
            text.contains(STORE_TIMEOUT_ENV) && text.contains(bad),
            "{text}"
        );
    }
}

/// Four ranks on threads over a real TCP store; rank 3 never arrives at
/// the all-gather, then the survivors meet and rank 1 skips a barrier.
/// Every waiting rank must name the absentee within the store timeout.
#[test]
fn ranks_that_never_arrive_are_named() {
    let server = TcpStoreServer::bind(ServerConfig::default()).expect("bind");
    let addr = server.local_addr();
    let timeout = Duration::from_millis(500);
    let results: Vec<_> = (0..3)
        .map(|rank| {
            thread::spawn(move || {
                let store: Arc<dyn Store> =
                    Arc::new(TcpStore::connect(addr, config(None, timeout)).expect("connect"));
                let mut ex = StoreExchange::new("rdzv");
                let start = Instant::now();
                let gathered = ex.all_gather(store.as_ref(), rank, 4, &rank);
                let first = (gathered, start.elapsed());
                let mut ex = StoreExchange::new("after");
                let second = if rank == 1 {
                    None
                } else {
                    let start = Instant::now();
                    Some((ex.barrier(store.as_ref(), rank, 3), start.elapsed()))
                };
                (first, second)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("rank thread"))
        .collect();
    for (rank, ((gathered, waited), second)) in results.into_iter().enumerate() {
        let err = gathered.expect_err("rank 3 never came");
        assert!(
            matches!(&err, StoreError::MissingRanks { missing, world: 4, .. } if missing == &[3]),
            "rank {rank}: {err}"
        );
        assert!(
            waited >= timeout && waited < Duration::from_secs(20),
            "{waited:?}"
        );
        if let Some((barrier, waited)) = second {
            let err = barrier.expect_err("rank 1 skipped the barrier");
            assert!(
                matches!(&err, StoreError::MissingRanks { op: "barrier", missing, .. } if missing == &[1]),
                "rank {rank}: {err}"
            );
            assert!(waited < Duration::from_secs(20), "{waited:?}");
        }
    }
}
