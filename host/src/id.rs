//! [`Id`]: what rank 0 hands the other ranks so that they can meet, in the
//! 128 bytes of NCCL's unique id (`cudarc::nccl::Id`), so code that ships
//! `id.internal()` between processes ships ours unchanged.
//!
//! What an id carries: NCCL's id names its bootstrap root (an
//! address the root's process listens on) and a magic number. Ours names a
//! key-value store that [`Id::new`] starts in the calling process (a
//! `TcpStoreServer` on loopback: every rank of an intra-node group runs on
//! this host), the secret token its clients must present, a nonce that
//! names the job, the root's pid for messages, a format version and a
//! checksum. What the ranks then exchange (rendezvous requests, memory
//! handles, NCCL's own unique id) goes through that store, as with
//! `Communicator::new`. Bytes that are not an Id fail at once (magic,
//! version, checksum); a root that is gone fails within the connect bound
//! (the port refuses); a stale Id whose port another store took fails on
//! the token.

use std::ffi::c_char;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use intranode_store::{ClientConfig, ServerConfig, Store, TcpStore, TcpStoreServer};

use crate::error::{Error, Result};

/// Bytes in an id, as in NCCL's `ncclUniqueId`.
pub const ID_BYTES: usize = 128;

const MAGIC: &[u8; 8] = b"intranod";
const VERSION: u8 = 1;
const TOKEN_CHARS: usize = 32;
/// Where the checksum starts: everything before it is covered.
const CHECKSUM_AT: usize = ID_BYTES - 8;

/// How long a rank keeps trying to reach the store an [`Id`] names. The
/// store exists before the id leaves the root's process, so a refused
/// connection means the root is gone; the retries cover only a moment of
/// a busy listener.
pub const ID_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Stores started by [`Id::new`] in this process, until the rank-0
/// communicator built from the id takes its store (it keeps it while it
/// lives). An id whose rank 0 is never built here keeps its store until
/// the process ends.
static SERVERS: Mutex<Vec<(u64, Arc<TcpStoreServer>)>> = Mutex::new(Vec::new());

/// A group's meeting point, made once by rank 0 with [`Id::new`] and
/// carried to the other ranks as 128 bytes ([`Id::internal`],
/// [`Id::uninit`]), as `cudarc::nccl::Id` is. Pass it to
/// [`Communicator::from_rank`](crate::Communicator::from_rank).
///
/// [`Id::new`] starts a small key-value store server (one thread, one
/// loopback port) in the calling process; the rank-0 communicator built
/// from the id in that process keeps it alive, so make the id in the
/// process that will be rank 0. As with NCCL's, make a new id for each
/// communicator. What the bytes carry: [`crate::id`].
#[derive(Clone, Copy)]
pub struct Id {
    internal: [c_char; ID_BYTES],
}

/// The fields of an [`Id`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct IdFields {
    pub addr: SocketAddr,
    pub token: String,
    pub nonce: u64,
    pub root_pid: u32,
}

impl std::fmt::Debug for IdFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdFields")
            .field("addr", &self.addr)
            .field("token", &"<redacted>")
            .field("nonce", &self.nonce)
            .field("root_pid", &self.root_pid)
            .finish()
    }
}

impl std::fmt::Debug for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in logs.
        match self.fields() {
            Ok(x) => write!(
                f,
                "Id {{ store: {}, job: {:016x}, root pid: {} }}",
                x.addr, x.nonce, x.root_pid
            ),
            Err(_) => write!(f, "Id {{ not an intranode id }}"),
        }
    }
}

impl Id {
    /// Starts this group's store in the calling process and names it.
    /// Call it in the process of rank 0 (see the type's docs).
    pub fn new() -> Result<Self> {
        let token = crate::id::new_token();
        let server = TcpStoreServer::bind(ServerConfig {
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            token: Some(token.clone()),
            ..ServerConfig::default()
        })
        .map_err(|source| Error::Store {
            op: "starting the Id's store",
            rank: 0,
            source,
        })?;
        let fields = IdFields {
            addr: server.local_addr(),
            token,
            nonce: rand::random(),
            root_pid: std::process::id(),
        };
        let id = Id::encode(&fields)?;
        SERVERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((fields.nonce, Arc::new(server)));
        Ok(id)
    }

    /// An id from the 128 bytes another process got from
    /// [`Id::internal`]. Never fails: bytes that are no id fail in
    /// [`Communicator::from_rank`](crate::Communicator::from_rank), naming
    /// what is wrong.
    pub fn uninit(internal: [c_char; ID_BYTES]) -> Self {
        Id { internal }
    }

    /// The 128 bytes to send to the other ranks.
    pub fn internal(&self) -> &[c_char; ID_BYTES] {
        &self.internal
    }

    /// Whether these bytes are an id made by [`Id::new`] of this format:
    /// `Err` names what is wrong (the same check
    /// [`Communicator::from_rank`](crate::Communicator::from_rank) makes).
    pub fn validate(&self) -> Result<()> {
        self.fields().map(|_| ())
    }

    fn bytes(&self) -> [u8; ID_BYTES] {
        self.internal.map(|c| c as u8)
    }

    fn encode(x: &IdFields) -> Result<Self> {
        let IpAddr::V4(ip) = x.addr.ip() else {
            return Err(Error::InvalidArgument(format!(
                "an Id names an IPv4 store, not {}",
                x.addr
            )));
        };
        if x.token.len() != TOKEN_CHARS || !x.token.is_ascii() {
            return Err(Error::InvalidArgument(
                "an Id's token is 32 ASCII characters".into(),
            ));
        }
        let mut b = [0u8; ID_BYTES];
        b[0..8].copy_from_slice(MAGIC);
        b[8] = VERSION;
        b[9..11].copy_from_slice(&x.addr.port().to_le_bytes());
        b[11..15].copy_from_slice(&ip.octets());
        b[15..47].copy_from_slice(x.token.as_bytes());
        b[47..55].copy_from_slice(&x.nonce.to_le_bytes());
        b[55..59].copy_from_slice(&x.root_pid.to_le_bytes());
        let sum = checksum(&b[..CHECKSUM_AT]);
        b[CHECKSUM_AT..].copy_from_slice(&sum.to_le_bytes());
        Ok(Id {
            internal: b.map(|u| u as c_char),
        })
    }

    /// The fields, or why these bytes are not an id of this library.
    pub(crate) fn fields(&self) -> Result<IdFields> {
        let b = self.bytes();
        let bad = |why: String| Error::InvalidArgument(format!("not an intranode::Id: {why}"));
        if &b[0..8] != MAGIC {
            return Err(bad(
                "its first bytes are not intranode's (an NCCL unique id from \
                 cudarc::nccl::Id::new, or bytes that are no id at all?): make it \
                 with intranode::nccl::Id::new in rank 0's process"
                    .into(),
            ));
        }
        if b[8] != VERSION {
            return Err(bad(format!(
                "format version {} where this build reads {VERSION}: build every rank \
                 with the same intranode",
                b[8]
            )));
        }
        let want = checksum(&b[..CHECKSUM_AT]);
        let got = u64::from_le_bytes(b[CHECKSUM_AT..].try_into().unwrap_or([0; 8]));
        if want != got {
            return Err(bad(
                "its checksum does not match: some of its 128 bytes changed on the way".into(),
            ));
        }
        let port = u16::from_le_bytes([b[9], b[10]]);
        let ip = Ipv4Addr::new(b[11], b[12], b[13], b[14]);
        let token = std::str::from_utf8(&b[15..47])
            .map_err(|_| bad("its token is not text".into()))?
            .to_owned();
        let nonce = u64::from_le_bytes(b[47..55].try_into().unwrap_or([0; 8]));
        let root_pid = u32::from_le_bytes(b[55..59].try_into().unwrap_or([0; 4]));
        Ok(IdFields {
            addr: SocketAddr::new(IpAddr::V4(ip), port),
            token,
            nonce,
            root_pid,
        })
    }

    /// Connects to the store this id names, within
    /// [`ID_CONNECT_TIMEOUT`] (or the store timeout, where shorter).
    pub(crate) fn connect(&self, rank: usize) -> Result<(Arc<dyn Store>, IdFields)> {
        let x = self.fields()?;
        let mut config = ClientConfig::try_from_env().map_err(|source| Error::Store {
            op: "reading the store settings",
            rank,
            source,
        })?;
        config.token = Some(x.token.clone());
        config.connect_timeout = config.connect_timeout.min(ID_CONNECT_TIMEOUT);
        let store = TcpStore::connect(x.addr, config).map_err(|source| Error::Store {
            op: "connecting to the store the Id names (is rank 0's process, which made \
                 the Id, still running, and is the Id from this job?)",
            rank,
            source,
        })?;
        Ok((Arc::new(store), x))
    }

    /// The store [`Id::new`] started in this process for this id, taken
    /// out of the process-wide list (rank 0 keeps it in its communicator).
    pub(crate) fn take_server(nonce: u64) -> Option<Arc<TcpStoreServer>> {
        let mut servers = SERVERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = servers.iter().position(|(n, _)| *n == nonce)?;
        Some(servers.swap_remove(at).1)
    }
}

/// A fresh secret for the store of one id: 128 random bits as hex, from
/// `rand`'s CSPRNG seeded by the operating system.
pub(crate) fn new_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// FNV-1a over `bytes`: catches bytes changed on the way, not an attacker
/// (the token is what keeps other processes out).
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> IdFields {
        IdFields {
            addr: "127.0.0.1:40123".parse().unwrap(),
            token: "0123456789abcdef0123456789abcdef".into(),
            nonce: 0x1122_3344_5566_7788,
            root_pid: 4242,
        }
    }

    #[test]
    fn an_id_survives_its_128_bytes() {
        let id = Id::encode(&sample()).unwrap();
        let copy = Id::uninit(*id.internal());
        assert!(copy.fields().unwrap() == sample());
        let shown = format!("{copy:?}");
        assert!(shown.contains("127.0.0.1:40123") && !shown.contains("0123456789abcdef"));
    }

    #[test]
    fn bytes_that_are_no_id_fail_naming_why() {
        let nccl_like = Id::uninit([7; ID_BYTES]);
        let e = nccl_like.fields().unwrap_err().to_string();
        assert!(
            e.contains("not an intranode::Id") && e.contains("NCCL"),
            "{e}"
        );

        let mut flipped = *Id::encode(&sample()).unwrap().internal();
        flipped[20] ^= 1;
        let e = Id::uninit(flipped).fields().unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");

        let mut newer = Id::encode(&sample()).unwrap().bytes();
        newer[8] = VERSION + 1;
        let sum = checksum(&newer[..CHECKSUM_AT]);
        newer[CHECKSUM_AT..].copy_from_slice(&sum.to_le_bytes());
        let e = Id::uninit(newer.map(|u| u as c_char))
            .fields()
            .unwrap_err()
            .to_string();
        assert!(e.contains("version"), "{e}");
    }

    #[test]
    fn a_gone_root_fails_naming_it() {
        // A port nobody listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let id = Id::encode(&IdFields {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            ..sample()
        })
        .unwrap();
        let e = match id.connect(1) {
            Ok(_) => panic!("connected to a closed port"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("rank 0's process"), "{e}");
    }

    #[test]
    fn a_stale_id_on_a_port_another_store_took_fails_on_the_token() {
        let id = Id::new().unwrap();
        let fields = id.fields().unwrap();
        let stale = Id::encode(&IdFields {
            token: "ffffffffffffffffffffffffffffffff".into(),
            ..fields.clone()
        })
        .unwrap();
        let e = match stale.connect(1) {
            Ok(_) => panic!("a wrong token was let in"),
            Err(e) => format!("{e:?}"),
        };
        assert!(e.to_lowercase().contains("token"), "{e}");
        // The right one gets in, and the store works.
        let (store, _) = id.connect(1).unwrap();
        store.set("k", b"v").unwrap();
        assert_eq!(store.get("k").unwrap(), b"v");
        assert!(Id::take_server(fields.nonce).is_some());
        assert!(Id::take_server(fields.nonce).is_none());
    }
}
