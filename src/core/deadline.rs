//! Deadlines: seconds from now in, one absolute monotonic instant out.
//!
//! A deadline is parsed and validated on every call (cheap), but the clock is read only
//! when an acquire actually has to wait, so the uncontended path never reads it.

use std::fmt;
use std::time::{Duration, Instant};

/// A validated "seconds from now": `None` means no limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timeout(Option<Duration>);

/// A deadline given as seconds was NaN or negative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadTimeout {
    NaN,
    Negative,
}

impl fmt::Display for BadTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BadTimeout::NaN => "must not be NaN",
            BadTimeout::Negative => "must not be negative",
        })
    }
}

impl std::error::Error for BadTimeout {}

impl Timeout {
    /// No limit.
    pub const NEVER: Timeout = Timeout(None);
    /// Try once.
    pub const NOW: Timeout = Timeout(Some(Duration::ZERO));

    /// Seconds from now. Infinity, and anything too large for a `Duration` or an
    /// `Instant` (about 10^12 years and more), mean no limit, as Go's and CPython's do
    /// for their largest values.
    pub fn from_secs(secs: f64) -> Result<Timeout, BadTimeout> {
        if secs.is_nan() {
            return Err(BadTimeout::NaN);
        }
        if secs < 0.0 {
            return Err(BadTimeout::Negative);
        }
        // A century is far past any process's life and keeps `Instant` arithmetic safe.
        const FOREVER: f64 = 100.0 * 365.25 * 24.0 * 3600.0;
        if secs >= FOREVER {
            return Ok(Timeout::NEVER);
        }
        Ok(Timeout(Some(Duration::from_secs_f64(secs))))
    }

    pub fn is_never(&self) -> bool {
        self.0.is_none()
    }

    pub fn is_now(&self) -> bool {
        self.0 == Some(Duration::ZERO)
    }

    pub fn duration(&self) -> Option<Duration> {
        self.0
    }

    /// The absolute deadline, reading the clock now.
    pub fn deadline(&self) -> Option<Instant> {
        self.0.map(|d| Instant::now() + d)
    }
}

/// The earlier of two optional deadlines.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_seconds() {
        assert_eq!(Timeout::from_secs(f64::NAN), Err(BadTimeout::NaN));
        assert_eq!(Timeout::from_secs(-0.5), Err(BadTimeout::Negative));
        assert!(Timeout::from_secs(f64::INFINITY).unwrap().is_never());
        assert!(Timeout::from_secs(1e300).unwrap().is_never());
        assert!(Timeout::from_secs(0.0).unwrap().is_now());
        assert_eq!(
            Timeout::from_secs(1.5).unwrap().duration(),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn earliest_picks_the_sooner() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        assert_eq!(earliest(Some(now), Some(later)), Some(now));
        assert_eq!(earliest(None, Some(later)), Some(later));
        assert_eq!(earliest(None, None), None);
    }
}
