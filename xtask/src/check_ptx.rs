//! `check-ptx`: the kernels as the GPU gets them, checked.

use std::path::Path;

use anyhow::Result;
use intranode_ptx_builder::KernelSet;

use crate::ptx_build::build_ptx_for;
use crate::{committed, ptxas};

/// `check-ptx`: both kernel sets of every architecture in `archs` built
/// and assembled by the pinned ptxas, the rules checked, the committed
/// production cubin compared, the spill table checked (`write`: written).
pub(crate) fn check_ptx(root: &Path, archs: &[String], write: bool) -> Result<()> {
    for arch in archs {
        for set in KernelSet::ALL {
            let path = build_ptx_for(root, arch, set, None)?;
            println!("{}", path.display());
            let (cubin, kernels) = ptxas::check(root, &path, arch)?;
            if set == KernelSet::Production {
                committed::check_cubin(root, arch, &cubin)?;
                ptxas::check_spill_table(root, arch, &kernels, write)?;
            }
        }
    }
    Ok(())
}
