//! The window model: how long the machine keeps running after a power-failure warning.
//!
//! A window is either a plain deadline (the detector's documented lead time) or derived from
//! hold-up energy: a capacitance charged to `volts_start` that may drain to `volts_min` while the
//! machine draws `watts`, which lasts `t = 1/2 C (V0^2 - Vmin^2) / P`. A safety margin (a
//! fraction of the window) is kept back: the save aims at the *budget*, `window * (1 - margin)`,
//! and admission control refuses work that would not fit in the budget.
//!
//! Figures worth knowing (from the DNV Memory and WSP papers):
//! - [`Window::ATX_PWR_OK_MS`] = 1 ms: what the ATX design guide promises between PWR_OK
//!   dropping and the DC rails leaving spec (T6 >= 1 ms);
//! - [`Window::DEFAULT_MS`] = 33 ms: the lead time some Intel machines forecast, the DNV paper's
//!   figure, and this crate's default;
//! - [`Window::CUSTOM_DETECTOR_MS`] = 70 ms: what a custom input-voltage detector gave in the DNV
//!   and Rapilog set-ups.

use std::fmt;
use std::time::Duration;

use crate::PowerFailError;

/// Hold-up energy parameters: a capacitance discharging from `volts_start` to `volts_min` while
/// the machine draws `watts`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HoldUp {
    /// Capacitance in microfarads.
    pub capacitance_uf: f64,
    /// Voltage when the warning arrives.
    pub volts_start: f64,
    /// Lowest voltage at which the rails are still in spec.
    pub volts_min: f64,
    /// Power drawn during the save, in watts.
    pub watts: f64,
}

impl HoldUp {
    /// Seconds of hold-up: `1/2 C (V0^2 - Vmin^2) / P`, after checking every parameter.
    pub fn seconds(&self) -> Result<f64, PowerFailError> {
        check_positive("capacitance_uf", self.capacitance_uf)?;
        check_positive("watts", self.watts)?;
        check_finite_nonneg("volts_min", self.volts_min)?;
        check_positive("volts_start", self.volts_start)?;
        if self.volts_start <= self.volts_min {
            return Err(PowerFailError::InvalidWindow {
                what: "volts_start",
                expected: "greater than volts_min",
                found: format!("{} (volts_min {})", self.volts_start, self.volts_min),
            });
        }
        let farads = self.capacitance_uf * 1e-6;
        let joules =
            0.5 * farads * (self.volts_start * self.volts_start - self.volts_min * self.volts_min);
        Ok(joules / self.watts)
    }
}

/// Where a window's length comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WindowKind {
    /// A detector's stated lead time.
    Deadline,
    /// Computed from hold-up energy.
    HoldUp(HoldUp),
}

/// A warning window and the safety margin kept back from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    total: Duration,
    kind: WindowKind,
    margin: f64,
}

impl Window {
    /// The default window in milliseconds: the 33 ms some Intel machines forecast (DNV paper).
    pub const DEFAULT_MS: f64 = 33.0;
    /// The ATX PWR_OK guarantee (T6 >= 1 ms).
    pub const ATX_PWR_OK_MS: f64 = 1.0;
    /// A custom input-voltage detector (> 70 ms in the DNV and Rapilog set-ups).
    pub const CUSTOM_DETECTOR_MS: f64 = 70.0;
    /// The default safety margin: a fifth of the window is kept back.
    pub const DEFAULT_MARGIN: f64 = 0.2;

    /// A window given as a deadline in milliseconds (finite, >= 0), with the default margin.
    pub fn deadline_ms(ms: f64) -> Result<Window, PowerFailError> {
        check_finite_nonneg("deadline_ms", ms)?;
        let total = duration_from_secs("deadline_ms", ms / 1000.0)?;
        Ok(Window {
            total,
            kind: WindowKind::Deadline,
            margin: Self::DEFAULT_MARGIN,
        })
    }

    /// A window given as a [`Duration`], with the default margin.
    pub fn from_duration(total: Duration) -> Window {
        Window {
            total,
            kind: WindowKind::Deadline,
            margin: Self::DEFAULT_MARGIN,
        }
    }

    /// A window computed from hold-up energy, with the default margin.
    pub fn holdup(h: HoldUp) -> Result<Window, PowerFailError> {
        let secs = h.seconds()?;
        let total = duration_from_secs("hold-up time", secs)?;
        Ok(Window {
            total,
            kind: WindowKind::HoldUp(h),
            margin: Self::DEFAULT_MARGIN,
        })
    }

    /// The 1 ms ATX PWR_OK window.
    pub fn atx_pwr_ok() -> Window {
        Window::from_duration(Duration::from_millis(1))
    }

    /// The 33 ms default window.
    pub fn intel_forecast() -> Window {
        Window::from_duration(Duration::from_millis(33))
    }

    /// The 70 ms custom-detector window.
    pub fn custom_detector() -> Window {
        Window::from_duration(Duration::from_millis(70))
    }

    /// The same window with another safety margin, a fraction in `[0, 1)`.
    pub fn with_margin(self, margin: f64) -> Result<Window, PowerFailError> {
        if !(margin.is_finite() && (0.0..1.0).contains(&margin)) {
            return Err(PowerFailError::InvalidWindow {
                what: "margin",
                expected: "a fraction in [0, 1)",
                found: margin.to_string(),
            });
        }
        Ok(Window { margin, ..self })
    }

    /// The whole window: past this the machine is assumed dead.
    pub fn total(&self) -> Duration {
        self.total
    }

    /// The safety margin as a fraction of the window.
    pub fn margin(&self) -> f64 {
        self.margin
    }

    /// What the save aims at: the window less its margin.
    pub fn budget(&self) -> Duration {
        self.total.mul_f64(1.0 - self.margin)
    }

    /// Where the window's length comes from.
    pub fn kind(&self) -> WindowKind {
        self.kind
    }
}

impl Default for Window {
    fn default() -> Window {
        Window::intel_forecast()
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} ms", ms(self.total))?;
        if let WindowKind::HoldUp(h) = self.kind {
            write!(
                f,
                " (hold-up: {} uF, {} V -> {} V at {} W)",
                h.capacitance_uf, h.volts_start, h.volts_min, h.watts
            )?;
        }
        write!(
            f,
            ", margin {:.0}%, budget {:.3} ms",
            self.margin * 100.0,
            ms(self.budget())
        )
    }
}

/// A duration in milliseconds, for reports.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn check_positive(what: &'static str, v: f64) -> Result<(), PowerFailError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(PowerFailError::InvalidWindow {
            what,
            expected: "a finite number > 0",
            found: v.to_string(),
        })
    }
}

fn check_finite_nonneg(what: &'static str, v: f64) -> Result<(), PowerFailError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(PowerFailError::InvalidWindow {
            what,
            expected: "a finite number >= 0",
            found: v.to_string(),
        })
    }
}

fn duration_from_secs(what: &'static str, secs: f64) -> Result<Duration, PowerFailError> {
    Duration::try_from_secs_f64(secs).map_err(|_| PowerFailError::InvalidWindow {
        what,
        expected: "a length a Duration can hold",
        found: format!("{secs} s"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holdup_formula() {
        // 0.5 F from 12 V to 11.4 V at 250 W: 0.25 * (144 - 129.96) / 250 = 14.04 ms.
        let w = Window::holdup(HoldUp {
            capacitance_uf: 500_000.0,
            volts_start: 12.0,
            volts_min: 11.4,
            watts: 250.0,
        })
        .unwrap();
        let got = w.total().as_secs_f64() * 1000.0;
        assert!((got - 14.04).abs() < 1e-6, "{got}");
    }

    #[test]
    fn invalid_parameters_are_refused() {
        let bad = HoldUp {
            capacitance_uf: 1.0,
            volts_start: 5.0,
            volts_min: 5.0,
            watts: 1.0,
        };
        assert!(matches!(
            Window::holdup(bad),
            Err(PowerFailError::InvalidWindow {
                what: "volts_start",
                ..
            })
        ));
        let bad = HoldUp { watts: 0.0, ..bad };
        assert!(matches!(
            Window::holdup(bad),
            Err(PowerFailError::InvalidWindow { what: "watts", .. })
        ));
        assert!(Window::deadline_ms(f64::NAN).is_err());
        assert!(Window::deadline_ms(-1.0).is_err());
        assert!(Window::deadline_ms(1e300).is_err());
        assert!(Window::default().with_margin(1.0).is_err());
        assert!(Window::default().with_margin(-0.1).is_err());
    }

    #[test]
    fn budget_keeps_the_margin_back() {
        let w = Window::deadline_ms(10.0)
            .unwrap()
            .with_margin(0.25)
            .unwrap();
        assert_eq!(w.total(), Duration::from_millis(10));
        assert_eq!(w.budget(), Duration::from_micros(7500));
        assert_eq!(Window::default().total(), Duration::from_millis(33));
        assert!(w.to_string().contains("budget 7.500 ms"), "{w}");
    }
}
