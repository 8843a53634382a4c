//! How a bridge campaign splits its time between the system fuzzer and unit rounds
//! (carving, fuzzing a unit, lifting what it found): by what each produced per second
//! recently, in one currency, new edges of the program at system level (an alarm counts
//! as [`ALARM_EDGES`] of them). A side that finds nothing loses its time to the other,
//! down to a floor: where units add nothing the bridge runs as `--system-only` would,
//! less [`UNIT_FLOOR`] of its time; where they solve what the system fuzzer cannot,
//! they get up to [`UNIT_CAP`].
//!
//! A side is credited with what it found less its noise ([`Side::credit`]): once the
//! system fuzzer plateaus, both sides find an edge now and then, and one edge a lifted
//! test happened on bought the units half the time for minutes (cut, in the benchmark:
//! a unit round's single edge at 74 s against none from the system fuzzer kept the
//! unit share at 30-50% until 313 s, and the campaign's units found nothing else).

use serde::{Deserialize, Serialize};

/// The least share of the time unit rounds get, however little they find.
pub const UNIT_FLOOR: f64 = 0.1;
/// The most they get, however much they find: the system fuzzer turns what units
/// solve into coverage further on.
pub const UNIT_CAP: f64 = 0.7;
/// What an alarm is worth, in edges.
pub const ALARM_EDGES: f64 = 50.0;
/// How much of a side's history each new round of it keeps: its rate follows the last
/// few rounds.
const DECAY: f64 = 0.7;
/// Unit rounds before the split follows their results: the first few are taken
/// whatever the system fuzzer does, to learn what units are worth here.
const LEARNING_ROUNDS: u32 = 2;

/// What one side produced recently, decayed.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Side {
    /// Edges (and alarms, as edges) found.
    pub found: f64,
    /// Seconds spent.
    pub seconds: f64,
    /// Rounds recorded.
    pub rounds: u32,
}

impl Side {
    fn record(&mut self, found: f64, seconds: f64) {
        self.found = self.found * DECAY + found.max(0.0);
        self.seconds = self.seconds * DECAY + seconds.max(0.0);
        self.rounds += 1;
    }

    /// What the side found, less one standard deviation of a count of that size
    /// (a Poisson count's is its square root): a single edge earns nothing, three
    /// earn 1.3, fifty alarm-edges earn 43. What a side finds steadily stands out of
    /// its noise; what it happened on once does not.
    pub fn credit(&self) -> f64 {
        (self.found - self.found.sqrt()).max(0.0)
    }

    /// Edges per second, recently, by [`Side::credit`].
    pub fn rate(&self) -> f64 {
        if self.seconds <= 0.0 {
            0.0
        } else {
            self.credit() / self.seconds
        }
    }
}

/// The split's state, kept in `campaign.json`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Schedule {
    /// The system fuzzer's slices.
    pub system: Side,
    /// Unit rounds.
    pub units: Side,
}

impl Schedule {
    /// A system slice of `seconds` found `edges` new edges and `alarms` alarms.
    pub fn system_found(&mut self, edges: f64, alarms: f64, seconds: f64) {
        self.system.record(edges + ALARM_EDGES * alarms, seconds);
    }

    /// A unit round of `seconds` found `edges` new edges (through its lifted tests)
    /// and `alarms` alarms.
    pub fn units_found(&mut self, edges: f64, alarms: f64, seconds: f64) {
        self.units.record(edges + ALARM_EDGES * alarms, seconds);
    }

    /// The share of the time unit rounds get now.
    pub fn unit_share(&self) -> f64 {
        if self.units.rounds < LEARNING_ROUNDS {
            return 0.5;
        }
        let (u, s) = (self.units.rate(), self.system.rate());
        if u + s <= 0.0 {
            // Neither finds anything: the system fuzzer is what a user would run.
            return UNIT_FLOOR;
        }
        (u / (u + s)).clamp(UNIT_FLOOR, UNIT_CAP)
    }

    /// How long the next system slice lasts after a unit round of `unit_seconds`, so
    /// that unit rounds take [`Schedule::unit_share`] of the time; at least `min`.
    pub fn system_slice(&self, unit_seconds: f64, min: f64) -> f64 {
        let u = self.unit_share();
        (unit_seconds * (1.0 - u) / u).max(min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_that_find_nothing_fall_to_the_floor() {
        let mut s = Schedule::default();
        for _ in 0..5 {
            s.system_found(20.0, 0.0, 30.0);
            s.units_found(0.0, 0.0, 10.0);
        }
        assert_eq!(s.unit_share(), UNIT_FLOOR);
        // A 10 s unit round is followed by 90 s of system fuzzing.
        assert!((s.system_slice(10.0, 5.0) - 90.0).abs() < 1e-9);
    }

    #[test]
    fn units_that_solve_what_the_system_fuzzer_cannot_get_the_time() {
        let mut s = Schedule::default();
        for _ in 0..5 {
            s.system_found(0.0, 0.0, 30.0);
            s.units_found(12.0, 1.0, 10.0);
        }
        assert_eq!(s.unit_share(), UNIT_CAP);
        assert!(s.system_slice(10.0, 2.0) < 10.0);
        assert_eq!(s.system_slice(1.0, 2.0), 2.0, "never below the least slice");
    }

    #[test]
    fn the_split_follows_recent_results_and_learns_first() {
        let mut s = Schedule::default();
        s.system_found(100.0, 0.0, 10.0);
        s.units_found(0.0, 0.0, 10.0);
        assert_eq!(
            s.unit_share(),
            0.5,
            "the first unit rounds are taken whatever the system fuzzer finds"
        );
        s.units_found(0.0, 0.0, 10.0);
        assert_eq!(s.unit_share(), UNIT_FLOOR);
        // Then units start to pay and the system fuzzer dries up.
        for _ in 0..6 {
            s.system_found(0.0, 0.0, 10.0);
            s.units_found(30.0, 0.0, 10.0);
        }
        assert!(s.unit_share() > 0.5, "share {}", s.unit_share());
        // Nobody finds anything any more: the system fuzzer is what a user would run.
        let quiet = Schedule {
            system: Side {
                found: 0.0,
                seconds: 10.0,
                rounds: 9,
            },
            units: Side {
                found: 0.0,
                seconds: 10.0,
                rounds: 9,
            },
        };
        assert_eq!(quiet.unit_share(), UNIT_FLOOR);
    }

    #[test]
    fn an_edge_the_units_happened_on_once_does_not_buy_them_the_time() {
        // The system fuzzer has plateaued; a unit round's lifted test finds one edge.
        let mut s = Schedule::default();
        for _ in 0..3 {
            s.system_found(0.0, 0.0, 30.0);
            s.units_found(0.0, 0.0, 10.0);
        }
        s.units_found(1.0, 0.0, 10.0);
        s.system_found(0.0, 0.0, 30.0);
        assert_eq!(s.unit_share(), UNIT_FLOOR, "{s:?}");
        // Units that find edges round after round do get it.
        for _ in 0..4 {
            s.units_found(3.0, 0.0, 10.0);
            s.system_found(0.0, 0.0, 30.0);
        }
        assert_eq!(s.unit_share(), UNIT_CAP, "{s:?}");
        // And an alarm is worth it at once.
        let mut a = Schedule::default();
        for _ in 0..3 {
            a.system_found(2.0, 0.0, 30.0);
            a.units_found(0.0, 0.0, 10.0);
        }
        a.units_found(0.0, 1.0, 10.0);
        assert!(a.unit_share() > 0.5, "{a:?}");
    }
}
