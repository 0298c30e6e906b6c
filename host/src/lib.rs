//! intranode: fast all-reduce between the GPUs of one machine.
pub mod dist_env;
pub mod ipc_channel;
pub mod topology;
