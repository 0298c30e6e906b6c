//! The GPUs a job started here can use: those `nvidia-smi -L` lists,
//! narrowed by `CUDA_VISIBLE_DEVICES` as CUDA narrows them for the ranks.
//! A machine with no NVIDIA GPU at all is told apart from one whose GPUs
//! are there but cannot be used (a driver that does not answer, a
//! `CUDA_VISIBLE_DEVICES` that hides them): the first has nothing to run,
//! the second is an error.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

/// What this machine offers a job.
#[derive(Debug, PartialEq, Eq)]
pub enum LocalGpus {
    /// No NVIDIA GPU here: no driver and no device files.
    Absent,
    /// GPUs are here but none can be counted: why.
    Unusable(String),
    /// `visible` GPUs of the `installed` ones, as the ranks will see them.
    Visible {
        /// GPUs a job started here sees (`CUDA_VISIBLE_DEVICES` applied).
        visible: usize,
        /// GPUs `nvidia-smi -L` lists.
        installed: usize,
    },
}

/// Looks at this machine: the driver's device files, `nvidia-smi -L` and
/// `CUDA_VISIBLE_DEVICES`.
pub fn local_gpus() -> LocalGpus {
    let listing = Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .map_err(|e| format!("cannot run nvidia-smi: {e}"))
        .and_then(|out| {
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(format!(
                    "nvidia-smi -L failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        });
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    classify(devices_present(), listing, visible.as_deref())
}

/// Whether the NVIDIA driver has a GPU here: a folder per GPU under
/// `/proc/driver/nvidia/gpus` (driver loaded), or `/dev/nvidia0` (what a
/// container with GPUs is given).
fn devices_present() -> bool {
    let from_driver = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .is_ok_and(|mut entries| entries.next().is_some());
    from_driver || Path::new("/dev/nvidia0").exists()
}

/// [`local_gpus`] from what it read: whether device files are present,
/// `nvidia-smi -L`'s output or why it failed, and `CUDA_VISIBLE_DEVICES`.
fn classify(present: bool, listing: Result<String, String>, visible: Option<&str>) -> LocalGpus {
    let listing = match listing {
        Ok(text) => text,
        // `nvidia-smi` missing or failing with no device files: a machine
        // without a GPU (CI's); with them, a driver that does not answer.
        Err(why) if present => return LocalGpus::Unusable(why),
        Err(_) => return LocalGpus::Absent,
    };
    let gpus = parse_listing(&listing);
    if gpus.is_empty() {
        return if present {
            LocalGpus::Unusable(
                "the NVIDIA device files are there, but nvidia-smi -L lists no GPU".into(),
            )
        } else {
            LocalGpus::Absent
        };
    }
    let installed = gpus.len();
    let visible = visible.map_or(installed, |list| count_visible(&gpus, list));
    LocalGpus::Visible { visible, installed }
}

/// The `(index, UUIDs)` of each GPU line of `nvidia-smi -L` (`GPU 0: NVIDIA
/// H200 (UUID: GPU-...)`), each with the UUIDs of its MIG devices (the
/// indented lines below it).
fn parse_listing(listing: &str) -> Vec<(usize, Vec<String>)> {
    let mut gpus: Vec<(usize, Vec<String>)> = Vec::new();
    for line in listing.lines() {
        let uuid = line
            .split_once("(UUID: ")
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(uuid, _)| uuid.trim().to_owned());
        if let Some(rest) = line.strip_prefix("GPU ") {
            let Some(index) = rest.split(':').next().and_then(|i| i.trim().parse().ok()) else {
                continue;
            };
            gpus.push((index, uuid.into_iter().collect()));
        } else if let (Some(uuid), Some(last)) = (uuid, gpus.last_mut()) {
            last.1.push(uuid);
        }
    }
    gpus
}

/// GPUs a `CUDA_VISIBLE_DEVICES` value leaves visible, of `gpus`: CUDA
/// takes its entries in order, each an index or a (prefix of a) `GPU-` or
/// `MIG-` UUID, and stops at the first that names no device (`-1`, an
/// empty entry, an index past the last GPU). A device named twice also
/// ends the count here: the ranks need distinct GPUs.
fn count_visible(gpus: &[(usize, Vec<String>)], list: &str) -> usize {
    let mut seen: Vec<usize> = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let found = if let Ok(index) = entry.parse::<usize>() {
            gpus.iter().position(|(i, _)| *i == index)
        } else if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            gpus.iter()
                .position(|(_, uuids)| uuids.iter().any(|u| u.starts_with(entry)))
        } else {
            None
        };
        match found {
            Some(gpu) if !seen.contains(&gpu) => seen.push(gpu),
            _ => break,
        }
    }
    seen.len()
}

/// The number of GPUs `task` runs on, at least `needed`: `Ok(None)` (after
/// saying so) where the machine has no GPU, an error where it has GPUs
/// that cannot be used or too few are visible.
pub fn for_task(task: &str, needed: usize) -> Result<Option<usize>> {
    let visible_note = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) => format!(" (CUDA_VISIBLE_DEVICES={v:?})"),
        Err(_) => String::new(),
    };
    match local_gpus() {
        LocalGpus::Absent => {
            println!("intranode {task}: no NVIDIA GPU on this machine. Nothing to run.");
            Ok(None)
        }
        LocalGpus::Unusable(why) => {
            bail!("intranode {task}: this machine has NVIDIA GPUs, but they cannot be used: {why}")
        }
        LocalGpus::Visible { visible, installed } if visible < needed => bail!(
            "intranode {task}: needs at least {needed} GPU(s) of one machine; {visible} of the \
             {installed} here are visible{visible_note}"
        ),
        LocalGpus::Visible { visible, .. } => Ok(Some(visible)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOUR: &str = "GPU 0: NVIDIA H200 (UUID: GPU-aaaa1111)\n\
                        GPU 1: NVIDIA H200 (UUID: GPU-bbbb2222)\n\
                        GPU 2: NVIDIA H200 (UUID: GPU-cccc3333)\n\
                        \x20 MIG 1g.18gb Device 0: (UUID: MIG-dddd4444)\n\
                        GPU 3: NVIDIA H200 (UUID: GPU-eeee5555)\n";

    fn visible(list: Option<&str>) -> LocalGpus {
        classify(true, Ok(FOUR.into()), list)
    }

    #[test]
    fn cuda_visible_devices_narrows_the_count() {
        let all = LocalGpus::Visible {
            visible: 4,
            installed: 4,
        };
        assert_eq!(visible(None), all);
        let of4 = |visible| LocalGpus::Visible {
            visible,
            installed: 4,
        };
        assert_eq!(visible(Some("0,1")), of4(2));
        assert_eq!(visible(Some("3, 1")), of4(2));
        assert_eq!(visible(Some("GPU-bbbb,GPU-eeee5555,MIG-dddd")), of4(3));
        // CUDA stops at the first entry that names no device.
        assert_eq!(visible(Some("0,7,1")), of4(1));
        assert_eq!(visible(Some("-1")), of4(0));
        assert_eq!(visible(Some("")), of4(0));
        assert_eq!(visible(Some("GPU-ffff")), of4(0));
        assert_eq!(visible(Some("0,0,1")), of4(1));
    }

    #[test]
    fn no_gpu_is_told_apart_from_unusable_ones() {
        let failed = || Err("nvidia-smi -L failed".to_owned());
        assert_eq!(classify(false, failed(), None), LocalGpus::Absent);
        assert_eq!(classify(false, Ok(String::new()), None), LocalGpus::Absent);
        assert!(matches!(
            classify(true, failed(), None),
            LocalGpus::Unusable(_)
        ));
        assert!(matches!(
            classify(true, Ok("No devices were found\n".into()), None),
            LocalGpus::Unusable(_)
        ));
    }
}
