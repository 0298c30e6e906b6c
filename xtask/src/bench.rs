//! `bench`: the all-reduce benchmark on this machine's GPUs, the way
//! `demo` runs its short sweep: release binaries, one `intranode-run` job
//! per world size (2, 4, 8, ... up to the GPU count, and the GPU count
//! itself), then one plot of every world size from the JSON they wrote.

use std::path::Path;

use anyhow::{Context, Result, bail};

/// Whole-job limit of one world size's sweep under the launcher: generous,
/// only there to stop a job that hangs somewhere no GPU wait bound
/// (`INTRANODE_BARRIER_TIMEOUT_MS`) covers.
const JOB_TIMEOUT_SECS: &str = "3600";

/// World sizes to measure on `gpus` GPUs: powers of two from 2, and all
/// of them.
fn world_sizes(gpus: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(2usize), |w| w.checked_mul(2))
        .take_while(|&w| w <= gpus)
        .collect();
    if gpus >= 2 && !sizes.contains(&gpus) {
        sizes.push(gpus);
    }
    sizes
}

pub fn run(root: &Path, out: Option<&Path>, bench_args: &[String]) -> Result<()> {
    if bench_args
        .iter()
        .any(|a| a == "--out" || a.starts_with("--out="))
    {
        bail!("give the output directory as `cargo xtask bench --out DIR`, before `--`");
    }
    let Some(gpus) = crate::gpus::for_task("bench", 2)? else {
        println!(
            "(Saved results plot anywhere: `cargo run -p intranode-bench -- plot --json FILE --out FILE.png`.)"
        );
        return Ok(());
    };
    let worlds = world_sizes(gpus);
    let out = crate::jobs::job_out_dir(root, out, "bench-out")?;
    let out_str = out.to_str().context("output path is not UTF-8")?;
    crate::jobs::build_launcher_and_bench(root)?;
    let mut jsons = Vec::new();
    for world in worlds {
        let n = world.to_string();
        let mut args = vec![
            "--nproc-per-node",
            &n,
            "--timeout",
            JOB_TIMEOUT_SECS,
            "--",
            "target/release/intranode-bench",
            "bench",
            "--out",
            out_str,
        ];
        args.extend(bench_args.iter().map(String::as_str));
        crate::process::run(root, "target/release/intranode-run", &args)?;
        jsons.push(out.join(format!("bench_w{world}.json")));
    }
    let png = out.join("allreduce.png");
    let mut args = vec!["plot".to_owned()];
    for j in &jsons {
        args.push("--json".into());
        args.push(j.to_str().context("output path is not UTF-8")?.into());
    }
    args.push("--out".into());
    args.push(png.to_str().context("output path is not UTF-8")?.into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    crate::process::run(root, "target/release/intranode-bench", &args)?;
    println!(
        "intranode bench: results in {} (bench_w*.json, .csv, .png; allreduce.png has every world size)",
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::world_sizes;

    #[test]
    fn world_sizes_are_powers_of_two_and_the_gpu_count() {
        assert_eq!(world_sizes(0), Vec::<usize>::new());
        assert_eq!(world_sizes(1), Vec::<usize>::new());
        assert_eq!(world_sizes(2), [2]);
        assert_eq!(world_sizes(4), [2, 4]);
        assert_eq!(world_sizes(6), [2, 4, 6]);
        assert_eq!(world_sizes(8), [2, 4, 8]);
    }
}
