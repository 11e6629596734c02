//! `starhalo bench ...`: benchmarks that compare against a baseline inside one run.

pub mod sf_pingpong;
