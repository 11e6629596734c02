//! `starhalo bench ...`: benchmarks that compare against a baseline inside one run.

pub mod exchange;
pub mod sf_pingpong;
