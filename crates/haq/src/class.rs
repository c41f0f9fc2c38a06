//! Priority classes and the crate's error type.
//!
//! A tenant's commands go to a queue of one of four classes. `Urgent` is served with strict
//! priority over the other three; `High`, `Medium` and `Low` share the device by their weights
//! (see [`crate::arbiter`]). The order of the variants is the priority order, so `Ord` sorts
//! the most urgent class first.
//!
//! Tenants are classed by their Linux I/O priority (`ionice`, read with `ioprio_get`, see
//! [`crate::ioprio`]): real time (1) is high, best effort (2) is medium, idle (3) is low. A
//! process nobody ran `ionice` on has class 0 (NONE), which the kernel serves as best effort,
//! so it is medium here. This departs from the dissertation, which maps class 0 to urgent:
//! there every unmodified process would preempt all weighted tenants. Here urgent is never
//! derived from a process's priority; the operator grants it by name.

use std::fmt;
use std::str::FromStr;

/// The errors of this crate. Each names what was wrong, what was expected and what was found.
#[derive(Debug, thiserror::Error)]
pub enum HaqError {
    /// A Linux I/O priority that is not one of the four classes, or whose level is out of range.
    #[error(
        "I/O priority class {class} level {level}: expected class 0 (none), 1 (rt), 2 (be) or 3 (idle) and level 0..=7"
    )]
    InvalidIoprio {
        /// The class found.
        class: u16,
        /// The level found.
        level: u16,
    },
    /// A text that does not parse (a command-line value, a configuration string).
    #[error("{what}: expected {expected}, found {found:?}")]
    Parse {
        /// What was being parsed, e.g. "class".
        what: &'static str,
        /// What would have been accepted.
        expected: &'static str,
        /// The text found.
        found: String,
    },
    /// A configuration value out of range.
    #[error("{what}: expected {expected}, found {found}")]
    InvalidConfig {
        /// The setting, e.g. "weights.high".
        what: &'static str,
        /// The accepted range.
        expected: String,
        /// The value found.
        found: String,
    },
    /// The controller was shut down, so it takes no more commands.
    #[error("the HAQ controller is shut down: {what} refused")]
    ShutDown {
        /// What was refused, e.g. "submit to queue alice/high".
        what: String,
    },
    /// A job ended without producing its result (it panicked).
    #[error("job of queue {queue} ended without a result (it panicked)")]
    JobFailed {
        /// The queue the job was submitted to, as "name/class".
        queue: String,
    },
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, e.g. "write chart.png".
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

/// A queue's priority class. The order of the variants is the priority order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Strict priority over every other class; granted by the operator.
    Urgent,
    /// The first weighted class (Linux `ionice -c1`, real time).
    High,
    /// The second weighted class (`ionice -c2`, best effort, and processes without a class).
    Medium,
    /// The third weighted class (`ionice -c3`, idle).
    Low,
}

impl Class {
    /// Every class, most urgent first.
    pub const ALL: [Class; 4] = [Class::Urgent, Class::High, Class::Medium, Class::Low];

    /// The weighted classes, in the order an arbitration round serves them.
    pub const WEIGHTED: [Class; 3] = [Class::High, Class::Medium, Class::Low];

    /// The class's name: "urgent", "high", "medium" or "low".
    pub fn name(self) -> &'static str {
        match self {
            Class::Urgent => "urgent",
            Class::High => "high",
            Class::Medium => "medium",
            Class::Low => "low",
        }
    }

    /// The position of the class in [`Class::ALL`] (0 for urgent .. 3 for low).
    pub fn index(self) -> usize {
        match self {
            Class::Urgent => 0,
            Class::High => 1,
            Class::Medium => 2,
            Class::Low => 3,
        }
    }

    /// The class of a Linux I/O priority: 1 (RT) is high, 2 (BE) is medium, 3 (IDLE) is low,
    /// 0 (NONE, a process nobody set a priority on; the kernel serves it as best effort) is
    /// medium. Urgent is never derived from a priority (see the module documentation). The
    /// level (0..=7) does not change the class but must be in range. Any other class or level
    /// is an error naming both.
    pub fn from_ioprio(class: u8, level: u8) -> Result<Class, HaqError> {
        if level > 7 {
            return Err(HaqError::InvalidIoprio {
                class: class.into(),
                level: level.into(),
            });
        }
        match class {
            0 | 2 => Ok(Class::Medium),
            1 => Ok(Class::High),
            3 => Ok(Class::Low),
            _ => Err(HaqError::InvalidIoprio {
                class: class.into(),
                level: level.into(),
            }),
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Class {
    type Err = HaqError;

    /// "urgent", "high", "medium", "low", or the `ionice` class names "rt" (high), "be"
    /// (medium), "idle" (low); ASCII case does not matter.
    fn from_str(s: &str) -> Result<Class, HaqError> {
        match s.to_ascii_lowercase().as_str() {
            "urgent" => Ok(Class::Urgent),
            "high" | "rt" | "realtime" => Ok(Class::High),
            "medium" | "be" | "best-effort" => Ok(Class::Medium),
            "low" | "idle" => Ok(Class::Low),
            _ => Err(HaqError::Parse {
                what: "class",
                expected: "urgent, high, medium, low, rt, be or idle",
                found: s.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioprio_classes_map_as_documented() {
        assert_eq!(Class::from_ioprio(1, 0).unwrap(), Class::High);
        assert_eq!(Class::from_ioprio(2, 4).unwrap(), Class::Medium);
        assert_eq!(Class::from_ioprio(3, 7).unwrap(), Class::Low);
        assert_eq!(Class::from_ioprio(0, 0).unwrap(), Class::Medium);
        for c in 0..=3u8 {
            assert_ne!(Class::from_ioprio(c, 0).unwrap(), Class::Urgent);
        }
    }

    #[test]
    fn bad_ioprio_values_are_errors_naming_them() {
        for (c, l) in [(4u8, 0u8), (7, 0), (255, 3), (2, 8), (1, 255)] {
            let e = Class::from_ioprio(c, l).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(&format!("class {c}")), "{msg}");
            assert!(msg.contains(&format!("level {l}")), "{msg}");
        }
    }

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for c in Class::ALL {
            assert_eq!(c.name().parse::<Class>().unwrap(), c);
            assert_eq!(c.to_string(), c.name());
            assert_eq!(Class::ALL[c.index()], c);
        }
        assert_eq!("RT".parse::<Class>().unwrap(), Class::High);
        assert_eq!("be".parse::<Class>().unwrap(), Class::Medium);
        assert_eq!("idle".parse::<Class>().unwrap(), Class::Low);
        let e = "hihg".parse::<Class>().unwrap_err().to_string();
        assert!(e.contains("\"hihg\"") && e.contains("expected"), "{e}");
        assert!("".parse::<Class>().is_err());
    }

    #[test]
    fn order_is_priority_order() {
        let mut v = vec![Class::Low, Class::Urgent, Class::Medium, Class::High];
        v.sort();
        assert_eq!(v, Class::ALL.to_vec());
    }
}
