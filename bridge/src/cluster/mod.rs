//! A campaign across machines: a main node (`trestle run --listen HOST:PORT`) and
//! workers (`trestle join HOST:PORT`), connected by LibAFL's LLMP brokers
//! broker-to-broker over TCP ([`link::Link`]).
//!
//! The main node records, carves, validates, reduces and reports, as a campaign on one
//! machine does; workers fuzz system tests and units and send back what they find
//! ([`Message`]). Only the main node judges: a worker's crash is an alarm once the
//! main node's validation reproduces it.

pub mod gate;
pub mod hub;
pub mod link;
pub mod worker;

use serde::{Deserialize, Serialize};

/// Version of the messages below; a worker of another version is turned away.
pub const PROTOCOL: u32 = 1;

/// What nodes tell each other. Every message goes to every node; one meant for a
/// single worker names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// A worker asks to join (worker → main).
    Hello {
        /// The worker's name (unique in the campaign).
        node: String,
        /// Its [`PROTOCOL`].
        protocol: u32,
        /// Its program's build ([`trestle_exec::binary::Binary::build`]).
        build: u64,
        /// Cores it fuzzes on.
        cores: usize,
    },
    /// The main node turns a worker away, saying why (main → worker).
    Refused {
        /// The worker.
        node: String,
        /// Why, in one line.
        reason: String,
    },
    /// The main node takes a worker in: what it fuzzes and how (main → worker).
    Welcome {
        /// The worker.
        node: String,
        /// Its work.
        work: Work,
    },
    /// Units carved since the last such message (main → workers).
    Units {
        /// The units.
        units: Vec<UnitFile>,
    },
    /// A system test that reached new coverage on `from` (any node → all).
    Queue {
        /// The node that found it.
        from: String,
        /// Its name there.
        name: String,
        /// The test, as system-test JSON.
        test: Vec<u8>,
    },
    /// A crash the system fuzzer of a worker found (worker → main).
    SystemCrash {
        /// The worker.
        from: String,
        /// Its name there.
        name: String,
        /// The test, as system-test JSON.
        test: Vec<u8>,
    },
    /// What fuzzing one unit for a slice found on a worker (worker → main).
    UnitFinds {
        /// The worker.
        from: String,
        /// The unit ([`UnitFile::name`]).
        unit: String,
        /// Its function.
        function: String,
        /// Executions.
        executions: u64,
        /// Inputs that crashed the unit: (file name, bytes).
        crashes: Vec<(String, Vec<u8>)>,
        /// Inputs that reached new unit coverage: (file name, bytes).
        queue: Vec<(String, Vec<u8>)>,
    },
    /// What a worker has done so far (worker → main, every few seconds).
    Stats {
        /// The worker.
        node: String,
        /// Its cores.
        cores: usize,
        /// Executions, system and unit.
        execs: u64,
        /// Findings sent: queue entries, crashes and unit finds.
        finds: u64,
    },
    /// The main node is alive, `elapsed` seconds into the campaign (main → workers).
    Alive {
        /// Seconds since the campaign started.
        elapsed: f64,
    },
    /// The campaign is over (main → workers).
    Done {
        /// Why, in one line.
        reason: String,
    },
}

/// A carved unit as it travels: its path under the main node's `units/` and its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitFile {
    /// Path under `units/` (`batch-0000/parse/1f2e.unit`): the unit's name everywhere.
    pub name: String,
    /// Its function.
    pub function: String,
    /// The unit file.
    pub bytes: Vec<u8>,
}

/// What a worker is to do, from the main node's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Work {
    /// The seed system tests: (name, system-test JSON).
    pub seeds: Vec<(String, Vec<u8>)>,
    /// Time limit per execution, seconds.
    pub timeout: f64,
    /// Length of a system fuzzing slice, seconds.
    pub system_slice: f64,
    /// Length of a unit fuzzing slice, seconds.
    pub unit_slice: f64,
    /// Random seed of the campaign (each worker derives its own).
    pub seed: u64,
    /// Whether to fuzz units (the bridge) or only system tests (a system-only campaign).
    pub units: bool,
    /// Seconds left in the campaign.
    pub remaining: f64,
}
