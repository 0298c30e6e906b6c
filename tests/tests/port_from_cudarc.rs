//! A cudarc NCCL program (`port/program.rs`) compiles against intranode
//! with its imports changed and nothing else: the text is compiled once
//! after cudarc's imports and once after intranode's (docs/PARITY.md,
//! "Porting"). The GPU runs of the same constructions are examples 04 and
//! 05.

#![allow(dead_code)]

/// The program as written for cudarc.
mod with_cudarc {
    use cudarc::nccl::result::{NcclError, NcclStatus};
    use cudarc::nccl::{Comm, Id, ReduceOp, group_end, group_start};
    include!("port/program.rs");
}

/// The same program, ported.
mod with_intranode {
    use intranode::nccl::result::{NcclError, NcclStatus};
    use intranode::nccl::{Comm, Id, ReduceOp, group_end, group_start};
    include!("port/program.rs");
}

/// What runs without a GPU: rank 0's id crosses to another "process" as
/// its 128 bytes and still names rank 0's store.
#[test]
fn the_ported_id_travels_as_128_bytes() {
    let bytes = with_intranode::make_id().map_err(|e| e.0).expect("Id::new");
    let id = intranode::nccl::Id::uninit(bytes);
    assert_eq!(id.internal(), &bytes);
    assert!(format!("{id:?}").contains("127.0.0.1"), "{id:?}");
}

/// Bytes from NCCL's `Id` (or anything else) are refused naming why, as a
/// code through the ported signature and in words through `last_error`.
#[test]
fn an_nccl_id_is_refused_clearly() {
    let e = intranode::nccl::Id::uninit([3; 128])
        .validate()
        .expect_err("not an id");
    assert!(e.to_string().contains("not an intranode::Id"), "{e}");
}
