//! The recorded context of one invocation, and the state it leaves behind.
//!
//! Memory is stored as a graph of extents. A pointer is never stored as an address
//! but as the extent it points into plus an offset, so a replay can place the extents
//! anywhere and relocate. The walk that produces a graph visits roots in a fixed order
//! (arguments, then globals by id) and numbers extents as it first meets them, so two
//! walks over equal memory give equal graphs: that is what the fidelity check compares.

use serde::{Deserialize, Serialize};

/// A 64-bit value as it sits in an argument slot, a return slot or a memory word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Value {
    /// Plain bits: an integer, a float, null, or a pointer into nothing trestle knows.
    Bits(u64),
    /// A pointer into `extent` (an index into the owning graph's extents), at `offset`
    /// bytes from its start (may equal the extent's length: one past the end).
    Ptr {
        /// Index of the target extent.
        extent: u32,
        /// Byte offset from the extent's start.
        offset: u64,
    },
    /// The address of a function, by id (plus an offset, which is almost always 0).
    Func {
        /// Function id.
        id: u64,
        /// Byte offset from the function's address.
        offset: u64,
    },
}

/// Where an extent came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExtentKind {
    /// A heap allocation.
    Heap,
    /// A stack allocation (an escaping `alloca`, or a `byval` argument copy).
    Stack,
    /// A global variable; restored in place.
    Global {
        /// Global id.
        id: u64,
        /// Read-only: neither dumped nor restored, only pointed at.
        constant: bool,
    },
    /// Program arguments and environment (`argv`, `envp` and their strings).
    Arg,
    /// A C library `FILE` object; [`Graph::files`] says which file it had open.
    File,
    /// Heap memory the program has freed, still pointed at (a cache's stale pointer,
    /// say). While recording and replaying, freed blocks are held back from reuse, so
    /// a stale pointer keeps meaning "freed" instead of aliasing a newer allocation.
    /// Compared as a pointer target only: its bytes are not recorded or restored.
    Freed,
    /// A block the C library allocated for itself (a compiled `regcomp` pattern's
    /// automaton, say), found by its allocator's chunk header where a pointer of the
    /// context points at its start. A replay takes it from the C library's allocator
    /// (not the arena), so the C library may grow or free it as it did.
    LibcHeap,
}

/// The open file behind a [`ExtentKind::File`] extent, so a replay can open the same
/// file at the same position under the same descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OpenFile {
    /// Index of the `FILE` extent.
    pub extent: u32,
    /// Its file descriptor.
    pub fd: i32,
    /// The descriptor's offset, where it can be told (not for pipes and terminals).
    pub offset: Option<u64>,
    /// The path it was opened with (relative paths are relative to the test's working
    /// directory); `None` for the standard streams and `fdopen`.
    pub path: Option<String>,
    /// `open(2)` flags equivalent to its `fopen` mode.
    pub flags: i32,
    /// Which of the C library's standard streams this `FILE` was (0 `stdin`, 1
    /// `stdout`, 2 `stderr`), if any: a replay restores it in place, where the C
    /// library's own pointer (`printf`, `getchar`) still finds it.
    pub standard: Option<u8>,
}

/// A pointer-sized word inside an extent that points somewhere known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PtrSlot {
    /// Byte offset of the word inside its extent.
    pub offset: u64,
    /// Where it points ([`Value::Ptr`] or [`Value::Func`]).
    pub target: Value,
}

/// One contiguous allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Extent {
    /// What kind of allocation.
    pub kind: ExtentKind,
    /// Length in bytes.
    pub len: u64,
    /// The largest power of two (at most 4096) that divided its address.
    pub align: u32,
    /// Its bytes, with pointer words left as recorded (they are patched on restore);
    /// `None` for read-only globals and extents the size bound cut off.
    pub bytes: Option<Vec<u8>>,
    /// The pointer words, in offset order.
    pub pointers: Vec<PtrSlot>,
}

/// Memory reachable from a set of roots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Graph {
    /// Extents in the order the walk met them.
    pub extents: Vec<Extent>,
    /// True if the size bound stopped the walk: some extents have no bytes.
    pub partial: bool,
    /// The open files behind the `FILE` extents.
    pub files: Vec<OpenFile>,
}

impl Graph {
    /// Check that the graph can be restored as it says: each global at most once (two
    /// extents of one global would overlap in memory), bytes within their extent,
    /// pointer words inside their extent, in offset order and not overlapping, and
    /// pointing at extents that exist. A unit from a trace of this program always
    /// passes; a damaged or hand-made one gets the first problem in words.
    pub fn check_shape(&self) -> Result<(), String> {
        let mut globals = std::collections::HashMap::new();
        for (i, e) in self.extents.iter().enumerate() {
            if let ExtentKind::Global { id, .. } = e.kind {
                if let Some(first) = globals.insert(id, i) {
                    return Err(format!(
                        "extents e{first} and e{i} overlap: both are global {id:016x}"
                    ));
                }
            }
            if let Some(b) = &e.bytes {
                if b.len() as u64 > e.len {
                    return Err(format!(
                        "extent e{i} holds {} bytes but is {} long",
                        b.len(),
                        e.len
                    ));
                }
            }
            let mut next_free = 0u64;
            for slot in &e.pointers {
                if slot.offset.checked_add(8).is_none_or(|end| end > e.len) {
                    return Err(format!(
                        "extent e{i}: pointer at +{} lies outside its {} bytes",
                        slot.offset, e.len
                    ));
                }
                if slot.offset < next_free {
                    return Err(format!(
                        "extent e{i}: pointer at +{} overlaps the one before it",
                        slot.offset
                    ));
                }
                next_free = slot.offset + 8;
                if let Value::Ptr { extent, .. } = slot.target {
                    if extent as usize >= self.extents.len() {
                        return Err(format!(
                            "extent e{i}: pointer at +{} to e{extent}, which does not exist",
                            slot.offset
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The context of one invocation: what a replay restores before calling the function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Context {
    /// The invoked function.
    pub fn_id: u64,
    /// Argument values, one per parameter.
    pub args: Vec<Value>,
    /// Memory reachable from the arguments and the globals the function can reach.
    pub graph: Graph,
    /// The `setlocale` calls the process had made before the invocation, in order
    /// (category, locale name as asked for); a replay repeats them.
    pub locale: Vec<(i32, String)>,
    /// The `setvbuf` calls the process had made on the standard streams with no
    /// buffer of its own (descriptor, mode, size), in order; a replay repeats them. bc
    /// makes stdout line-buffered in `main`: a unit that reaches stdout only through
    /// the C library's `stdout` would otherwise find it fully buffered.
    pub stdio_modes: Vec<(i32, i32, u64)>,
    /// Files the program had open with `open`/`openat` (descriptor, offset, path,
    /// flags; `extent` unused): a replay reopens them under the same numbers.
    pub fds: Vec<OpenFile>,
    /// How far each input stream had been consumed ([`StreamPos`]): standard input
    /// and the files the program reads. Not part of what a replay restores; carving
    /// turns the unread rest of a stream into a parameter.
    pub streams: Vec<StreamPos>,
}

/// The read position of one input stream at a moment of the recording.
///
/// The program has consumed `offset - pending` bytes of the file: the descriptor
/// stands at `offset`, and the `FILE` (if any) still holds `pending` bytes it read
/// ahead but has not handed to the program yet.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamPos {
    /// The descriptor.
    pub fd: i32,
    /// The `FILE` extent reading from it, if the context holds one; `None` for the C
    /// library's own `stdin` (not reachable from the program's memory) or a bare
    /// descriptor read with `read(2)`.
    pub file: Option<u32>,
    /// True if a `FILE` reads from the descriptor (the C library's `stdin` included).
    pub buffered: bool,
    /// The path it was opened with; `None` for standard input.
    pub path: Option<String>,
    /// The descriptor's offset; `None` if it cannot be told (a pipe, a socket).
    pub offset: Option<u64>,
    /// Bytes read ahead into the `FILE`'s buffer and not yet consumed.
    pub pending: u64,
    /// Where the `FILE`'s read pointer stood (an address, compared only: it moves
    /// when the program reads, also on a stream whose offset cannot be told).
    pub mark: u64,
    /// Why the stream's position cannot be restored with another content (a
    /// wide-character stream, pushed-back bytes, …); `None` when it can.
    pub problem: Option<String>,
}

impl StreamPos {
    /// Bytes of the file the program has consumed, when that can be told.
    pub fn consumed(&self) -> Option<u64> {
        self.offset.and_then(|o| o.checked_sub(self.pending))
    }
}

/// The state an invocation leaves: its return value and the memory reachable from the
/// same roots afterwards, numbered afresh.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct State {
    /// The return value (`Bits(0)` for void).
    pub ret: Value,
    /// Memory after the call.
    pub graph: Graph,
    /// The input streams' positions after the call (not compared: a replay serves
    /// its input from elsewhere).
    pub streams: Vec<StreamPos>,
}

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// It returned.
    Returned(State),
    /// It (or something it called) called `exit`.
    Exited {
        /// The exit status.
        code: i32,
        /// Memory at exit.
        state: State,
    },
    /// The process died of a signal inside it.
    Crashed {
        /// The signal number.
        signal: i32,
    },
    /// A C++ exception left it (thrown inside it or below, caught above it). Memory
    /// is not compared: the handlers above it run before anyone could look.
    Threw,
}

impl Outcome {
    /// The memory after the call, when the outcome has it.
    pub fn state(&self) -> Option<&State> {
        match self {
            Outcome::Returned(s) | Outcome::Exited { state: s, .. } => Some(s),
            Outcome::Crashed { .. } | Outcome::Threw => None,
        }
    }

    /// A one-word description.
    pub fn summary(&self) -> String {
        match self {
            Outcome::Returned(s) => format!("returned {}", s.ret.describe()),
            Outcome::Exited { code, .. } => format!("exited with status {code}"),
            Outcome::Crashed { signal } => format!("crashed with signal {signal}"),
            Outcome::Threw => "threw an exception".to_string(),
        }
    }
}

impl Value {
    /// A short human-readable form.
    pub fn describe(&self) -> String {
        match self {
            Value::Bits(b) => format!("{}", *b as i64),
            // An offset past half the address space is one before the extent's start.
            Value::Ptr { extent, offset } if (*offset as i64) < 0 => {
                format!("&e{extent}-{}", (*offset as i64).unsigned_abs())
            }
            Value::Ptr { extent, offset } => format!("&e{extent}+{offset}"),
            Value::Func { id, offset } => format!("fn#{id:016x}+{offset}"),
        }
    }
}

/// Compare an expected outcome with an observed one. `None` means they agree; otherwise
/// the first difference, in words.
pub fn diff_outcomes(expected: &Outcome, observed: &Outcome) -> Option<String> {
    diff_outcomes_after(&Graph::default(), expected, observed)
}

/// [`diff_outcomes`] for an invocation that started from the memory `pre` (its
/// context's graph). A word of a global that held a pointer in `pre` and holds none
/// after the call was partly overwritten (bc's scanner stores a `char` into a union
/// over the previous token's string pointer): its remaining bytes are the old
/// pointer's, an address that differs between the recording and the replay by
/// construction, so only the bytes the recorded call changed are compared there.
pub fn diff_outcomes_after(pre: &Graph, expected: &Outcome, observed: &Outcome) -> Option<String> {
    diff_outcomes_except(pre, expected, observed, &Unstable::default())
}

/// [`diff_outcomes_after`], leaving out the words of memory that are `unstable`.
pub fn diff_outcomes_except(
    pre: &Graph,
    expected: &Outcome,
    observed: &Outcome,
    unstable: &Unstable,
) -> Option<String> {
    diff_outcomes_named(pre, expected, observed, unstable, &GlobalNames::new())
}

/// Names of globals by id, for differences that name the global they are in
/// (`global initial_seed`) rather than its id. An id without a name is shown as it is.
pub type GlobalNames = std::collections::HashMap<u64, String>;

/// [`diff_outcomes_except`], naming globals as `names` says.
pub fn diff_outcomes_named(
    pre: &Graph,
    expected: &Outcome,
    observed: &Outcome,
    unstable: &Unstable,
    names: &GlobalNames,
) -> Option<String> {
    let exempt = Exempt {
        stale: StalePointers::of(pre),
        unstable,
        index: None,
    };
    match (expected, observed) {
        (Outcome::Returned(a), Outcome::Returned(b)) => diff_states_after(a, b, &exempt, names),
        (Outcome::Exited { code: ca, state: a }, Outcome::Exited { code: cb, state: b }) => {
            if ca != cb {
                Some(format!("exit status {ca} recorded, {cb} in replay"))
            } else {
                diff_states_after(a, b, &exempt, names)
            }
        }
        (Outcome::Crashed { signal: a }, Outcome::Crashed { signal: b }) if a == b => None,
        (Outcome::Threw, Outcome::Threw) => None,
        (a, b) => Some(format!(
            "{} recorded, {} in replay",
            a.summary(),
            b.summary()
        )),
    }
}

/// The words of memory in which two replays of one context differ from each other:
/// what the call computed from something outside its context (the clock, the process
/// id, a random seed taken from either; mawk seeds `rand()` from the time of day at
/// start-up), which no recording can predict. By aligned 8-byte words, not bytes: a
/// time in microseconds differs only in its low bytes between two replays a moment
/// apart, in its high bytes too from a recording made earlier. Only memory, and not
/// the call's result: two replays that differ in how they ended, in the return value
/// or a returned aggregate, in the shape of the memory or in a pointer leave nothing
/// out, so such a difference from the recording still counts (a function returning
/// the process id is not faithful).
///
/// [`Unstable::between_recordings`] is the other source: two recordings of the same
/// call (the same seed run twice) that disagree show what the call took from outside
/// its context, and there the result may be left out too (a process id returned).
#[derive(Debug, Default, Clone)]
pub struct Unstable {
    /// (extent index, offset of the word) in the memory after the call.
    words: std::collections::HashSet<(usize, usize)>,
    /// The return value is left out.
    ret: bool,
    /// Extents left out whole (their pointers or sizes differ).
    extents: std::collections::BTreeSet<usize>,
    /// All memory after the call is left out (its shape differs).
    memory: bool,
}

impl Unstable {
    /// Where the memory after the replays `a` and `b` differs.
    pub fn between(a: &Outcome, b: &Outcome) -> Self {
        let mut words = std::collections::HashSet::new();
        if let (Some(x), Some(y)) = (a.state(), b.state()) {
            // A returned aggregate is copied into a stack extent for the walk.
            let result = match x.ret {
                Value::Ptr { extent, .. }
                    if x.graph
                        .extents
                        .get(extent as usize)
                        .is_some_and(|e| e.kind == ExtentKind::Stack) =>
                {
                    Some(extent as usize)
                }
                _ => None,
            };
            if x.graph.extents.len() == y.graph.extents.len() {
                for (i, (p, q)) in x.graph.extents.iter().zip(&y.graph.extents).enumerate() {
                    if Some(i) == result {
                        continue;
                    }
                    if let (Some(p), Some(q)) = (&p.bytes, &q.bytes) {
                        words.extend(differing_words(i, p, q));
                    }
                }
            }
        }
        Unstable {
            words,
            ..Unstable::default()
        }
    }

    /// What two recordings `a` and `b` of the same call disagree on: the return value,
    /// extents whose size or pointers differ (all memory when the number of extents
    /// does), and words of memory otherwise. An error, saying how, when the two ended
    /// differently (returned in one, exited or crashed in the other; other exit
    /// statuses or signals): then neither is an oracle for a replay.
    pub fn between_recordings(a: &Outcome, b: &Outcome) -> Result<Self, String> {
        let ended_alike = match (a, b) {
            (Outcome::Returned(_), Outcome::Returned(_)) | (Outcome::Threw, Outcome::Threw) => true,
            (Outcome::Exited { code: p, .. }, Outcome::Exited { code: q, .. }) => p == q,
            (Outcome::Crashed { signal: p }, Outcome::Crashed { signal: q }) => p == q,
            _ => false,
        };
        if !ended_alike {
            return Err(format!(
                "{} in one recording, {} in the other",
                a.summary(),
                b.summary()
            ));
        }
        let mut u = Unstable::default();
        let (Some(x), Some(y)) = (a.state(), b.state()) else {
            return Ok(u);
        };
        u.ret = x.ret != y.ret;
        if x.graph.extents.len() != y.graph.extents.len() {
            u.memory = true;
            return Ok(u);
        }
        for (i, (p, q)) in x.graph.extents.iter().zip(&y.graph.extents).enumerate() {
            if p.kind != q.kind || p.len != q.len || p.pointers != q.pointers {
                u.extents.insert(i);
            } else if let (Some(p), Some(q)) = (&p.bytes, &q.bytes) {
                u.words.extend(differing_words(i, p, q));
            }
        }
        Ok(u)
    }

    /// Leave out what `other` leaves out too.
    pub fn merge(&mut self, other: Unstable) {
        self.words.extend(other.words);
        self.extents.extend(other.extents);
        self.ret |= other.ret;
        self.memory |= other.memory;
    }

    /// How many words are left out.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// True if nothing is left out.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && self.extents.is_empty() && !self.ret && !self.memory
    }

    /// What is left out, in words: "the return value, 2 words of memory".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.ret {
            parts.push("the return value".to_owned());
        }
        if self.memory {
            parts.push("the memory after the call (its shape)".to_owned());
        }
        if !self.extents.is_empty() {
            parts.push(format!(
                "{} extent(s) (their size or pointers)",
                self.extents.len()
            ));
        }
        if !self.words.is_empty() {
            parts.push(format!("{} word(s) of memory", self.words.len()));
        }
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join(", ")
        }
    }

    fn contains(&self, extent: usize, offset: usize) -> bool {
        self.words.contains(&(extent, offset & !7))
    }

    fn whole_extent(&self, extent: usize) -> bool {
        self.memory || self.extents.contains(&extent)
    }
}

/// (extent `i`, aligned word offset) of every byte in which `p` and `q` differ.
fn differing_words<'a>(
    i: usize,
    p: &'a [u8],
    q: &'a [u8],
) -> impl Iterator<Item = (usize, usize)> + 'a {
    (0..p.len().min(q.len()))
        .filter(move |&o| p[o] != q[o])
        .map(move |o| (i, o & !7))
}

/// What a comparison of memory after a call leaves out.
struct Exempt<'a> {
    stale: StalePointers<'a>,
    unstable: &'a Unstable,
    /// Where the graphs compared leave extents out: each extent's index in the graph
    /// `unstable` speaks of.
    index: Option<&'a [usize]>,
}

impl Exempt<'_> {
    fn unstable_extent(&self, i: usize) -> usize {
        self.index.and_then(|k| k.get(i).copied()).unwrap_or(i)
    }
}

/// [`diff_states_with`] after a call from a context. Where the recorded call partly
/// overwrote a word of a global (a `char` stored into a union over a string pointer),
/// the bytes it left are the old ones: an old pointer, relocated into the replay's
/// memory, or bits restored as recorded, an address of the recording's memory. Either
/// way what is left may point into some extent in one run and into none (or another)
/// in the other. Where the two differ, they are compared again without the pointers
/// such words hold and without the extents only those pointers reach.
fn diff_states_after(
    a: &State,
    b: &State,
    exempt: &Exempt<'_>,
    names: &GlobalNames,
) -> Option<String> {
    let d = diff_states_with(a, b, exempt, names)?;
    // Only words whose pointers the two disagree on, and in which the replay wrote
    // what the recorded call wrote: a new pointer the call stored shares its high bytes
    // with the old one, but is relocated in the replay, low bytes and all.
    fn global(g: &Graph, id: u64) -> Option<&Extent> {
        g.extents
            .iter()
            .find(|e| matches!(e.kind, ExtentKind::Global { id: i, .. } if i == id))
    }
    let words: std::collections::HashSet<(u64, u64)> = exempt
        .stale
        .partly_overwritten(&a.graph)
        .into_iter()
        .filter(|&(id, offset)| {
            let (Some(x), Some(y)) = (global(&a.graph, id), global(&b.graph, id)) else {
                return false;
            };
            let (Some(p), Some(q), Some(old)) =
                (&x.bytes, &y.bytes, exempt.stale.before(id, offset))
            else {
                return false;
            };
            let at = offset as usize..offset as usize + 8;
            let (Some(p), Some(q)) = (p.get(at.clone()), q.get(at)) else {
                return false;
            };
            let written_alike = (0..8).all(|k| p[k] == old[k] || p[k] == q[k]);
            let slot = |e: &Extent| e.pointers.iter().find(|s| s.offset == offset).cloned();
            written_alike && slot(x) != slot(y)
        })
        .collect();
    if words.is_empty() {
        return Some(d);
    }
    let (a, kept) = without_slots(a, &words);
    let (b, _) = without_slots(b, &words);
    let exempt = Exempt {
        stale: exempt.stale.clone(),
        unstable: exempt.unstable,
        index: Some(&kept),
    };
    diff_states_with(&a, &b, &exempt, names).map(|_| d)
}

/// `s` without the pointer slots of globals at `words` and the extents reached only
/// through them, with the index in `s` of each extent kept. An extent is reached if a
/// global, the return value or nothing at all points at it (the walk's other roots,
/// the arguments, are not written down), or a kept pointer does.
fn without_slots(s: &State, words: &std::collections::HashSet<(u64, u64)>) -> (State, Vec<usize>) {
    let g = &s.graph;
    let n = g.extents.len();
    let dropped = |e: &Extent, p: &PtrSlot| matches!(e.kind, ExtentKind::Global { id, .. } if words.contains(&(id, p.offset)));
    let target = |v: &Value| match *v {
        Value::Ptr { extent, .. } if (extent as usize) < n => Some(extent as usize),
        _ => None,
    };
    let mut pointed = vec![false; n];
    for p in g.extents.iter().flat_map(|e| &e.pointers) {
        if let Some(t) = target(&p.target) {
            pointed[t] = true;
        }
    }
    let mut todo: Vec<usize> = (0..n)
        .filter(|&i| !pointed[i] || matches!(g.extents[i].kind, ExtentKind::Global { .. }))
        .collect();
    todo.extend(target(&s.ret));
    let mut reached = vec![false; n];
    while let Some(i) = todo.pop() {
        if std::mem::replace(&mut reached[i], true) {
            continue;
        }
        let e = &g.extents[i];
        todo.extend(
            e.pointers
                .iter()
                .filter(|p| !dropped(e, p))
                .filter_map(|p| target(&p.target)),
        );
    }
    let kept: Vec<usize> = (0..n).filter(|&i| reached[i]).collect();
    let mut renumbered = vec![None; n];
    for (k, &i) in kept.iter().enumerate() {
        renumbered[i] = Some(k as u32);
    }
    let remap = |v: &Value| match *v {
        Value::Ptr { extent, offset } => match renumbered.get(extent as usize).copied().flatten() {
            Some(extent) => Value::Ptr { extent, offset },
            None => *v,
        },
        v => v,
    };
    let extents = kept
        .iter()
        .map(|&i| {
            let e = &g.extents[i];
            let pointers = e
                .pointers
                .iter()
                .filter(|p| !dropped(e, p))
                .map(|p| PtrSlot {
                    offset: p.offset,
                    target: remap(&p.target),
                })
                .collect();
            Extent {
                pointers,
                ..e.clone()
            }
        })
        .collect();
    let files = g
        .files
        .iter()
        .filter_map(|f| {
            Some(OpenFile {
                extent: renumbered.get(f.extent as usize).copied().flatten()?,
                ..f.clone()
            })
        })
        .collect();
    let graph = Graph {
        extents,
        partial: g.partial,
        files,
    };
    (
        State {
            ret: remap(&s.ret),
            graph,
            streams: s.streams.clone(),
        },
        kept,
    )
}

/// The pointer words of a context's globals, with the bytes they held.
#[derive(Default, Clone)]
struct StalePointers<'a> {
    /// (global id, word offset) -> the recorded word.
    words: std::collections::HashMap<(u64, u64), &'a [u8]>,
    /// Each global's bytes in the context.
    globals: std::collections::HashMap<u64, &'a [u8]>,
}

impl<'a> StalePointers<'a> {
    fn of(pre: &'a Graph) -> Self {
        let mut words = std::collections::HashMap::new();
        let mut globals = std::collections::HashMap::new();
        for e in &pre.extents {
            let (ExtentKind::Global { id, .. }, Some(bytes)) = (e.kind, &e.bytes) else {
                continue;
            };
            globals.insert(id, bytes.as_slice());
            for p in &e.pointers {
                if let Some(word) = bytes.get(p.offset as usize..p.offset as usize + 8) {
                    words.insert((id, p.offset), word);
                }
            }
        }
        StalePointers { words, globals }
    }

    /// The pointer words of globals in `after` that the call partly changed from what
    /// the context held there (some bytes the same, some not): a pointer there is
    /// made of the bytes left from before, whether those were a pointer the call did
    /// not relocate or bits restored as they were.
    fn partly_overwritten(&self, after: &Graph) -> std::collections::HashSet<(u64, u64)> {
        let mut words = std::collections::HashSet::new();
        for e in &after.extents {
            let (ExtentKind::Global { id, .. }, Some(bytes)) = (e.kind, &e.bytes) else {
                continue;
            };
            for p in &e.pointers {
                let (Some(now), Some(old)) = (
                    bytes.get(p.offset as usize..p.offset as usize + 8),
                    self.before(id, p.offset),
                ) else {
                    continue;
                };
                let same = now.iter().zip(old).filter(|(x, y)| x == y).count();
                if same > 0 && same < 8 {
                    words.insert((id, p.offset));
                }
            }
        }
        words
    }

    /// The word the context held at `offset` of global `id`.
    fn before(&self, id: u64, offset: u64) -> Option<&'a [u8]> {
        self.globals
            .get(&id)?
            .get(offset as usize..offset as usize + 8)
    }

    /// True if byte `o` of global `kind` is a leftover of a pointer the call did not
    /// overwrite in the recording (`recorded` is the recorded byte after the call).
    fn leftover(&self, kind: ExtentKind, o: usize, recorded: u8) -> bool {
        let ExtentKind::Global { id, .. } = kind else {
            return false;
        };
        let word = (o & !7) as u64;
        self.words
            .get(&(id, word))
            .is_some_and(|w| w[o - word as usize] == recorded)
    }
}

/// Compare two states (return value, then memory graph).
pub fn diff_states(a: &State, b: &State) -> Option<String> {
    diff_states_with(
        a,
        b,
        &Exempt {
            stale: StalePointers::default(),
            unstable: &Unstable::default(),
            index: None,
        },
        &GlobalNames::new(),
    )
}

fn diff_states_with(
    a: &State,
    b: &State,
    exempt: &Exempt<'_>,
    names: &GlobalNames,
) -> Option<String> {
    if a.ret != b.ret && !exempt.unstable.ret {
        return Some(format!(
            "return value {} recorded, {} in replay",
            a.ret.describe(),
            b.ret.describe()
        ));
    }
    diff_graphs_with(&a.graph, &b.graph, exempt, names)
}

/// Compare two memory graphs extent by extent. Alignment is not compared: a replay
/// places heap extents where its allocator likes.
pub fn diff_graphs(a: &Graph, b: &Graph) -> Option<String> {
    diff_graphs_with(
        a,
        b,
        &Exempt {
            stale: StalePointers::default(),
            unstable: &Unstable::default(),
            index: None,
        },
        &GlobalNames::new(),
    )
}

/// An extent's kind in a difference: a global by name where `names` knows it.
pub fn describe_kind(kind: ExtentKind, names: &GlobalNames) -> String {
    match kind {
        ExtentKind::Global { id, constant } => format!(
            "global {}{}",
            names
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("{id:016x}")),
            if constant { " (read-only)" } else { "" }
        ),
        k => format!("{k:?}"),
    }
}

fn diff_graphs_with(
    a: &Graph,
    b: &Graph,
    exempt: &Exempt<'_>,
    names: &GlobalNames,
) -> Option<String> {
    let kind = |k: ExtentKind| describe_kind(k, names);
    if exempt.unstable.memory {
        return None;
    }
    if a.extents.len() != b.extents.len() {
        return Some(format!(
            "{} extents reachable after the recorded call, {} after the replay",
            a.extents.len(),
            b.extents.len()
        ));
    }
    for (i, (x, y)) in a.extents.iter().zip(&b.extents).enumerate() {
        if exempt.unstable.whole_extent(exempt.unstable_extent(i)) {
            continue;
        }
        let same_kind = match (x.kind, y.kind) {
            (ExtentKind::Global { id: p, .. }, ExtentKind::Global { id: q, .. }) => p == q,
            (ExtentKind::Global { .. }, _) | (_, ExtentKind::Global { .. }) => false,
            (ExtentKind::Freed, k) | (k, ExtentKind::Freed) => k == ExtentKind::Freed,
            _ => true,
        };
        if !same_kind {
            return Some(format!(
                "extent e{i}: {} recorded, {} in replay",
                kind(x.kind),
                kind(y.kind)
            ));
        }
        if x.len != y.len {
            return Some(format!(
                "extent e{i}: {} bytes recorded, {} in replay",
                x.len, y.len
            ));
        }
        if x.pointers != y.pointers {
            let describe = |p: Option<&PtrSlot>| match p {
                Some(p) => format!("+{} -> {}", p.offset, p.target.describe()),
                None => "nothing".into(),
            };
            let k = x
                .pointers
                .iter()
                .zip(&y.pointers)
                .take_while(|(a, b)| a == b)
                .count();
            return Some(format!(
                "extent e{i} ({}): pointer {} recorded, {} in replay",
                kind(x.kind),
                describe(x.pointers.get(k)),
                describe(y.pointers.get(k))
            ));
        }
        if let (Some(p), Some(q)) = (&x.bytes, &y.bytes) {
            if p == q {
                // Most extents are equal byte for byte: one comparison of the
                // slices, not a look at each byte.
                continue;
            }
            // Every pointer word differs (the replay relocated it): look each byte
            // up among the words sorted, not through all of them (an array of a
            // thousand pointers made that quadratic).
            let mut ptr_words: Vec<u64> = x.pointers.iter().map(|s| s.offset).collect();
            ptr_words.sort_unstable();
            let in_ptr = |o: usize| {
                let o = o as u64;
                let i = ptr_words.partition_point(|&w| w + 8 <= o);
                ptr_words.get(i).is_some_and(|&w| w <= o)
            };
            let differs = |o: usize| {
                p[o] != q[o]
                    && !in_ptr(o)
                    && !exempt.stale.leftover(x.kind, o, p[o])
                    && !exempt.unstable.contains(exempt.unstable_extent(i), o)
            };
            if let Some(o) = (0..p.len().min(q.len())).find(|&o| differs(o)) {
                return Some(format!(
                    "extent e{i} ({}): byte {o} is {:#04x} recorded, {:#04x} in replay",
                    kind(x.kind),
                    p[o],
                    q[o]
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap(bytes: &[u8]) -> Extent {
        Extent {
            kind: ExtentKind::Heap,
            len: bytes.len() as u64,
            align: 16,
            bytes: Some(bytes.to_vec()),
            pointers: vec![],
        }
    }

    #[test]
    fn a_changed_byte_is_a_difference() {
        let a = State {
            ret: Value::Bits(1),
            graph: Graph {
                extents: vec![heap(b"abc")],
                ..Graph::default()
            },
            streams: vec![],
        };
        let mut b = a.clone();
        assert_eq!(diff_states(&a, &b), None);
        b.graph.extents[0].bytes = Some(b"abd".to_vec());
        assert!(diff_states(&a, &b).unwrap().contains("byte 2"));
    }

    #[test]
    fn a_difference_in_a_global_names_it_where_the_name_is_known() {
        let global = |v: u8| Extent {
            kind: ExtentKind::Global {
                id: 7,
                constant: false,
            },
            ..heap(&[v])
        };
        let out = |v| {
            Outcome::Returned(State {
                ret: Value::Bits(0),
                graph: Graph {
                    extents: vec![global(v)],
                    ..Graph::default()
                },
                streams: vec![],
            })
        };
        let pre = Graph::default();
        let names = GlobalNames::from([(7, "initial_seed".to_owned())]);
        let named =
            diff_outcomes_named(&pre, &out(1), &out(2), &Unstable::default(), &names).unwrap();
        assert_eq!(
            named,
            "extent e0 (global initial_seed): byte 0 is 0x01 recorded, 0x02 in replay"
        );
        let unnamed = diff_outcomes_except(&pre, &out(1), &out(2), &Unstable::default()).unwrap();
        assert!(unnamed.contains("(global 0000000000000007)"), "{unnamed}");
    }

    /// bc's scanner stores a `char` into a union over the previous token's string
    /// pointer: what is left of the old pointer points into some extent in the
    /// recording and into none in the replay (or elsewhere), and that is no
    /// difference. A pointer the call stored anew, and a different `char`, still are.
    #[test]
    fn a_char_over_a_stale_pointer_is_no_difference_and_a_new_pointer_is_one() {
        let global = |bytes: [u8; 8], target: Option<(u32, u64)>| Extent {
            kind: ExtentKind::Global {
                id: 9,
                constant: false,
            },
            pointers: target
                .map(|(extent, offset)| PtrSlot {
                    offset: 0,
                    target: Value::Ptr { extent, offset },
                })
                .into_iter()
                .collect(),
            ..heap(&bytes)
        };
        let state = |extents: Vec<Extent>| {
            Outcome::Returned(State {
                ret: Value::Bits(0),
                graph: Graph {
                    extents,
                    ..Graph::default()
                },
                streams: vec![],
            })
        };
        let old = 0x5555_0000_1230u64.to_le_bytes();
        let pre = Graph {
            extents: vec![global(old, Some((1, 0))), heap(b"word\0")],
            ..Graph::default()
        };
        let with_char = |c: u8, high: u64| {
            let mut w = high.to_le_bytes();
            w[0] = c;
            w
        };
        // Recorded: '+' over the old pointer, which now lands inside another chunk.
        let recorded = state(vec![
            global(with_char(b'+', 0x5555_0000_1200), Some((1, 0x2b - 0x20))),
            heap(b"01234567890123"),
        ]);
        // Replayed: the old pointer was the replay's, so what is left of it points nowhere.
        let replayed = state(vec![global(with_char(b'+', 0x7777_0000_4400), None)]);
        assert_eq!(diff_outcomes_after(&pre, &recorded, &replayed), None);
        // The next token's: the context held the leftover as bits, restored as they
        // were, and the call's '+' over them points into the recording's memory only.
        let bits = with_char(b'(', 0x5555_0000_1200);
        let pre_bits = Graph {
            extents: vec![global(bits, None)],
            ..Graph::default()
        };
        let recorded_bits = state(vec![
            global(with_char(b'+', 0x5555_0000_1200), Some((1, 3))),
            heap(b"0123456789"),
        ]);
        let replayed_bits = state(vec![global(with_char(b'+', 0x5555_0000_1200), None)]);
        assert_eq!(
            diff_outcomes_after(&pre_bits, &recorded_bits, &replayed_bits),
            None
        );
        let other_char = state(vec![global(with_char(b'-', 0x7777_0000_4400), None)]);
        assert!(diff_outcomes_after(&pre, &recorded, &other_char).is_some());
        // A new pointer the call stored (high bytes like the old one's) to a string
        // the replay got wrong: compared in full.
        let new = |low: u8, text: &[u8]| {
            state(vec![
                global(with_char(low, 0x5555_0000_1200), Some((1, 0))),
                heap(text),
            ])
        };
        let (recorded, replayed) = (new(0x40, b"other\0"), new(0x80, b"othex\0"));
        assert!(
            diff_outcomes_after(&pre, &recorded, &replayed)
                .unwrap()
                .contains("byte 4"),
            "{:?}",
            diff_outcomes_after(&pre, &recorded, &replayed)
        );
    }

    #[test]
    fn words_two_replays_disagree_on_are_left_out_and_nothing_else() {
        let out = |ret, count: u64, seed: u64| {
            let bytes = [count.to_le_bytes(), seed.to_le_bytes()].concat();
            Outcome::Returned(State {
                ret: Value::Bits(ret),
                graph: Graph {
                    extents: vec![heap(&bytes)],
                    ..Graph::default()
                },
                streams: vec![],
            })
        };
        // A count the call keeps, then a time in microseconds: the two replays a
        // moment apart differ in its low bytes, the recording in its high bytes too.
        let recorded = out(0, 3, 0x0006_1f00_0000_1234);
        let (first, second) = (
            out(0, 3, 0x0006_1f22_0001_5678),
            out(0, 3, 0x0006_1f22_0001_9abc),
        );
        let unstable = Unstable::between(&first, &second);
        assert_eq!(unstable.len(), 1);
        let pre = Graph::default();
        assert!(diff_outcomes_after(&pre, &recorded, &first)
            .unwrap()
            .contains("byte 8"));
        assert_eq!(
            diff_outcomes_except(&pre, &recorded, &first, &unstable),
            None
        );
        // The count is the same in both replays: the recording is its oracle.
        assert!(diff_outcomes_except(
            &pre,
            &recorded,
            &out(0, 4, 0x0006_1f22_0001_5678),
            &unstable
        )
        .unwrap()
        .contains("byte 0"));
        // A return value that differs between replays is no memory: it counts.
        let unstable = Unstable::between(&out(1, 3, 5), &out(2, 3, 6));
        assert!(
            diff_outcomes_except(&pre, &recorded, &out(1, 3, 5), &unstable)
                .unwrap()
                .contains("return value")
        );
        // Nor does a returned aggregate (its copy on the stack, pointed at by the result).
        let returned = |seed: u64| {
            let e = Extent {
                kind: ExtentKind::Stack,
                ..heap(&seed.to_le_bytes())
            };
            Outcome::Returned(State {
                ret: Value::Ptr {
                    extent: 0,
                    offset: 0,
                },
                graph: Graph {
                    extents: vec![e],
                    ..Graph::default()
                },
                streams: vec![],
            })
        };
        assert!(Unstable::between(&returned(5), &returned(6)).is_empty());
    }

    #[test]
    fn what_two_recordings_disagree_on_is_left_out_and_nothing_else() {
        let out = |ret, count: u64, salt: u64| {
            let bytes = [count.to_le_bytes(), salt.to_le_bytes()].concat();
            Outcome::Returned(State {
                ret: Value::Bits(ret),
                graph: Graph {
                    extents: vec![heap(&bytes)],
                    ..Graph::default()
                },
                streams: vec![],
            })
        };
        let pre = Graph::default();
        // Two recordings of one call: a process id returned, a salt from getrandom.
        let (first, second) = (out(4242, 3, 0x1111), out(4250, 3, 0x2222));
        let left_out = Unstable::between_recordings(&first, &second).unwrap();
        assert_eq!(left_out.describe(), "the return value, 1 word(s) of memory");
        // A replay with its own pid and salt is faithful where the recordings agree...
        assert_eq!(
            diff_outcomes_except(&pre, &first, &out(77, 3, 0x3333), &left_out),
            None
        );
        // ...and the count they agree on is still compared.
        assert!(
            diff_outcomes_except(&pre, &first, &out(77, 4, 0x3333), &left_out)
                .unwrap()
                .contains("byte 0")
        );
        // Recordings that agree leave nothing out.
        assert!(Unstable::between_recordings(&first, &first)
            .unwrap()
            .is_empty());
        // Memory of another shape is left out whole; the return value still counts.
        let two = Outcome::Returned(State {
            ret: Value::Bits(4242),
            graph: Graph {
                extents: vec![heap(b"a"), heap(b"b")],
                ..Graph::default()
            },
            streams: vec![],
        });
        let shape = Unstable::between_recordings(&first, &two).unwrap();
        assert_eq!(
            diff_outcomes_except(&pre, &first, &out(4242, 9, 9), &shape),
            None
        );
        assert!(
            diff_outcomes_except(&pre, &first, &out(1, 3, 0x1111), &shape)
                .unwrap()
                .contains("return value")
        );
        // Recordings that ended differently are no oracle at all.
        let exited = Outcome::Exited {
            code: 2,
            state: first.state().unwrap().clone(),
        };
        assert!(Unstable::between_recordings(&first, &exited)
            .unwrap_err()
            .contains("in the other"));
    }

    #[test]
    fn a_pointer_to_freed_memory_differs_from_one_to_live_memory() {
        let freed = Extent {
            kind: ExtentKind::Freed,
            bytes: None,
            ..heap(&[0; 8])
        };
        let g = |e| Graph {
            extents: vec![e],
            ..Graph::default()
        };
        assert_eq!(diff_graphs(&g(freed.clone()), &g(freed.clone())), None);
        assert!(diff_graphs(&g(freed), &g(heap(&[0; 8])))
            .unwrap()
            .contains("Freed recorded, Heap in replay"));
    }

    #[test]
    fn a_pointer_partly_overwritten_compares_by_the_bytes_the_call_wrote() {
        let global = |bytes: [u8; 8]| Extent {
            kind: ExtentKind::Global {
                id: 7,
                constant: false,
            },
            len: 8,
            align: 8,
            bytes: Some(bytes.to_vec()),
            pointers: vec![],
        };
        let g = |e| Graph {
            extents: vec![e],
            ..Graph::default()
        };
        // Before the call the global held a pointer (recorded at 0x5555_0000_1230).
        let mut pre = global([0x30, 0x12, 0, 0, 0x55, 0x55, 0, 0]);
        pre.pointers.push(PtrSlot {
            offset: 0,
            target: Value::Ptr {
                extent: 1,
                offset: 0,
            },
        });
        let out = |bytes| {
            Outcome::Returned(State {
                ret: Value::Bits(0),
                graph: g(global(bytes)),
                streams: vec![],
            })
        };
        // The call stored b'+' into its low byte; the replay's old pointer was elsewhere.
        let recorded = out([b'+', 0x12, 0, 0, 0x55, 0x55, 0, 0]);
        let replayed = out([b'+', 0x40, 0, 0, 0, 0x60, 0, 0]);
        assert_eq!(
            diff_outcomes_after(&g(pre.clone()), &recorded, &replayed),
            None
        );
        assert!(
            diff_outcomes(&recorded, &replayed).is_some(),
            "without the context it is a difference"
        );
        let wrong = out([b'-', 0x40, 0, 0, 0, 0x60, 0, 0]);
        assert!(diff_outcomes_after(&g(pre), &recorded, &wrong)
            .unwrap()
            .contains("byte 0"));
    }

    #[test]
    fn pointer_words_compare_by_target_not_address() {
        let mut x = heap(&[1u8; 16]);
        x.pointers.push(PtrSlot {
            offset: 8,
            target: Value::Ptr {
                extent: 0,
                offset: 0,
            },
        });
        let mut y = x.clone();
        y.bytes.as_mut().unwrap()[8..16].copy_from_slice(&[9; 8]);
        let g = |e| Graph {
            extents: vec![e],
            ..Graph::default()
        };
        assert_eq!(diff_graphs(&g(x), &g(y)), None);
    }
}
