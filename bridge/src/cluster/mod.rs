//! A campaign across machines: a main node (`trestle run --listen HOST:PORT`) and
//! workers (`trestle join HOST:PORT`), connected by LibAFL's LLMP brokers
//! broker-to-broker over TCP ([`link::Link`]).
//!
//! The main node records, carves, validates, reduces and reports, as a campaign on one
//! machine does; workers fuzz system tests and units and send back what they find
//! ([`Message`]). Only the main node judges: a worker's crash is an alarm once the
//! main node's validation reproduces it.

pub mod link;

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
        /// Its program's build ([`crate::binary::Binary::build`]).
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
