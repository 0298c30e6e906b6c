//! What the launcher's integration tests share.

use std::sync::LazyLock;

/// The launcher under test: cargo's build of it, or the device bundle's
/// copy where `run-tests.sh` names the bundle (`INTRANODE_TEST_BIN_DIR`).
pub static LAUNCHER: LazyLock<String> = LazyLock::new(|| {
    std::env::var("INTRANODE_TEST_BIN_DIR").map_or_else(
        |_| env!("CARGO_BIN_EXE_intranode-run").to_owned(),
        |dir| format!("{dir}/intranode-run"),
    )
});
