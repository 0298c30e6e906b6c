//! What a stable-Rust user of intranode can do on any machine: read the
//! embedded kernels and ask for GPUs. Built and run by `cargo xtask
//! stable-embed` with the stable tool chain.

fn main() {
    let ptx = intranode::kernels::ptx().expect("the embedded PTX unpacks");
    let entries = intranode::kernels::entry_names(&ptx);
    println!(
        "stable-embed: embedded PTX for {}: {} bytes, {} kernel entry points; machine code for {:?}",
        intranode::kernels::PTX_ARCH,
        ptx.len(),
        entries.len(),
        intranode::kernels::CUBIN_ARCH
    );
    assert_eq!(
        intranode::kernels::CUBIN_ARCH,
        "sm_90",
        "no sm_90 machine code embedded"
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
