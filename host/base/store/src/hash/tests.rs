//! Unit tests of the table: limits, memory accounting, waits.

use std::thread;

use super::*;

fn limited(max_value_bytes: usize, max_stored_bytes: usize) -> MemTable {
    MemTable::new(TableLimits {
        max_value_bytes,
        max_stored_bytes,
    })
}

#[test]
fn value_and_append_limits() {
    let t = limited(10, 1 << 20);
    t.set("k".into(), vec![0; 10]).unwrap();
    let err = t.set("k".into(), vec![0; 11]).unwrap_err();
    assert!(err.to_string().contains("max_value_bytes"), "{err}");
    t.set("a".into(), vec![0; 6]).unwrap();
    let err = t.append("a", &[0; 5]).unwrap_err();
    assert!(
        err.to_string().contains("appended value of 11 bytes"),
        "{err}"
    );
    t.append("a", &[1; 4]).unwrap();
    let err = t.compare_set("a", &[], vec![0; 11]).unwrap_err();
    assert!(matches!(err, StoreError::ValueTooLarge { .. }), "{err}");
    let err = t
        .multi_set(vec![("x".into(), vec![]), ("y".into(), vec![0; 11])])
        .unwrap_err();
    assert!(matches!(err, StoreError::ValueTooLarge { .. }), "{err}");
    assert!(!t.check(&["x"]), "multi_set is all or nothing");
}

#[test]
fn stored_bytes_are_counted_and_capped() {
    let cap = 4 * ENTRY_OVERHEAD_BYTES;
    let t = limited(1 << 20, cap);
    t.set("a".into(), vec![0; 100]).unwrap();
    // Key and value as malloc chunks: 32 and 112 bytes.
    assert_eq!(t.stored_bytes(), 32 + 112 + ENTRY_OVERHEAD_BYTES);
    // Replacing a value counts the difference only.
    t.set("a".into(), vec![0; 50]).unwrap();
    assert_eq!(t.stored_bytes(), 32 + 64 + ENTRY_OVERHEAD_BYTES);
    let err = t.set("b".into(), vec![0; cap]).unwrap_err();
    assert!(err.to_string().contains("store is full"), "{err}");
    // Empty keys are not free.
    let mut refused = None;
    for i in 0..10 {
        if let Err(e) = t.set(format!("e{i}"), Vec::new()) {
            refused = Some(e);
            break;
        }
    }
    assert!(matches!(refused, Some(StoreError::StoreFull { .. })));
    assert!(t.stored_bytes() <= cap);
    for i in 0..10 {
        t.delete(&format!("e{i}"));
    }
    t.delete("a");
    assert_eq!(t.stored_bytes(), 0);
    // Appends grow a value within the cap, then stop.
    let mut appended = 0;
    while t.append("log", &[7; 16]).is_ok() {
        appended += 16;
    }
    assert!(appended > 0 && t.stored_bytes() <= cap, "{appended}");
    let counted = t.stored_bytes();
    t.delete("log");
    assert!(counted >= appended, "{counted} < {appended}");
    assert_eq!(t.stored_bytes(), 0);
}

/// Fill with 200 KiB values (below malloc's mmap threshold, so they
/// live in the arenas), overwrite every one with an empty value,
/// refill. Without NOTE [trim on overwrite] no round trims, and RSS
/// grows by a fill each round.
#[test]
fn overwriting_with_small_values_trims_like_deleting() {
    let value_bytes = 200 << 10;
    // A little over three trims' worth per round.
    let keys = 3 * TRIM_AFTER_BYTES / value_bytes + 8;
    let t = limited(1 << 20, 1 << 30);
    for round in 0..3u64 {
        for i in 0..keys {
            t.set(format!("k{i}"), vec![1; value_bytes]).unwrap();
        }
        let filled = t.stored_bytes();
        for i in 0..keys {
            t.set(format!("k{i}"), Vec::new()).unwrap();
        }
        assert!(t.stored_bytes() < filled / 100, "round {round}");
        // Three trims' worth freed by overwriting each round.
        assert!(
            t.trims() >= 3 * (round + 1),
            "round {round}: {} trims",
            t.trims()
        );
    }
    // multi_set and compare_set replace values too.
    let before = t.trims();
    for _ in 0..2 {
        let pairs = (0..keys)
            .map(|i| (format!("k{i}"), vec![2; value_bytes]))
            .collect();
        t.multi_set(pairs).unwrap();
        for i in 0..keys {
            t.compare_set(&format!("k{i}"), &vec![2; value_bytes], Vec::new())
                .unwrap();
        }
    }
    assert!(t.trims() >= before + 6, "{} trims", t.trims() - before);
}

#[test]
fn a_set_wakes_only_the_waiters_of_its_key() {
    let t = Arc::new(MemTable::default());
    let waiters: Vec<_> = (0..50)
        .map(|i| {
            let t = Arc::clone(&t);
            thread::spawn(move || {
                let key = format!("k{i}");
                t.wait_get(&[&key, "common"], Duration::from_secs(60), None)
            })
        })
        .collect();
    while t.parked_waits() < 50 {
        thread::yield_now();
    }
    // Each wait sits under its own first missing key.
    assert_eq!(t.lock().waiters.len(), 50);
    for i in 0..50 {
        t.set(format!("k{i}"), vec![1]).unwrap();
    }
    // All have moved on to the shared key.
    while t.lock().waiters.get("common").map_or(0, Vec::len) < 50 {
        thread::yield_now();
    }
    assert_eq!(t.lock().waiters.len(), 1);
    t.set("common".into(), b"go".to_vec()).unwrap();
    for w in waiters {
        let values = w.join().unwrap().unwrap();
        assert_eq!(values[1].as_slice(), b"go");
    }
    assert_eq!(t.parked_waits(), 0, "every wait deregistered itself");
}

#[test]
fn a_wait_whose_client_is_gone_ends() {
    let t = MemTable::default();
    let mut polls = 0;
    let mut alive = || {
        polls += 1;
        polls < 3
    };
    let r = t.wait_get(
        &["never"],
        Duration::from_secs(600),
        Some((&mut alive, Duration::from_millis(1))),
    );
    assert_eq!(r, Err(WaitFailure::ClientGone));
    assert_eq!(t.parked_waits(), 0);
}
