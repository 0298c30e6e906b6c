//! The benchmark's results as they are written and read back: one [`Row`]
//! per measured configuration, the check of auto against the best of its
//! choices ([`AutoCheck`]), and the JSON file ([`BenchFile`]) that `bench`
//! writes and `plot` reads. Plain data: `plot` draws it, `bench` writes
//! it with the plot beside it (`bench::write_files`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use intranode_harness::free::Dist;
use serde::{Deserialize, Serialize};

/// Auto may be at most this much slower than the fastest algorithm it
/// chooses from, at every size ("never more than 5% slower").
pub const AUTO_TOLERANCE: f64 = 1.05;

/// Layout version of [`BenchFile`]. Version 1 (the earliest committed
/// results; two are kept in `crates/bench/testdata/`) was a bare JSON list
/// of rows, which [`load`] still reads.
pub const FORMAT: u32 = 2;

/// One measured configuration (maximum over ranks of each rank's median).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub world: usize,
    pub bytes: usize,
    pub algo: String,
    /// What `auto` chose, for the auto rows.
    pub chosen: String,
    pub graph_us: f64,
    pub eager_us: Option<f64>,
    /// Host time to enqueue one call, eager.
    pub eager_host_us: Option<f64>,
    pub busbw_gbps: f64,
    pub graph_vs_nccl: Option<f64>,
    pub eager_vs_nccl: Option<f64>,
    /// Output elements that differ from the reference, summed over ranks
    /// (nccl-tests' `#wrong`; older files: not recorded, 0).
    #[serde(default)]
    pub wrong: u64,
    /// Free-running per-call distributions by mode (`bench_free.rs`), the
    /// slowest rank's; empty for lined-up runs and older files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub free: Vec<ModeStats>,
}

/// One free-running mode's figures for one configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeStats {
    /// `graph-K`, `eager`, `skew` or `decode`.
    pub mode: String,
    pub dist: Dist,
    /// Mean per call of the same graph without stamps (graph modes).
    pub mean_us: Option<f64>,
}

/// The mean per call of the largest graph mode (no stamps): a row's
/// `graph_us`.
pub fn largest_graph_mean(free: &[ModeStats]) -> f64 {
    free.iter()
        .filter(|m| m.mode.starts_with("graph-"))
        .max_by_key(|m| m.mode["graph-".len()..].parse::<usize>().unwrap_or(0))
        .and_then(|m| m.mean_us)
        .unwrap_or(f64::NAN)
}

/// Fills every row of size `bytes` with its ratios to the `nccl` row of
/// that size, if one was measured.
pub fn fill_nccl_ratios(rows: &mut [Row], bytes: usize) {
    let nccl = rows
        .iter()
        .find(|x| x.bytes == bytes && x.algo == "nccl")
        .map(|x| (x.graph_us, x.eager_us));
    if let Some((ng, ne)) = nccl {
        for row in rows.iter_mut().filter(|x| x.bytes == bytes) {
            row.graph_vs_nccl = Some(row.graph_us / ng);
            row.eager_vs_nccl = row.eager_us.zip(ne).map(|(a, b)| a / b);
        }
    }
}

/// Bus bandwidth of an all-reduce: each byte crosses the links
/// 2 (n-1)/n times in a ring or two-shot, the convention of nccl-tests.
pub fn busbw_gbps(world: usize, bytes: usize, us: f64) -> f64 {
    2.0 * (world as f64 - 1.0) / world as f64 * bytes as f64 / (us * 1e3)
}

/// Auto against the fastest explicit algorithm at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoCheck {
    pub bytes: usize,
    /// The algorithm auto chose.
    pub chosen: String,
    /// Fastest explicit algorithm in graph replay, and auto's time over
    /// its time.
    pub graph_best: String,
    pub graph_vs_best: f64,
    /// The same for eager launches, where they were measured.
    pub eager_best: Option<String>,
    pub eager_vs_best: Option<f64>,
    /// Both ratios at most [`AUTO_TOLERANCE`].
    pub within_tolerance: bool,
}

/// The prefix of the rows of NCCL's symmetric kernels (`nccl-sym`,
/// `nccl-sym-nomix`): a baseline on buffers of its own, which auto never
/// chooses.
pub const NCCL_SYM_PREFIX: &str = "nccl-sym";

/// One [`AutoCheck`] per size that has an auto row and at least one
/// explicit algorithm (one-shot, two-shot, HCM, NCCL: whatever was
/// measured; not NCCL's symmetric kernels, which auto cannot choose), in
/// size order.
pub fn auto_checks(rows: &[Row]) -> Vec<AutoCheck> {
    let mut checks = Vec::new();
    for auto in rows.iter().filter(|r| r.algo == "auto") {
        let choices: Vec<&Row> = rows
            .iter()
            .filter(|r| {
                r.bytes == auto.bytes && r.algo != "auto" && !r.algo.starts_with(NCCL_SYM_PREFIX)
            })
            .collect();
        let Some(graph) = fastest(&choices, |r| Some(r.graph_us)) else {
            continue;
        };
        let graph_vs_best = auto.graph_us / graph.1;
        let eager = auto
            .eager_us
            .and_then(|a| fastest(&choices, |r| r.eager_us).map(|(name, t)| (name, a / t)));
        let within_tolerance = graph_vs_best <= AUTO_TOLERANCE
            && eager.as_ref().is_none_or(|(_, v)| *v <= AUTO_TOLERANCE);
        checks.push(AutoCheck {
            bytes: auto.bytes,
            chosen: auto.chosen.clone(),
            graph_best: graph.0,
            graph_vs_best,
            eager_best: eager.as_ref().map(|e| e.0.clone()),
            eager_vs_best: eager.map(|e| e.1),
            within_tolerance,
        });
    }
    checks.sort_by_key(|c| c.bytes);
    checks
}

/// Name and time of the fastest row by `time`, ignoring rows without one.
fn fastest(rows: &[&Row], time: impl Fn(&Row) -> Option<f64>) -> Option<(String, f64)> {
    rows.iter()
        .filter_map(|r| time(r).map(|t| (r.algo.clone(), t)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// What `bench` writes as `bench_w{world}.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchFile {
    /// [`FORMAT`].
    pub format: u32,
    pub world: usize,
    /// GPU name as CUDA reports it (rank 0's device), when known.
    pub gpu: Option<String>,
    /// Element type of every message.
    pub dtype: String,
    /// Reduction op of every all-reduce (older files: sum).
    #[serde(default = "sum_name")]
    pub op: String,
    pub rows: Vec<Row>,
    /// Tolerance [`AutoCheck::within_tolerance`] was judged against.
    pub auto_tolerance: f64,
    pub auto_check: Vec<AutoCheck>,
    /// How the times were taken: `free` (no host barrier between calls;
    /// `graph_us` is the mean of the largest graph, `eager_us` of the
    /// eager calls) or `aligned` (ranks lined up before each sample).
    #[serde(default)]
    pub timing: String,
    /// `all-reduce` (also for older files), `reduce-scatter` or
    /// `all-gather`.
    #[serde(default = "all_reduce_name")]
    pub collective: String,
    /// The decode-like mode's rows (free-running runs only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decode: Vec<DecodeRow>,
    /// `NCCL_GRAPH_MIXING_SUPPORT` as NCCL read it (`on`, its default, or
    /// `off`): every NCCL row of the run ran under it (free-running
    /// all-reduce sweeps; older files: not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_graph_mixing: Option<String>,
    /// Rows asked for that the run could not measure, with the reason
    /// (the CSV has measured rows only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<Unavailable>,
}

/// A row asked for and not measured: `algo` as the row would be named,
/// and why (the same on every rank).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    pub algo: String,
    pub reason: String,
}

fn sum_name() -> String {
    "sum".into()
}

fn all_reduce_name() -> String {
    "all-reduce".into()
}

/// One configuration of the decode-like mode: a graph alternating a
/// 20 us kernel with an all-reduce of `batch x hidden` bf16.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeRow {
    pub hidden: usize,
    pub batch: usize,
    pub bytes: usize,
    /// `floor` (the spin alone), an algorithm, or `auto`.
    pub algo: String,
    /// Per step (spin and call), the slowest rank's.
    pub step: Dist,
    /// The step's median over the floor's.
    pub overhead_us: f64,
    /// `overhead_us` over NCCL's, where NCCL ran.
    pub overhead_vs_nccl: Option<f64>,
}

impl BenchFile {
    pub fn new(world: usize, gpu: Option<String>, dtype: &str, rows: Vec<Row>) -> Self {
        let auto_check = auto_checks(&rows);
        BenchFile {
            format: FORMAT,
            world,
            gpu,
            dtype: dtype.to_owned(),
            op: sum_name(),
            rows,
            auto_tolerance: AUTO_TOLERANCE,
            auto_check,
            timing: "aligned".into(),
            collective: all_reduce_name(),
            decode: Vec::new(),
            nccl_graph_mixing: None,
            unavailable: Vec::new(),
        }
    }

    /// The GPU name without the vendor prefix, for titles.
    pub fn gpu_short(&self) -> Option<&str> {
        self.gpu
            .as_deref()
            .map(|g| g.strip_prefix("NVIDIA ").unwrap_or(g).trim())
    }

    /// Writes the rows as CSV, with the auto check on the auto rows.
    pub fn write_csv(&self, out: impl std::io::Write) -> csv::Result<()> {
        let mut w = csv::Writer::from_writer(out);
        w.write_record([
            "world",
            "bytes",
            "algo",
            "chosen",
            "graph_us",
            "eager_us",
            "eager_host_us",
            "busbw_gbps",
            "graph_vs_nccl",
            "eager_vs_nccl",
            "graph_vs_best",
            "eager_vs_best",
        ])?;
        for row in &self.rows {
            let check = self
                .auto_check
                .iter()
                .find(|c| row.algo == "auto" && c.bytes == row.bytes);
            w.write_record([
                row.world.to_string(),
                row.bytes.to_string(),
                row.algo.clone(),
                row.chosen.clone(),
                format!("{:.3}", row.graph_us),
                opt(row.eager_us),
                opt(row.eager_host_us),
                format!("{:.2}", row.busbw_gbps),
                opt(row.graph_vs_nccl),
                opt(row.eager_vs_nccl),
                opt(check.map(|c| c.graph_vs_best)),
                opt(check.and_then(|c| c.eager_vs_best)),
            ])?;
        }
        w.flush()?;
        Ok(())
    }

    /// The auto check as the summary prints it: a line per size, then a
    /// verdict naming the sizes where auto was too slow.
    pub fn auto_check_table(&self) -> String {
        let pct = (self.auto_tolerance - 1.0) * 100.0;
        let mut t = format!(
            "auto against the fastest of its choices (tolerance {pct:.0}%; ratio = auto / fastest):\n"
        );
        // Writing to a String cannot fail.
        let _ = writeln!(
            t,
            "{:>10} {:>9} {:>10} {:>7} {:>10} {:>7}  verdict",
            "bytes", "chosen", "graph best", "ratio", "eager best", "ratio"
        );
        for c in &self.auto_check {
            let _ = writeln!(
                t,
                "{:>10} {:>9} {:>10} {:>7.3} {:>10} {:>7}  {}",
                fmt_bytes(c.bytes),
                c.chosen,
                c.graph_best,
                c.graph_vs_best,
                c.eager_best.as_deref().unwrap_or("-"),
                c.eager_vs_best.map_or("-".into(), |v| format!("{v:.3}")),
                if c.within_tolerance { "ok" } else { "SLOW" }
            );
        }
        t.push_str(&self.auto_verdict());
        t.push('\n');
        t
    }

    /// One line: auto within the tolerance everywhere, or where not.
    pub fn auto_verdict(&self) -> String {
        let pct = (self.auto_tolerance - 1.0) * 100.0;
        let slow: Vec<String> = self
            .auto_check
            .iter()
            .filter(|c| !c.within_tolerance)
            .map(|c| fmt_bytes(c.bytes))
            .collect();
        if slow.is_empty() {
            format!(
                "auto within {pct:.0}% of the fastest of its choices at every size ({} sizes)",
                self.auto_check.len()
            )
        } else {
            format!(
                "auto more than {pct:.0}% slower than the fastest of its choices at {}",
                slow.join(", ")
            )
        }
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.3}"))
}

/// Parses a results file: the current [`BenchFile`] or a version-1 list
/// of rows (bf16, GPU unknown, auto check computed here).
pub fn parse(text: &str) -> Result<BenchFile> {
    let value: serde_json::Value = serde_json::from_str(text).context("not JSON")?;
    if value.is_array() {
        let rows: Vec<Row> =
            serde_json::from_value(value).context("a list, but not of benchmark rows")?;
        let Some(world) = rows.first().map(|r| r.world) else {
            bail!("no rows");
        };
        if rows.iter().any(|r| r.world != world) {
            bail!("rows of several world sizes in one file");
        }
        return Ok(BenchFile::new(world, None, "bf16", rows));
    }
    let file: BenchFile = serde_json::from_value(value).context("not a benchmark result")?;
    if file.format != FORMAT {
        bail!(
            "results format {} (this build reads {FORMAT} and bare lists)",
            file.format
        );
    }
    if file.rows.is_empty() {
        bail!("no rows");
    }
    Ok(file)
}

pub fn load(path: &Path) -> Result<BenchFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("reading results from {}", path.display()))
}

/// `1 KiB`, `256 MiB`: sizes as the tables and plots show them.
pub fn fmt_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes;
    let mut unit = 0;
    while unit + 1 < UNITS.len() && value >= 1024 && value.is_multiple_of(1024) {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A row of `algo` at `bytes` taking `graph_us` (eager 2 us more).
    pub(crate) fn row(world: usize, bytes: usize, algo: &str, graph_us: f64) -> Row {
        Row {
            world,
            bytes,
            algo: algo.to_owned(),
            chosen: algo.to_owned(),
            graph_us,
            eager_us: Some(graph_us + 2.0),
            eager_host_us: Some(4.0),
            busbw_gbps: busbw_gbps(world, bytes, graph_us),
            graph_vs_nccl: None,
            eager_vs_nccl: None,
            wrong: 0,
            free: Vec::new(),
        }
    }

    #[test]
    fn auto_check_flags_sizes_where_auto_is_slow() {
        let mut rows = vec![
            row(2, 1024, "one-shot", 4.0),
            row(2, 1024, "two-shot", 7.0),
            row(2, 1024, "nccl", 6.0),
            row(2, 1024, "auto", 4.1),
            row(2, 16 << 20, "one-shot", 130.0),
            row(2, 16 << 20, "two-shot", 85.0),
            row(2, 16 << 20, "nccl", 76.0),
            row(2, 16 << 20, "auto", 85.2),
        ];
        rows[3].chosen = "one-shot".into();
        rows[7].chosen = "two-shot".into();
        let checks = auto_checks(&rows);
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0].graph_best, "one-shot");
        assert!((checks[0].graph_vs_best - 4.1 / 4.0).abs() < 1e-12);
        assert!(checks[0].within_tolerance);
        assert_eq!(checks[1].chosen, "two-shot");
        assert_eq!(checks[1].graph_best, "nccl");
        assert!(!checks[1].within_tolerance);
    }

    #[test]
    fn auto_check_leaves_out_nccl_symmetric_kernels() {
        let mut rows = vec![
            row(4, 1024, "one-shot", 5.0),
            row(4, 1024, "nccl", 9.0),
            row(4, 1024, "nccl-sym", 3.0),
            row(4, 1024, "nccl-sym-nomix", 2.5),
            row(4, 1024, "auto", 5.1),
        ];
        fill_nccl_ratios(&mut rows, 1024);
        let checks = auto_checks(&rows);
        assert_eq!(checks[0].graph_best, "one-shot");
        assert!(checks[0].within_tolerance, "{checks:?}");
        // The symmetric rows still get their ratio to plain NCCL.
        assert_eq!(rows[2].graph_vs_nccl, Some(3.0 / 9.0));
    }

    #[test]
    fn unavailable_rows_and_the_nccl_mode_travel_in_the_json_only() {
        let rows = vec![row(2, 1024, "nccl", 6.0), row(2, 1024, "nccl-sym", 4.0)];
        let mut file = BenchFile::new(2, None, "bf16", rows);
        file.nccl_graph_mixing = Some("off".into());
        file.unavailable = vec![Unavailable {
            algo: "nccl-sym-nomix".into(),
            reason: "NCCL 2.26.5 has no window registration".into(),
        }];
        let json = serde_json::to_string(&file).unwrap();
        assert!(json.contains(r#""nccl_graph_mixing":"off""#), "{json}");
        assert_eq!(parse(&json).unwrap(), file);
        let mut csv = Vec::new();
        file.write_csv(&mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        assert_eq!(csv.lines().count(), 3, "{csv}");
        assert!(csv.lines().nth(2).unwrap().starts_with("2,1024,nccl-sym,"));
        // Files without them (every earlier one) read as none.
        let plain = BenchFile::new(2, None, "bf16", vec![row(2, 1024, "nccl", 6.0)]);
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("unavailable") && !json.contains("graph_mixing"));
        assert_eq!(parse(&json).unwrap().unavailable, Vec::new());
    }

    #[test]
    fn auto_check_counts_eager_too() {
        let mut rows = vec![row(4, 4096, "one-shot", 5.0), row(4, 4096, "auto", 5.0)];
        rows[1].eager_us = Some(9.0);
        let checks = auto_checks(&rows);
        assert_eq!(checks[0].graph_vs_best, 1.0);
        assert_eq!(checks[0].eager_best.as_deref(), Some("one-shot"));
        assert!(!checks[0].within_tolerance, "{checks:?}");
    }

    #[test]
    fn reads_both_formats() {
        let rows = vec![row(2, 1024, "nccl", 6.0), row(2, 1024, "auto", 4.5)];
        let format1 = serde_json::to_string(&rows).unwrap();
        let old = parse(&format1).unwrap();
        assert_eq!((old.world, old.gpu.as_deref()), (2, None));
        assert_eq!(old.auto_check.len(), 1);
        let file = BenchFile::new(2, Some("NVIDIA H200".into()), "bf16", rows);
        let back = parse(&serde_json::to_string(&file).unwrap()).unwrap();
        assert_eq!(back, file);
        assert_eq!(back.gpu_short(), Some("H200"));
        assert!(parse("[]").is_err());
        assert!(parse(r#"{"format": 99}"#).is_err());
    }

    /// The committed results still parse: the README's plot's (the dated
    /// folder it names) and the oldest format.
    #[test]
    fn committed_results_parse() {
        for (world, text) in [
            (2, include_str!("../testdata/bench_format1_w2.json")),
            (4, include_str!("../testdata/bench_format1_w4.json")),
        ] {
            let file = parse(text).unwrap();
            assert_eq!(file.world, world);
            assert_eq!(file.auto_check.len(), 11, "{:?}", file.auto_check);
        }
        let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/perf/results");
        if !results.is_dir() {
            // A test executable run away from its checkout (the device
            // bundle's run-tests.sh): the committed files are not there.
            eprintln!(
                "skipped: no source tree at {} (run outside the checkout)",
                results.display()
            );
            return;
        }
        let readme = load(&results.join("2026-11-27-h100x4/bench_w4_graph16_1GiB.json")).unwrap();
        assert_eq!(readme.world, 4);
        assert_eq!(readme.gpu_short(), Some("H100 80GB HBM3"));
    }

    #[test]
    fn csv_has_a_line_per_row_and_the_check_on_auto_rows() {
        let rows = vec![row(2, 1024, "nccl", 6.0), row(2, 1024, "auto", 4.2)];
        let mut csv = Vec::new();
        BenchFile::new(2, None, "bf16", rows)
            .write_csv(&mut csv)
            .unwrap();
        let csv = String::from_utf8(csv).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].ends_with(",,"), "{}", lines[1]);
        assert!(lines[2].ends_with(",0.700,0.775"), "{}", lines[2]);
    }

    #[test]
    fn auto_check_table_names_the_slow_sizes() {
        let rows = vec![
            row(2, 1024, "nccl", 6.0),
            row(2, 1024, "auto", 4.2),
            row(2, 4096, "nccl", 6.0),
            row(2, 4096, "auto", 6.6),
        ];
        let table = BenchFile::new(2, None, "bf16", rows.clone()).auto_check_table();
        assert!(table.contains("    4 KiB"), "{table}");
        assert!(table.contains("SLOW"), "{table}");
        assert!(
            table.ends_with("slower than the fastest of its choices at 4 KiB\n"),
            "{table}"
        );
        let table = BenchFile::new(2, None, "bf16", rows[..2].to_vec()).auto_check_table();
        assert!(!table.contains("SLOW"), "{table}");
        assert!(table.ends_with("at every size (1 sizes)\n"), "{table}");
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(fmt_bytes(1024), "1 KiB");
        assert_eq!(fmt_bytes(256 << 20), "256 MiB");
        assert_eq!(fmt_bytes(1000), "1000 B");
        assert_eq!(fmt_bytes(3 << 10), "3 KiB");
    }
}
