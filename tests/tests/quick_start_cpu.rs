//! The README's quick start on a machine without a launcher (or a GPU)
//! fails with the text the Troubleshooting table lists: `main` returning
//! a `Box<dyn Error>` prints its `Debug`, which is the message.

use cudarc::nccl::ReduceOp;
use intranode::Communicator;
use intranode::dist_env::DistEnv;

/// The README's `main`, word for word but for its name.
fn quick_start() -> Result<(), Box<dyn std::error::Error>> {
    let env = DistEnv::from_env()?; // torchrun, Open MPI, Slurm or PMI variables
    let store = intranode::store::connect_env(&env)?; // intranode-run's store, or torchrun's TCPStore
    let ctx = intranode::gpu::context(env.device.unwrap_or(env.local_rank))?;
    let stream = ctx.new_stream()?;
    let comm = Communicator::new(stream.clone(), store, env.rank, env.world_size)?;
    let mut grads = stream.clone_htod(&vec![1.0f32; 1 << 20])?; // your gradients
    comm.all_reduce_in_place(&mut grads, &ReduceOp::Sum)?; // like cudarc::nccl::Comm
    comm.synchronize()?;
    assert_eq!(stream.clone_dtoh(&grads)?[0], env.world_size as f32);
    Ok(())
}

#[test]
fn without_a_launcher_or_driver_main_prints_the_troubleshooting_text() {
    for var in intranode_launcher_free_vars() {
        // SAFETY: this test binary's only test; no other thread reads the
        // environment while it runs.
        unsafe { std::env::remove_var(var) };
    }
    let e = quick_start().expect_err("no launcher variables are set");
    let printed = format!("Error: {e:?}");
    assert!(
        printed.starts_with("Error: no launcher variables found: set RANK and WORLD_SIZE"),
        "{printed}"
    );

    // The next step's failure on a machine without a driver (`no CUDA
    // driver: ...`, the table's row); with a driver there is none to show.
    if let Err(e) = intranode::gpu::context(0) {
        let boxed: Box<dyn std::error::Error> = Box::new(e);
        assert_eq!(format!("{boxed:?}"), boxed.to_string());
    }
}

/// Every variable `DistEnv` reads a rank from.
fn intranode_launcher_free_vars() -> [&'static str; 6] {
    [
        "RANK",
        "WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
        "PMIX_RANK",
    ]
}
