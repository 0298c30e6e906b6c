//! `device-bundle`: what a GPU machine without a Rust tool chain needs to
//! run the project: the release binaries and every test executable,
//! stripped and gzipped (a device run carries at most 64 MiB), plus
//! `unpack.sh DIR`, which unpacks them into `DIR` with `run-tests.sh`, the
//! script that runs the tests in order.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// Binaries of the workspace that belong in the bundle.
/// Binaries the bundle carries; the tests that start a binary
/// (`intranode-run`, `symm_check`) find them here through
/// `INTRANODE_TEST_BIN_DIR`, which `run-tests.sh` sets.
const BINARIES: &[&str] = &[
    "intranode-run",
    "intranode-bench",
    "intranode-suite",
    "symm_check",
];

/// Examples the bundle carries and `run-tests.sh` runs under the launcher.
const EXAMPLES: [&str; 3] = ["01_data_parallel", "02_cuda_graph", "03_symmetric"];

/// Examples that start their ranks themselves (`--gpus 0,1,..`): the
/// bundle carries them and `run-tests.sh` runs them on every local GPU.
const SELF_STARTING_EXAMPLES: [&str; 2] = ["04_from_rank", "05_from_devices"];

pub fn build(root: &Path, out: Option<&Path>) -> Result<()> {
    let out = out
        .map(Path::to_owned)
        .unwrap_or_else(|| root.join("bundle"));
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
    }
    std::fs::create_dir_all(&out)?;
    let cargo = intranode_ptx_builder::cargo_binary();

    let status = Command::new(&cargo)
        .current_dir(root)
        // The GPU machines are sm_90: the machine code alone, no PTX
        // fallback (3.7 MB less a binary), so the bundle fits a device run.
        .env("INTRANODE_EMBED_PTX", "0")
        .args([
            "build",
            "--release",
            "--workspace",
            "--bins",
            "--examples",
            "--locked",
        ])
        .status()
        .context("cargo build --release")?;
    if !status.success() {
        bail!("cargo build --release failed ({status})");
    }
    for bin in BINARIES {
        let src = root.join("target").join("release").join(bin);
        if src.is_file() {
            copy_stripped_gz(&src, &out.join(bin))?;
        }
    }
    for example in EXAMPLES.iter().chain(&SELF_STARTING_EXAMPLES) {
        let src = root
            .join("target")
            .join("release")
            .join("examples")
            .join(example);
        copy_stripped_gz(&src, &out.join(example))?;
    }

    // Test executables: cargo names them in its JSON messages.
    let output = Command::new(&cargo)
        .current_dir(root)
        // The GPU machines are sm_90: the machine code alone, no PTX
        // fallback (3.7 MB less a binary), so the bundle fits a device run.
        .env("INTRANODE_EMBED_PTX", "0")
        .args([
            "test",
            "--release",
            "--workspace",
            "--no-run",
            "--locked",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("cargo test --no-run")?;
    if !output.status.success() {
        bail!("cargo test --release --no-run failed ({})", output.status);
    }
    let mut tests = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(exe) = msg.get("executable").and_then(|e| e.as_str()) else {
            continue;
        };
        let is_test = msg
            .pointer("/profile/test")
            .and_then(|t| t.as_bool())
            .unwrap_or(false);
        let name = msg
            .pointer("/target/name")
            .and_then(|n| n.as_str())
            .unwrap_or("test");
        if !is_test {
            continue;
        }
        let file = format!("test-{}", name.replace('-', "_"));
        copy_stripped_gz(Path::new(exe), &out.join(&file))?;
        tests.push(file);
    }
    tests.sort();
    let mut script = String::from(
        "#!/bin/sh\n# Runs every test executable of the bundle; GPU tests fail instead of\n\
         # skipping when INTRANODE_REQUIRE_GPUS is set.\nset -u\ncd \"$(dirname \"$0\")\"\nexport NCCL_NVLS_ENABLE=0\n# The tests that start a binary take the bundle's copy.\nexport INTRANODE_TEST_BIN_DIR=\"$(pwd)\"\nfail=0\n",
    );
    for t in &tests {
        script.push_str(&format!(
            "echo \"== {t}\"; ./{t} --test-threads=1 || fail=1\n"
        ));
    }
    // The examples run on every local GPU under the launcher (02_cuda_graph
    // is the GPU check of capture under cudarc's defaults); without 2 GPUs
    // they say so and pass.
    script.push_str("gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')\n");
    for example in EXAMPLES {
        script.push_str(&format!(
            "if [ \"$gpus\" -ge 2 ]; then echo \"== {example}\"; ./intranode-run --nproc-per-node \"$gpus\" -- ./{example} || fail=1; else echo \"SKIPPED {example}: $gpus GPU(s)\"; fi\n"
        ));
    }
    script.push_str("list=$(seq -s, 0 $((gpus - 1)))\n");
    for example in SELF_STARTING_EXAMPLES {
        script.push_str(&format!(
            "if [ \"$gpus\" -ge 2 ]; then echo \"== {example}\"; ./{example} --gpus \"$list\" || fail=1; else echo \"SKIPPED {example}: $gpus GPU(s)\"; fi\n"
        ));
    }
    script.push_str("exit $fail\n");
    let script_path = out.join("run-tests.sh");
    std::fs::write(&script_path, script)?;
    make_executable(&script_path)?;
    let unpack_path = out.join("unpack.sh");
    std::fs::write(&unpack_path, UNPACK)?;
    make_executable(&unpack_path)?;
    let mut bytes = 0u64;
    for entry in std::fs::read_dir(&out)? {
        bytes += entry?.metadata()?.len();
    }
    let mib = bytes as f64 / f64::from(1u32 << 20);
    if bytes > CARRY_LIMIT_BYTES {
        eprintln!(
            "xtask: warning: the bundle is {mib:.1} MiB, over the {} MiB a device run carries",
            CARRY_LIMIT_BYTES >> 20
        );
    }
    println!("{} ({mib:.1} MiB)", out.display());
    Ok(())
}

/// What one device run can carry to a GPU machine.
const CARRY_LIMIT_BYTES: u64 = 64 << 20;

/// `unpack.sh DIR`: the gzipped binaries, unpacked and executable, and
/// `run-tests.sh`, in `DIR`.
const UNPACK: &str = "#!/bin/sh
# Unpacks the bundle's gzipped binaries into DIR (default
# /tmp/intranode-bundle), with run-tests.sh; then: cd DIR && ./run-tests.sh
set -eu
here=$(cd \"$(dirname \"$0\")\" && pwd)
dir=${1:-/tmp/intranode-bundle}
mkdir -p \"$dir\"
for f in \"$here\"/*.gz; do
  n=$(basename \"$f\" .gz)
  gunzip -c \"$f\" > \"$dir/$n\"
  chmod +x \"$dir/$n\"
done
cp \"$here/run-tests.sh\" \"$dir/\"
echo \"$dir\"
";

/// `src`, stripped, gzipped as `dst` + `.gz`.
fn copy_stripped_gz(src: &Path, dst: &Path) -> Result<()> {
    copy_stripped(src, dst)?;
    let bytes = std::fs::read(dst).with_context(|| format!("reading {}", dst.display()))?;
    let gz = dst.with_file_name(format!(
        "{}.gz",
        dst.file_name()
            .and_then(|n| n.to_str())
            .context("bundle file name is not UTF-8")?
    ));
    std::fs::write(&gz, crate::committed::gzip(&bytes)?)
        .with_context(|| format!("writing {}", gz.display()))?;
    std::fs::remove_file(dst).with_context(|| format!("removing {}", dst.display()))?;
    Ok(())
}

pub(crate) fn copy_stripped(src: &Path, dst: &Path) -> Result<()> {
    std::fs::copy(src, dst).with_context(|| format!("copying {}", src.display()))?;
    let status = Command::new("strip")
        .arg(dst)
        .status()
        .context("running strip")?;
    if !status.success() {
        bail!("strip {} failed ({status})", dst.display());
    }
    Ok(())
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perms = std::fs::metadata(path)?.permissions();
    perms.set_mode(0o755);
    std::fs::set_permissions(path, perms)?;
    Ok(())
}
