//! The wall-time limit of `-t HH:MM:SS`.

use crate::exit::bad_input;
use anyhow::Result;
use std::time::{Duration, Instant};

/// Parses `HH:MM:SS` (hours any number of digits, minutes and seconds below 60).
pub fn parse_wall_time(s: &str) -> Result<Duration> {
    let bad = || bad_input!("-t '{s}': expected a wall-time limit HH:MM:SS, e.g. 01:30:00");
    let parts: Vec<&str> = s.trim().split(':').collect();
    let [h, m, sec] = parts[..] else {
        return Err(bad());
    };
    let num = |p: &str| -> Result<u64> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        p.parse().map_err(|_| bad())
    };
    let (h, m, sec) = (num(h)?, num(m)?, num(sec)?);
    if m >= 60 || sec >= 60 {
        return Err(bad_input!("-t '{s}': minutes and seconds must be below 60"));
    }
    let total = h
        .checked_mul(3600)
        .and_then(|x| x.checked_add(m * 60 + sec))
        .ok_or_else(bad)?;
    if total == 0 {
        return Err(bad_input!("-t '{s}': the wall-time limit must be positive"));
    }
    Ok(Duration::from_secs(total))
}

/// When the run started and how long it may take.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    start: Instant,
    limit: Option<Duration>,
}

impl Deadline {
    /// A deadline `limit` after `start` (none without a limit).
    pub fn new(start: Instant, limit: Option<Duration>) -> Self {
        Deadline { start, limit }
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// True once the limit has passed. Ranks decide together (see the problems), since
    /// their clocks cross the limit at different moments.
    pub fn expired(&self) -> bool {
        self.limit.is_some_and(|l| self.start.elapsed() >= l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_time_formats() {
        assert_eq!(
            parse_wall_time("01:30:00").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(parse_wall_time("0:00:05").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_wall_time("100:59:59").unwrap().as_secs(), 363_599);
        for bad in [
            "", "1:2", "1:2:3:4", "a:00:00", "00:60:00", "00:00:60", "00:00:00", "-1:00:00",
            "1: 2:3",
        ] {
            let e = parse_wall_time(bad).unwrap_err();
            assert!(e.is::<crate::exit::BadInput>(), "{bad}");
            assert!(e.to_string().contains(&format!("-t '{bad}'")), "{e}");
        }
    }

    #[test]
    fn deadline_expires() {
        let past = Instant::now() - Duration::from_secs(2);
        assert!(Deadline::new(past, Some(Duration::from_secs(1))).expired());
        assert!(!Deadline::new(past, Some(Duration::from_secs(60))).expired());
        assert!(!Deadline::new(past, None).expired());
    }
}
