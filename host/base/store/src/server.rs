//! [`TcpStoreServer`]: serves a [`MemTable`] over the [`crate::wire`]
//! protocol, one thread per client, within the bounds of
//! [`ServerLimits`] (NOTE [memory budget] in `limits.rs`).

// The acceptor in `accept.rs`; each client's thread in `connection.rs`,
// which reads its frames through `read.rs`; the buffer budget they share in
// `budget.rs`, the summary of refused clients in `refusal_log.rs`, and the
// state that acceptor and client threads share in `shared.rs`.
mod accept;
mod budget;
mod connection;
mod read;
pub(crate) mod refusal_log;
mod shared;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};

use crate::error::StoreError;
use crate::hash::{MemTable, TableLimits};
use crate::limits::ServerLimits;
use crate::vars::TOKEN_ENV;
use accept::{SpareDescriptor, accept_loop};
use budget::Budget;
use refusal_log::RefusalLog;
use shared::{Clients, Shared};

/// Settings of a [`TcpStoreServer`].
#[derive(Clone)]
pub struct ServerConfig {
    /// Address to listen on; loopback by default, so nothing off the node
    /// can reach the store unless asked for.
    pub addr: IpAddr,
    /// Port to listen on; 0 picks a free one (read it back with
    /// [`TcpStoreServer::local_addr`]).
    pub port: u16,
    /// Shared secret clients must present, if any; never empty.
    pub token: Option<String>,
    /// Every bound on connections, sizes, time and memory.
    pub limits: ServerLimits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            token: None,
            limits: ServerLimits::default(),
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("addr", &self.addr)
            .field("port", &self.port)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("limits", &self.limits)
            .finish()
    }
}

impl ServerConfig {
    /// The defaults, with the token read from [`TOKEN_ENV`]; fails, naming
    /// the variable, when it is set but empty or not UTF-8.
    pub fn try_from_env() -> Result<Self, StoreError> {
        Ok(Self {
            token: token_from_env()?,
            ..Self::default()
        })
    }

    /// [`ServerConfig::try_from_env`] for callers that cannot handle an
    /// error here: an unusable [`TOKEN_ENV`] is logged and kept as an
    /// empty token, which [`TcpStoreServer::bind`] refuses (naming the
    /// variable), so the server never runs without the token it was meant
    /// to have.
    pub fn from_env() -> Self {
        Self::try_from_env().unwrap_or_else(|e| {
            tracing::error!("{e}");
            Self {
                token: Some(String::new()),
                ..Self::default()
            }
        })
    }
}

/// The token in [`TOKEN_ENV`]: `None` when unset, an error naming the
/// variable when set but empty or not UTF-8.
pub(crate) fn token_from_env() -> Result<Option<String>, StoreError> {
    match std::env::var_os(TOKEN_ENV) {
        None => Ok(None),
        Some(raw) => match raw.into_string() {
            Ok(token) if token.is_empty() => Err(StoreError::BadToken {
                var: TOKEN_ENV,
                reason: "is set but empty; unset it to run without a token, or set a non-empty one",
            }),
            Ok(token) => Ok(Some(token)),
            Err(_) => Err(StoreError::BadToken {
                var: TOKEN_ENV,
                reason: "is not valid UTF-8",
            }),
        },
    }
}

/// An empty token is refused rather than taken as "no token": a job meant
/// to have one must not silently run open. `from_env` turns an unusable
/// variable into an empty token, hence the wording.
pub(crate) fn check_token(token: Option<&str>) -> Result<(), StoreError> {
    match token {
        Some("") => Err(StoreError::BadToken {
            var: TOKEN_ENV,
            reason: "is empty or not valid UTF-8; unset it to run without a token, or set a non-empty UTF-8 one",
        }),
        _ => Ok(()),
    }
}

/// A c10d-style TCP store server.
///
/// [`TcpStoreServer::bind`] starts an acceptor thread and one thread per
/// client; they run until [`TcpStoreServer::shutdown`] or drop, which wake
/// every parked request, close every connection and join every thread.
#[derive(Debug)]
pub struct TcpStoreServer {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    /// Dropped by shutdown: the acceptor polls the other end, which then
    /// reads as closed and wakes it.
    wake_acceptor: Option<UnixStream>,
}

impl TcpStoreServer {
    /// Binds `config.addr:config.port` and starts serving in the
    /// background. Fails on an empty token or limits that
    /// [`ServerLimits::validate`] refuses.
    pub fn bind(config: ServerConfig) -> Result<Self, StoreError> {
        check_token(config.token.as_deref())?;
        config.limits.validate()?;
        crate::malloc::return_large_frees_to_the_system();
        let want = SocketAddr::new(config.addr, config.port);
        let bind_err = |source| StoreError::Bind { addr: want, source };
        let listener = TcpListener::bind(want).map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let (wake_acceptor, woken) = UnixStream::pair().map_err(bind_err)?;
        let limits = config.limits;
        let shared = Arc::new(Shared {
            table: MemTable::new(TableLimits {
                max_value_bytes: limits.max_value_bytes,
                max_stored_bytes: limits.max_stored_bytes,
            }),
            budget: Budget {
                used_bytes: Mutex::new(0),
                freed: Condvar::new(),
                max_bytes: limits.max_buffered_bytes,
            },
            limits,
            token: config.token,
            shutting_down: AtomicBool::new(false),
            clients: Mutex::new(Clients::default()),
            refusers: AtomicUsize::new(0),
            refusal_log: RefusalLog::default(),
        });
        // Taken here, not on the acceptor: a server counts it among its
        // descriptors from the moment it is bound.
        let spare = SpareDescriptor::take(&listener);
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(format!("store-accept-{}", local_addr.port()))
                .spawn(move || accept_loop(&shared, &listener, &woken, spare))
                .map_err(bind_err)?
        };
        tracing::debug!(%local_addr, "store server listening");
        Ok(Self {
            local_addr,
            shared,
            acceptor: Some(acceptor),
            wake_acceptor: Some(wake_acceptor),
        })
    }

    /// The address the server listens on (with the real port when bound to
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The limits the server enforces.
    pub fn limits(&self) -> &ServerLimits {
        &self.shared.limits
    }

    // NOTE [refusal log].
    /// Clients refused so far, and the lines written about them: the
    /// second stays near one a second however many clients are refused.
    pub fn refusals(&self) -> (u64, u64) {
        let state = self.shared.refusal_log.state();
        (state.total, state.lines)
    }

    /// Stops accepting, fails parked requests, closes every connection and
    /// joins every thread. Idempotent; also run by drop.
    pub fn shutdown(&mut self) {
        self.shared.shutting_down.store(true, Ordering::Release);
        self.shared.table.close();
        self.shared.budget.freed.notify_all();
        drop(self.wake_acceptor.take());
        if let Some(acceptor) = self.acceptor.take()
            && acceptor.join().is_err()
        {
            tracing::error!(addr = %self.local_addr, "store acceptor thread panicked");
        }
        // The acceptor is gone, so no client registers after this.
        let threads = {
            let mut clients = self.shared.clients();
            for stream in clients.streams.values() {
                // Unblocks reads and writes; an error means already closed.
                let _ = stream.shutdown(Shutdown::Both);
            }
            std::mem::take(&mut clients.threads)
        };
        for t in threads {
            if t.join().is_err() {
                tracing::error!(addr = %self.local_addr, "store client thread panicked");
            }
        }
        self.shared.refusal_log.write_due(true);
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests;
