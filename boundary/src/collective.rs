//! Decisions every rank takes together, so that a rank whose inputs are wrong never leaves
//! the others waiting for messages it will not send.

use starhalo_sf::mpi::collective::SystemOperation;
use starhalo_sf::mpi::topology::SimpleCommunicator;
use starhalo_sf::mpi::traits::CommunicatorCollectives;

use crate::error::BoundaryError;

/// Fails on every rank of `comm` when any rank's `mine` failed (collective): a rank that
/// failed keeps its own error, the others report `Mismatch(others)`.
pub(crate) fn agree<T>(
    comm: &SimpleCommunicator,
    mine: Result<T, BoundaryError>,
    others: &str,
) -> Result<T, BoundaryError> {
    let failed = i32::from(mine.is_err());
    let mut any = 0i32;
    comm.all_reduce_into(&failed, &mut any, SystemOperation::max());
    let v = mine?;
    if any != 0 {
        return Err(BoundaryError::Mismatch(others.into()));
    }
    Ok(v)
}

/// Fails on every rank of `comm` when the ranks' values of some fact differ (collective):
/// `facts` are (what, value) pairs of what every rank must hold alike, such as digests of
/// their inputs; the error names the first fact that differs.
pub(crate) fn same(comm: &SimpleCommunicator, facts: &[(&str, u64)]) -> Result<(), BoundaryError> {
    // One reduction gives both extremes: the max of each value and of its complement (whose
    // max is the complement of the min).
    let n = facts.len();
    let mine: Vec<u64> = facts
        .iter()
        .map(|f| f.1)
        .chain(facts.iter().map(|f| !f.1))
        .collect();
    let mut max = vec![0u64; 2 * n];
    comm.all_reduce_into(&mine[..], &mut max[..], SystemOperation::max());
    let (hi, not_lo) = max.split_at(n);
    match facts
        .iter()
        .zip(hi.iter().zip(not_lo))
        .find(|(_, (h, nl))| **h != !**nl)
    {
        Some(((what, _), _)) => Err(BoundaryError::Mismatch(format!(
            "the ranks hold different {what}"
        ))),
        None => Ok(()),
    }
}
