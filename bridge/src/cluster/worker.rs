//! `trestle join HOST:PORT`: a worker. It says hello with its program's build, gets
//! the campaign's seeds and settings, and then fuzzes in rounds as the main node does
//! (a system slice, then a unit slice), sending every new system queue entry, system
//! crash and unit find to the main node as it goes, and taking the queue entries and
//! units the other nodes send. It judges nothing: the main node validates.
//!
//! It stops when its time or the campaign's is up, when the main node says the
//! campaign is done, or when the main node has not been heard of for
//! [`MAIN_SILENCE`] (it went away), each with a message.
//!
//! With `--cores N` (N > 1) the process starts N single-core workers of its own,
//! `NAME-c1` … `NAME-cN`, each on a core of its own with its own system fuzzer and
//! unit slices (they share what they find through the brokers, as any workers do), and
//! waits for them; they die with it.

use super::link::Link;
use super::{Message, UnitFile, Work, PROTOCOL};
use anyhow::{bail, Context as _, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trestle_exec::binary::Binary;
use trestle_exec::systest::{load_test, NamedTest};
use trestle_sysfuzz::{dictionary, SysFuzzConfig, SysFuzzer};

/// How long a worker waits for the main node's answer to its hello (the main node
/// answers between its steps; carving or lifting can take a minute).
const WELCOME_WAIT: Duration = Duration::from_secs(300);
/// A main node not heard of for this long has gone away.
pub const MAIN_SILENCE: Duration = Duration::from_secs(20);
/// At most this many bytes of one unit slice's queue go to the main node.
const MAX_QUEUE_BYTES: usize = 8 << 20;

/// Options of `trestle join`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The main node's address, `HOST:PORT`.
    pub addr: String,
    /// The program, the same build as the main node's.
    pub program: PathBuf,
    /// Cores to fuzz on: one worker process per core.
    pub cores: usize,
    /// How long to work at most (default: as long as the campaign).
    pub time: Option<Duration>,
    /// Where to keep the worker's queue and unit runs (default: a temporary directory).
    pub out: Option<PathBuf>,
    /// The worker's name (default: host name and process id).
    pub name: Option<String>,
    /// Run the program without bubblewrap.
    pub no_sandbox: bool,
    /// The campaign's key file.
    pub key: PathBuf,
}

/// How a worker's session went.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// Its name.
    pub node: String,
    /// Executions, system and unit.
    pub execs: u64,
    /// Findings sent.
    pub finds: u64,
    /// Why it stopped.
    pub stopped: String,
}

/// Run `trestle join`.
pub fn run(o: &Options) -> Result<Summary> {
    if o.cores == 0 {
        bail!("--cores 0: a worker needs at least one core");
    }
    if o.cores > 1 {
        return run_per_core(o);
    }
    let binary = Binary::load(&o.program)?;
    let node = o.name.clone().unwrap_or_else(default_name);
    let key = crate::cluster::gate::Key::load(&o.key)?;
    let link = Link::join(&o.addr, &key)?;
    link.send(&Message::Hello {
        node: node.clone(),
        protocol: PROTOCOL,
        build: binary.build,
        cores: o.cores,
    })?;
    let (work, backlog) = welcome(&link, &node)?;
    // A fuzzer and the program it runs take turns: one core serves both best. (Once
    // welcomed: a refused worker says one line, why.)
    crate::fuzz::bind_core(None, false)?;
    let scratch;
    let dir = match &o.out {
        Some(d) => d.clone(),
        None => {
            scratch = tempfile::Builder::new()
                .prefix("trestle-worker-")
                .tempdir()?;
            scratch.path().to_owned()
        }
    };
    log::info!(
        "trestle join: {node} joined the campaign at {}; working in {}",
        link.addr,
        dir.display()
    );
    // The main node says when the campaign is over; a little past its end, a worker
    // that has not heard so stops by itself.
    let campaign_left = Duration::from_secs_f64(work.remaining.max(0.0)) + Duration::from_secs(30);
    let deadline = Instant::now() + o.time.unwrap_or(Duration::MAX / 4).min(campaign_left);
    let mut w = Worker::new(o, node, link, work, &binary, &dir, deadline)?;
    for m in backlog {
        w.take(m)?;
    }
    let stopped = w.rounds()?;
    w.send_stats()?;
    log::info!(
        "trestle join: {} stopped ({stopped}): {} executions, {} finds sent",
        w.node,
        w.execs,
        w.finds
    );
    Ok(Summary {
        node: w.node,
        execs: w.execs,
        finds: w.finds,
        stopped,
    })
}

/// `--cores N`: N single-core workers, each this function again on options of its own
/// (`NAME-c1` … `NAME-cN`, each with its own directory under `--out`) in a child
/// process forked from this one, which dies with it; returns when all have stopped
/// (each says its own figures, and the main node has them).
fn run_per_core(o: &Options) -> Result<Summary> {
    let available = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if o.cores > available {
        bail!(
            "--cores {}: this process may run on {available} core(s)",
            o.cores
        );
    }
    Binary::load(&o.program)?; // a missing or foreign program: one error, not N
    crate::cluster::gate::Key::load(&o.key)?; // so is a missing key
    let base = o.name.clone().unwrap_or_else(default_name);
    let mut children = Vec::new();
    for k in 1..=o.cores {
        let name = format!("{base}-c{k}");
        let one = Options {
            cores: 1,
            name: Some(name.clone()),
            out: o.out.as_ref().map(|d| d.join(&name)),
            ..o.clone()
        };
        // SAFETY: the process has one thread here (the workers start theirs after
        // the fork), so the child's copy of it is whole.
        match unsafe { libc::fork() } {
            -1 => {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("cannot start worker {name}"))
            }
            0 => {
                // SAFETY: prctl only sets this process's parent-death signal.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) };
                // A panic must not unwind into the parent's loop in this copy of it.
                let code = match std::panic::catch_unwind(|| run(&one)) {
                    Ok(Ok(_)) => 0,
                    Ok(Err(e)) => {
                        log::error!("trestle: error: worker {name}: {e:#}");
                        2
                    }
                    Err(_) => 101,
                };
                // SAFETY: ends this child without running the parent's exit handlers.
                unsafe { libc::_exit(code) }
            }
            pid => children.push((name, pid)),
        }
    }
    log::info!(
        "trestle join: {} workers started ({base}-c1 … {base}-c{})",
        o.cores,
        o.cores
    );
    let mut failed = Vec::new();
    for (name, pid) in children {
        let mut status = 0;
        // SAFETY: waits for a child of this process, writing its status to `status`.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e).with_context(|| format!("waiting for worker {name}"));
            }
        }
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            failed.push(format!("{name} ({})", wait_status(status)));
        }
    }
    if !failed.is_empty() {
        bail!(
            "worker(s) {} stopped with an error (see their lines above)",
            failed.join(", ")
        );
    }
    // Each worker said its own figures; the main node has them all.
    Ok(Summary {
        node: base,
        execs: 0,
        finds: 0,
        stopped: format!("its {} workers stopped", o.cores),
    })
}

/// A child's wait status in words.
fn wait_status(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("wait status {status}")
    }
}

fn default_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let host =
        if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            String::from_utf8_lossy(&buf[..end]).into_owned()
        } else {
            "worker".into()
        };
    format!("{host}-{}", std::process::id())
}

/// Wait for the main node's welcome (or refusal) of `node`; the messages that came
/// before it (a late joiner reads what was sent before it came) are kept.
fn welcome(link: &Link, node: &str) -> Result<(Work, Vec<Message>)> {
    let end = Instant::now() + WELCOME_WAIT;
    let mut backlog = Vec::new();
    let mut heard = Instant::now();
    while Instant::now() < end {
        if heard.elapsed() > MAIN_SILENCE {
            bail!(
                "the main node at {} has not been heard of for {}s: it went away",
                link.addr,
                MAIN_SILENCE.as_secs()
            );
        }
        match link.recv(Duration::from_millis(200))? {
            Some(Message::Alive { .. }) => heard = Instant::now(),
            Some(Message::Welcome { node: n, work }) if n == node => return Ok((work, backlog)),
            Some(Message::Refused { node: n, reason }) if n == node => bail!(
                "the main node at {} refused this worker: {reason}",
                link.addr
            ),
            Some(m @ (Message::Units { .. } | Message::Queue { .. } | Message::Done { .. })) => {
                backlog.push(m)
            }
            _ => {}
        }
    }
    bail!("the main node at {} did not answer within {}s (is it a trestle run --listen of this version?)", link.addr, WELCOME_WAIT.as_secs())
}

struct Worker {
    node: String,
    link: Link,
    work: Work,
    cores: usize,
    dir: PathBuf,
    binary: Binary,
    sys: SysFuzzer,
    /// Units received, with how often this worker fuzzed each.
    units: Vec<(UnitFile, usize)>,
    deadline: Instant,
    last_alive: Instant,
    done: Option<String>,
    execs: u64,
    finds: u64,
    rounds: u64,
    /// This worker's random seed (the campaign's mixed with its name), for its system
    /// fuzzer and, plus the round, its unit slices.
    seed: u64,
}

impl Worker {
    fn new(
        o: &Options,
        node: String,
        link: Link,
        work: Work,
        binary: &Binary,
        dir: &Path,
        deadline: Instant,
    ) -> Result<Worker> {
        let seeds_dir = dir.join("seeds");
        std::fs::create_dir_all(&seeds_dir)
            .with_context(|| format!("cannot create {}", seeds_dir.display()))?;
        let mut seeds = Vec::new();
        for (name, bytes) in &work.seeds {
            let name = crate::carve::units::safe_name(name);
            let path = seeds_dir.join(format!("{name}.json"));
            std::fs::write(&path, bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
            seeds.push(NamedTest {
                name,
                test: load_test(&path)?,
                path,
            });
        }
        // Each worker its own random seed, from the campaign's and its name.
        let seed = work.seed ^ trestle_abi::ids::fnv1a64(node.as_bytes());
        let sys = SysFuzzer::new(SysFuzzConfig {
            program: binary.path.clone(),
            seeds,
            out: dir.join("system"),
            timeout: Duration::from_secs_f64(work.timeout),
            seed,
            dictionary: dictionary(binary),
            no_forkserver: false,
            cmplog: true,
            memory: if trestle_exec::sandbox::is_sanitizer_build(&binary.path) {
                0
            } else {
                trestle_exec::sandbox::Limits::default().memory
            },
            sandbox: !o.no_sandbox,
            // The lean sibling, if the program a worker runs has one beside it.
            lean: true,
        })
        .context("starting the system-level fuzzer")?;
        Ok(Worker {
            node,
            link,
            work,
            cores: o.cores.max(1),
            dir: dir.to_owned(),
            binary: binary.clone(),
            sys,
            units: Vec::new(),
            deadline,
            last_alive: Instant::now(),
            done: None,
            execs: 0,
            finds: 0,
            rounds: 0,
            seed,
        })
    }

    /// Rounds until a reason to stop; returns it.
    fn rounds(&mut self) -> Result<String> {
        loop {
            self.take_all()?;
            if let Some(why) = self.stop_reason() {
                return Ok(why);
            }
            self.system_slice()?;
            if self.work.units && self.stop_reason().is_none() {
                self.unit_slice()?;
            }
            self.rounds += 1;
            crate::memory::give_back_free_memory();
            self.send_stats()?;
        }
    }

    fn stop_reason(&self) -> Option<String> {
        if let Some(why) = &self.done {
            return Some(format!("the campaign is over: {why}"));
        }
        if Instant::now() >= self.deadline {
            return Some("its time is up".into());
        }
        if self.last_alive.elapsed() > MAIN_SILENCE {
            return Some(format!(
                "the main node at {} has not been heard of for {}s: it went away",
                self.link.addr,
                MAIN_SILENCE.as_secs()
            ));
        }
        None
    }

    fn take_all(&mut self) -> Result<()> {
        for m in self.link.drain()? {
            self.take(m)?;
        }
        Ok(())
    }

    /// One message from another node.
    fn take(&mut self, m: Message) -> Result<()> {
        match m {
            Message::Alive { .. } => self.last_alive = Instant::now(),
            Message::Done { reason } => self.done = Some(reason),
            Message::Units { units } => {
                self.last_alive = Instant::now();
                for u in units {
                    if !self.units.iter().any(|(v, _)| v.name == u.name) {
                        self.units.push((u, 0));
                    }
                }
            }
            Message::Queue { from, test, .. } if from != self.node => {
                let path = self.dir.join("incoming.json");
                std::fs::write(&path, &test)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                // A test that does not load is another node's problem: said, passed over.
                match load_test(&path) {
                    Ok(t) => {
                        self.sys.add_test(&t)?;
                        // Not this worker's find: the next slice must not send it back.
                        self.sys.take_report()?;
                    }
                    Err(e) => {
                        log::info!("trestle join: passing over a queue entry from {from}: {e:#}")
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// System fuzzing for a slice, in short chunks; what it finds goes out at once.
    fn system_slice(&mut self) -> Result<()> {
        let end = Instant::now() + Duration::from_secs_f64(self.work.system_slice);
        while Instant::now() < end && Instant::now() < self.deadline {
            let rep = self
                .sys
                .fuzz_for(Duration::from_secs(2).min(end - Instant::now()))?;
            self.execs += rep.executions;
            for p in &rep.new_queue {
                let test =
                    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
                self.link.send(&Message::Queue {
                    from: self.node.clone(),
                    name: file_name(p),
                    test,
                })?;
                self.sent("queue", &file_name(p), 1)?;
            }
            for p in &rep.new_crashes {
                let test =
                    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
                self.link.send(&Message::SystemCrash {
                    from: self.node.clone(),
                    name: file_name(p),
                    test,
                })?;
                self.sent("crash", &file_name(p), 1)?;
            }
            // Figures every chunk: a worker that is killed has them counted up to then.
            self.send_stats()?;
            self.take_all()?;
            if self.done.is_some() {
                break;
            }
        }
        Ok(())
    }

    /// Fuzz the unit fuzzed least so far for a slice and send what it found. Ties
    /// go in an order of the worker's own (a hash of its name and the unit's), so
    /// that workers start on different units.
    fn unit_slice(&mut self) -> Result<()> {
        let order = |u: &UnitFile| {
            trestle_abi::ids::fnv1a64(format!("{}/{}", self.node, u.name).as_bytes())
        };
        let Some(i) =
            (0..self.units.len()).min_by_key(|&i| (self.units[i].1, order(&self.units[i].0)))
        else {
            return Ok(());
        };
        self.units[i].1 += 1;
        let (u, k) = (self.units[i].0.clone(), self.units[i].1);
        let unit = crate::carve::units::decode_unit(&u.bytes)
            .with_context(|| format!("unit {} from the main node", u.name))?;
        let dir = self.dir.join("fuzz").join(format!(
            "{}-{k}",
            crate::carve::units::safe_name(&u.function)
        ));
        trestle_exec::files::remove_dir_if_present(&dir)?;
        let left = self.deadline.saturating_duration_since(Instant::now());
        let cfg = crate::fuzz::unit_fuzz_config(
            &self.binary,
            unit,
            dir.clone(),
            Duration::from_secs_f64(self.work.unit_slice).min(left.max(Duration::from_secs(1))),
            self.sys.run_limit(),
            Duration::from_secs_f64(self.work.timeout),
            self.seed.wrapping_add(self.rounds),
            self.cores,
        );
        let report = trestle_unit_fuzz::fuzz_in_process(&cfg);
        let executions = match report {
            Ok(r) => r.executions,
            Err(e) => {
                // One unit that cannot be fuzzed here is that unit's problem.
                log::info!("trestle join: unit {}: {e:#}", u.name);
                return Ok(());
            }
        };
        self.execs += executions;
        let crashes = files_in(&dir.join("crashes"), usize::MAX)?;
        let queue = files_in(&dir.join("queue"), MAX_QUEUE_BYTES)?;
        if !crashes.is_empty() || !queue.is_empty() {
            let n = crashes.len() as u64;
            self.link.send(&Message::UnitFinds {
                from: self.node.clone(),
                unit: u.name.clone(),
                function: u.function,
                executions,
                crashes,
                queue,
            })?;
            self.sent("unit", &u.name, n)?;
        }
        Ok(())
    }

    /// Count `finds` sent, and list what was sent in `sent.log` (seconds since the
    /// epoch, kind, name): what the main node has from this worker.
    fn sent(&mut self, kind: &str, name: &str, finds: u64) -> Result<()> {
        use std::io::Write as _;
        self.finds += finds;
        let log = self.dir.join("sent.log");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot write {}", log.display()))?;
        writeln!(f, "{now:.3} {kind} {name}")
            .with_context(|| format!("cannot write {}", log.display()))
    }

    fn send_stats(&self) -> Result<()> {
        self.link.send(&Message::Stats {
            node: self.node.clone(),
            cores: self.cores,
            execs: self.execs,
            finds: self.finds,
        })
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The regular files of `dir` (LibAFL's metadata files included), up to `max_bytes`
/// in all; none if it does not exist.
fn files_in(dir: &Path, max_bytes: usize) -> Result<Vec<(String, Vec<u8>)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut out = Vec::new();
    let mut total = 0;
    for e in entries {
        let p = e
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        if !p.is_file() {
            continue;
        }
        let bytes = std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?;
        total += bytes.len();
        if total > max_bytes {
            break;
        }
        out.push((file_name(&p), bytes));
    }
    out.sort();
    Ok(out)
}
