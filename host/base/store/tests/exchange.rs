//! `StoreExchange` with several ranks on threads, over `HashStore` and
//! `TcpStore`: results are right, rounds never collide, keys are cleaned up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use intranode_store::{
    ClientConfig, HashStore, PrefixStore, ServerConfig, Store, StoreExchange, TcpStore,
    TcpStoreServer,
};

const WORLD: usize = 4;
const ROUNDS: u64 = 40;

/// A typed rendezvous record, like the one the host crate exchanges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Hello {
    rank: usize,
    round: u64,
    host: String,
    sizes: Vec<u64>,
}

fn hello(rank: usize, round: u64) -> Hello {
    Hello {
        rank,
        round,
        host: format!("node-{rank}"),
        // Odd, rank-dependent lengths so values differ in size.
        sizes: (0..(rank as u64 * 3 + round % 5)).collect(),
    }
}

/// What one rank does: many rounds of every collective, checking results.
fn rank_main(store: &dyn Store, rank: usize) {
    let mut ex = StoreExchange::new("ex");
    for round in 0..ROUNDS {
        let all = ex
            .all_gather(store, rank, WORLD, &hello(rank, round))
            .unwrap();
        let want: Vec<Hello> = (0..WORLD).map(|r| hello(r, round)).collect();
        assert_eq!(all, want, "rank {rank} round {round}");

        let root = (round as usize) % WORLD;
        let mine = (rank == root).then(|| format!("root {root} round {round}"));
        let got: String = ex
            .broadcast(store, rank, WORLD, root, mine.as_ref())
            .unwrap();
        assert_eq!(got, format!("root {root} round {round}"));

        ex.barrier(store, rank, WORLD).unwrap();
    }
    assert_eq!(ex.seq(), ROUNDS * 3);
}

fn run_ranks(make: impl Fn(usize) -> Arc<dyn Store>) {
    let handles: Vec<_> = (0..WORLD)
        .map(|rank| {
            let store = make(rank);
            thread::spawn(move || rank_main(store.as_ref(), rank))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn hash_store_four_ranks_many_rounds() {
    let store = Arc::new(HashStore::with_timeout(Duration::from_secs(20)));
    store.set("unrelated", b"keep me").unwrap();
    let baseline = store.num_keys().unwrap();
    run_ranks(|_| Arc::clone(&store) as Arc<dyn Store>);
    // Every call's keys were deleted by its last reader.
    assert_eq!(store.num_keys().unwrap(), baseline);
    assert_eq!(store.get("unrelated").unwrap(), b"keep me");
}

fn tcp_client(addr: SocketAddr) -> Arc<dyn Store> {
    let config = ClientConfig {
        timeout: Duration::from_secs(20),
        connect_timeout: Duration::from_secs(10),
        token: None,
        ..ClientConfig::default()
    };
    Arc::new(TcpStore::connect(addr, config).unwrap())
}

#[test]
fn tcp_store_four_ranks_many_rounds() {
    let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
    let addr = server.local_addr();
    let observer = tcp_client(addr);
    let baseline = observer.num_keys().unwrap();
    run_ranks(|_| tcp_client(addr));
    assert_eq!(observer.num_keys().unwrap(), baseline);
}

#[test]
fn independent_exchanges_through_prefix_stores() {
    let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
    let addr = server.local_addr();
    // Two groups with the same exchange prefix, kept apart by PrefixStore.
    let handles: Vec<_> = (0..2)
        .flat_map(|group| (0..2).map(move |rank| (group, rank)))
        .map(|(group, rank)| {
            thread::spawn(move || {
                let store = PrefixStore::new(format!("group{group}"), tcp_client(addr));
                let mut ex = StoreExchange::new("ex");
                let mut out = Vec::new();
                for round in 0..10u32 {
                    let v = group * 1000 + rank * 10 + round;
                    out.push(ex.all_gather(&store, rank as usize, 2, &v).unwrap());
                }
                (group, out)
            })
        })
        .collect();
    for h in handles {
        let (group, out) = h.join().unwrap();
        for (round, values) in out.into_iter().enumerate() {
            let round = round as u32;
            assert_eq!(
                values,
                vec![group * 1000 + round, group * 1000 + 10 + round]
            );
        }
    }
    assert_eq!(tcp_client(addr).num_keys().unwrap(), 0);
}
