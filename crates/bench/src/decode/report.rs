//! The decode benchmark's results: one row per (model, batch, variant),
//! the overheads against the no-communication floor and NCCL, the JSON
//! file and the markdown table.

use serde::{Deserialize, Serialize};

use intranode_harness::free::Dist;

/// One configuration's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub model: String,
    pub batch: usize,
    /// `none`, `nccl` or `ours`.
    pub variant: String,
    /// Programmatic dependent launch: not written yet,
    /// so every row is `false`; the key the on/off comparison will use.
    pub pdl: bool,
    /// What carried the all-reduce (`-` for none; ours: the algorithm the
    /// communicator chose at this size).
    pub algo: String,
    /// Time per layer over the replays (whole replay / layers), the worst
    /// rank's figures.
    pub per_layer: Dist,
    /// The whole model's time per token: its layers x the median per layer.
    pub model_us_per_token: f64,
    /// Median per layer minus the `none` variant's (same model, batch).
    pub overhead_us: Option<f64>,
    /// `overhead_us` over NCCL's.
    pub overhead_vs_nccl: Option<f64>,
    /// The correctness verdict (see `check.rs`).
    pub check: String,
}

/// What `decode` writes (`decode_w<world>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeFile {
    pub world: usize,
    pub gpu: String,
    /// Layers in each graph.
    pub layers: usize,
    pub replays: usize,
    /// Whether cudarc's event tracking was on.
    pub cudarc_tracking: bool,
    /// Skipped variants and the like.
    pub notes: Vec<String>,
    pub rows: Vec<Row>,
}

/// The least NCCL overhead (us per layer) a ratio is taken against.
pub const MIN_NCCL_OVERHEAD_US: f64 = 1.0;

/// Fills every row's overheads from the `none` and `nccl` rows of its
/// (model, batch, pdl).
pub fn fill_overheads(rows: &mut [Row]) {
    let median_of = |rows: &[Row], r: &Row, variant: &str| {
        rows.iter()
            .find(|o| {
                o.model == r.model && o.batch == r.batch && o.pdl == r.pdl && o.variant == variant
            })
            .map(|o| o.per_layer.median_us)
    };
    let snapshot = rows.to_vec();
    for r in rows.iter_mut() {
        let floor = median_of(&snapshot, r, "none");
        r.overhead_us = floor.map(|f| r.per_layer.median_us - f);
        let nccl_overhead = floor.and_then(|f| median_of(&snapshot, r, "nccl").map(|n| n - f));
        // Below a microsecond NCCL's overhead is the replays' noise (a
        // world of one: NCCL copies nothing), and a ratio to it means
        // nothing.
        r.overhead_vs_nccl = match (r.overhead_us, nccl_overhead) {
            (Some(o), Some(n)) if r.variant != "none" && n >= MIN_NCCL_OVERHEAD_US => Some(o / n),
            _ => None,
        };
    }
}

/// The markdown table, with a header saying what was run.
pub fn markdown(f: &DecodeFile) -> String {
    let mut s = format!(
        "# intranode-bench decode: world {}, {}\n\n{} layers per CUDA graph, {} free-running replays; us per layer (whole replay / layers; the worst rank's median, p99, max); overhead = variant - none; x nccl = overhead / NCCL's; per token = the model's layers x the median; event tracking {}.\n\n",
        f.world,
        f.gpu,
        f.layers,
        f.replays,
        if f.cudarc_tracking { "on" } else { "off" },
    );
    for n in &f.notes {
        s.push_str(&format!("- {n}\n"));
    }
    if !f.notes.is_empty() {
        s.push('\n');
    }
    s.push_str("| model | batch | variant | algo | us/layer median | p99 | max | overhead | x nccl | per token (ms) | check |\n");
    s.push_str("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_owned(), |v| format!("{v:+.prec$}"));
    for r in &f.rows {
        s.push_str(&format!(
            "| {} | {} | {}{} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {:.2} | {} |\n",
            r.model,
            r.batch,
            r.variant,
            if r.pdl { " (pdl)" } else { "" },
            r.algo,
            r.per_layer.median_us,
            r.per_layer.p99_us,
            r.per_layer.max_us,
            opt(r.overhead_us, 1),
            r.overhead_vs_nccl
                .map_or("-".to_owned(), |v| format!("{v:.2}")),
            r.model_us_per_token / 1000.0,
            r.check,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(model: &str, batch: usize, variant: &str, median: f64) -> Row {
        Row {
            model: model.into(),
            batch,
            variant: variant.into(),
            pdl: false,
            algo: "-".into(),
            per_layer: Dist {
                median_us: median,
                p99_us: median + 1.0,
                max_us: median + 2.0,
                calls: 30,
            },
            model_us_per_token: 32.0 * median,
            overhead_us: None,
            overhead_vs_nccl: None,
            check: "ok".into(),
        }
    }

    #[test]
    fn overheads_come_from_the_same_model_and_batch() {
        let mut rows = vec![
            row("a", 1, "none", 100.0),
            row("a", 1, "nccl", 120.0),
            row("a", 1, "ours", 105.0),
            row("a", 8, "none", 110.0),
            row("a", 8, "ours", 111.0),
            row("a", 32, "none", 110.0),
            row("a", 32, "nccl", 110.4),
            row("a", 32, "ours", 110.1),
            row("b", 1, "ours", 300.0),
        ];
        fill_overheads(&mut rows);
        assert_eq!(rows[0].overhead_us, Some(0.0));
        assert_eq!(rows[0].overhead_vs_nccl, None);
        assert_eq!(rows[1].overhead_us, Some(20.0));
        assert_eq!(rows[1].overhead_vs_nccl, Some(1.0));
        assert_eq!(rows[2].overhead_us, Some(5.0));
        assert_eq!(rows[2].overhead_vs_nccl, Some(0.25));
        // No NCCL row at batch 8: no ratio; no floor for model b (the
        // last row): nothing.
        assert_eq!(rows[4].overhead_us, Some(1.0));
        assert_eq!(rows[4].overhead_vs_nccl, None);
        // NCCL's overhead under a microsecond: noise, no ratio.
        assert_eq!(rows[7].overhead_vs_nccl, None);
        assert_eq!(rows[8].overhead_us, None);
    }

    #[test]
    fn markdown_has_one_line_per_row() {
        let mut rows = vec![row("a", 1, "none", 100.0), row("a", 1, "ours", 104.5)];
        fill_overheads(&mut rows);
        let f = DecodeFile {
            world: 2,
            gpu: "H200".into(),
            layers: 8,
            replays: 50,
            cudarc_tracking: false,
            notes: vec!["nccl: skipped".into()],
            rows,
        };
        let md = markdown(&f);
        assert!(md.contains("- nccl: skipped"));
        assert!(
            md.contains("| a | 1 | ours | - | 104.5 | 105.5 | 106.5 | +4.5 | - | 3.34 | ok |"),
            "{md}"
        );
        assert_eq!(md.lines().filter(|l| l.starts_with("| a |")).count(), 2);
    }
}
