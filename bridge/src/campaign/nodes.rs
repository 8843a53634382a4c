//! A campaign across machines, the main node's part (`trestle run --listen`): it
//! gives workers the seeds, the units it carves and its queue entries, and takes what
//! they find into the campaign exactly as its own finds: queue entries into the system
//! fuzzer (and so into carving), system crashes to validation, unit finds to lifting.
//! Each worker's finds are kept under `nodes/<worker>/` (system tests) and
//! `fuzz/<function>-<worker>-<k>/` (unit runs), and its alarms name it (`found_on`).

use super::runner::Runner;
use super::FuzzedUnit;
use crate::carve::units::{safe_name, UnitIndex};
use crate::cluster::hub::{Hub, NodeRecord};
use crate::cluster::{Message, UnitFile, Work};
use anyhow::{Context as _, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use trestle_exec::systest::load_test;

/// The main node of a campaign across machines.
pub(super) struct MainNode {
    /// Where workers join and their messages come in.
    hub: Hub,
    /// This node leaves all fuzzing to the workers.
    pub(super) delegate: bool,
    /// Workers' finds not taken in yet.
    finds: Vec<Message>,
}

impl Runner {
    /// Accept workers at `addr` from now on; with `delegate`, this node fuzzes nothing.
    pub(super) fn listen(&mut self, addr: &str, delegate: bool, key: Option<&Path>) -> Result<()> {
        let s = &self.c.settings;
        let mut seeds = Vec::new();
        for t in trestle_exec::systest::load_tests(&s.seeds)? {
            let bytes = std::fs::read(&t.path)
                .with_context(|| format!("cannot read seed {}", t.path.display()))?;
            seeds.push((t.name, bytes));
        }
        let work = Work {
            seeds,
            timeout: s.timeout.as_secs_f64(),
            system_slice: s.system_slice.as_secs_f64(),
            unit_slice: s.unit_slice.as_secs_f64(),
            seed: s.seed,
            units: !s.system_only,
            remaining: self.remaining(),
        };
        // The campaign's key: given, or made once in its directory (a resume keeps it).
        let key_path = key
            .map(Path::to_owned)
            .unwrap_or_else(|| self.out.join("cluster.key"));
        let (key, made) = crate::cluster::gate::Key::load_or_create(&key_path)?;
        if made {
            log::info!(
                "trestle run: made the campaign's cluster key {}; copy it to the workers' machines",
                key_path.display()
            );
        }
        let hub = Hub::listen(addr, self.program.binary.build, work, key)?;
        log::info!(
            "trestle run: accepting workers at {} (trestle join {} --program PROGRAM --key {})",
            hub.addr(),
            hub.addr(),
            key_path.display()
        );
        self.cluster = Some(MainNode {
            hub,
            delegate,
            finds: Vec::new(),
        });
        // The units carved before (a resumed campaign) are the workers' too.
        for (dir, index) in self.c.unit_dirs.iter().zip(&self.unit_indexes) {
            self.share_units(dir, index)?;
        }
        Ok(())
    }

    /// Give the workers this node's new queue entries.
    pub(super) fn share_queue(&self, paths: &[PathBuf]) -> Result<()> {
        let Some(MainNode { hub, .. }) = &self.cluster else {
            return Ok(());
        };
        for p in paths {
            let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
            hub.send_queue(file_name(p), bytes)?;
        }
        Ok(())
    }

    /// Give the workers the parameterized units of a carved batch.
    pub(super) fn share_units(&self, dir: &Path, index: &UnitIndex) -> Result<()> {
        let Some(MainNode { hub, .. }) = &self.cluster else {
            return Ok(());
        };
        let root = self.out.join("units");
        let mut units = Vec::new();
        for row in index.units.iter().filter(|u| u.params > 0) {
            let path = dir.join(&row.file);
            let bytes = std::fs::read(&path)
                .with_context(|| format!("cannot read unit {}", path.display()))?;
            let name = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            units.push(UnitFile {
                name,
                function: row.function.clone(),
                bytes,
            });
        }
        hub.send_units(units)
    }

    /// Answer the workers and take in what they found.
    pub(super) fn serve_workers(&mut self) -> Result<()> {
        self.poll_workers()?;
        let finds = match self.cluster.as_mut() {
            Some(m) => std::mem::take(&mut m.finds),
            None => Vec::new(),
        };
        let lift = finds.iter().any(|f| matches!(f, Message::UnitFinds { .. }));
        for f in finds {
            self.take_find(f)?;
        }
        if lift {
            self.lift_pending()?;
        }
        Ok(())
    }

    /// Answer the workers' hellos and keep their finds for [`Runner::serve_workers`]
    /// (while a unit is fuzzed here: validating and lifting would compete with it).
    pub(super) fn poll_workers(&mut self) -> Result<()> {
        let remaining = self.remaining();
        let Some(m) = self.cluster.as_mut() else {
            return Ok(());
        };
        let finds = m.hub.poll(remaining)?;
        m.finds.extend(finds);
        Ok(())
    }

    /// Poll the workers for `d` (this node fuzzing nothing itself).
    pub(super) fn wait_for_workers(&mut self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        while Instant::now() < end
            && !super::status::STOP.load(Ordering::SeqCst)
            && self.remaining() > 0.0
        {
            self.serve_workers()?;
            self.status("waiting for the workers");
            self.sample()?;
            std::thread::sleep(
                Duration::from_millis(200).min(end.saturating_duration_since(Instant::now())),
            );
        }
        self.save()
    }

    fn take_find(&mut self, f: Message) -> Result<()> {
        match f {
            Message::Queue { from, name, test } => {
                let path = self.keep(&from, "queue", &name, &test)?;
                match load_test(&path) {
                    Ok(t) => {
                        self.sys.add_test(&t)?;
                    }
                    Err(e) => {
                        log::info!("trestle run: passing over a queue entry from {from}: {e:#}")
                    }
                }
            }
            Message::SystemCrash { from, name, test } => {
                let path = self.keep(&from, "crashes", &name, &test)?;
                self.system_crash(&path, Some(from))?;
            }
            Message::UnitFinds {
                from,
                unit,
                function,
                executions,
                crashes,
                queue,
            } => self.take_unit_finds(from, unit, function, executions, crashes, queue)?,
            _ => {}
        }
        Ok(())
    }

    /// A worker's system test, kept under `nodes/<worker>/<kind>/`.
    fn keep(&self, from: &str, kind: &str, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        let dir = self.out.join("nodes").join(safe_name(from)).join(kind);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join(file_part(name));
        trestle_exec::files::write_atomic(&path, bytes)?;
        Ok(path)
    }

    /// A worker's unit run, laid out as a local one (`fuzz/<function>-<worker>-<k>/`
    /// with the unit, its crashes and queue) and listed to be lifted.
    fn take_unit_finds(
        &mut self,
        from: String,
        unit: String,
        function: String,
        executions: u64,
        crashes: Vec<(String, Vec<u8>)>,
        queue: Vec<(String, Vec<u8>)>,
    ) -> Result<()> {
        let unit_path = self.out.join("units").join(&unit);
        if !unit_path.is_file() {
            log::info!("trestle run: {from} sent finds of unit {unit}, which this campaign does not have; passed over");
            return Ok(());
        }
        let k = self
            .c
            .fuzzed
            .iter()
            .filter(|f| f.function == function && f.node.as_deref() == Some(&from))
            .count();
        let dir = self.out.join("fuzz").join(format!(
            "{}-{}-{k}",
            safe_name(&function),
            safe_name(&from)
        ));
        trestle_exec::files::remove_dir_if_present(&dir)?;
        let dir = trestle_unit_fuzz::lay_out(&crate::carve::units::read_unit(&unit_path)?, &dir)?;
        for (sub, files) in [("crashes", &crashes), ("queue", &queue)] {
            for (name, bytes) in files {
                trestle_exec::files::write_atomic(&dir.join(sub).join(file_part(name)), bytes)?;
            }
        }
        self.c.fuzzed.push(FuzzedUnit {
            unit: unit_path,
            function,
            dir,
            executions,
            crashes: crashes.len(),
            lifted: false,
            new_alarms: 0,
            effective: 0,
            error: None,
            reason: format!("fuzzed on worker {from}"),
            value_hashes: Vec::new(),
            param_kinds: Vec::new(),
            node: Some(from),
            started_from: 0,
            corpus_evicted: false,
        });
        self.save()
    }

    /// The last finds, then tell the workers the campaign is over, and keep every
    /// node's figures.
    pub(super) fn close_cluster(&mut self, reason: &str) -> Result<()> {
        if self.cluster.is_none() {
            return Ok(());
        }
        self.serve_workers()?;
        if let Some(m) = &self.cluster {
            m.hub.done(reason)?;
        }
        // Their last figures and finds (a message takes up to a few seconds from broker
        // to broker).
        let end = Instant::now() + Duration::from_secs(4);
        while Instant::now() < end {
            self.serve_workers()?;
            std::thread::sleep(Duration::from_millis(100));
        }
        let Some(m) = &self.cluster else {
            return Ok(());
        };
        let main = NodeRecord {
            name: "main".into(),
            cores: if m.delegate { 0 } else { self.c.settings.cores },
            // Every run of its system fuzzer (seeds and workers' queue entries included)
            // and of its own unit fuzzing.
            execs: self.sys.executions()
                + self
                    .c
                    .fuzzed
                    .iter()
                    .filter(|f| f.node.is_none())
                    .map(|f| f.executions)
                    .sum::<u64>(),
            finds: self.c.main_finds,
        };
        self.c.nodes = std::iter::once(main).chain(m.hub.workers()).collect();
        self.save()
    }
}

/// A file name a worker sent, as a name in one directory (never a path elsewhere):
/// kept as it is when it is one (LibAFL pairs `x` with `.x.metadata`), else made safe.
fn file_part(name: &str) -> String {
    if !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0')
    {
        name.to_owned()
    } else {
        safe_name(name)
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
