//! How long the blocking calls (a whole ghost fill, flux correction or multigrid round) poll
//! for messages: a stuck or lost peer ends in [`BoundaryError::Timeout`], naming what was
//! awaited, rather than in a silent hang. Task regions time their tasks themselves.

use crate::error::BoundaryError;
use std::time::{Duration, Instant};

/// A wait that started now and may last `limit` (`None`: as long as it takes).
pub(crate) struct Patience {
    start: Instant,
    limit: Option<Duration>,
}

impl Patience {
    pub(crate) fn new(limit: Option<Duration>) -> Self {
        Self {
            start: Instant::now(),
            limit,
        }
    }

    /// One more poll: `Ok` while time is left, else the timeout, saying what (`what()`) was
    /// still awaited.
    pub(crate) fn poll(&self, what: impl FnOnce() -> String) -> Result<(), BoundaryError> {
        match self.limit {
            Some(after) if self.start.elapsed() > after => Err(BoundaryError::Timeout {
                what: what(),
                after,
            }),
            _ => {
                std::hint::spin_loop();
                Ok(())
            }
        }
    }
}

/// The channels a wait still waits for, the first few of them.
pub(crate) fn waiting_for(pending: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut s = pending[..pending.len().min(SHOWN)].join(", ");
    if pending.len() > SHOWN {
        s += &format!(" and {} more", pending.len() - SHOWN);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_in_a_timeout_naming_what_it_waited_for() {
        assert!(Patience::new(None).poll(|| unreachable!()).is_ok());
        let p = Patience::new(Some(Duration::ZERO));
        std::thread::sleep(Duration::from_millis(1));
        let e = p.poll(|| "ghost fill".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ghost fill: still waiting for messages after 0 s"
        );
        let names: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        assert_eq!(waiting_for(&names[..2]), "c0, c1");
        assert_eq!(
            waiting_for(&names),
            "c0, c1, c2, c3, c4, c5, c6, c7 and 2 more"
        );
    }
}
