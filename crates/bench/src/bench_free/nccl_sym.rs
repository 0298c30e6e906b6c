//! `bench --nccl-symmetric`: NCCL's symmetric kernels (NCCL 2.27 and
//! later) as a baseline beside plain NCCL. A second NCCL communicator of
//! the bench's own (cudarc's `Comm` keeps its handle to itself), both
//! buffers from `ncclMemAlloc` and registered on it as windows with
//! `NCCL_WIN_COLL_SYMMETRIC`, once, at the sweep's largest size; every size
//! reduces a prefix of them (offset 0 on every rank, as those kernels
//! require), timed in the sweep's modes (graphs of K calls replayed
//! free-running, eager, skew) and its output checked as every other row's.
//!
//! NCCL reads `NCCL_GRAPH_MIXING_SUPPORT` once, at init; `0` drops the
//! synchronization that lets graph-captured and eager calls of one
//! communicator be outstanding together, the setting NCCL's
//! symmetric-kernel figures are quoted with. The bench leaves the variable
//! as the run's environment has it (`NCCL_GRAPH_MIXING_SUPPORT=0
//! intranode-run ... bench --nccl-symmetric` for the other mode: a run of
//! its own), names the row by it ([`GraphMixing::row_label`]) and records
//! it in the results file; the plain NCCL rows of such a run run under it
//! too. Every call of the sweep is on one stream, one after another, so
//! none is outstanding beside another either way.
//!
//! The bench creates no multicast object; whether NCCL uses NVLink
//! multicast is `NCCL_NVLS_ENABLE`'s, which the device scripts set to 0.
//!
//! Where NCCL cannot (no NCCL, one older than 2.27, a type or op those
//! kernels do not reduce, a window NCCL does not register), the row is
//! reported unavailable with the reason ([`Unavailable`]) and the sweep
//! goes on.

use std::ffi::{CStr, c_int, c_void};

use anyhow::{Context, Result, anyhow};
use cudarc::driver::{CudaSlice, DevicePtr};
use cudarc::nccl::{result as nccl_result, sys};
use intranode::AllReduceAlgo;
use intranode_harness::data;
use intranode_harness::free::Timer;
use intranode_harness::progress::Progress;
use intranode_harness::rank::Rank;

use super::{RankDists, measure, merge, row};
use crate::bench::BenchArgs;
use crate::elem::{self, BenchElem, Dtype, Op};
use crate::results::{BenchFile, NCCL_SYM_PREFIX, Row, Unavailable, fmt_bytes};

/// `NCCL_WIN_COLL_SYMMETRIC`, the `winFlags` bit of
/// `ncclCommWindowRegister` that asks for a symmetric window (nccl.h,
/// "Window Registration flags", NCCL 2.27 and later). cudarc's bindings
/// have the functions but none of the header's defines.
const WIN_COLL_SYMMETRIC: c_int = 0x01;

/// The first NCCL with window registration and the symmetric kernels,
/// 2.27.0, as `ncclGetVersion` codes it (major x 10000 + minor x 100 +
/// patch).
const MIN_VERSION_CODE: c_int = 22_700;

/// NCCL's window registration wants buffers (and sizes) in whole 4 KiB
/// pages (`NCCL_WIN_REQUIRED_ALIGNMENT` in later headers); `ncclMemAlloc`
/// rounds up to its own, larger granularity.
const WINDOW_ALIGN_BYTES: usize = 4096;

/// `NCCL_GRAPH_MIXING_SUPPORT` as NCCL reads it at init.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphMixing {
    /// NCCL's default: graph-captured and eager calls may overlap.
    On,
    /// `NCCL_GRAPH_MIXING_SUPPORT=0`.
    Off,
}

impl GraphMixing {
    pub const ENV: &'static str = "NCCL_GRAPH_MIXING_SUPPORT";

    /// NCCL's reading of the variable: an integer, 0 turning the support
    /// off; unset, empty or not an integer leaves NCCL's default (on).
    pub fn parse(value: Option<&str>) -> GraphMixing {
        match value.map(str::trim).map(str::parse::<i64>) {
            Some(Ok(0)) => GraphMixing::Off,
            _ => GraphMixing::On,
        }
    }

    /// This process's setting, read as NCCL reads it.
    pub fn from_env() -> GraphMixing {
        Self::parse(std::env::var(Self::ENV).ok().as_deref())
    }

    /// As results files record it.
    pub fn name(self) -> &'static str {
        match self {
            GraphMixing::On => "on",
            GraphMixing::Off => "off",
        }
    }

    /// The name of the baseline's rows in this mode, so that runs of both
    /// modes can sit side by side in one table.
    pub fn row_label(self) -> String {
        match self {
            GraphMixing::On => NCCL_SYM_PREFIX.to_owned(),
            GraphMixing::Off => format!("{NCCL_SYM_PREFIX}-nomix"),
        }
    }
}

/// `2.28.9` from NCCL's version code (`22809`; codes before 2.9 were
/// major x 1000 + minor x 100 + patch).
pub fn version_text(code: c_int) -> String {
    let (major, minor, patch) = if code >= 10_000 {
        (code / 10_000, code % 10_000 / 100, code % 100)
    } else {
        (code / 1000, code % 1000 / 100, code % 100)
    };
    format!("{major}.{minor}.{patch}")
}

/// Why an NCCL of version `code` has no symmetric kernels, if it has
/// none.
pub fn version_gap(code: c_int) -> Option<String> {
    (code < MIN_VERSION_CODE).then(|| {
        format!(
            "NCCL {} has no window registration or symmetric kernels (2.27 and later)",
            version_text(code)
        )
    })
}

/// Why NCCL's symmetric kernels do not reduce `dtype` with `op`, if they
/// do not: they sum floating-point types of 32 bits or fewer (NCCL 2.27's
/// release notes); NCCL would run its regular kernels on the windows,
/// which is not the baseline this row stands for.
pub fn kernel_gap(dtype: Dtype, op: Op) -> Option<String> {
    let float32 = matches!(dtype, Dtype::Bf16 | Dtype::F16 | Dtype::F32);
    (!(float32 && op == Op::Sum)).then(|| {
        format!(
            "NCCL's symmetric kernels sum bf16, f16 and f32 only, not {} {}",
            dtype.name(),
            op.name()
        )
    })
}

/// The row the run will not have, named as it would have been.
pub fn unavailable(mixing: GraphMixing, reason: String) -> Unavailable {
    Unavailable {
        algo: mixing.row_label(),
        reason,
    }
}

/// The same outcome on every rank: the first rank's reason where any
/// rank has one (`rank N: ...` where it is not rank 0's).
fn agree(r: &mut Rank, mine: Result<(), String>) -> Result<Result<(), String>> {
    let all = r.all_gather(&mine)?;
    Ok(match all.iter().position(Result::is_err) {
        None => Ok(()),
        Some(0) => all[0].clone(),
        Some(i) => Err(format!(
            "rank {i}: {}",
            all[i].clone().err().unwrap_or_default()
        )),
    })
}

fn nccl_text(e: sys::ncclResult_t) -> String {
    format!("{e:?}")
}

/// NCCL's last error message on `comm`, for a registration that failed.
fn last_error(comm: sys::ncclComm_t) -> String {
    // SAFETY: `comm` is a live communicator; NCCL returns a
    // NUL-terminated string it owns (possibly empty), read at once.
    let text = unsafe {
        let p = sys::ncclGetLastError(comm);
        if p.is_null() {
            return String::new();
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    text.trim().to_owned()
}

/// One buffer from `ncclMemAlloc`, registered as a symmetric window
/// (`win`, null until it is).
struct Window {
    ptr: *mut c_void,
    win: sys::ncclWindow_t,
}

/// The baseline's communicator and its two windows (send, receive).
/// [`close`](Self::close) takes them down on every rank together
/// (deregistering a window is collective); dropped without it (an error on
/// the way, a failed registration) it aborts the communicator, a local
/// call that waits for no peer, and leaves the buffers to the process's
/// end.
pub struct Baseline {
    comm: sys::ncclComm_t,
    windows: Vec<Window>,
    capacity_bytes: usize,
    mixing: GraphMixing,
    version: c_int,
}

/// Rank 0's end of the baseline: the line that says what its rows stand
/// for (or why they are missing), and the run's NCCL setting and missing
/// rows in the results file.
pub fn report(file: &mut BenchFile, line: Option<String>, unavailable: Vec<Unavailable>) {
    line.iter().for_each(|l| println!("{l}"));
    for u in &unavailable {
        println!("{}: unavailable: {}", u.algo, u.reason);
    }
    file.nccl_graph_mixing = Some(GraphMixing::from_env().name().into());
    file.unavailable = unavailable;
}

impl Baseline {
    /// The sweep's baseline where `--nccl-symmetric` asks for it, for
    /// messages up to `max_bytes`: set up, or the row that will be
    /// missing.
    pub fn for_sweep(
        r: &mut Rank,
        args: &BenchArgs,
        max_bytes: Option<usize>,
    ) -> Result<(Option<Baseline>, Vec<Unavailable>)> {
        if !args.nccl_symmetric {
            return Ok((None, Vec::new()));
        }
        Ok(match Self::setup(r, args, max_bytes.unwrap_or(0))? {
            Ok(base) => (Some(base), Vec::new()),
            Err(gap) => (None, vec![gap]),
        })
    }

    /// Sets the baseline up on every rank for messages up to `max_bytes`,
    /// or says why it cannot be had, the same on every rank.
    fn setup(
        r: &mut Rank,
        args: &BenchArgs,
        max_bytes: usize,
    ) -> Result<std::result::Result<Baseline, Unavailable>> {
        let mixing = GraphMixing::from_env();
        let local = (|| -> std::result::Result<c_int, String> {
            if let Some(gap) = kernel_gap(args.dtype, args.op) {
                return Err(gap);
            }
            r.comm.nccl().map_err(|e| format!("no NCCL: {e}"))?;
            let version = nccl_result::get_nccl_version()
                .map_err(|e| format!("ncclGetVersion: {}", nccl_text(e.0)))?;
            version_gap(version).map_or(Ok(version), Err)
        })();
        let version = match (agree(r, local.clone().map(|_| ()))?, local) {
            (Ok(()), Ok(v)) => v,
            (Err(why), _) | (Ok(()), Err(why)) => return Ok(Err(unavailable(mixing, why))),
        };
        let mut base = match Self::init(r, mixing, version)? {
            Ok(b) => b,
            Err(why) => return Ok(Err(unavailable(mixing, why))),
        };
        // Allocations first, each rank on its own, then the registrations,
        // which are collective: no rank enters one that a peer, short of
        // memory, would never join.
        let capacity_bytes = max_bytes.max(1).next_multiple_of(WINDOW_ALIGN_BYTES);
        let allocated = base.allocate(r, capacity_bytes);
        if let Err(why) = agree(r, allocated)? {
            return Ok(Err(unavailable(mixing, why)));
        }
        let registered = base.register(capacity_bytes);
        if let Err(why) = agree(r, registered)? {
            return Ok(Err(unavailable(mixing, why)));
        }
        base.capacity_bytes = capacity_bytes;
        Ok(Ok(base))
    }

    /// The communicator, its unique id from rank 0 through the store.
    fn init(
        r: &mut Rank,
        mixing: GraphMixing,
        version: c_int,
    ) -> Result<std::result::Result<Baseline, String>> {
        let id: Option<Vec<u8>> = match r.rank() {
            0 => {
                let id = nccl_result::get_uniqueid()
                    .map_err(|e| anyhow!("ncclGetUniqueId: {}", nccl_text(e.0)))?;
                Some(id.internal.iter().map(|&c| c as u8).collect())
            }
            _ => None,
        };
        let ids = r.all_gather(&id)?;
        let bytes = ids
            .first()
            .cloned()
            .flatten()
            .context("no NCCL unique id from rank 0")?;
        let mut unique = sys::ncclUniqueId { internal: [0; 128] };
        if bytes.len() != unique.internal.len() {
            anyhow::bail!("an NCCL unique id of {} bytes, want 128", bytes.len());
        }
        for (dst, src) in unique.internal.iter_mut().zip(&bytes) {
            *dst = *src as std::ffi::c_char;
        }
        // NCCL works on the calling thread's current device.
        r.ctx.bind_to_thread()?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        let (world, rank) = (r.world() as c_int, r.rank() as c_int);
        // SAFETY: `comm` is a place for the handle; every rank calls this
        // with the same id and world, each with its own rank.
        let made = unsafe { nccl_result::comm_init_rank(&mut comm, world, unique, rank) }
            .map_err(|e| format!("ncclCommInitRank: {}", nccl_text(e.0)));
        let base = made.map(|_| Baseline {
            comm,
            windows: Vec::new(),
            capacity_bytes: 0,
            mixing,
            version,
        });
        let outcome = base.as_ref().map(|_| ()).map_err(Clone::clone);
        Ok(agree(r, outcome)?.and(base))
    }

    /// The send and the receive buffer, `bytes` each, from
    /// `ncclMemAlloc` (the memory window registration needs).
    fn allocate(&mut self, r: &Rank, bytes: usize) -> std::result::Result<(), String> {
        r.ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
        for _ in 0..2 {
            let mut ptr: *mut c_void = std::ptr::null_mut();
            // SAFETY: `ptr` is a place for the allocation's address.
            let res = unsafe { sys::ncclMemAlloc(&mut ptr, bytes) };
            if res != sys::ncclResult_t::ncclSuccess || ptr.is_null() {
                return Err(format!("ncclMemAlloc of {bytes} bytes: {}", nccl_text(res)));
            }
            self.windows.push(Window {
                ptr,
                win: std::ptr::null_mut(),
            });
        }
        Ok(())
    }

    /// Registers both buffers as symmetric windows (a collective call,
    /// each rank registering the same size in the same order).
    fn register(&mut self, bytes: usize) -> std::result::Result<(), String> {
        for w in &mut self.windows {
            // SAFETY: `w.ptr` holds `bytes` bytes from `ncclMemAlloc`,
            // registered once on this live communicator; `w.win` is a
            // place for the handle.
            let res = unsafe {
                sys::ncclCommWindowRegister(self.comm, w.ptr, bytes, &mut w.win, WIN_COLL_SYMMETRIC)
            };
            if res != sys::ncclResult_t::ncclSuccess || w.win.is_null() {
                return Err(format!(
                    "ncclCommWindowRegister ({bytes} bytes, NCCL_WIN_COLL_SYMMETRIC): {} {}",
                    nccl_text(res),
                    last_error(self.comm)
                ));
            }
        }
        Ok(())
    }

    /// What the results and the tables call the baseline's rows.
    pub fn label(&self) -> String {
        self.mixing.row_label()
    }

    /// A line for the log: what the rows stand for.
    pub fn describe(&self) -> String {
        format!(
            "{}: NCCL {} symmetric kernels on ncclMemAlloc windows of {} bytes \
             ({}={}; NCCL_NVLS_ENABLE={})",
            self.label(),
            version_text(self.version),
            self.capacity_bytes,
            GraphMixing::ENV,
            std::env::var(GraphMixing::ENV).unwrap_or_else(|_| "unset".into()),
            std::env::var("NCCL_NVLS_ENABLE").unwrap_or_else(|_| "unset".into()),
        )
    }

    /// The row of one size: `d_in`'s data (the inputs of `call`) copied
    /// into the send window, the output poisoned, every mode timed (the
    /// skew drawn from `seed`, the size and the baseline's own constant),
    /// the output checked on every rank and the distributions merged;
    /// wrong elements counted as `timed_row` counts them.
    pub fn row<T: BenchElem>(
        &self,
        r: &mut Rank,
        args: &BenchArgs,
        timer: &mut Timer,
        d_in: &CudaSlice<T>,
        (call, seed): (u64, u64),
        progress: &mut Progress,
    ) -> Result<Row> {
        let (elems, world) = (d_in.len(), r.world());
        let bytes = std::mem::size_of::<T>() * elems;
        let config_seed = data::mix(seed ^ 0x5E7C ^ bytes as u64 ^ (call << 40));
        let (send, recv) = match self.windows.as_slice() {
            [s, r] if !s.win.is_null() && !r.win.is_null() => (s.ptr, r.ptr),
            _ => anyhow::bail!("the symmetric windows are not registered"),
        };
        if bytes > self.capacity_bytes {
            anyhow::bail!(
                "{bytes} bytes past the windows' {} bytes",
                self.capacity_bytes
            );
        }
        let stream = r.stream.cu_stream();
        {
            let (src, _sync) = d_in.device_ptr(&r.stream);
            let poison = vec![elem::poison::<T>(); elems];
            // SAFETY: both windows hold `capacity_bytes >= bytes`; `d_in`
            // holds `bytes` and is guarded for the stream by `_sync`;
            // `poison` lives past the synchronization below.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(send as u64, src, bytes, stream)?;
                cudarc::driver::result::memcpy_htod_async(recv as u64, &poison, stream)?;
            }
            r.stream.synchronize()?;
        }
        let comm = self.comm;
        let mine: RankDists = {
            let mut enqueue = |r: &Rank, _j: usize| -> Result<()> {
                // SAFETY: both windows hold `elems` elements of `T` and
                // live as long as `self`, on this communicator's every
                // rank at offset 0; the call is ordered on this rank's
                // stream like every other of the sweep.
                let res = unsafe {
                    sys::ncclAllReduce(
                        send,
                        recv,
                        elems,
                        T::as_nccl_type(),
                        sys::ncclRedOp_t::ncclSum,
                        comm,
                        r.stream.cu_stream() as sys::cudaStream_t,
                    )
                };
                if res != sys::ncclResult_t::ncclSuccess {
                    return Err(anyhow!(
                        "ncclAllReduce on the symmetric windows: {} {}",
                        nccl_text(res),
                        last_error(comm)
                    ));
                }
                Ok(())
            };
            measure(r, args, timer, bytes, &mut enqueue, config_seed)?
        };
        let mut out = vec![elem::poison::<T>(); elems];
        // SAFETY: the receive window holds `bytes`; `out` lives past the
        // synchronization.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut out, recv as u64, stream)? };
        r.stream.synchronize()?;
        let label = self.label();
        let (wrong, first) = elem::wrong(&out, args.op, call, world);
        if let Some(first) = first {
            eprintln!(
                "rank {}: {} {} {label} at {bytes} bytes: {wrong} wrong elements; first {first}",
                r.rank(),
                T::NAME,
                args.op.name(),
            );
        }
        let all = r.all_gather(&(mine, wrong as u64))?;
        let dists: Vec<RankDists> = all.iter().map(|(d, _)| d.clone()).collect();
        let op = args.op.nccl();
        let mut row = row::<T>(
            r,
            world,
            bytes,
            Some(AllReduceAlgo::Nccl),
            &op,
            merge(&dists),
        );
        row.wrong = all.iter().map(|(_, w)| w).sum();
        row.chosen.clone_from(&label);
        progress.step(&format!("{} {label}", fmt_bytes(bytes)));
        row.algo = label;
        Ok(row)
    }

    /// Deregisters the windows, frees them and destroys the communicator,
    /// on every rank at the same point of the sweep; returns
    /// [`describe`](Self::describe)'s line.
    pub fn close(mut self, r: &Rank) -> Result<String> {
        let line = self.describe();
        r.ctx.bind_to_thread()?;
        r.stream.synchronize()?;
        let comm = std::mem::replace(&mut self.comm, std::ptr::null_mut());
        for w in std::mem::take(&mut self.windows).into_iter().rev() {
            if !w.win.is_null() {
                // SAFETY: `w` was registered on `comm`, which is live, and
                // no call on it is pending (synchronized above); every rank
                // deregisters its windows in the same order.
                let res = unsafe { sys::ncclCommWindowDeregister(comm, w.win) };
                if res != sys::ncclResult_t::ncclSuccess {
                    anyhow::bail!("ncclCommWindowDeregister: {}", nccl_text(res));
                }
            }
            // SAFETY: `w.ptr` came from `ncclMemAlloc` and is no longer
            // registered or used.
            let res = unsafe { sys::ncclMemFree(w.ptr) };
            if res != sys::ncclResult_t::ncclSuccess {
                anyhow::bail!("ncclMemFree: {}", nccl_text(res));
            }
        }
        // SAFETY: `comm` is live, has no windows left, and is not used
        // after this.
        unsafe { nccl_result::comm_destroy(comm) }
            .map_err(|e| anyhow!("ncclCommDestroy: {}", nccl_text(e.0)))?;
        Ok(line)
    }
}

impl Drop for Baseline {
    fn drop(&mut self) {
        if self.comm.is_null() {
            return;
        }
        // SAFETY: `comm` is live and not used after this; aborting is
        // local to this rank, unlike deregistering or destroying, so a
        // rank on its way out with an error does not wait for its peers.
        // The windows' memory stays until the process ends.
        if let Err(e) = unsafe { nccl_result::comm_abort(self.comm) } {
            eprintln!("nccl-sym: ncclCommAbort: {}", nccl_text(e.0));
        }
        self.comm = std::ptr::null_mut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_mixing_is_read_as_nccl_reads_it() {
        assert_eq!(GraphMixing::parse(None), GraphMixing::On);
        assert_eq!(GraphMixing::parse(Some("0")), GraphMixing::Off);
        assert_eq!(GraphMixing::parse(Some(" 0 ")), GraphMixing::Off);
        assert_eq!(GraphMixing::parse(Some("1")), GraphMixing::On);
        assert_eq!(GraphMixing::parse(Some("")), GraphMixing::On);
        assert_eq!(GraphMixing::parse(Some("off")), GraphMixing::On);
        assert_eq!(GraphMixing::Off.name(), "off");
        assert_eq!(GraphMixing::On.name(), "on");
    }

    #[test]
    fn rows_are_named_by_the_mode() {
        assert_eq!(GraphMixing::On.row_label(), "nccl-sym");
        assert_eq!(GraphMixing::Off.row_label(), "nccl-sym-nomix");
        // Both fall under the prefix the auto check leaves out.
        for m in [GraphMixing::On, GraphMixing::Off] {
            assert!(m.row_label().starts_with(NCCL_SYM_PREFIX));
            assert_ne!(m.row_label(), "nccl");
        }
    }

    #[test]
    fn versions_before_2_27_are_unavailable() {
        assert_eq!(version_text(22809), "2.28.9");
        assert_eq!(version_text(22700), "2.27.0");
        assert_eq!(version_text(2804), "2.8.4");
        assert_eq!(version_gap(22700), None);
        assert_eq!(version_gap(22809), None);
        let gap = version_gap(22605).expect("2.26 has none");
        assert!(gap.contains("NCCL 2.26.5"), "{gap}");
        assert!(gap.contains("2.27"), "{gap}");
    }

    #[test]
    fn only_float_sums_of_32_bits_or_fewer_run() {
        for d in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
            assert_eq!(kernel_gap(d, Op::Sum), None, "{d:?}");
            assert!(kernel_gap(d, Op::Max).is_some(), "{d:?}");
        }
        let gap = kernel_gap(Dtype::F64, Op::Sum).expect("f64");
        assert!(gap.ends_with("not f64 sum"), "{gap}");
        assert!(kernel_gap(Dtype::I32, Op::Sum).is_some());
    }

    #[test]
    fn unavailable_rows_keep_the_mode_and_the_reason() {
        let u = unavailable(GraphMixing::Off, "NCCL 2.26.5 has none".into());
        assert_eq!(u.algo, "nccl-sym-nomix");
        assert_eq!(u.reason, "NCCL 2.26.5 has none");
    }
}
