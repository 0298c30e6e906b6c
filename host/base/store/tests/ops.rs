//! Every `Store` operation, run against every backend: `HashStore`,
//! `TcpStore`, and `PrefixStore` over each.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use intranode_store::{
    ClientConfig, HashStore, PrefixStore, ServerConfig, Store, StoreError, TcpStore, TcpStoreServer,
};

/// Short enough to keep the suite fast, long enough for a loaded 2-core
/// machine to answer a present key.
const SHORT: Duration = Duration::from_millis(200);

fn client(server: &TcpStoreServer) -> TcpStore {
    let config = ClientConfig {
        connect_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    TcpStore::connect(server.local_addr(), config).unwrap()
}

/// Runs `f` against each backend, labelled for failure messages.
fn for_each_backend(f: impl Fn(&str, &dyn Store)) {
    let hash = HashStore::new();
    f("hash", &hash);

    let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
    let tcp = client(&server);
    f("tcp", &tcp);

    let inner: Arc<dyn Store> = Arc::new(HashStore::new());
    let prefixed = PrefixStore::new("pg0", inner);
    f("prefix(hash)", &prefixed);

    let inner: Arc<dyn Store> = Arc::new(client(&server));
    // Fresh namespace on the same server: num_keys counts the whole store,
    // so the op test clears it first (below).
    let prefixed = PrefixStore::new("pg1", inner);
    f("prefix(tcp)", &prefixed);
}

fn clear(store: &dyn Store, keys: &[&str]) {
    for k in keys {
        store.delete_key(k).unwrap();
    }
}

#[test]
fn set_get_delete_num_keys() {
    for_each_backend(|name, store| {
        let base = store.num_keys().unwrap();
        store.set("a", b"1").unwrap();
        store.set("b", b"").unwrap();
        assert_eq!(store.get("a").unwrap(), b"1", "{name}");
        assert_eq!(store.get("b").unwrap(), b"", "{name}");
        store.set("a", b"22").unwrap();
        assert_eq!(store.get("a").unwrap(), b"22", "{name}");
        assert_eq!(store.num_keys().unwrap(), base + 2, "{name}");
        assert!(store.delete_key("a").unwrap(), "{name}");
        assert!(!store.delete_key("a").unwrap(), "{name}");
        assert_eq!(store.num_keys().unwrap(), base + 1, "{name}");
        clear(store, &["b"]);
        assert_eq!(store.num_keys().unwrap(), base, "{name}");
    });
}

#[test]
fn add_counts_in_decimal_ascii() {
    for_each_backend(|name, store| {
        assert_eq!(store.add("c", 5).unwrap(), 5, "{name}");
        assert_eq!(store.add("c", -7).unwrap(), -2, "{name}");
        assert_eq!(store.get("c").unwrap(), b"-2", "{name}");
        store.set("c", b"40").unwrap();
        assert_eq!(store.add("c", 2).unwrap(), 42, "{name}");

        store.set("text", b"not a number").unwrap();
        let err = store.add("text", 1).unwrap_err();
        assert!(
            err.to_string().contains("not a decimal i64"),
            "{name}: {err}"
        );

        store.set("big", i64::MAX.to_string().as_bytes()).unwrap();
        let err = store.add("big", 1).unwrap_err();
        assert!(err.to_string().contains("overflows"), "{name}: {err}");
        clear(store, &["c", "text", "big"]);
    });
}

#[test]
fn compare_set_has_c10d_semantics() {
    for_each_backend(|name, store| {
        // Missing key, expected non-empty: nothing set, `expected` returned.
        assert_eq!(store.compare_set("k", b"x", b"y").unwrap(), b"x", "{name}");
        assert!(!store.check(&["k"]).unwrap(), "{name}");
        // Missing key, expected empty: set.
        assert_eq!(store.compare_set("k", b"", b"v1").unwrap(), b"v1", "{name}");
        // Match: swap.
        assert_eq!(
            store.compare_set("k", b"v1", b"v2").unwrap(),
            b"v2",
            "{name}"
        );
        // Mismatch: current value returned, unchanged.
        assert_eq!(
            store.compare_set("k", b"v1", b"v3").unwrap(),
            b"v2",
            "{name}"
        );
        assert_eq!(store.get("k").unwrap(), b"v2", "{name}");
        clear(store, &["k"]);
    });
}

#[test]
fn check_wait_multi_append() {
    for_each_backend(|name, store| {
        assert!(store.check(&[]).unwrap(), "{name}");
        assert!(!store.check(&["m1", "m2"]).unwrap(), "{name}");
        store
            .multi_set(&["m1", "m2"], &[b"one".as_slice(), b"two".as_slice()])
            .unwrap();
        assert!(store.check(&["m1", "m2"]).unwrap(), "{name}");
        store.wait(&["m1", "m2"], Some(SHORT)).unwrap();
        store.wait(&["m1"], None).unwrap();
        assert_eq!(
            store.multi_get(&["m2", "m1"]).unwrap(),
            vec![b"two".to_vec(), b"one".to_vec()],
            "{name}"
        );
        assert_eq!(store.multi_get(&[]).unwrap(), Vec::<Vec<u8>>::new());

        let err = store.multi_set(&["x"], &[]).unwrap_err();
        assert!(
            matches!(err, StoreError::LengthMismatch { keys: 1, values: 0 }),
            "{name}: {err}"
        );

        store.append("log", b"ab").unwrap();
        store.append("log", b"cd").unwrap();
        assert_eq!(store.get("log").unwrap(), b"abcd", "{name}");
        clear(store, &["m1", "m2", "log"]);
    });
}

#[test]
fn large_and_binary_values() {
    for_each_backend(|name, store| {
        let value: Vec<u8> = (0..3 << 20).map(|i| (i * 7 + 3) as u8).collect();
        store.set("blob", &value).unwrap();
        assert_eq!(store.get("blob").unwrap(), value, "{name}");
        clear(store, &["blob"]);
    });
}

#[test]
fn timeouts_name_keys_and_duration() {
    for_each_backend(|name, store| {
        let err = store.get_with_timeout("never", SHORT).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, StoreError::Timeout { keys, .. } if keys.iter().any(|k| k.ends_with("never"))),
            "{name}: {msg}"
        );
        assert!(
            msg.contains("never") && msg.contains("200 ms"),
            "{name}: {msg}"
        );

        store.set("present", b"").unwrap();
        let err = store.wait(&["present", "absent"], Some(SHORT)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("present") && msg.contains("absent") && msg.contains("200 ms"),
            "{name}: {msg}"
        );

        // The store-wide timeout applies to get, wait(None) and multi_get.
        let old = store.timeout();
        store.set_timeout(SHORT);
        assert_eq!(store.timeout(), SHORT, "{name}");
        assert!(
            matches!(store.get("never"), Err(StoreError::Timeout { .. })),
            "{name}"
        );
        assert!(
            matches!(
                store.wait(&["never"], None),
                Err(StoreError::Timeout { .. })
            ),
            "{name}"
        );
        assert!(
            matches!(
                store.multi_get(&["present", "never"]),
                Err(StoreError::Timeout { .. })
            ),
            "{name}"
        );
        store.set_timeout(old);
        // The connection is still usable after a timeout.
        assert_eq!(store.get("present").unwrap(), b"", "{name}");
        clear(store, &["present"]);
    });
}

#[test]
fn default_timeout_is_300_s() {
    assert_eq!(HashStore::new().timeout(), Duration::from_secs(300));
    assert_eq!(ClientConfig::default().timeout, Duration::from_secs(300));
    assert_eq!(
        ClientConfig::default().connect_timeout,
        Duration::from_secs(300)
    );
    let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
    assert_eq!(client(&server).timeout(), Duration::from_secs(300));
}

#[test]
fn blocking_get_wakes_when_another_thread_sets() {
    let hash: Arc<dyn Store> = Arc::new(HashStore::new());
    let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
    let backends: Vec<(Arc<dyn Store>, Arc<dyn Store>)> = vec![
        (Arc::clone(&hash), hash),
        (Arc::new(client(&server)), Arc::new(client(&server))),
    ];
    for (reader, writer) in backends {
        let waiter = thread::spawn(move || {
            let v = reader
                .get_with_timeout("late", Duration::from_secs(20))
                .unwrap();
            reader
                .wait(&["late", "later"], Some(Duration::from_secs(20)))
                .unwrap();
            v
        });
        thread::sleep(Duration::from_millis(50));
        writer.set("late", b"here").unwrap();
        thread::sleep(Duration::from_millis(20));
        writer.set("later", b"").unwrap();
        assert_eq!(waiter.join().unwrap(), b"here");
    }
}

#[test]
fn prefix_store_namespaces_keys() {
    let inner: Arc<dyn Store> = Arc::new(HashStore::new());
    let a = PrefixStore::new("a", Arc::clone(&inner));
    let b = PrefixStore::new("b", Arc::clone(&inner));
    a.set("k", b"from a").unwrap();
    b.set("k", b"from b").unwrap();
    assert_eq!(inner.get("a/k").unwrap(), b"from a");
    assert_eq!(inner.get("b/k").unwrap(), b"from b");
    assert!(a.check(&["k"]).unwrap());
    assert!(!a.check(&["a/k"]).unwrap());
    // num_keys is the whole store, as in c10d.
    assert_eq!(a.num_keys().unwrap(), 2);
    let err = a.get_with_timeout("missing", SHORT).unwrap_err();
    assert!(err.to_string().contains("a/missing"), "{err}");
    a.set_timeout(SHORT);
    assert_eq!(inner.timeout(), SHORT);
    assert_eq!(a.prefix(), "a");
}

#[test]
fn stores_are_send_sync_and_object_safe() {
    fn check<T: Send + Sync>() {}
    check::<HashStore>();
    check::<PrefixStore>();
    check::<TcpStore>();
    check::<TcpStoreServer>();
    check::<Arc<dyn Store>>();
}
