//! `intranode-bench link`: what NVLink carries when every rank moves data
//! to (or from) every peer at once, with no collective around it: the
//! ceiling the large-message forms work against.
//!
//! Each rank's symmetric buffer is cut into one region per rank. In the
//! push modes rank `r` writes its region of every peer's buffer: `ce`
//! through the copy engines (`cuMemcpyDtoDAsync` to the peer's mapping,
//! one stream per peer), `sm` through the SMs (the `add` kernel of
//! `x + x` storing into the peer's mapping, one kernel per peer on its
//! own stream). In `ce-pull` each rank copies every peer's own region
//! into local memory. Every mode moves `--reps` times the region to or
//! from each peer, chunked as `--chunk-bytes` says; a GPU barrier lines
//! the ranks up before each timed run, and GB/s are bytes over NVLink
//! out of (push) or into (pull) this GPU over the time from the first
//! copy to the last. After the last run each rank checks what it holds
//! from every peer.

use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use half::bf16;
use intranode_harness::Rank;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Copy engines, this rank's region into every peer's buffer.
    Ce,
    /// Copy engines, every peer's own region into local memory.
    CePull,
    /// SM stores (`add` of `x + x` into every peer's buffer).
    Sm,
}

#[derive(clap::Args, Debug)]
pub struct LinkArgs {
    /// Modes, one run each per chunk size.
    #[arg(long, value_delimiter = ',', default_value = "ce,ce-pull,sm")]
    pub modes: Vec<Mode>,
    /// Bytes of one copy (or kernel); 0: the whole region at once.
    #[arg(long, value_delimiter = ',', default_value = "0,4194304,1048576")]
    pub chunk_bytes: Vec<usize>,
    /// Times each region is moved per timed run.
    #[arg(long, default_value_t = 40)]
    pub reps: usize,
    /// Timed runs per mode and chunk; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

/// The byte every rank's source holds: distinct per rank, never zero.
fn fill_byte(rank: usize) -> u8 {
    0x31 + rank as u8
}

/// What a push of `mode` leaves in `rank`'s region of a peer's buffer.
fn expected_byte_pair(mode: Mode, rank: usize) -> [u8; 2] {
    let b = fill_byte(rank);
    match mode {
        Mode::Ce | Mode::CePull => [b, b],
        Mode::Sm => {
            let x = bf16::from_bits(u16::from_le_bytes([b, b]));
            bf16::from_f32(2.0 * x.to_f32()).to_bits().to_le_bytes()
        }
    }
}

pub fn run(args: &LinkArgs) -> Result<()> {
    let Some(r) = Rank::setup("intranode-bench link")? else {
        return Ok(());
    };
    let (rank, world) = (r.rank(), r.world());
    let Rank {
        ctx,
        stream: main,
        store,
        mut exchange,
        comm,
        ..
    } = r;
    let mut barrier = || exchange.barrier(store.as_ref(), rank, world);
    ensure!(world >= 2, "link needs at least 2 ranks (got {world})");
    ensure!(
        args.reps > 0 && args.runs > 0,
        "--reps and --runs must be positive"
    );
    let intra = comm
        .intra()
        .context("the intra-node path is off: no peer mappings to probe")?;
    let symm = intra.symm();
    let buffers = symm.buffer_ptrs().to_vec();
    // Whole 4 KiB pages per region, so every copy and vector is aligned.
    let region = symm.buffer_bytes() / world / 4096 * 4096;
    ensure!(region > 0, "the symmetric buffer is too small to cut");
    let peers: Vec<usize> = (0..world).filter(|&p| p != rank).collect();
    let streams: Vec<_> = peers
        .iter()
        .map(|_| ctx.new_stream())
        .collect::<Result<_, _>>()?;
    let src: CudaSlice<u8> = main.alloc_zeros(region)?;
    let (src_ptr, _src_guard) = src.device_ptr(&main);
    // Pull targets: one local region per peer.
    let pulled: CudaSlice<u8> = main.alloc_zeros(region * peers.len())?;
    let (pulled_ptr, _pulled_guard) = pulled.device_ptr(&main);
    // SAFETY: `src` holds `region` bytes; the fill is ordered before
    // every copy by `main` and the events below.
    unsafe {
        cudarc::driver::result::memset_d8_async(
            src_ptr,
            fill_byte(rank),
            region,
            main.cu_stream(),
        )?;
        // This rank's own region holds its pattern for the pulls.
        cudarc::driver::result::memset_d8_async(
            buffers[rank] + (rank * region) as u64,
            fill_byte(rank),
            region,
            main.cu_stream(),
        )?;
    }
    main.synchronize()?;
    let kernels = intra.kernels();
    if rank == 0 {
        println!(
            "link: {world} ranks, region {} KiB per peer, {} reps, median of {} runs",
            region >> 10,
            args.reps,
            args.runs
        );
        println!(
            "{:>8} {:>10} {:>12} {:>10} {:>10}",
            "mode", "chunk", "bytes/run", "us", "GB/s"
        );
    }
    let mut last = None;
    for &mode in &args.modes {
        for &chunk_arg in &args.chunk_bytes {
            let chunk = if chunk_arg == 0 {
                region
            } else {
                chunk_arg.min(region) / 4096 * 4096
            };
            ensure!(chunk > 0, "--chunk-bytes {chunk_arg} is under a page");
            let mut times_us = Vec::with_capacity(args.runs);
            for _ in 0..args.runs {
                barrier()?;
                // The host barrier leaves the ranks milliseconds apart,
                // as long as a run: a rank that starts late finds the
                // links free and reads fast. A GPU barrier lines them up
                // to microseconds.
                intra.barrier(None, &main)?;
                let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
                start.record(&main)?;
                for (i, (&peer, s)) in peers.iter().zip(&streams).enumerate() {
                    s.wait(&start)?;
                    let pulled_region = pulled_ptr + (i * region) as u64;
                    enqueue(
                        mode,
                        s,
                        kernels,
                        Targets {
                            src: src_ptr,
                            push_dst: buffers[peer] + (rank * region) as u64,
                            pull_src: buffers[peer] + (peer * region) as u64,
                            pull_dst: pulled_region,
                        },
                        region,
                        chunk,
                        args.reps,
                    )?;
                    let done = ctx.new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))?;
                    done.record(s)?;
                    main.wait(&done)?;
                }
                end.record(&main)?;
                main.synchronize()?;
                times_us.push(start.elapsed_ms(&end)? as f64 * 1000.0);
            }
            times_us.sort_by(f64::total_cmp);
            let us = times_us[times_us.len() / 2];
            let bytes = region * args.reps * peers.len();
            println!(
                "[{rank}] {:>8} {:>10} {:>12} {:>10.1} {:>10.1}",
                format!("{mode:?}").to_lowercase(),
                chunk,
                bytes,
                us,
                bytes as f64 / us / 1000.0
            );
            last = Some(mode);
        }
    }
    // Every rank's last copies are done (each synchronized its streams);
    // after the barrier, every peer's are too.
    barrier()?;
    if let Some(mode) = last {
        check(&main, rank, mode, &buffers, &peers, region, &pulled)?;
        println!("[{rank}] link: the last mode's data checked from every peer");
    }
    barrier()?;
    Ok(())
}

/// Where one peer's copies of a run go.
struct Targets {
    src: u64,
    push_dst: u64,
    pull_src: u64,
    pull_dst: u64,
}

/// Enqueues one peer's copies of a run on `s`: `reps` times the region,
/// in pieces of `chunk` bytes.
fn enqueue(
    mode: Mode,
    s: &Arc<CudaStream>,
    kernels: &intranode::kernels::KernelModule,
    t: Targets,
    region: usize,
    chunk: usize,
    reps: usize,
) -> Result<()> {
    for _ in 0..reps {
        let mut off = 0;
        while off < region {
            let n = chunk.min(region - off);
            let o = off as u64;
            match mode {
                // SAFETY: both ranges lie in live allocations: the peer's
                // mapped buffer (its region `rank`, `region` bytes) and
                // `src`; nothing else touches them during the run.
                Mode::Ce => unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        t.push_dst + o,
                        t.src + o,
                        n,
                        s.cu_stream(),
                    )?
                },
                // SAFETY: the peer's own region, which only the peer's
                // fill wrote (before the first barrier), into this rank's
                // local pull region.
                Mode::CePull => unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        t.pull_dst + o,
                        t.pull_src + o,
                        n,
                        s.cu_stream(),
                    )?
                },
                Mode::Sm => {
                    let elems = n / 2;
                    // SAFETY: `src + o` and `push_dst + o` each hold `n`
                    // bytes (within `src` and the peer's region); the views
                    // are leaked below, so nothing frees the peer's mapping
                    // or `src` through them.
                    let (a, mut out) = unsafe {
                        (
                            s.upgrade_device_ptr::<bf16>(t.src + o, elems),
                            s.upgrade_device_ptr::<bf16>(t.push_dst + o, elems),
                        )
                    };
                    let launched = kernels.add(s, &a, &a, &mut out);
                    a.leak();
                    out.leak();
                    launched?;
                }
            }
            off += n;
        }
    }
    Ok(())
}

/// Checks what `mode`'s last run left: in push modes, every peer's region
/// of this rank's buffer; in the pull mode, every pulled region.
fn check(
    main: &Arc<CudaStream>,
    rank: usize,
    mode: Mode,
    buffers: &[u64],
    peers: &[usize],
    region: usize,
    pulled: &CudaSlice<u8>,
) -> Result<()> {
    let all = match mode {
        Mode::CePull => main.clone_dtoh(pulled)?,
        Mode::Ce | Mode::Sm => {
            let mut host = vec![0u8; region * buffers.len()];
            // SAFETY: this rank's own buffer holds `world` regions; the
            // copy is synchronous and every write into it has finished
            // (the barrier after every rank synchronized its streams).
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, buffers[rank])? };
            host
        }
    };
    for (i, &peer) in peers.iter().enumerate() {
        let at = match mode {
            Mode::CePull => i * region,
            Mode::Ce | Mode::Sm => peer * region,
        };
        let want = expected_byte_pair(mode, peer);
        if let Some(bad) = all[at..at + region]
            .chunks_exact(2)
            .position(|pair| pair != want)
        {
            bail!(
                "rank {rank}, {mode:?}: peer {peer}'s region holds {:02x?} at byte {}, expected {want:02x?}",
                &all[at + 2 * bad..at + 2 * bad + 2],
                2 * bad
            );
        }
    }
    Ok(())
}
