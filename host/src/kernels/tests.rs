//! Unit tests of the embedded kernels' table and launches.

use std::collections::BTreeSet;

use super::*;

/// The embedded PTX, or `None` (with a note) in a build that left it
/// out (`INTRANODE_EMBED_PTX=0`, the device bundle's).
pub(super) fn embedded_ptx() -> Option<String> {
    if PTX_IMAGE.is_empty() {
        eprintln!("skipped: this build embeds no PTX (INTRANODE_EMBED_PTX=0)");
        return None;
    }
    Some(ptx().expect("the embedded PTX unpacks"))
}

/// The one list and the PTX agree both ways: every kernel the host can
/// launch is in the PTX, and the PTX holds nothing unlisted.
#[test]
fn the_kernel_list_is_exactly_the_ptx() {
    let listed: BTreeSet<String> = Kernel::all().map(|k| k.to_string()).collect();
    let Some(ptx) = embedded_ptx() else { return };
    let in_ptx: BTreeSet<String> = entry_names(&ptx).into_iter().map(str::to_owned).collect();
    assert_eq!(listed.len(), Kernel::COUNT);
    let missing: Vec<_> = listed.difference(&in_ptx).collect();
    let unlisted: Vec<_> = in_ptx.difference(&listed).collect();
    assert!(missing.is_empty(), "listed, not in the PTX: {missing:?}");
    assert!(unlisted.is_empty(), "in the PTX, not listed: {unlisted:?}");
}

#[test]
fn the_production_ptx_has_no_test_kernels() {
    let Some(ptx) = embedded_ptx() else { return };
    for name in entry_names(&ptx) {
        assert!(
            !["probe_", "soak_", "timing_", "fill_uniform_"]
                .iter()
                .any(|p| name.starts_with(p)),
            "{name} in the production PTX"
        );
    }
}

#[test]
fn element_types_map_to_the_kernels_names() {
    for e in ElemType::ALL {
        assert_eq!(Elem::from(e).name(), e.suffix());
    }
}

#[test]
fn embedded_ptx_calls_nothing_out_of_line() {
    let Some(ptx) = embedded_ptx() else { return };
    assert!(
        !ptx.contains(".extern .func"),
        "the PTX calls into core out of line"
    );
}

#[test]
fn entries() {
    let ptx = ".visible .entry add_f32(\n.param .u64 a\n)\n{\n}\n.visible .entry probe_x()\n{\n}\n";
    assert_eq!(entry_names(ptx), ["add_f32", "probe_x"]);
}

#[test]
fn cubin_compatibility() {
    assert!(cubin_runs_on("sm_90", 9, 0));
    assert!(cubin_runs_on("sm_90", 9, 1));
    assert!(!cubin_runs_on("sm_90", 8, 9));
    assert!(!cubin_runs_on("sm_90", 10, 0));
    assert!(cubin_runs_on("sm_80", 8, 6));
    assert!(cubin_runs_on("sm_90a", 9, 0));
    assert!(!cubin_runs_on("sm_90a", 9, 1));
    assert!(!cubin_runs_on("", 9, 0));
    assert_eq!("ptx".parse(), Ok(KernelImage::Ptx));
    assert_eq!("".parse(), Ok(KernelImage::Auto));
    assert!("sass".parse::<KernelImage>().is_err());
}

/// The committed cubin is an ELF image for the committed architecture
/// whose symbols include every kernel (the machine code of the same
/// list; CI checks its bytes against ptxas's output in `check-ptx`).
#[test]
fn the_cubin_holds_every_kernel() {
    if CUBIN_IMAGE.is_empty() {
        // Built from source (a kernel edit not yet committed): no
        // cubin is embedded, and the PTX serves every device.
        eprintln!("no cubin embedded: kernels built from source");
        return;
    }
    let cubin = unpack(CUBIN_IMAGE, "cubin").expect("the embedded cubin unpacks");
    assert!(cubin.starts_with(b"\x7fELF"), "not an ELF image");
    let text = String::from_utf8_lossy(&cubin);
    for k in Kernel::all() {
        let name = k.to_string();
        assert!(text.contains(&name), "{name} missing from the cubin");
    }
}

/// Text passes through; a damaged image is an error, not other bytes.
#[test]
fn unpack_checks_the_image() {
    assert_eq!(unpack(b"// PTX", "text").unwrap(), b"// PTX");
    if CUBIN_IMAGE.is_empty() {
        return;
    }
    let mut damaged = CUBIN_IMAGE.to_vec();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x55;
    assert!(unpack(&damaged, "damaged cubin").is_err());
}

#[test]
fn grid_sizes() {
    assert_eq!(elementwise_grid(1, 2), Grid::new(1, 256));
    assert_eq!(elementwise_grid(8 * 256, 2), Grid::new(1, 256));
    assert_eq!(elementwise_grid(8 * 256 + 1, 2), Grid::new(2, 256));
    assert_eq!(elementwise_grid(1 << 30, 4).blocks, 528);
}
