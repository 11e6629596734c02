//! Exit codes and who speaks about errors.

use mpi::topology::{Communicator, SimpleCommunicator};
use std::process::ExitCode;

/// Bad input from the user (an option, a file, a graph): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// Builds a [`BadInput`] error from a format string.
macro_rules! bad_input {
    ($($t:tt)*) => { anyhow::Error::new($crate::exit::BadInput(format!($($t)*))) };
}
pub(crate) use bad_input;

/// Prints the error (rank 0 always, other ranks only when the error is their own) and maps it
/// to the exit code.
pub fn report(world: &SimpleCommunicator, result: anyhow::Result<()>) -> ExitCode {
    let Err(err) = result else {
        return ExitCode::SUCCESS;
    };
    let peer_only = err
        .chain()
        .any(|e| matches!(e.downcast_ref(), Some(starhalo_sf::SfError::PeerInvalid(_))));
    let rank = world.rank();
    if rank == 0 || !peer_only {
        let prefix = if world.size() > 1 {
            format!("[rank {rank}] ")
        } else {
            String::new()
        };
        eprintln!("{prefix}error: {err:#}");
    }
    let bad = err
        .chain()
        .any(|e| e.is::<BadInput>() || e.is::<starhalo_sf::SfError>());
    ExitCode::from(if bad { 2 } else { 1 })
}
