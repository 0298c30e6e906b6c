//! Checks, on the PTX the crate embeds, that every named function of
//! `kernels-gpu/src/ptx.rs` that orders memory emits exactly the
//! instruction, semantics and scope its name claims: each is compiled into
//! a `probe_<name>` kernel of its own, whose body this test reads. The
//! probes live in the test PTX (the crate `intranode-test-kernels-gpu`,
//! embedded under the feature `test-kernels`, which `cargo test
//! --workspace` turns on through the bench and test crates), built on
//! the same `ptx.rs` with the same flags as the production PTX.

use intranode::kernels::{SCOPE_PROBES, TEST_PTX as PTX};

/// The body of `.entry name(...) { ... }` in the PTX.
fn entry_body(ptx: &str, name: &str) -> String {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no kernel {name} in the PTX"));
    let rest = &ptx[start..];
    let open = rest.find('{').expect("kernel body opens");
    let mut depth = 0usize;
    for (i, c) in rest[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return rest[open..open + i + 1].to_owned();
                }
            }
            _ => {}
        }
    }
    panic!("kernel {name} never closes");
}

/// Memory-access and ordering instructions of a body (parameter loads
/// aside), first word only (after a predicate guard such as `@p`).
fn ordering_ops(body: &str) -> Vec<String> {
    body.lines()
        .map(str::trim)
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            match words.next() {
                Some(guard) if guard.starts_with('@') => words.next(),
                first => first,
            }
        })
        .filter(|op| {
            (op.starts_with("ld.") && !op.starts_with("ld.param"))
                || op.starts_with("st.")
                || op.starts_with("fence")
                || op.starts_with("membar")
                || op.starts_with("atom")
                || op.starts_with("red.")
        })
        .map(str::to_owned)
        .collect()
}

fn assert_probe(name: &str, claimed: &str) {
    let body = entry_body(PTX, &format!("probe_{name}"));
    let ops = ordering_ops(&body);
    assert!(
        ops.iter().any(|op| op == claimed),
        "probe_{name}: `{claimed}` not emitted; got {ops:?}"
    );
    // Nothing of another scope sneaks in.
    for op in &ops {
        for scope in [".sys", ".gpu", ".cta", ".cluster"] {
            if op.contains(scope) {
                assert!(
                    claimed.contains(scope),
                    "probe_{name}: `{op}` has scope {scope}, claimed `{claimed}`"
                );
            }
        }
    }
}

#[test]
fn acquire_release_and_relaxed_flags_have_system_scope() {
    assert_probe("ld_acquire_sys_u32", "ld.acquire.sys.global.u32");
    assert_probe("ld_relaxed_sys_u32", "ld.relaxed.sys.global.u32");
    assert_probe("st_release_sys_u32", "st.release.sys.global.u32");
    assert_probe("st_relaxed_sys_u32", "st.relaxed.sys.global.u32");
    assert_probe("ld_relaxed_sys_v4_u32", "ld.relaxed.sys.global.v4.u32");
    assert_probe("st_relaxed_sys_v4_u32", "st.relaxed.sys.global.v4.u32");
}

#[test]
fn fences_have_their_named_scope() {
    assert_probe("fence_acq_rel_sys", "fence.acq_rel.sys;");
    assert_probe("fence_acq_rel_gpu", "fence.acq_rel.gpu;");
}

#[test]
fn vector_accesses_are_16_bytes() {
    assert_probe("ld_global_v4_u32", "ld.global.v4.u32");
    assert_probe("st_global_v4_u32", "st.global.v4.u32");
}

#[test]
fn globaltimer_is_read() {
    let body = entry_body(PTX, "probe_globaltimer_ns");
    assert!(body.contains("%globaltimer"), "{body}");
}

/// The production PTX, or `None`, said, in a build that embeds only
/// machine code (`INTRANODE_EMBED_PTX=0`, the device bundle's); CI's
/// builds embed it.
fn production_ptx() -> Option<String> {
    if !intranode::kernels::embeds_ptx() {
        eprintln!("SKIPPED: this build embeds no PTX (INTRANODE_EMBED_PTX=0)");
        return None;
    }
    Some(intranode::kernels::ptx().expect("the embedded PTX unpacks"))
}

#[test]
fn the_schedule_fuzzer_never_ships() {
    let Some(production) = production_ptx() else {
        return;
    };
    // `schedule::delay` is empty outside feature `schedule-fuzz`.
    for op in ["nanosleep", "%smid"] {
        assert!(!production.contains(op), "the production PTX holds {op}");
    }
}

#[test]
fn no_out_of_line_calls() {
    let Some(production) = production_ptx() else {
        return;
    };
    for ptx in [PTX, production.as_str()] {
        assert!(
            !ptx.contains(".extern .func"),
            "the PTX calls into core out of line"
        );
    }
}

/// The production kernels use the same functions: the probes check what
/// they emit only if some production kernel emits it too (a probe of a
/// function no kernel uses any more checks nothing).
#[test]
fn every_probed_instruction_is_used_by_the_production_kernels() {
    let Some(production) = production_ptx() else {
        return;
    };
    for (probe, op) in [
        ("probe_ld_acquire_sys_u32", "ld.acquire.sys.global.u32"),
        ("probe_ld_relaxed_sys_u32", "ld.relaxed.sys.global.u32"),
        ("probe_st_release_sys_u32", "st.release.sys.global.u32"),
        ("probe_st_relaxed_sys_u32", "st.relaxed.sys.global.u32"),
        (
            "probe_ld_relaxed_sys_v4_u32",
            "ld.relaxed.sys.global.v4.u32",
        ),
        (
            "probe_st_relaxed_sys_v4_u32",
            "st.relaxed.sys.global.v4.u32",
        ),
        ("probe_ld_global_v4_u32", "ld.global.v4.u32"),
        ("probe_st_global_v4_u32", "st.global.v4.u32"),
        (
            "probe_atom_add_acq_rel_gpu_u32",
            "atom.add.acq_rel.gpu.global.u32",
        ),
        ("probe_fence_acq_rel_sys", "fence.acq_rel.sys;"),
        (
            "probe_atom_add_relaxed_gpu_u64",
            "atom.add.relaxed.gpu.global.u64",
        ),
        (
            "probe_red_add_relaxed_gpu_u64",
            "red.relaxed.gpu.global.add.u64",
        ),
        ("probe_globaltimer_ns", "%globaltimer"),
    ] {
        assert!(SCOPE_PROBES.contains(&probe), "{probe} is not listed");
        assert!(production.contains(op), "no production kernel emits {op}");
    }
}

/// NOTE [l2 prefetch] (`kernels-gpu/src/fused_norm.rs`): the prefetch is
/// the bulk hint and nothing else: no load, store or fence comes with it
/// (it has no memory-ordering scope), and the production fused norms emit
/// it. Built for sm_90 and later only; older targets emit nothing.
#[test]
fn l2_prefetch_is_a_bulk_hint_without_ordering() {
    let body = entry_body(PTX, "probe_prefetch_bulk_l2");
    let op = "cp.async.bulk.prefetch.L2.global [";
    assert!(
        ordering_ops(&body).is_empty(),
        "probe_prefetch_bulk_l2: {:?}",
        ordering_ops(&body)
    );
    if !PTX.contains(".target sm_9") {
        assert!(!body.contains("prefetch"), "{body}");
        return;
    }
    assert!(body.contains(op), "{body}");
    assert!(SCOPE_PROBES.contains(&"probe_prefetch_bulk_l2"));
    let Some(production) = production_ptx() else {
        return;
    };
    let fused: Vec<&str> = production
        .lines()
        .filter_map(|l| l.split(".entry ").nth(1))
        .filter_map(|r| r.split('(').next())
        .filter(|name| name.starts_with("lamport_rmsnorm_"))
        .collect();
    assert!(!fused.is_empty(), "no fused norm kernels");
    for name in fused {
        assert!(
            entry_body(&production, name).contains(op),
            "{name} does not prefetch"
        );
    }
}

#[test]
fn block_counter_atomic_has_gpu_scope() {
    assert_probe(
        "atom_add_acq_rel_gpu_u32",
        "atom.add.acq_rel.gpu.global.u32",
    );
    // NOTE [call count] (`kernels-gpu/src/sync.rs`): relaxed, and nothing
    // else orders around it.
    assert_probe(
        "atom_add_relaxed_gpu_u64",
        "atom.add.relaxed.gpu.global.u64",
    );
    assert_probe("red_add_relaxed_gpu_u64", "red.relaxed.gpu.global.add.u64");
    for probe in [
        "probe_atom_add_relaxed_gpu_u64",
        "probe_red_add_relaxed_gpu_u64",
    ] {
        let body = entry_body(PTX, probe);
        assert!(
            !body.contains("fence") && !body.contains("membar"),
            "{probe}: {body}"
        );
    }
}

#[test]
fn block_broadcast_goes_through_shared_memory_between_barriers() {
    assert_probe("block_broadcast_u32", "st.shared.u32");
    assert_probe("block_broadcast_u32", "ld.shared.u32");
    let body = entry_body(PTX, "probe_block_broadcast_u32");
    let store = body.find("st.shared.u32").expect("store");
    let load = body.find("ld.shared.u32").expect("load");
    assert!(body[..store].contains("bar.sync 0;"), "{body}");
    assert!(body[store..load].contains("bar.sync 0;"), "{body}");
}

#[test]
fn block_gather_goes_through_shared_memory_between_barriers() {
    assert_probe("block_gather_warp_f32", "st.shared.f32");
    assert_probe("block_gather_warp_f32", "ld.shared.v4.f32");
    let body = entry_body(PTX, "probe_block_gather_warp_f32");
    // A barrier before the store (the last round's loads are done) and
    // one between the store and the loads.
    let store = body.find("st.shared.f32").expect("store");
    let load = body.find("ld.shared.v4.f32").expect("load");
    assert!(body[..store].contains("bar.sync 0;"), "{body}");
    assert!(body[store..load].contains("bar.sync 0;"), "{body}");
}

/// NOTE [launch overlap] (`host/src/kernels/launch.rs`): every collective
/// of the production PTX begins with `griddepcontrol.wait` (then
/// `griddepcontrol.launch_dependents`) before any load or store, so a
/// launch that overlaps the kernel ahead reads nothing early; the kernels
/// launched plainly (elementwise, norms) do not wait.
#[test]
fn collectives_wait_for_the_kernel_ahead_before_touching_memory() {
    let Some(ptx) = production_ptx() else {
        return;
    };
    if !ptx.contains(".target sm_9") {
        // Built for an older architecture: no griddepcontrol, no overlap.
        return;
    }
    let collective = |name: &str| {
        [
            "one_shot_",
            "two_shot_",
            "hcm_",
            "lamport",
            "broadcast_w",
            "push_",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            || name == "barrier"
    };
    let mut waiting = 0;
    for line in ptx.lines().filter(|l| l.contains(".entry ")) {
        let name = line
            .split(".entry ")
            .nth(1)
            .and_then(|r| r.split('(').next())
            .expect("entry name");
        let body = entry_body(&ptx, name);
        let first_wait = body.find("griddepcontrol.wait;");
        if !collective(name) {
            assert!(first_wait.is_none(), "{name} waits but is launched plainly");
            continue;
        }
        let wait = first_wait.unwrap_or_else(|| panic!("{name} does not wait"));
        let trigger = body
            .find("griddepcontrol.launch_dependents;")
            .unwrap_or_else(|| panic!("{name} never lets its dependents launch"));
        assert!(wait < trigger, "{name}: launch_dependents before wait");
        for op in ["ld.global", "st.global", "ld.shared", "st.shared", "atom."] {
            if let Some(at) = body.find(op) {
                assert!(wait < at, "{name}: {op} before griddepcontrol.wait");
            }
        }
        waiting += 1;
    }
    assert!(waiting > 100, "only {waiting} collectives found");
}
