//! Two groups of ranks on one store server (NOTE [one group per prefix] in
//! `src/exchange.rs`): under prefixes of their own both groups work,
//! concurrently. (Under one prefix, the second writer of a key is refused
//! at once: `exchange::tests::a_second_group_on_the_prefix_fails_at_once`.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use intranode_store::{
    ClientConfig, ServerConfig, Store, StoreError, StoreExchange, TcpStore, TcpStoreServer,
};

fn client(addr: SocketAddr, timeout: Duration) -> Arc<dyn Store> {
    let config = ClientConfig {
        timeout,
        connect_timeout: Duration::from_secs(10),
        token: None,
        ..ClientConfig::default()
    };
    Arc::new(TcpStore::connect(addr, config).unwrap())
}

/// What one rank of `group` saw: an all-gather then a broadcast from rank
/// 0, under `prefix`.
fn rank_main(
    addr: SocketAddr,
    prefix: String,
    group: u32,
    rank: usize,
    timeout: Duration,
) -> Result<(Vec<u32>, u32), StoreError> {
    let store = client(addr, timeout);
    let mut ex = StoreExchange::new(prefix);
    let mine = group * 100 + rank as u32;
    let all = ex.all_gather(store.as_ref(), rank, 2, &mine)?;
    let root_value = (rank == 0).then_some(group * 100 + 50);
    let got = ex.broadcast(store.as_ref(), rank, 2, 0, root_value.as_ref())?;
    Ok((all, got))
}

/// The same four ranks with a prefix per group: both groups work,
/// concurrently, and leave no key behind.
#[test]
fn two_groups_with_prefixes_of_their_own_both_work() {
    let server = TcpStoreServer::bind(ServerConfig::default()).unwrap();
    let addr = server.local_addr();
    let timeout = Duration::from_secs(20);
    let handles: Vec<_> = (0..2u32)
        .flat_map(|group| (0..2).map(move |rank| (group, rank)))
        .map(|(group, rank)| {
            thread::spawn(move || {
                let prefix = format!("intranode/tp{group}/nccl");
                (group, rank_main(addr, prefix, group, rank, timeout))
            })
        })
        .collect();
    for h in handles {
        let (group, out) = h.join().unwrap();
        let (all, got) = out.unwrap();
        assert_eq!(all, vec![group * 100, group * 100 + 1]);
        assert_eq!(got, group * 100 + 50);
    }
    assert_eq!(client(addr, timeout).num_keys().unwrap(), 0);
}
