//! What rank 0 prints after a free-running sweep: the per-mode table, the
//! same rows as nccl-tests prints them, the tail check and the decode-like
//! table (fixed-width columns; the nccl-tests one keeps that tool's
//! layout).

use super::{DECODE_SPIN_NS, SKEW_K};
use crate::elem::Op;
use crate::results::{DecodeRow, Row, fmt_bytes};

/// The sweep as nccl-tests prints it (out of place: the sweep times
/// `all_reduce` from one buffer into another). `time` is the mean per
/// call of the largest graph without stamps (`ModeStats::mean_us`); algbw is
/// bytes over time, busbw nccl-tests' all-reduce convention (algbw x
/// 2 (n-1)/n); `#wrong` counts output elements off the reference, over
/// every rank.
pub(super) fn print_nccl_tests_table(rows: &[Row], dtype: &str, op: Op, elem_bytes: usize) {
    println!("as nccl-tests prints it (out of place):");
    println!(
        "{:>12} {:>12} {:>6} {:>6} {:>16} {:>9} {:>8} {:>8} {:>7}",
        "size", "count", "type", "redop", "algo", "time", "algbw", "busbw", "#wrong"
    );
    println!(
        "{:>12} {:>12} {:>6} {:>6} {:>16} {:>9} {:>8} {:>8} {:>7}",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""
    );
    for r in rows {
        let algbw = r.bytes as f64 / (r.graph_us * 1e3);
        println!(
            "{:>12} {:>12} {:>6} {:>6} {:>16} {:>9.2} {:>8.2} {:>8.2} {:>7}",
            r.bytes,
            r.bytes / elem_bytes,
            dtype,
            op.name(),
            r.algo,
            r.graph_us,
            algbw,
            r.busbw_gbps,
            r.wrong
        );
    }
}

pub(super) fn print_free_table(rows: &[Row]) {
    let modes: Vec<String> = rows
        .first()
        .map(|r| r.free.iter().map(|m| m.mode.clone()).collect())
        .unwrap_or_default();
    println!(
        "free-running, us per call, the slowest rank's median / p99 / max (mean = graph without stamps):"
    );
    let mut head = format!("{:>10} {:>16} {:>16}", "bytes", "algo", "chosen");
    for m in &modes {
        head.push_str(&format!(" {:>24}", format!("{m} med/p99/max")));
    }
    head.push_str(&format!(" {:>9} {:>8} {:>9}", "mean_us", "x_nccl", "busbw"));
    println!("{head}");
    for r in rows {
        let mut line = format!("{:>10} {:>16} {:>16}", r.bytes, r.algo, r.chosen);
        for m in &r.free {
            let d = m.dist;
            line.push_str(&format!(
                " {:>24}",
                format!("{:.2}/{:.2}/{:.1}", d.median_us, d.p99_us, d.max_us)
            ));
        }
        line.push_str(&format!(
            " {:>9.2} {:>8} {:>9.1}",
            r.graph_us,
            r.graph_vs_nccl.map_or("-".into(), |v| format!("{v:.2}")),
            r.busbw_gbps
        ));
        println!("{line}");
    }
}

/// The tail targets (p99 at most 1.5 x the median, max at most 3 x) in
/// the graph, skew and decode modes.
pub(super) fn print_tail_check(rows: &[Row], decode: &[DecodeRow]) {
    let mut bad = Vec::new();
    let mut checked = 0;
    for r in rows {
        for m in r.free.iter().filter(|m| m.mode != "eager") {
            checked += 1;
            if !m.dist.tail_ok() {
                bad.push(format!(
                    "{} {} {}: {:.2}/{:.2}/{:.1}",
                    fmt_bytes(r.bytes),
                    r.algo,
                    m.mode,
                    m.dist.median_us,
                    m.dist.p99_us,
                    m.dist.max_us
                ));
            }
        }
    }
    for d in decode {
        checked += 1;
        if !d.step.tail_ok() {
            bad.push(format!(
                "decode {}x{} {}: {:.2}/{:.2}/{:.1}",
                d.hidden, d.batch, d.algo, d.step.median_us, d.step.p99_us, d.step.max_us
            ));
        }
    }
    if bad.is_empty() {
        println!(
            "tail: p99 <= 1.5 x median and max <= 3 x median in all {checked} graph, skew and decode configurations"
        );
    } else {
        println!(
            "tail: {} of {checked} graph, skew and decode configurations miss p99 <= 1.5 x median or max <= 3 x median:",
            bad.len()
        );
        for b in bad {
            println!("  {b}");
        }
    }
}

pub(super) fn print_decode_table(rows: &[DecodeRow]) {
    if rows.is_empty() {
        return;
    }
    println!(
        "decode-like: graph of {SKEW_K} steps ({} us spin + all-reduce), us per step, the slowest rank's:",
        DECODE_SPIN_NS / 1000
    );
    println!(
        "{:>6} {:>5} {:>9} {:>16} {:>22} {:>11} {:>9}",
        "hidden", "batch", "bytes", "algo", "step med/p99/max", "overhead", "x_nccl"
    );
    for d in rows {
        println!(
            "{:>6} {:>5} {:>9} {:>16} {:>22} {:>11.2} {:>9}",
            d.hidden,
            d.batch,
            d.bytes,
            d.algo,
            format!(
                "{:.2}/{:.2}/{:.1}",
                d.step.median_us, d.step.p99_us, d.step.max_us
            ),
            d.overhead_us,
            d.overhead_vs_nccl.map_or("-".into(), |v| format!("{v:.2}"))
        );
    }
}
