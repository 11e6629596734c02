//! starhalo-sf: the star forest (the PetscSF model) over MPI.
//!
//! A star forest describes communication as a graph: each rank owns `nroots` roots and a set
//! of leaves, and each leaf names its root as `(rank, offset)`. Set-up ([`StarForest::new`])
//! discovers the reverse direction, splits local from remote edges and compiles a [`Plan`]
//! per peer (contiguous, 3-D strided, or a list); then [`StarForest::bcast_begin`] (root to
//! leaf), [`StarForest::reduce_begin`] (leaf to root) and
//! [`StarForest::fetch_and_op_begin`] move data, any number at once, each finished by
//! [`Pending::end`]. Forests make forests: [`StarForest::multi`] (with gather and scatter),
//! [`StarForest::invert`], [`StarForest::compose`], [`StarForest::compose_inverse`],
//! [`StarForest::embed_roots`] and [`StarForest::embed_leaves`].
//!
//! Layout: `graph` (the input), `algebra` (forests from forests), `node_aware` (bcasts, reduces
//! and fetch-and-ops routed through relay ranks of each node: 2-step, 3-step, split), `cost` (the postal and max-rate models that choose a
//! route), `discovery` (two-sided set-up), `plan` (pack plans), `unit`
//! (unit types and ops), `forest` (the operations), `link` (pooled in-flight state),
//! `transport` (how bytes move: one implementation per [`SfType`], the one-sided one in
//! `rma`), [`shmem`] (an OpenSHMEM-style layer: symmetric heap, puts, gets, atomics, signals,
//! teams), `raw` (the only MPI FFI), [`p2p`] (point-to-point message arenas), [`pool`]
//! (storage pools keyed by size), `staged` (the traffic through packed arrays, for data in
//! device memory), `device` (pack plans and the staged forest on a CUDA device), `exact_sum`
//! (reductions whose bits do not depend on the decomposition).

mod algebra;
mod cost;
pub mod device;
mod discovery;
mod error;
mod exact_sum;
mod forest;
mod graph;
mod link;
mod node_aware;
pub mod p2p;
mod plan;
pub mod pool;
mod raw;
mod rma;
pub mod shmem;
pub mod staged;
mod transport;
mod unit;

pub use algebra::MultiSf;
pub use cost::{load, CostModel, Load, Postal, Prediction};
pub use discovery::{Discovery, NBX_FROM_RANKS};
pub use error::SfError;
pub use exact_sum::ExactSum;
pub use forest::{Pending, SfOptions, StarForest};
pub use graph::{Graph, RootRef};
pub use mpi;
pub use node_aware::{NodeAwareSf, Nodes, ReduceRoute, RoutedPending, Strategy};
pub use plan::{PackPlan, Plan, PlanIter, Runs};
pub use raw::mpi_cuda_support;
pub use staged::Staged;
pub use transport::SfType;
pub use unit::{neutral, Op, Reducer, Scalar, Unit};
