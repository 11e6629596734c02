//! `starhalo bench ...`: benchmarks that compare against a baseline inside one run.

pub mod exchange;
mod exchange_device;
pub mod sf_pingpong;
pub mod sf_strategies;
pub mod shmem;
