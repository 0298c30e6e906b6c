//! TEMPORARY stand-in for `intranode_store` until that crate lands.
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};

pub const TOKEN_ENV: &str = "INTRANODE_STORE_TOKEN";

#[derive(Debug, thiserror::Error)]
#[error("store: {0}")]
pub struct StoreError(#[from] std::io::Error);

#[derive(Debug)]
pub struct ServerConfig {
    pub addr: IpAddr,
    pub port: u16,
    pub max_frame_bytes: usize,
    pub token: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self { addr: IpAddr::V4(Ipv4Addr::LOCALHOST), port: 0, max_frame_bytes: 1 << 20, token: None }
    }
}

#[derive(Debug)]
pub struct TcpStoreServer(TcpListener);

impl TcpStoreServer {
    pub fn bind(cfg: ServerConfig) -> Result<Self, StoreError> {
        Ok(Self(TcpListener::bind((cfg.addr, cfg.port))?))
    }
    pub fn local_addr(&self) -> SocketAddr {
        self.0.local_addr().unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }
}
