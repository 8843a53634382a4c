//! The main node's side ([`Hub`]): answers workers' hellos (the same build and
//! protocol, or a one-line refusal), says it is alive, keeps each node's figures,
//! and hands the campaign what workers found (their queue entries, system crashes and
//! unit finds, as the [`Message`]s they came in) to validate.

use super::link::Link;
use super::{Message, UnitFile, Work, PROTOCOL};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// How often the main node says it is alive (its link does, by itself).
const ALIVE_EVERY: Duration = Duration::from_secs(1);

/// One node of a campaign, as `campaign.json` and the report list it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Its name (`main` for the main node).
    pub name: String,
    /// Cores it fuzzed on.
    pub cores: usize,
    /// Executions, system and unit.
    pub execs: u64,
    /// What it found: new queue entries, system crashes and unit crashes.
    pub finds: u64,
}

/// The main node's end of the cluster.
pub struct Hub {
    link: Link,
    build: u64,
    work: Work,
    workers: BTreeMap<String, NodeRecord>,
}

impl Hub {
    /// Listen on `addr` for workers of the program build `build` holding `key`, to
    /// give them `work`.
    pub fn listen(addr: &str, build: u64, work: Work, key: super::gate::Key) -> Result<Hub> {
        let link = Link::listen(addr, ALIVE_EVERY, key)?;
        Ok(Hub {
            link,
            build,
            work,
            workers: BTreeMap::new(),
        })
    }

    /// Where workers join.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.link.addr
    }

    /// Answer hellos and keep figures; returns the finds of welcomed workers that
    /// came (`Queue`, `SystemCrash` and `UnitFinds` messages), in order. `remaining` is
    /// the campaign's time left (for a worker that joins now).
    pub fn poll(&mut self, remaining: f64) -> Result<Vec<Message>> {
        let mut finds = Vec::new();
        for m in self.link.drain()? {
            match m {
                Message::Hello {
                    node,
                    protocol,
                    build,
                    cores,
                } => self.hello(node, protocol, build, cores, remaining)?,
                Message::Stats {
                    node,
                    cores,
                    execs,
                    finds: n,
                } => {
                    if let Some(w) = self.workers.get_mut(&node) {
                        *w = NodeRecord {
                            name: node,
                            cores,
                            execs,
                            finds: n,
                        };
                    }
                }
                Message::Queue { ref from, .. }
                | Message::SystemCrash { ref from, .. }
                | Message::UnitFinds { ref from, .. }
                    if self.workers.contains_key(from) =>
                {
                    finds.push(m)
                }
                _ => {}
            }
        }
        Ok(finds)
    }

    fn hello(
        &mut self,
        node: String,
        protocol: u32,
        build: u64,
        cores: usize,
        remaining: f64,
    ) -> Result<()> {
        let refusal = if protocol != PROTOCOL {
            Some(format!(
                "it speaks protocol {protocol}, the main node {PROTOCOL} (another trestle version)"
            ))
        } else if build != self.build {
            Some(format!("it has another build of the program (build {build:016x}; the main node's is {:016x})", self.build))
        } else if node == "main" {
            Some("`main` is the main node's name; give the worker another (--name)".to_owned())
        } else {
            None
        };
        if let Some(reason) = refusal {
            log::info!("trestle run: refused worker {node}: {reason}");
            return self.link.send(&Message::Refused { node, reason });
        }
        log::info!("trestle run: worker {node} joined ({cores} core(s))");
        self.workers.entry(node.clone()).or_insert(NodeRecord {
            name: node.clone(),
            cores,
            execs: 0,
            finds: 0,
        });
        let work = Work {
            remaining,
            ..self.work.clone()
        };
        self.link.send(&Message::Welcome { node, work })
    }

    /// Give the workers units to fuzz.
    pub fn send_units(&self, units: Vec<UnitFile>) -> Result<()> {
        if units.is_empty() {
            return Ok(());
        }
        self.link.send(&Message::Units { units })
    }

    /// Give the workers a queue entry of the main node's.
    pub fn send_queue(&self, name: String, test: Vec<u8>) -> Result<()> {
        self.link.send(&Message::Queue {
            from: "main".into(),
            name,
            test,
        })
    }

    /// Tell the workers the campaign is over.
    pub fn done(&self, reason: &str) -> Result<()> {
        self.link.send(&Message::Done {
            reason: reason.to_owned(),
        })
    }

    /// The workers that joined, with their last figures.
    pub fn workers(&self) -> Vec<NodeRecord> {
        self.workers.values().cloned().collect()
    }
}
