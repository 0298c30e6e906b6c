//! Builds the GPU kernels from the current `kernels-gpu` source and hands
//! the PTX to the crate (`src/kernels/mod.rs` embeds it), so a fresh
//! clone's `cargo build` never uses stale or checked-in PTX.

use std::path::PathBuf;

fn main() {
    if let Err(e) = try_main() {
        // A build script reports failure through its exit status; the
        // message goes to cargo's error output.
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn try_main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let workspace_root = manifest_dir
        .parent()
        .ok_or("host crate has no parent directory")?
        .to_owned();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let kernels = workspace_root.join("kernels-gpu");
    println!("cargo:rerun-if-changed={}", kernels.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        kernels.join("Cargo.toml").display()
    );
    println!("cargo:rerun-if-env-changed=INTRANODE_PTX_ARCH");

    let arch =
        std::env::var("INTRANODE_PTX_ARCH").unwrap_or_else(|_| ptx_builder::DEFAULT_ARCH.into());
    let ptx = ptx_builder::build_ptx(&ptx_builder::PtxBuild {
        workspace_root,
        arch,
        // Its own target directory: the outer cargo holds the lock of ours.
        target_dir: out_dir.join("ptx-target"),
        cargo: ptx_builder::cargo_binary(),
    })?;
    std::fs::write(out_dir.join("kernels.ptx"), ptx)?;
    Ok(())
}
