//! Small collective helpers for the CLI.

use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};

/// Gathers every rank's bytes on rank 0 (in rank order); other ranks get an empty list.
pub fn gather_bytes(world: &SimpleCommunicator, mine: &[u8]) -> Vec<Vec<u8>> {
    const TAG: i32 = 77;
    if world.rank() != 0 {
        world.process_at_rank(0).send_with_tag(mine, TAG);
        return Vec::new();
    }
    let mut all = vec![mine.to_vec()];
    for r in 1..world.size() {
        let (data, _) = world.process_at_rank(r).receive_vec_with_tag::<u8>(TAG);
        all.push(data);
    }
    all
}
