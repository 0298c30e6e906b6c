//! `figures [DIR]`: the README's figure tables, made from one dated
//! results folder (`docs/perf/results/<date>-<machine>/`), so that every
//! number in the README comes from a committed raw file.
//!
//! The README holds the tables between two markers; the first names the
//! folder they were made from:
//!
//! ```text
//! <!-- figures: docs/perf/results/2026-11-27-h100x4 (cargo xtask figures) -->
//! ...tables...
//! <!-- figures end -->
//! ```
//!
//! `cargo xtask figures` remakes them from the folder the marker names;
//! `cargo xtask figures DIR` from `DIR`, naming it in the marker. The test
//! below fails when the committed tables differ from what the committed
//! folder gives.
//!
//! Inputs, found by name in the folder: `bench_w*.csv` (one per world size,
//! as `intranode-bench bench` writes them; the rows of `auto` and `nccl`)
//! and `decode_w*.json` (`intranode-bench decode`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

const BEGIN: &str = "<!-- figures: ";
const BEGIN_TAIL: &str = " (cargo xtask figures) -->";
const END: &str = "<!-- figures end -->";

/// The message sizes the all-reduce table shows (those every file has).
const SIZES: [u64; 9] = [
    1 << 10,
    32 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
    1 << 30,
];

/// `cargo xtask figures [DIR]`: rewrites README.md's figure block.
pub fn run(root: &Path, dir: Option<&str>) -> Result<()> {
    let readme_path = root.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).context("reading README.md")?;
    let dir = match dir {
        Some(dir) => dir.to_owned(),
        None => marked_folder(&readme)?,
    };
    let block = block(&root.join(&dir), &dir)?;
    print!("{block}");
    let updated = replace_block(&readme, &block)?;
    if updated != readme {
        std::fs::write(&readme_path, updated).context("writing README.md")?;
        eprintln!("xtask: README.md's figures remade from {dir}");
    }
    Ok(())
}

/// The folder the README's figure marker names.
fn marked_folder(readme: &str) -> Result<String> {
    let start = readme
        .find(BEGIN)
        .context("README.md has no figure marker (`<!-- figures: DIR ... -->`)")?
        + BEGIN.len();
    let end = readme[start..]
        .find(BEGIN_TAIL)
        .context("README.md's figure marker does not end as written by xtask")?;
    Ok(readme[start..start + end].to_owned())
}

/// README.md with its figure block (markers included) replaced by `block`.
fn replace_block(readme: &str, block: &str) -> Result<String> {
    let start = readme
        .find(BEGIN)
        .context("README.md has no figure marker")?;
    let end = readme[start..]
        .find(END)
        .context("README.md's figures have no end marker")?
        + start
        + END.len();
    Ok(format!(
        "{}{}{}",
        &readme[..start],
        block.trim_end(),
        &readme[end..]
    ))
}

/// The whole block, markers included, from folder `dir` (named `name` in
/// the marker).
fn block(dir: &Path, name: &str) -> Result<String> {
    let mut out = format!("{BEGIN}{name}{BEGIN_TAIL}\n\n");
    out += &all_reduce_table(dir)?;
    let decode = decode_table(dir)?;
    if !decode.is_empty() {
        out += "\n";
        out += &decode;
    }
    out += END;
    out += "\n";
    Ok(out)
}

/// Files in `dir` whose names start with `prefix` and end with `suffix`,
/// sorted by name.
fn files(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(prefix) && name.ends_with(suffix) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// One world size's `auto` and `nccl` rows: (bytes, chosen algorithm,
/// auto's us, NCCL's us).
struct World {
    world: u64,
    rows: Vec<(u64, String, f64, f64)>,
}

fn read_world(path: &Path) -> Result<World> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().context("empty CSV")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("{}: no column {name}", path.display()))
    };
    let (c_world, c_bytes, c_algo, c_chosen, c_us) = (
        col("world")?,
        col("bytes")?,
        col("algo")?,
        col("chosen")?,
        col("graph_us")?,
    );
    let mut auto = Vec::new();
    let mut nccl = std::collections::HashMap::new();
    let mut world = None;
    for line in lines.filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let get = |i: usize| f.get(i).copied().unwrap_or("");
        let bytes: u64 = get(c_bytes).parse().context("bytes")?;
        let us: f64 = get(c_us)
            .parse()
            .with_context(|| format!("{}: graph_us of {line:?}", path.display()))?;
        world = Some(get(c_world).parse::<u64>().context("world")?);
        match get(c_algo) {
            "auto" => auto.push((bytes, get(c_chosen).to_owned(), us)),
            "nccl" => {
                nccl.insert(bytes, us);
            }
            _ => {}
        }
    }
    let rows = auto
        .into_iter()
        .filter_map(|(bytes, chosen, us)| nccl.get(&bytes).map(|&n| (bytes, chosen, us, n)))
        .collect();
    Ok(World {
        world: world.with_context(|| format!("{}: no rows", path.display()))?,
        rows,
    })
}

fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    }
}

/// Three significant figures or so, as the tables have always shown them.
fn us_text(us: f64) -> String {
    match us.abs() {
        u if u < 100.0 => format!("{us:.2}"),
        u if u < 1000.0 => format!("{us:.1}"),
        _ => format!("{us:.0}"),
    }
}

fn all_reduce_table(dir: &Path) -> Result<String> {
    let mut worlds = files(dir, "bench_w", ".csv")?
        .iter()
        .map(|p| read_world(p))
        .collect::<Result<Vec<_>>>()?;
    if worlds.is_empty() {
        bail!("{}: no bench_w*.csv", dir.display());
    }
    worlds.sort_by_key(|w| w.world);
    let mut out = String::from("| message |");
    let mut rule = String::from("|---|");
    for w in &worlds {
        let _ = write!(
            out,
            " {0} GPUs: intranode, us (form) | NCCL, us | x NCCL |",
            w.world
        );
        rule += "---:|---:|---:|";
    }
    out += "\n";
    out += &rule;
    out += "\n";
    for bytes in SIZES {
        let cells: Option<Vec<_>> = worlds
            .iter()
            .map(|w| w.rows.iter().find(|r| r.0 == bytes))
            .collect();
        let Some(cells) = cells else { continue };
        let _ = write!(out, "| {} |", size_text(bytes));
        for (_, chosen, ours, nccl) in cells {
            let _ = write!(
                out,
                " {} ({chosen}) | {} | {:.2} |",
                us_text(*ours),
                us_text(*nccl),
                ours / nccl
            );
        }
        out += "\n";
    }
    Ok(out)
}

fn decode_table(dir: &Path) -> Result<String> {
    let mut out = String::new();
    for path in files(dir, "decode_w", ".json")? {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let world = json["world"].as_u64().context("decode: world")?;
        let rows = json["rows"].as_array().context("decode: rows")?;
        let overhead = |model: &str, batch: u64, variant: &str| {
            rows.iter()
                .find(|r| {
                    r["model"] == model
                        && r["batch"].as_u64() == Some(batch)
                        && r["variant"] == variant
                })
                .and_then(|r| r["overhead_us"].as_f64())
        };
        let _ = writeln!(
            out,
            "| TP{world} layer: overhead over no communication | batch | NCCL | intranode (x NCCL) | intranode fused with residual + RMSNorm (x NCCL) |"
        );
        out += "|---|---:|---:|---:|---:|\n";
        let mut keys: Vec<(String, u64)> = Vec::new();
        for r in rows {
            let key = (
                r["model"].as_str().context("decode: model")?.to_owned(),
                r["batch"].as_u64().context("decode: batch")?,
            );
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        for (model, batch) in keys {
            let (Some(nccl), Some(ours), Some(fused)) = (
                overhead(&model, batch, "nccl"),
                overhead(&model, batch, "ours"),
                overhead(&model, batch, "fused"),
            ) else {
                continue;
            };
            let _ = writeln!(
                out,
                "| {model} | {batch} | {nccl:+.1} us | {ours:+.1} us ({:.2}) | {fused:+.1} us ({:.2}) |",
                ours / nccl,
                fused / nccl
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's committed tables are what its committed folder gives.
    #[test]
    fn readme_figures_match_their_results_folder() {
        let root = crate::process::root().unwrap();
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let dir = marked_folder(&readme).unwrap();
        let made = block(&root.join(&dir), &dir).unwrap();
        let start = readme.find(BEGIN).unwrap();
        let end = readme[start..].find(END).unwrap() + start + END.len();
        assert_eq!(
            &readme[start..end],
            made.trim_end(),
            "README.md's figures differ from {dir}: run `cargo xtask figures`"
        );
    }

    #[test]
    fn a_block_replaces_only_the_marked_lines() {
        let readme = "a\n<!-- figures: x (cargo xtask figures) -->\nold\n<!-- figures end -->\nb\n";
        let new = "<!-- figures: y (cargo xtask figures) -->\nnew\n<!-- figures end -->\n";
        let out = replace_block(readme, new).unwrap();
        assert_eq!(
            out,
            "a\n<!-- figures: y (cargo xtask figures) -->\nnew\n<!-- figures end -->\nb\n"
        );
        assert_eq!(marked_folder(&out).unwrap(), "y");
    }

    #[test]
    fn numbers_read_as_before() {
        assert_eq!(us_text(2.696), "2.70");
        assert_eq!(us_text(206.76), "206.8");
        assert_eq!(us_text(2981.788), "2982");
        assert_eq!(size_text(256 << 10), "256 KiB");
        assert_eq!(size_text(1 << 30), "1 GiB");
    }
}

/// The README's quick-start Rust block is the crate docs' example
/// (`host/README.md`), which `cargo test -p intranode --doc` compiles: the
/// workspace README is not in the package, so it is checked through that
/// copy.
#[cfg(test)]
mod readme_snippet {
    /// The body of the first fenced block whose info string starts with
    /// `rust`.
    fn first_rust_block(text: &str) -> Option<String> {
        let mut lines = text.lines();
        lines.by_ref().find(|l| l.starts_with("```rust"))?;
        let body: Vec<&str> = lines.take_while(|l| !l.starts_with("```")).collect();
        Some(body.join("\n"))
    }

    #[test]
    fn readme_quick_start_is_the_doc_tested_example() {
        let root = crate::process::root().unwrap();
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let readme = first_rust_block(&read("README.md")).expect("README.md has a rust block");
        let crate_doc =
            first_rust_block(&read("host/README.md")).expect("host/README.md has a rust block");
        assert_eq!(
            readme, crate_doc,
            "README.md's quick start differs from host/README.md's doc-tested example"
        );
    }
}
