//! What a stable-Rust user of intranode can do on any machine: read the
//! embedded PTX and ask for GPUs. Built and run by `cargo xtask
//! stable-embed` with the stable tool chain.

fn main() {
    let entries = intranode::kernels::entry_names(intranode::kernels::PTX);
    println!(
        "stable-embed: embedded PTX for {}: {} bytes, {} kernel entry points",
        intranode::kernels::PTX_ARCH,
        intranode::kernels::PTX.len(),
        entries.len()
    );
    assert!(
        entries.iter().any(|e| e.starts_with("one_shot_")),
        "no one-shot all-reduce kernel in the embedded PTX"
    );
    match intranode::gpu::device_count() {
        Ok(n) => println!("stable-embed: {n} CUDA device(s)"),
        Err(e) => println!("stable-embed: no GPU here ({e})"),
    }
}
