//! `TorchStore` against a strict stand-in for PyTorch's `TCPStore` server,
//! written from the protocol (NOTE [torch store protocol] in
//! `host/base/store/src/torch.rs`): it closes the connection on anything
//! PyTorch's libuv server would close it on (no VALIDATE first, a wrong
//! magic, an unknown query, a key, value or key count over its limits) and
//! records why, so every test can also check the client sent nothing
//! malformed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use intranode_dist_env::{StoreChoice, StoreProtocol};
use intranode_store::torch::{
    TORCH_CHECK_NOT_READY, TORCH_CHECK_READY, TORCH_MAX_KEY_BYTES, TORCH_MAX_KEYS,
    TORCH_MAX_VALUE_BYTES, TORCH_STOP_WAITING, TORCH_VALIDATION_MAGIC, TORCH_WAIT_CANCELED,
    TorchQuery,
};
use intranode_store::{
    ClientConfig, DEFAULT_MAX_REPLY_BYTES, ServerConfig, Store, StoreError, TcpStoreServer,
    TorchStore, connect,
};

#[derive(Default)]
struct State {
    table: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    /// Why the server closed a connection (protocol violations only).
    rejected: Mutex<Vec<String>>,
    /// Queries served, in order, for tests that check what was sent.
    queries: Mutex<Vec<TorchQuery>>,
    /// Every key a query wrote, in order.
    written: Mutex<Vec<String>>,
}

struct FakeTorchStore {
    port: u16,
    state: Arc<State>,
}

impl FakeTorchStore {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let state = shared.clone();
                thread::spawn(move || serve(stream, &state));
            }
        });
        Self { port, state }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn rejected(&self) -> Vec<String> {
        self.state.rejected.lock().unwrap().clone()
    }

    fn queries(&self) -> Vec<TorchQuery> {
        self.state.queries.lock().unwrap().clone()
    }

    fn written(&self) -> Vec<String> {
        self.state.written.lock().unwrap().clone()
    }

    fn keys(&self) -> Vec<String> {
        let mut keys: Vec<_> = self.state.table.lock().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }
}

/// Why a connection ends: the peer left between requests (fine), or broke
/// the protocol (recorded).
enum End {
    Closed,
    Violation(String),
}

impl From<io::Error> for End {
    fn from(e: io::Error) -> Self {
        End::Violation(format!("i/o inside a request: {e}"))
    }
}

fn serve(mut stream: TcpStream, state: &State) {
    let end = session(&mut stream, state);
    if let Err(End::Violation(why)) = end {
        state.rejected.lock().unwrap().push(why);
    }
    let _ = stream.shutdown(Shutdown::Both);
}

fn u32_of(s: &mut TcpStream) -> Result<u32, End> {
    let mut b = [0; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn u64_of(s: &mut TcpStream) -> Result<u64, End> {
    let mut b = [0; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn bytes_of(s: &mut TcpStream, max: usize, what: &str) -> Result<Vec<u8>, End> {
    let len = u64_of(s)?;
    if len > max as u64 {
        return Err(End::Violation(format!("{what} of {len} bytes over {max}")));
    }
    let mut v = vec![0; len as usize];
    s.read_exact(&mut v)?;
    Ok(v)
}

fn key_of(s: &mut TcpStream) -> Result<String, End> {
    let key = bytes_of(s, TORCH_MAX_KEY_BYTES, "key")?;
    String::from_utf8(key).map_err(|_| End::Violation("key not utf-8".into()))
}

fn keys_of(s: &mut TcpStream) -> Result<Vec<String>, End> {
    let count = u64_of(s)?;
    if count > TORCH_MAX_KEYS as u64 {
        return Err(End::Violation(format!(
            "{count} keys over {TORCH_MAX_KEYS}"
        )));
    }
    (0..count).map(|_| key_of(s)).collect()
}

fn put_bytes(out: &mut Vec<u8>, v: &[u8]) {
    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
    out.extend_from_slice(v);
}

fn session(s: &mut TcpStream, state: &State) -> Result<(), End> {
    let mut first = true;
    loop {
        let mut q = [0u8; 1];
        match s.read(&mut q) {
            Ok(0) => return Err(End::Closed),
            Ok(_) => {}
            Err(_) => return Err(End::Closed),
        }
        let Some(query) = TorchQuery::from_byte(q[0]) else {
            return Err(End::Violation(format!("unknown query {:#04x}", q[0])));
        };
        if first {
            if query != TorchQuery::Validate {
                return Err(End::Violation(format!(
                    "first query {query:?}, not Validate"
                )));
            }
            let magic = u32_of(s)?;
            if magic != TORCH_VALIDATION_MAGIC {
                return Err(End::Violation(format!("bad magic {magic:#010x}")));
            }
            first = false;
            state.queries.lock().unwrap().push(query);
            continue;
        }
        state.queries.lock().unwrap().push(query);
        let mut out = Vec::new();
        let mut table = state.table.lock().unwrap();
        match query {
            TorchQuery::Validate => return Err(End::Violation("second Validate".into())),
            TorchQuery::Set | TorchQuery::Append => {
                let key = key_of(s)?;
                let value = bytes_of(s, TORCH_MAX_VALUE_BYTES, "value")?;
                state.written.lock().unwrap().push(key.clone());
                if query == TorchQuery::Set {
                    table.insert(key, value);
                } else {
                    table.entry(key).or_default().extend_from_slice(&value);
                }
                state.changed.notify_all();
            }
            TorchQuery::CompareSet => {
                let key = key_of(s)?;
                let expected = bytes_of(s, TORCH_MAX_VALUE_BYTES, "value")?;
                let desired = bytes_of(s, TORCH_MAX_VALUE_BYTES, "value")?;
                let now = match table.get(&key) {
                    None if expected.is_empty() => {
                        table.insert(key, desired.clone());
                        desired
                    }
                    None => expected,
                    Some(current) if *current == expected => {
                        table.insert(key, desired.clone());
                        desired
                    }
                    Some(current) => current.clone(),
                };
                state.changed.notify_all();
                put_bytes(&mut out, &now);
            }
            TorchQuery::Get => {
                let key = key_of(s)?;
                put_bytes(&mut out, table.get(&key).map_or(&[][..], |v| v));
            }
            TorchQuery::Add => {
                let key = key_of(s)?;
                let delta = u64_of(s)? as i64;
                state.written.lock().unwrap().push(key.clone());
                let current: i64 = match table.get(&key) {
                    Some(v) => std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| End::Violation("add on a non-counter".into()))?,
                    None => 0,
                };
                let new = current + delta;
                table.insert(key, new.to_string().into_bytes());
                state.changed.notify_all();
                out.extend_from_slice(&new.to_le_bytes());
            }
            TorchQuery::Check => {
                let keys = keys_of(s)?;
                let ready = keys.iter().all(|k| table.contains_key(k));
                out.push(if ready {
                    TORCH_CHECK_READY
                } else {
                    TORCH_CHECK_NOT_READY
                });
            }
            TorchQuery::Wait => {
                let keys = keys_of(s)?;
                drop(table);
                wait(s, state, &keys)?;
            }
            TorchQuery::GetNumKeys => out.extend_from_slice(&(table.len() as i64).to_le_bytes()),
            TorchQuery::DeleteKey => {
                let key = key_of(s)?;
                let n = i64::from(table.remove(&key).is_some());
                out.extend_from_slice(&n.to_le_bytes());
            }
            TorchQuery::MultiGet => {
                for key in keys_of(s)? {
                    put_bytes(&mut out, table.get(&key).map_or(&[][..], |v| v));
                }
            }
            TorchQuery::MultiSet => {
                let count = u64_of(s)?;
                if count > TORCH_MAX_KEYS as u64 {
                    return Err(End::Violation(format!(
                        "{count} keys over {TORCH_MAX_KEYS}"
                    )));
                }
                for _ in 0..count {
                    let key = key_of(s)?;
                    let value = bytes_of(s, TORCH_MAX_VALUE_BYTES, "value")?;
                    state.written.lock().unwrap().push(key.clone());
                    table.insert(key, value);
                }
                state.changed.notify_all();
            }
            // Nothing is being waited for: PyTorch answers WAIT_CANCELED.
            TorchQuery::CancelWait => out.push(TORCH_WAIT_CANCELED),
            TorchQuery::Ping => out.extend_from_slice(&u32_of(s)?.to_le_bytes()),
        }
        s.write_all(&out)?;
    }
}

/// Parks a WAIT until its keys exist or the client sends CANCEL_WAIT
/// (anything else while waiting breaks the protocol).
fn wait(s: &mut TcpStream, state: &State, keys: &[String]) -> Result<(), End> {
    s.set_read_timeout(Some(Duration::from_millis(5)))?;
    let result = loop {
        {
            let table = state.table.lock().unwrap();
            if keys.iter().all(|k| table.contains_key(k)) {
                break s.write_all(&[TORCH_STOP_WAITING]).map_err(End::from);
            }
            let _ = state
                .changed
                .wait_timeout(table, Duration::from_millis(5))
                .unwrap();
        }
        let mut q = [0u8; 1];
        match s.peek(&mut q) {
            Ok(0) => break Err(End::Closed),
            Ok(_) if q[0] == TorchQuery::CancelWait as u8 => {
                s.read_exact(&mut q)?;
                state.queries.lock().unwrap().push(TorchQuery::CancelWait);
                break s.write_all(&[TORCH_WAIT_CANCELED]).map_err(End::from);
            }
            Ok(_) => break Err(End::Violation(format!("query {:#04x} during WAIT", q[0]))),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => break Err(e.into()),
        }
    };
    s.set_read_timeout(None)?;
    result
}

fn config(timeout_ms: u64) -> ClientConfig {
    ClientConfig {
        timeout: Duration::from_millis(timeout_ms),
        connect_timeout: Duration::from_secs(10),
        handshake_timeout: Duration::from_secs(5),
        token: None,
    }
}

fn client(fake: &FakeTorchStore) -> TorchStore {
    TorchStore::connect(fake.addr(), config(10_000)).unwrap()
}

#[test]
fn every_operation_round_trips() {
    let fake = FakeTorchStore::start();
    let store = client(&fake);
    assert_eq!(
        fake.queries()[..2],
        [TorchQuery::Validate, TorchQuery::Ping]
    );

    store.set("a", b"\x00\x01binary\xff").unwrap();
    assert_eq!(store.get("a").unwrap(), b"\x00\x01binary\xff");
    store.set("empty", b"").unwrap();
    assert_eq!(store.get("empty").unwrap(), b"");
    assert_eq!(store.add("n", 5).unwrap(), 5);
    assert_eq!(store.add("n", -7).unwrap(), -2);
    assert_eq!(store.get("n").unwrap(), b"-2");
    assert!(store.check(&["a", "n"]).unwrap());
    assert!(!store.check(&["a", "missing"]).unwrap());
    assert!(store.check(&[]).unwrap());
    // compare_set with c10d's semantics.
    assert_eq!(store.compare_set("cs", b"", b"one").unwrap(), b"one");
    assert_eq!(store.compare_set("cs", b"x", b"two").unwrap(), b"one");
    assert_eq!(store.compare_set("cs", b"one", b"two").unwrap(), b"two");
    assert_eq!(store.compare_set("nope", b"x", b"y").unwrap(), b"x");
    store.append("log", b"ab").unwrap();
    store.append("log", b"cd").unwrap();
    assert_eq!(store.get("log").unwrap(), b"abcd");
    store.multi_set(&["m1", "m2"], &[b"1", b"22"]).unwrap();
    assert_eq!(
        store.multi_get(&["m2", "m1", "a"]).unwrap(),
        vec![
            b"22".to_vec(),
            b"1".to_vec(),
            b"\x00\x01binary\xff".to_vec()
        ]
    );
    // a, empty, n, cs, log, m1, m2 (a failed compare_set adds nothing).
    assert_eq!(store.num_keys().unwrap(), 7);
    assert!(store.delete_key("m1").unwrap());
    assert!(!store.delete_key("m1").unwrap());
    assert_eq!(store.num_keys().unwrap(), 6);
    store.wait(&["a", "m2"], None).unwrap();
    let err = store.multi_set(&["x"], &[b"1", b"2"]).unwrap_err();
    assert!(
        matches!(err, StoreError::LengthMismatch { keys: 1, values: 2 }),
        "{err}"
    );
    assert_eq!(fake.rejected(), Vec::<String>::new());
}

#[test]
fn a_blocking_get_is_answered_when_another_client_sets_the_key() {
    let fake = FakeTorchStore::start();
    let reader = client(&fake);
    let writer = client(&fake);
    let setter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        writer.set("late", b"here").unwrap();
    });
    assert_eq!(reader.get("late").unwrap(), b"here");
    setter.join().unwrap();
    assert_eq!(fake.rejected(), Vec::<String>::new());
}

#[test]
fn a_timed_out_wait_cancels_and_the_connection_stays_usable() {
    let fake = FakeTorchStore::start();
    let store = client(&fake);
    let err = store
        .wait(&["never"], Some(Duration::from_millis(50)))
        .unwrap_err();
    match &err {
        StoreError::Timeout { keys, .. } => assert_eq!(keys, &["never".to_owned()]),
        other => panic!("{other}"),
    }
    let err = store
        .get_with_timeout("never", Duration::from_millis(50))
        .unwrap_err();
    assert!(matches!(err, StoreError::Timeout { .. }), "{err}");
    assert!(fake.queries().contains(&TorchQuery::CancelWait));
    // Still in step: the next request gets its own reply.
    store.set("k", b"v").unwrap();
    assert_eq!(store.get("k").unwrap(), b"v");
    assert_eq!(fake.rejected(), Vec::<String>::new());
}

#[test]
fn over_limit_requests_are_refused_before_sending() {
    let fake = FakeTorchStore::start();
    let store = client(&fake);
    // Keys go out with PyTorch's "/" before them (`TORCH_KEY_PREFIX`).
    let long_key = "k".repeat(TORCH_MAX_KEY_BYTES);
    let err = store.set(&long_key, b"v").unwrap_err();
    assert!(err.to_string().contains("MAX_STRING_LEN"), "{err}");
    let big = vec![7u8; TORCH_MAX_VALUE_BYTES + 1];
    let err = store.set("k", &big).unwrap_err();
    assert!(err.to_string().contains("MAX_PAYLOAD_LEN"), "{err}");
    // At the limits exactly, the server takes them.
    let key = "k".repeat(TORCH_MAX_KEY_BYTES - 1);
    store.set(&key, &big[1..]).unwrap();
    assert_eq!(store.get(&key).unwrap().len(), TORCH_MAX_VALUE_BYTES);
    assert_eq!(fake.rejected(), Vec::<String>::new());
}

/// A call's own timeout bounds its reconnect: once the store went away, a
/// `get_with_timeout(1 s)` or `wait(.., 1 s)` returns within its own
/// timeout and a little slack, not after the store's (30 s here, 300 s by
/// default).
#[test]
fn a_calls_own_timeout_bounds_its_reconnect_to_a_gone_store() {
    // Answers VALIDATE and PING on one connection, then goes away:
    // listener and connection closed.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut hello = [0u8; 10];
        s.read_exact(&mut hello).unwrap();
        s.write_all(&hello[6..10]).unwrap();
        s
    });
    let long = Duration::from_secs(30);
    let store = TorchStore::connect(
        addr.as_str(),
        ClientConfig {
            timeout: long,
            connect_timeout: long,
            ..config(0)
        },
    )
    .unwrap();
    drop(server.join().unwrap());
    // The connection is gone: the next call learns it at once.
    store.check(&["k"]).unwrap_err();

    let timeout = Duration::from_secs(1);
    // The timeout, the ping's floor of a second, and a loaded machine.
    let bound = timeout + Duration::from_secs(3);
    for op in ["get", "wait"] {
        let started = Instant::now();
        let err = match op {
            "get" => store.get_with_timeout("k", timeout).map(drop),
            _ => store.wait(&["k"], Some(timeout)),
        }
        .unwrap_err();
        let took = started.elapsed();
        assert!(
            took < bound,
            "{op} took {took:?} (store timeout {long:?}): {err}"
        );
        assert!(matches!(err, StoreError::Broken { .. }), "{op}: {err}");
        assert!(err.to_string().contains(&addr), "{op}: {err}");
    }
}

/// `multi_get` caps its whole reply as `TcpStore` does (32 MiB,
/// `DEFAULT_MAX_REPLY_BYTES`): each value is within PyTorch's 8 MiB, but
/// 128 keys of 8 MiB made the client buffer 1 GiB. Five here: the fifth
/// value is refused from its length, with an error naming the limit.
#[test]
fn multi_get_caps_the_whole_reply() {
    let fake = FakeTorchStore::start();
    let store = client(&fake);
    let big = vec![7u8; TORCH_MAX_VALUE_BYTES];
    store.set("big", &big).unwrap();
    let err = store.multi_get(&["big"; 5]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&DEFAULT_MAX_REPLY_BYTES.to_string())
            && text.contains("with_max_reply_bytes"),
        "{text}"
    );
    println!("{text}");
    // Within the cap (and on a new connection: the refused reply was not
    // read to its end), all is well.
    assert_eq!(store.multi_get(&["big"; 3]).unwrap(), vec![big.clone(); 3]);
    // A raised cap takes all five.
    let store = client(&fake).with_max_reply_bytes(64 << 20);
    assert_eq!(store.multi_get(&["big"; 5]).unwrap(), vec![big; 5]);
}

#[test]
fn connect_prefixes_keys_as_torchruns_workers_do() {
    let fake = FakeTorchStore::start();
    let choice = StoreChoice {
        protocol: StoreProtocol::Torch,
        key_prefix: Some("/worker/attempt_2".into()),
        reason: "test",
    };
    let store = connect(&fake.addr(), &choice, config(10_000)).unwrap();
    store.set("intranode/x", b"1").unwrap();
    // SET has no reply: the GET's reply proves the server took it.
    assert_eq!(store.get("intranode/x").unwrap(), b"1");
    // On the wire: PyTorch's client prefix, then the workers' prefix.
    assert_eq!(fake.keys(), ["//worker/attempt_2/intranode/x"]);
}

#[test]
fn a_silent_peer_fails_the_connect_naming_it() {
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let held = thread::spawn(move || listener.accept().map(|(s, _)| s));
    let started = Instant::now();
    let err = TorchStore::connect(
        addr.as_str(),
        ClientConfig {
            connect_timeout: Duration::from_secs(2),
            ..config(300_000)
        },
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&addr), "{text}");
    assert!(text.contains("no answer to PING"), "{text}");
    // Bounded by the connect window, not the 300 s store timeout.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    drop(held.join());
}

#[test]
fn intranodes_own_store_is_recognised_as_not_pytorchs() {
    let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
    let addr = server.local_addr().to_string();
    let err = TorchStore::connect(addr.as_str(), config(10_000)).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&addr), "{text}");
    assert!(text.contains("not a PyTorch TCPStore"), "{text}");
}

/// Sends raw bytes and reports whether the fake closed the connection.
fn closes_on(bytes: &[u8]) -> (bool, Vec<String>) {
    let fake = FakeTorchStore::start();
    let mut s = TcpStream::connect(fake.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let closed = s.read_to_end(&mut rest).is_ok();
    // Give the server thread the moment it needs to record the reason.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.rejected().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    (closed, fake.rejected())
}

fn validate() -> Vec<u8> {
    let mut v = vec![TorchQuery::Validate as u8];
    v.extend_from_slice(&TORCH_VALIDATION_MAGIC.to_le_bytes());
    v
}

#[test]
fn the_fake_server_is_strict() {
    let (closed, why) = closes_on(&[TorchQuery::Ping as u8, 1, 2, 3, 4]);
    assert!(closed && why[0].contains("not Validate"), "{why:?}");
    let (closed, why) = closes_on(&[0, 1, 2, 3, 4]);
    assert!(closed && why[0].contains("bad magic"), "{why:?}");
    let mut unknown = validate();
    unknown.push(0x63);
    let (closed, why) = closes_on(&unknown);
    assert!(closed && why[0].contains("unknown query 0x63"), "{why:?}");
    let mut long_key = validate();
    long_key.push(TorchQuery::Get as u8);
    long_key.extend_from_slice(&(TORCH_MAX_KEY_BYTES as u64 + 1).to_le_bytes());
    let (closed, why) = closes_on(&long_key);
    assert!(closed && why[0].contains("key of 8193 bytes"), "{why:?}");
    let mut truncated = validate();
    truncated.push(TorchQuery::Set as u8);
    truncated.extend_from_slice(&5u64.to_le_bytes());
    truncated.extend_from_slice(b"ab");
    let (closed, why) = closes_on(&truncated);
    assert!(closed && why[0].contains("i/o inside a request"), "{why:?}");
    let mut many = validate();
    many.push(TorchQuery::Check as u8);
    many.extend_from_slice(&(TORCH_MAX_KEYS as u64 + 1).to_le_bytes());
    let (closed, why) = closes_on(&many);
    assert!(closed && why[0].contains("keys over"), "{why:?}");
}

#[test]
fn ranks_under_torchrun_variables_rendezvous_through_the_torch_store() {
    let fake = FakeTorchStore::start();
    let port = fake.port.to_string();
    let ranks: Vec<_> = (0..3)
        .map(|rank| {
            let port = port.clone();
            thread::spawn(move || {
                let rank_text = rank.to_string();
                // What torchrun's agent gives each worker.
                let vars = [
                    ("RANK", rank_text.as_str()),
                    ("WORLD_SIZE", "3"),
                    ("LOCAL_RANK", rank_text.as_str()),
                    ("LOCAL_WORLD_SIZE", "3"),
                    ("GROUP_RANK", "0"),
                    ("TORCHELASTIC_RUN_ID", "none"),
                    ("TORCHELASTIC_RESTART_COUNT", "1"),
                    ("TORCHELASTIC_USE_AGENT_STORE", "True"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", port.as_str()),
                ];
                let env = intranode_dist_env::DistEnv::from_vars(|name| {
                    vars.iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, v)| (*v).to_owned())
                })
                .unwrap();
                assert_eq!(env.store.protocol, StoreProtocol::Torch);
                let store = intranode_store::connect_env(&env).unwrap();
                let mut exchange = intranode_store::StoreExchange::new("intranode/test");
                let all: Vec<usize> = exchange
                    .all_gather(store.as_ref(), env.rank, env.world_size, &(env.rank * 10))
                    .unwrap();
                exchange
                    .barrier(store.as_ref(), env.rank, env.world_size)
                    .unwrap();
                all
            })
        })
        .collect();
    for rank in ranks {
        assert_eq!(rank.join().unwrap(), vec![0, 10, 20]);
    }
    // Every key the ranks wrote sits under this attempt's prefix.
    let written = fake.written();
    assert!(!written.is_empty());
    assert!(
        written
            .iter()
            .all(|k| k.starts_with("//worker/attempt_1/intranode/test/")),
        "{written:?}"
    );
    assert_eq!(fake.rejected(), Vec::<String>::new());
}
