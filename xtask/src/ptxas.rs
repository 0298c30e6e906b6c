//! `ptxas` from the PyPI wheel `nvidia-cuda-nvcc` (CUDA 13.0, the version
//! of the GPU machines), fetched into `.cache/ptxas` when absent, and the
//! checks run on its report.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const WHEEL: &str = "nvidia-cuda-nvcc==13.0.88";
const PTXAS_IN_WHEEL: &str = "nvidia/cu13/bin/ptxas";

/// The cached ptxas, fetched first if needed (`PTXAS` overrides).
fn ptxas(root: &Path) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS") {
        return Ok(p.into());
    }
    let cache = root.join(".cache").join("ptxas");
    let bin = cache.join("ptxas");
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&cache)?;
    eprintln!("xtask: fetching ptxas ({WHEEL}) into {}", cache.display());
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "--only-binary=:all:",
            WHEEL,
            "-d",
        ])
        .arg(&cache)
        .status()
        .context("running python3 -m pip download")?;
    if !status.success() {
        bail!("pip download {WHEEL} failed ({status})");
    }
    // Unpack the one file with Python's zipfile: `unzip` is not everywhere.
    let script = format!(
        "import glob,os,zipfile,sys\n\
         w=glob.glob(os.path.join(sys.argv[1],'nvidia_cuda_nvcc-*.whl'))[0]\n\
         z=zipfile.ZipFile(w)\n\
         open(sys.argv[2],'wb').write(z.read('{PTXAS_IN_WHEEL}'))\n\
         os.chmod(sys.argv[2],0o755)\n\
         os.remove(w)\n"
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&cache)
        .arg(&bin)
        .status()
        .context("unpacking ptxas")?;
    if !status.success() {
        bail!("unpacking ptxas from the wheel failed ({status})");
    }
    Ok(bin)
}

/// Registers a thread may use: a block of the most threads any launch
/// has (512, `intranode_ptx_builder::MAX_THREADS_PER_BLOCK`) must fit the
/// 64 Ki registers of a block, else the launch fails with
/// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`. A failure on every architecture
/// checked (NOTE [register bound] in `intranode-ptx-builder`).
const MAX_REGISTERS: u32 = intranode_ptx_builder::MAX_REGISTERS_PER_THREAD;

/// Spills the register bound costs where the kernels need more: `(arch,
/// kernel, most stack + spill bytes)`. Without the bound these sm_80
/// kernels need more than 128 registers and a 512-thread launch of them
/// fails on an A100; with it ptxas keeps them at 128 and spills to local
/// memory (cached in L1), a cost no A100 has measured. The push form's
/// one-pass loop (push of tile t+D and copy-out of tile t-D together)
/// makes the w7/w8 figures and the f16/bf16 w8 ones; the copy tail four
/// vectors at a time (`prims::grid::copy4`, measured on sm_90, where
/// nothing spills) the f32 two-shot's w3 and w4 figures and the f32
/// reduce-scatter's w8. Any other spill, or more
/// bytes, fails the check (docs/RELEASE.md).
const ALLOWED_SPILLS: &[(&str, &str, u32)] = &[
    ("sm_80", "two_shot_f32_w4", 32 + 272),
    ("sm_80", "two_shot_f32_w3", 16 + 144),
    ("sm_80", "push_rs_f32_w8", 40 + 232),
    ("sm_80", "push_f32_w8", 64 + 520),
    ("sm_80", "push_f32_w7", 16 + 32),
    ("sm_80", "push_f16_w8", 56 + 448),
    ("sm_80", "push_bf16_w8", 56 + 448),
];

/// One kernel's resources as `ptxas -v` reports them.
#[derive(Debug, Default, PartialEq)]
pub struct KernelReport {
    pub name: String,
    pub registers: u32,
    pub stack_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

/// Parses `ptxas -v` output into per-kernel reports.
pub fn parse_report(text: &str) -> Vec<KernelReport> {
    let mut out: Vec<KernelReport> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            out.push(KernelReport {
                name: rest.trim().to_owned(),
                ..Default::default()
            });
        } else if let Some(k) = out.last_mut() {
            if line.contains("bytes stack frame") {
                let nums: Vec<u32> = line
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|w| w.parse().ok())
                    .collect();
                if let [stack, stores, loads, ..] = nums[..] {
                    k.stack_bytes = stack;
                    k.spill_store_bytes = stores;
                    k.spill_load_bytes = loads;
                }
            } else if let Some(r) = line.split("Used ").nth(1) {
                k.registers = r
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
            }
        }
    }
    out
}

/// Flags of every ptxas run, so the machine code `check` reports on is
/// byte for byte the machine code `assemble` commits (ptxas records its
/// command line in the cubin: a `-v` more or less changes the file).
/// ptxas's default optimisation (`-O3`), as the driver's JIT uses for PTX.
const PTXAS_FLAGS: &[&str] = &["-v"];

/// The machine code (cubin) the pinned ptxas makes of `ptx` for `arch`:
/// what `build-ptx --write` commits.
pub fn assemble(root: &Path, ptx: &Path, arch: &str) -> Result<Vec<u8>> {
    let ptxas = ptxas(root)?;
    let cubin = ptx.with_extension(format!("{arch}.cubin"));
    eprintln!(
        "xtask: assembling {} for {arch} (ptxas, about a minute)",
        ptx.display()
    );
    let output = Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .args(PTXAS_FLAGS)
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .output()
        .with_context(|| format!("running {}", ptxas.display()))?;
    if !output.status.success() {
        bail!(
            "ptxas failed on {} ({}):\n{}",
            ptx.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    std::fs::read(&cubin).with_context(|| format!("reading {}", cubin.display()))
}

/// Assembles `ptx` for `arch` and enforces the kernel rules; returns the
/// path of the cubin it wrote (beside `ptx`) and ptxas's report of each
/// kernel.
pub fn check(root: &Path, ptx: &Path, arch: &str) -> Result<(PathBuf, Vec<KernelReport>)> {
    let text =
        std::fs::read_to_string(ptx).with_context(|| format!("reading {}", ptx.display()))?;
    if let Some(line) = text.lines().find(|l| l.contains(".extern .func")) {
        bail!(
            "{}: out-of-line call into core, the PTX would not load: {line}",
            ptx.display()
        );
    }
    let ptxas = ptxas(root)?;
    let cubin = ptx.with_extension(format!("{arch}.cubin"));
    let output = Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .args(PTXAS_FLAGS)
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .output()
        .with_context(|| format!("running {}", ptxas.display()))?;
    let report = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!(
            "ptxas failed on {} ({}):\n{report}",
            ptx.display(),
            output.status
        );
    }
    let kernels = parse_report(&report);
    if kernels.is_empty() {
        bail!("ptxas reported no kernels for {}:\n{report}", ptx.display());
    }
    // PTX that runs only through the JIT carries the bound itself.
    if intranode_ptx_builder::embeds_register_bound(arch) {
        let bounds = text
            .lines()
            .filter(|l| l.trim_start().starts_with(".maxnreg "))
            .count();
        let entries = intranode_ptx_builder::entry_names(&text).len();
        if bounds != entries {
            bail!(
                "{}: {bounds} `.maxnreg` for {entries} kernels; every kernel of a PTX for \
                 {arch} must carry the register bound (intranode_ptx_builder::bound_registers)",
                ptx.display()
            );
        }
    }
    let mut bad = Vec::new();
    let mut too_many = Vec::new();
    println!(
        "{:<40} {:>5} {:>6} {:>7}",
        format!("kernel ({arch})"),
        "regs",
        "stack",
        "spills"
    );
    for k in &kernels {
        println!(
            "{:<40} {:>5} {:>6} {:>7}",
            k.name,
            k.registers,
            k.stack_bytes,
            k.spill_store_bytes + k.spill_load_bytes
        );
        let spilled = k.stack_bytes + k.spill_store_bytes + k.spill_load_bytes;
        let allowed = ALLOWED_SPILLS
            .iter()
            .find(|(a, name, _)| *a == arch && *name == k.name)
            .map_or(0, |&(_, _, bytes)| bytes);
        if spilled > allowed {
            bad.push(format!("{} ({spilled} bytes, {allowed} allowed)", k.name));
        }
        if k.registers > MAX_REGISTERS {
            too_many.push(k.name.clone());
        }
    }
    if !bad.is_empty() {
        bail!("kernels with a stack frame or spills: {}", bad.join(", "));
    }
    if !too_many.is_empty() {
        bail!(
            "kernels over {MAX_REGISTERS} registers, which a {}-thread launch cannot hold \
             ({arch}): {}",
            intranode_ptx_builder::MAX_THREADS_PER_BLOCK,
            too_many.join(", ")
        );
    }
    Ok((cubin, kernels))
}

/// The file whose spill table [`check_spill_table`] keeps.
pub const SPILL_DOC: &str = "docs/RELEASE.md";

/// The lines that open and close the spill table of `arch` in [`SPILL_DOC`].
fn spill_markers(arch: &str) -> (String, String) {
    (
        format!("<!-- spills {arch} (cargo xtask check-ptx --arch {arch} --write) -->"),
        format!("<!-- spills {arch} end -->"),
    )
}

/// The markdown table of the kernels that have a stack frame or spill on
/// `arch`, in ptxas's order, between [`spill_markers`].
fn spill_table(arch: &str, kernels: &[KernelReport]) -> String {
    let (begin, end) = spill_markers(arch);
    let mut out = format!(
        "{begin}\n| kernel ({arch}) | registers | stack + spill bytes (stores + loads) |\n|---|---:|---:|\n"
    );
    for k in kernels {
        let spills = k.spill_store_bytes + k.spill_load_bytes;
        if k.stack_bytes + spills > 0 {
            out.push_str(&format!(
                "| `{}` | {} | {} + {spills} |\n",
                k.name, k.registers, k.stack_bytes
            ));
        }
    }
    out.push_str(&end);
    out
}

/// `doc` with the spill table of `arch` replaced by `table`, or `None`
/// where `doc` has none for `arch`.
fn replace_spill_table(doc: &str, arch: &str, table: &str) -> Option<String> {
    let (begin, end) = spill_markers(arch);
    let start = doc.find(&begin)?;
    let stop = start + doc[start..].find(&end)? + end.len();
    Some(format!("{}{table}{}", &doc[..start], &doc[stop..]))
}

/// Fails, naming the command that rewrites it, where [`SPILL_DOC`]'s spill
/// table for `arch` is not the production kernels' `kernels` as ptxas
/// reported them; with `write`, rewrites it instead. Nothing to do for an
/// architecture without a table there.
pub fn check_spill_table(
    root: &Path,
    arch: &str,
    kernels: &[KernelReport],
    write: bool,
) -> Result<()> {
    let path = root.join(SPILL_DOC);
    let doc =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let table = spill_table(arch, kernels);
    let Some(updated) = replace_spill_table(&doc, arch, &table) else {
        return Ok(());
    };
    if updated == doc {
        eprintln!("xtask: {SPILL_DOC}'s {arch} spill table is what ptxas reports");
    } else if write {
        std::fs::write(&path, updated).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("xtask: rewrote {SPILL_DOC}'s {arch} spill table");
    } else {
        bail!(
            "{SPILL_DOC}'s {arch} spill table differs from what ptxas reports now:\n{table}\n\
             run `cargo xtask check-ptx --arch {arch} --write` and commit {SPILL_DOC}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spill_table_lists_only_what_spills() {
        let k = |name: &str, registers, stack_bytes, spill_store_bytes, spill_load_bytes| {
            KernelReport {
                name: name.into(),
                registers,
                stack_bytes,
                spill_store_bytes,
                spill_load_bytes,
            }
        };
        let kernels = [k("a", 90, 0, 0, 0), k("b", 128, 48, 176, 176)];
        let table = spill_table("sm_80", &kernels);
        assert!(table.contains("| `b` | 128 | 48 + 352 |"), "{table}");
        assert!(!table.contains("`a`"));
        let doc = format!("x\n{}\ny\n", spill_table("sm_80", &[]));
        let updated = replace_spill_table(&doc, "sm_80", &table).unwrap();
        assert_eq!(updated, format!("x\n{table}\ny\n"));
        assert!(replace_spill_table(&doc, "sm_90", &table).is_none());
    }

    #[test]
    fn parses_ptxas_report() {
        let text = "ptxas info    : Compiling entry function 'add_f32' for 'sm_90'\n\
ptxas info    : Function properties for add_f32\n\
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
ptxas info    : Used 24 registers, used 0 barriers\n\
ptxas info    : Function properties for probe\n\
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 4 registers, used 0 barriers\n";
        let r = parse_report(text);
        assert_eq!(
            r,
            [
                KernelReport {
                    name: "add_f32".into(),
                    registers: 24,
                    stack_bytes: 8,
                    spill_store_bytes: 4,
                    spill_load_bytes: 12
                },
                KernelReport {
                    name: "probe".into(),
                    registers: 4,
                    ..Default::default()
                },
            ]
        );
    }
}
