//! `TorchStore` against a real `torch.distributed.TCPStore`, both of its
//! server back-ends (libuv, PyTorch's default since 2.4, and the older
//! one), where `python3` can import torch.
//!
//! Skips with a message where it cannot (torch is not installed on the CI
//! machine); `INTRANODE_REQUIRE_TORCH=1` turns the skip into a failure (the
//! GPU machine's script sets it: torch is installed there). `INTRANODE_PYTHON`
//! names another interpreter.
//!
//! The Python side hosts the store, writes a key, waits for the Rust side's
//! keys and checks them byte for byte, so each side checks what the other
//! wrote.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use intranode_store::{ClientConfig, Store, StoreError, TorchStore};

const REQUIRE_ENV: &str = "INTRANODE_REQUIRE_TORCH";

const SERVER_PY: &str = r#"
import datetime, sys
from torch.distributed import TCPStore
use_libuv = sys.argv[1] == "libuv"
store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                 timeout=datetime.timedelta(seconds=60), use_libuv=use_libuv)
print(store.port, flush=True)
store.set("py/hello", "from python")
store.wait(["rust/done"])
got = store.get("rust/value")
assert got == b"\x00\x01binary\xff", got
assert store.get("rust/counter") == b"7", store.get("rust/counter")
assert store.get("rust/appended") == b"abcd", store.get("rust/appended")
assert store.get("rust/multi2") == b"22", store.get("rust/multi2")
assert not store.check(["rust/deleted"])
print("python: rust's keys are right", flush=True)
store.set("py/verdict", "ok")
store.wait(["rust/bye"])
"#;

fn python() -> String {
    std::env::var("INTRANODE_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Whether torch imports; prints why not.
fn torch_available() -> bool {
    let out = Command::new(python())
        .args(["-c", "import torch.distributed"])
        .stdin(Stdio::null())
        .output();
    let why = match out {
        Ok(out) if out.status.success() => return true,
        Ok(out) => String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .to_owned(),
        Err(e) => e.to_string(),
    };
    let required = std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{REQUIRE_ENV}=1 but torch is not importable: {why}"
    );
    // Straight to the process's stderr: `eprintln!` is captured by the
    // test harness, which would then print a bare "ok" for a test that
    // did nothing.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: the real-TCPStore test needs {} with torch ({why}); \
         the fake-server tests in torch_fake.rs still ran",
        python()
    );
    false
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn round_trip(backend: &str) {
    if !torch_available() {
        return;
    }
    let mut child = Server(
        Command::new(python())
            .args(["-c", SERVER_PY, backend])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python"),
    );
    let mut lines = BufReader::new(child.0.stdout.take().expect("stdout")).lines();
    let port: u16 = lines
        .next()
        .expect("python printed its port")
        .expect("read the port")
        .trim()
        .parse()
        .expect("a port number");
    let store = TorchStore::connect(
        format!("127.0.0.1:{port}").as_str(),
        ClientConfig {
            timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(60),
            handshake_timeout: Duration::from_secs(10),
            token: None,
        },
    )
    .expect("connect to torch's TCPStore");

    assert_eq!(store.get("py/hello").unwrap(), b"from python");
    store.set("rust/value", b"\x00\x01binary\xff").unwrap();
    assert_eq!(store.add("rust/counter", 10).unwrap(), 10);
    assert_eq!(store.add("rust/counter", -3).unwrap(), 7);
    store.append("rust/appended", b"ab").unwrap();
    store.append("rust/appended", b"cd").unwrap();
    store
        .multi_set(&["rust/multi1", "rust/multi2"], &[b"1", b"22"])
        .unwrap();
    assert_eq!(
        store.multi_get(&["rust/multi2", "rust/multi1"]).unwrap(),
        vec![b"22".to_vec(), b"1".to_vec()]
    );
    assert_eq!(store.compare_set("rust/cs", b"", b"one").unwrap(), b"one");
    assert_eq!(store.compare_set("rust/cs", b"x", b"two").unwrap(), b"one");
    assert_eq!(
        store.compare_set("rust/cs", b"one", b"two").unwrap(),
        b"two"
    );
    store.set("rust/deleted", b"x").unwrap();
    assert!(store.delete_key("rust/deleted").unwrap());
    assert!(!store.delete_key("rust/deleted").unwrap());
    assert!(store.check(&["py/hello", "rust/cs"]).unwrap());
    assert!(!store.check(&["py/hello", "rust/nothing"]).unwrap());
    assert!(store.num_keys().unwrap() >= 7);
    // A wait that times out is cancelled, and the connection stays in step.
    let err = store
        .wait(&["rust/never"], Some(Duration::from_millis(200)))
        .unwrap_err();
    assert!(matches!(err, StoreError::Timeout { .. }), "{err}");
    assert_eq!(store.get("rust/cs").unwrap(), b"two");

    store.set("rust/done", b"1").unwrap();
    assert_eq!(store.get("py/verdict").unwrap(), b"ok");
    store.set("rust/bye", b"1").unwrap();
    let verdict = lines.next().expect("python's verdict").expect("read");
    assert_eq!(verdict, "python: rust's keys are right");
    let status = child.0.wait().expect("python exits");
    assert!(status.success(), "python: {status}");
    eprintln!("torch TCPStore ({backend} back-end): every operation round-tripped");
}

#[test]
fn round_trip_with_torchs_libuv_server() {
    round_trip("libuv");
}

#[test]
fn round_trip_with_torchs_classic_server() {
    round_trip("classic");
}
