//! Faults on GPUs, run under `intranode-run`:
//!
//! - `faults --phase rendezvous|barrier|all-reduce --victim K`: rank K
//!   SIGKILLs itself during the rendezvous, just before a GPU barrier, or
//!   right after queueing all-reduces (so it dies while its peers are
//!   inside them). Every survivor must get an error naming rank K within
//!   the configured bound (the store timeout for the rendezvous,
//!   `INTRANODE_BARRIER_TIMEOUT_MS` on the GPU), must find its GPU context
//!   still working (allocate, load a module, launch, copy back), and then
//!   exits 0. The launcher reports the victim's SIGKILL as the job's first
//!   failure (exit 137), so run it with `--failure-wait-secs` to let the
//!   survivors finish: `faults-suite` does that and checks every verdict.
//!
//! - `faults --phase skip|late --victim K`: rank K skips the last of
//!   `--calls` all-reduces, or sleeps past the bound before it, and lives
//!   on. Every other rank's work handle must report the timed-out wait
//!   (`Work::synchronize`: `PeerTimeout` naming rank K, the collective, the
//!   phase and the bound) within the bound plus [`TIGHT_SLACK`]; every
//!   later call must fail with the same error. The skipping victim passes
//!   whatever its own calls returned. The late one must never get a wrong
//!   result without an error (NOTE [no arrival after giving up] in
//!   `kernels-gpu/src/sync.rs`): its late call either fails with
//!   `PeerTimeout` naming a peer, or returns the exact sum and its next
//!   call fails so. Every rank exits 0.
//!
//! Survivor verdict lines read `faults rank R: PASS ...`; any other outcome
//! is an error (`FAIL`, exit 1).

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice};
use half::bf16;
use intranode::AllReduceAlgo;
use intranode::Work;
use intranode::config::CommConfig;
use intranode::internals::IntraNodeComm;
use intranode::internals::RendezvousError;
use intranode::kernels::KernelModule;
use intranode::types::ReduceOp;
use intranode_harness::Proc;
use intranode_harness::data;
use intranode_store::StoreError;

/// Beyond the configured bound, how late a survivor's error may come:
/// launches, a context synchronize and a loaded machine, not a second
/// timeout.
pub const SLACK: Duration = Duration::from_secs(10);

/// Beyond the bound, how late a timed-out wait of a live group may be
/// reported: the wait itself is bounded on the GPU, and the
/// calls before it take microseconds.
pub const TIGHT_SLACK: Duration = Duration::from_millis(100);

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The victim dies before publishing its rendezvous request.
    Rendezvous,
    /// The group is up; the victim dies before a GPU barrier.
    Barrier,
    /// The group is up; the victim queues all-reduces and dies at once.
    AllReduce,
    /// The group is up; the victim skips the last of the all-reduces and
    /// lives on.
    Skip,
    /// The group is up; the victim sleeps past the wait bound before the
    /// last of the all-reduces, then makes it.
    Late,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Rendezvous => "rendezvous",
            Phase::Barrier => "barrier",
            Phase::AllReduce => "all-reduce",
            Phase::Skip => "skip",
            Phase::Late => "late",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct FaultArgs {
    /// Where the victim dies.
    #[arg(long, value_enum)]
    pub phase: Phase,
    /// The rank that SIGKILLs itself (default: the last rank).
    #[arg(long)]
    pub victim: Option<usize>,
    /// Algorithm of the all-reduce phase (`lamport`, `lamport-two-shot`,
    /// `one-shot`, `two-shot`, `hcm` or `push`).
    #[arg(long, default_value = "two-shot")]
    pub algo: String,
    /// All-reduces every rank queues in the all-reduce phase.
    #[arg(long, default_value_t = 8)]
    pub calls: usize,
    /// bf16 elements of each of them.
    #[arg(long, default_value_t = 1 << 20)]
    pub elems: usize,
}

/// Ends this process with SIGKILL, as a crash or the OOM killer would.
fn die(rank: usize, phase: Phase) -> Result<()> {
    println!(
        "faults rank {rank}: victim: SIGKILL myself at {}",
        phase.name()
    );
    let _ = std::io::stdout().flush();
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL)?;
    bail!("raise(SIGKILL) returned")
}

/// Allocates, loads the kernels as a fresh module, launches `add` on a
/// fresh stream and checks what comes back: the context survived.
pub fn context_works(ctx: &Arc<CudaContext>) -> Result<String> {
    let stream = ctx.new_stream().context("new stream")?;
    let module = KernelModule::load_unshared(ctx).context("loading the kernels again")?;
    let n = (1usize << 16) + 3;
    let a: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.5).collect();
    let da = stream.clone_htod(&a).context("copy in")?;
    let db = stream.clone_htod(&b).context("copy in")?;
    let mut dout = stream.alloc_zeros::<f32>(n).context("allocate")?;
    module.add(&stream, &da, &db, &mut dout).context("launch")?;
    let out = stream.clone_dtoh(&dout).context("copy back")?;
    stream.synchronize().context("synchronize")?;
    if let Some(i) = (0..n).find(|&i| out[i] != a[i] + b[i]) {
        bail!(
            "context check: element {i} is {}, want {}",
            out[i],
            a[i] + b[i]
        );
    }
    Ok(format!(
        "GPU context works (allocated, loaded a module, launched add over {n} elements on a new stream, copied back, all equal)"
    ))
}

/// The missing rank an error names, for each kind of error a dead peer
/// produces.
fn named_ranks(e: &intranode::Error) -> Option<Vec<usize>> {
    match e {
        intranode::Error::Store {
            source: StoreError::MissingRanks { missing, .. },
            ..
        } => Some(missing.clone()),
        intranode::Error::PeerTimeout { peer, .. } => Some(vec![*peer]),
        _ => None,
    }
}

pub fn run(args: &FaultArgs) -> Result<()> {
    let Some(mut p) = Proc::setup("intranode-suite faults")? else {
        return Ok(());
    };
    let (rank, world) = (p.rank(), p.world());
    let victim = args.victim.unwrap_or(world.saturating_sub(1));
    if world < 2 || victim >= world {
        bail!(
            "faults needs at least 2 ranks and a victim below the world size ({world}), got victim {victim}"
        );
    }
    let algo = AllReduceAlgo::from_name(&args.algo)
        .filter(|a| *a != AllReduceAlgo::Nccl)
        .with_context(|| {
            format!(
                "--algo {:?}: expected lamport, lamport-two-shot, one-shot, two-shot, hcm or push",
                args.algo
            )
        })?;
    let config = CommConfig::from_env()?;
    // Every rank is connected and ready before anyone dies.
    p.store_barrier()?;

    if matches!(args.phase, Phase::Skip | Phase::Late) {
        return straggler(&mut p, args, algo, &config, victim);
    }
    // Where the clock started, for the verdict's text.
    let mut clock = String::new();
    let (err, waited, bound, comm) = match args.phase {
        Phase::Rendezvous => {
            if rank == victim {
                die(rank, args.phase)?;
            }
            let start = Instant::now();
            let result = IntraNodeComm::rendezvous(&p.ctx, p.store.clone(), rank, world, &config);
            let waited = start.elapsed();
            match result {
                Ok(_) => bail!(
                    "faults rank {rank}: FAIL: the rendezvous succeeded without rank {victim}"
                ),
                Err(RendezvousError::Failed(e)) => (e, waited, p.store_timeout, None),
                Err(e @ RendezvousError::Unsupported(_)) => {
                    bail!(
                        "faults rank {rank}: FAIL: expected a store error naming rank {victim}, got: {e}"
                    )
                }
            }
        }
        Phase::Barrier | Phase::AllReduce | Phase::Skip | Phase::Late => {
            let comm = p.comm(&config)?;
            let bound = comm.barrier_timeout();
            // The group works before the fault.
            for _ in 0..10 {
                comm.barrier(None, &p.stream)?;
            }
            warm_up(&p, &comm, algo)?;
            p.stream.synchronize()?;
            comm.health().check()?;
            // The calls' buffers (1 GB each at the largest size) are made
            // before the clock starts: the bound is the GPU's, from where
            // a wait begins, not the host's set-up.
            let mut buffers = if args.phase == Phase::AllReduce {
                Some(fault_buffers(&p, args)?)
            } else {
                None
            };
            p.store_barrier()?;
            let start = Instant::now();
            let (launched, waits_from) = match &mut buffers {
                None => {
                    if rank == victim {
                        die(rank, args.phase)?;
                    }
                    (comm.barrier(None, &p.stream), None)
                }
                Some(buffers) => queue_all_reduces(&p, &comm, algo, rank == victim, buffers),
            };
            // Bounded: every GPU wait on a peer runs out after `bound`,
            // and `Work::synchronize` reports it when the GPU writes it
            // (the waits queued behind the first give up on their own).
            let (reported, reached) = match launched {
                Ok(work) => synchronize_watching(&work, waits_from.as_ref()),
                Err(e) => (Err(e), None),
            };
            let reported_at = Instant::now();
            // Everything queued ends before the context is checked.
            p.stream.synchronize().map_err(|e| {
                anyhow::anyhow!(
                    "faults rank {rank}: FAIL: synchronize after rank {victim} died: {e} (a kernel faulted: the context is unusable)"
                )
            })?;
            drop(buffers);
            let err = match reported.and_then(|()| comm.health().check()) {
                Ok(()) => bail!(
                    "faults rank {rank}: FAIL: no error after rank {victim} died ({} s)",
                    start.elapsed().as_secs_f64()
                ),
                Err(e) => e,
            };
            let from = wait_began(start, reached, reported_at, bound);
            clock = format!(
                " (measured from {}; {:.3} s after the calls began to be queued)",
                if from == start {
                    "the start of the queueing"
                } else {
                    "where the stream reached the first call the victim never made"
                },
                (reported_at - start).as_secs_f64()
            );
            (err, reported_at - from, bound, Some(comm))
        }
    };

    if named_ranks(&err).as_deref() != Some(&[victim][..]) {
        bail!(
            "faults rank {rank}: FAIL {}: the error does not name rank {victim} (alone): {err}",
            args.phase.name()
        );
    }
    // A GPU wait is bounded on the GPU: its error comes within the bound
    // and TIGHT_SLACK; the rendezvous waits on the store, with SLACK.
    let slack = if args.phase == Phase::Rendezvous {
        SLACK
    } else {
        TIGHT_SLACK
    };
    if waited > bound + slack {
        bail!(
            "faults rank {rank}: FAIL {}: the error came after {:.3} s{clock}, beyond the bound of {:.3} s + {} ms",
            args.phase.name(),
            waited.as_secs_f64(),
            bound.as_secs_f64(),
            slack.as_millis()
        );
    }
    // A dead communicator refuses further calls at once.
    if let Some(comm) = &comm {
        let t = Instant::now();
        let refused = comm.barrier(None, &p.stream);
        if refused.is_ok() || t.elapsed() > Duration::from_secs(1) {
            bail!("faults rank {rank}: FAIL: the communicator accepted a call after the fault");
        }
    }
    let context = context_works(&p.ctx)
        .map_err(|e| anyhow::anyhow!("faults rank {rank}: FAIL: after the fault: {e:#}"))?;
    println!(
        "faults rank {rank}: PASS {} victim {victim}: error after {:.3} s{clock} (bound {:.3} s): {err}; {context}",
        args.phase.name(),
        waited.as_secs_f64(),
        bound.as_secs_f64()
    );
    drop(comm);
    println!("faults rank {rank}: communicator torn down");
    Ok(())
}

/// The skip and late phases: a live rank that misses a call or comes
/// after the bound.
fn straggler(
    p: &mut Proc,
    args: &FaultArgs,
    algo: AllReduceAlgo,
    config: &CommConfig,
    victim: usize,
) -> Result<()> {
    let rank = p.rank();
    let phase = args.phase.name();
    let comm = p.comm(config)?;
    let bound = comm.barrier_timeout();
    warm_up(p, &comm, algo)?;
    p.stream.synchronize()?;
    comm.health().check()?;
    let n = args.elems.max(1);
    let calls = args.calls.max(1);
    let input = data::inputs::<bf16>(3, 0, rank, n);
    let d_in = p.stream.clone_htod(&input)?;
    let mut outs = (0..calls)
        .map(|_| p.stream.alloc_zeros::<bf16>(n))
        .collect::<Result<Vec<_>, _>>()?;
    p.stream.synchronize()?;
    // The form that runs at this size (a Lamport form hands large
    // messages to its barrier twin): the one the report must name.
    let form_run = comm.resolve(algo, intranode::ElemType::Bf16, n);
    p.store_barrier()?;
    let start = Instant::now();
    let mut last = None;
    let mut last_call_from = None;
    for (k, d_out) in outs.iter_mut().enumerate() {
        if k + 1 == calls && rank != victim {
            last_call_from = Some(p.stream.record_event(None)?);
        }
        if rank == victim && k + 1 == calls {
            if args.phase == Phase::Skip {
                println!("faults rank {rank}: victim: skipping call {k} of {calls}");
                break;
            }
            let nap = bound + Duration::from_millis(500);
            println!(
                "faults rank {rank}: victim: sleeping {:.1} s before call {k} of {calls}",
                nap.as_secs_f64()
            );
            std::thread::sleep(nap);
        }
        last = Some(comm.all_reduce(&d_in, d_out, ReduceOp::Sum, algo, &p.stream)?);
    }
    let (result, reached) = match &last {
        Some(work) => synchronize_watching(work, last_call_from.as_ref()),
        None => (Ok(()), None),
    };
    let reported_at = Instant::now();
    let waited = reported_at - wait_began(start, reached, reported_at, bound);
    if rank == victim {
        let seen = match (&result, args.phase) {
            (_, Phase::Late) => {
                let late = outs.last().context("no output")?;
                late_victim_verdict(p, &comm, &result, late, &d_in, algo, n)?
            }
            (Ok(()), _) => "its own calls returned Ok".to_owned(),
            (Err(e), _) => format!("its own calls returned: {e}"),
        };
        println!(
            "faults rank {rank}: PASS {phase} victim {victim}: {seen} ({:.2} s)",
            waited.as_secs_f64()
        );
        return Ok(());
    }
    let err = match result {
        Ok(()) => bail!(
            "faults rank {rank}: FAIL {phase}: the work handle reported no error after rank {victim} {} ({:.2} s)",
            if args.phase == Phase::Skip {
                "skipped a call"
            } else {
                "came late"
            },
            waited.as_secs_f64()
        ),
        Err(e) => e,
    };
    match &err {
        intranode::Error::PeerTimeout {
            peer,
            form,
            phase: where_,
            ..
        } if *peer == victim && *form == form_run.name() && !where_.is_empty() => {}
        other => bail!(
            "faults rank {rank}: FAIL {phase}: expected a timeout naming rank {victim} and {}, got: {other}",
            form_run.name()
        ),
    }
    if waited > bound + TIGHT_SLACK {
        bail!(
            "faults rank {rank}: FAIL {phase}: the error came after {:.3} s, beyond the bound of {:.3} s + {} ms",
            waited.as_secs_f64(),
            bound.as_secs_f64(),
            TIGHT_SLACK.as_millis()
        );
    }
    // Dead until rebuilt: the next call fails at once with the same error.
    let t = Instant::now();
    match comm.all_reduce(&d_in, &mut outs[0], ReduceOp::Sum, algo, &p.stream) {
        Err(again)
            if again.to_string() == err.to_string() && t.elapsed() < Duration::from_secs(1) => {}
        Err(again) => {
            bail!("faults rank {rank}: FAIL {phase}: the next call failed differently: {again}")
        }
        Ok(_) => bail!(
            "faults rank {rank}: FAIL {phase}: the communicator accepted a call after the timeout"
        ),
    }
    let context = context_works(&p.ctx)
        .map_err(|e| anyhow::anyhow!("faults rank {rank}: FAIL: after the fault: {e:#}"))?;
    println!(
        "faults rank {rank}: PASS {phase} victim {victim}: Work::synchronize failed after {:.3} s (bound {:.3} s, {:.1} ms over): {err}; the next call failed at once with the same error; {context}",
        waited.as_secs_f64(),
        bound.as_secs_f64(),
        (waited.as_secs_f64() - bound.as_secs_f64()) * 1000.0
    );
    Ok(())
}

/// The late victim's verdict (NOTE [no arrival after giving up]): its
/// late call failed with a timeout naming a peer, or returned the exact
/// sum, and then the next call fails so. Anything else (above all a wrong
/// sum with no error) is an error.
fn late_victim_verdict(
    p: &Proc,
    comm: &IntraNodeComm,
    result: &intranode::Result<()>,
    late_out: &CudaSlice<bf16>,
    d_in: &CudaSlice<bf16>,
    algo: AllReduceAlgo,
    n: usize,
) -> Result<String> {
    let rank = p.rank();
    let named_peer = |e: &intranode::Error| matches!(e, intranode::Error::PeerTimeout { peer, .. } if *peer != rank);
    match result {
        Err(e) if named_peer(e) => Ok(format!("its late call failed: {e}")),
        Err(e) => bail!(
            "faults rank {rank}: FAIL late: the victim's late call failed with something other than a timeout naming a peer: {e}"
        ),
        Ok(()) => {
            let out = p.stream.clone_dtoh(late_out)?;
            data::verify(&out, 3, 0, p.world(), ReduceOp::Sum).map_err(|e| {
                anyhow::anyhow!(
                    "faults rank {rank}: FAIL late: the victim's late call returned Ok with a wrong sum: {e}"
                )
            })?;
            let mut again = p.stream.alloc_zeros::<bf16>(n)?;
            let next = comm
                .all_reduce(d_in, &mut again, ReduceOp::Sum, algo, &p.stream)
                .and_then(|w| w.synchronize());
            match next {
                Err(e) if named_peer(&e) => Ok(format!(
                    "its late call returned the exact sum; the next one failed: {e}"
                )),
                Err(e) => bail!(
                    "faults rank {rank}: FAIL late: after an exact late call, the next one failed with something other than a timeout naming a peer: {e}"
                ),
                Ok(()) => bail!(
                    "faults rank {rank}: FAIL late: the victim's next call returned Ok though its peers had given up on it"
                ),
            }
        }
    }
}

/// Ten checked all-reduces: the path works before the fault.
fn warm_up(p: &Proc, comm: &IntraNodeComm, algo: AllReduceAlgo) -> Result<()> {
    for call in 0..10u64 {
        let n = 4096 + 7 * call as usize;
        let input = data::inputs::<bf16>(1, call, p.rank(), n);
        let d_in = p.stream.clone_htod(&input)?;
        let mut d_out = p.stream.alloc_zeros::<bf16>(n)?;
        comm.all_reduce(&d_in, &mut d_out, ReduceOp::Sum, algo, &p.stream)?;
        let out = p.stream.clone_dtoh(&d_out)?;
        p.stream.synchronize()?;
        data::verify(&out, 1, call, p.world(), ReduceOp::Sum)
            .map_err(|e| anyhow::anyhow!("warm-up all-reduce {call}: {e}"))?;
    }
    Ok(())
}

/// The all-reduce phase's buffers: one input and `args.calls` outputs of
/// `args.elems` bf16 each, filled and on the device.
struct FaultBuffers {
    input: CudaSlice<bf16>,
    outputs: Vec<CudaSlice<bf16>>,
}

fn fault_buffers(p: &Proc, args: &FaultArgs) -> Result<FaultBuffers> {
    let n = args.elems.max(1);
    let input = p
        .stream
        .clone_htod(&data::inputs::<bf16>(2, 0, p.rank(), n))?;
    let outputs = (0..args.calls.max(1))
        .map(|_| p.stream.alloc_zeros::<bf16>(n))
        .collect::<Result<Vec<_>, _>>()?;
    p.stream.synchronize()?;
    Ok(FaultBuffers { input, outputs })
}

/// Queues `args.calls` all-reduces; the victim queues only half of them
/// and dies at once, while its peers' kernels are in flight: their later
/// calls wait for a rank that is gone. (A victim that queued them all
/// would usually finish them before the signal lands, leaving its peers
/// nothing to notice.) A survivor stops queueing at the first refused call
/// (the error word is already set) and returns that error; else the last
/// call's work handle, and an event recorded before the first call the
/// victim never made (the stream reaches it when a wait on the victim can
/// begin, at the latest).
fn queue_all_reduces(
    p: &Proc,
    comm: &IntraNodeComm,
    algo: AllReduceAlgo,
    victim: bool,
    buffers: &mut FaultBuffers,
) -> (intranode::Result<Work>, Option<CudaEvent>) {
    let calls = buffers.outputs.len();
    let mine = if victim { calls / 2 } else { calls };
    let mut last = None;
    let mut waits_from = None;
    for (k, d_out) in buffers.outputs.iter_mut().take(mine).enumerate() {
        if k == calls / 2 {
            match p.stream.record_event(None) {
                Ok(e) => waits_from = Some(e),
                Err(source) => {
                    let e = intranode::Error::Driver {
                        op: "cuEventRecord",
                        device: Some(p.ctx.ordinal()),
                        source,
                    };
                    return (Err(e), waits_from);
                }
            }
        }
        match comm.all_reduce(&buffers.input, d_out, ReduceOp::Sum, algo, &p.stream) {
            Ok(work) => last = Some(work),
            Err(e) => return (Err(e), waits_from),
        }
    }
    if victim {
        // Dies with its kernels queued or running; `die` does not return.
        let e = die(p.rank(), Phase::AllReduce).err();
        let why = e.map(|e| e.to_string()).unwrap_or_default();
        return (Err(intranode::Error::InvalidArgument(why)), waits_from);
    }
    match last {
        Some(work) => (Ok(work), waits_from),
        None => (
            Err(intranode::Error::InvalidArgument("no call queued".into())),
            waits_from,
        ),
    }
}

/// Where the failed wait began, at the latest: where the stream passed
/// the event before the first call the victim never made, if the report
/// came at least the bound after it (the failed wait was that call's or a
/// later one's); else an earlier call's wait failed, which began after
/// `start` (the clock started once the buffers were ready).
fn wait_began(
    start: Instant,
    reached: Option<Instant>,
    reported_at: Instant,
    bound: Duration,
) -> Instant {
    match reached {
        Some(t) if t <= reported_at && reported_at - t >= bound => t,
        _ => start,
    }
}

/// `work.synchronize()`, while another thread watches `event` and notes
/// when the stream passed it: the report, and when a wait that failed
/// could have begun at the latest (`None`: the event was not passed
/// before the report, or there is none).
fn synchronize_watching(
    work: &Work,
    event: Option<&CudaEvent>,
) -> (intranode::Result<()>, Option<Instant>) {
    let Some(event) = event else {
        return (work.synchronize(), None);
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            loop {
                match event.try_is_complete() {
                    Ok(true) => return Some(Instant::now()),
                    Ok(false) => {}
                    Err(_) => return None,
                }
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                std::hint::spin_loop();
            }
        });
        let reported = work.synchronize();
        stop.store(true, Ordering::Relaxed);
        (reported, watcher.join().unwrap_or(None))
    })
}
