//! `intranode-bench poll-storm`: what a wait costs when every thread of a
//! large grid polls one word, in page-locked host memory (the error word
//! the collectives' waits used to poll) or in device memory (the abort
//! word they poll now): NOTE [abandoned waits] in `kernels-gpu/src/sync.rs`.
//! One GPU, no peers: each thread waits a fixed time, polling as a
//! Lamport wait does, and records how late it got out.

use anyhow::{Context, Result};
use cudarc::driver::DevicePtr;
use cudarc::driver::sys::CUevent_flags;
use intranode::internals::HostErrorWord;
use intranode::kernels::TestKernelModule;

use intranode_harness::free::Dist;

#[derive(clap::Args, Debug)]
pub struct PollStormArgs {
    /// CUDA device.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Threads of the grid (one Lamport wait each), one run per value.
    #[arg(long, value_delimiter = ',', default_value = "2048,16384,65536,131072")]
    pub threads: Vec<usize>,
    /// How long each thread waits, in microseconds, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "50,200,1000")]
    pub wait_us: Vec<u64>,
}

pub fn run(args: &PollStormArgs) -> Result<()> {
    if !intranode::gpu::gpus_or_skip(args.device + 1, "intranode-bench poll-storm")? {
        return Ok(());
    }
    let ctx = intranode::gpu::context(args.device)?;
    let stream = ctx.new_stream()?;
    let module = TestKernelModule::load(&ctx)?;
    let host_word = HostErrorWord::new(&ctx, std::time::Duration::ZERO)?;
    let device_word = stream.alloc_zeros::<u32>(1)?;
    let (device_ptr, _guard) = device_word.device_ptr(&stream);
    println!(
        "{:>7} {:>8} {:>7} {:>28} {:>10}",
        "word", "threads", "wait_us", "exit lag us med/p99/max", "kernel_us"
    );
    for &threads in &args.threads {
        for &wait_us in &args.wait_us {
            for (word_name, word) in [("host", host_word.device_ptr()), ("device", device_ptr)] {
                let mut lag = stream.alloc_zeros::<u64>(threads)?;
                let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                start.record(&stream)?;
                // SAFETY: both words outlive the stream's work (synchronized
                // below before either is dropped): one is mapped host
                // memory of this context, the other device memory of it.
                unsafe { module.poll_storm(&stream, word, wait_us * 1000, &mut lag, 256)? };
                end.record(&stream)?;
                let lags = stream.clone_dtoh(&lag)?;
                stream.synchronize()?;
                let kernel_us = start.elapsed_ms(&end)? as f64 * 1000.0;
                let d = Dist::of(lags.iter().map(|&ns| ns as f64 / 1000.0).collect())
                    .context("no threads")?;
                println!(
                    "{word_name:>7} {threads:>8} {wait_us:>7} {:>28} {kernel_us:>10.1}",
                    format!("{:.2}/{:.2}/{:.2}", d.median_us, d.p99_us, d.max_us)
                );
            }
        }
    }
    Ok(())
}
