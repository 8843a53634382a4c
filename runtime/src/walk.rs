//! Snapshots: walk the memory graph reachable from a set of roots.
//!
//! Roots are visited in a fixed order (argument values, then globals in the order
//! given), extents are numbered as first met and explored breadth first, and every
//! aligned pointer-sized word that points into a known extent becomes an edge. Equal
//! memory therefore gives an equal [`Graph`], wherever it lies.

use crate::extents::{ExtentMap, Found};
use crate::files::FileTable;
use std::collections::{BTreeMap, HashMap, VecDeque};
use trestle_abi::context::Graph;
use trestle_abi::{Extent, ExtentKind, OpenFile, PtrSlot, StreamPos, Value};

/// Limits on one snapshot.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Total bytes copied.
    pub bytes: usize,
    /// Bytes copied from one extent.
    pub extent_bytes: usize,
    /// Extents visited.
    pub extents: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            bytes: 4 << 20,
            extent_bytes: 1 << 20,
            extents: 50_000,
        }
    }
}

/// One walk in progress.
pub struct Walker<'a> {
    map: &'a ExtentMap,
    stack_cutoff: u64,
    limits: Limits,
    index: HashMap<usize, u32>,
    found: Vec<Found>,
    extents: Vec<Extent>,
    queue: VecDeque<u32>,
    copied: usize,
    partial: bool,
    file_table: Option<&'a FileTable>,
    files: Vec<OpenFile>,
    streams: Vec<StreamPos>,
    /// Blocks of the C library's own met so far, by start: their lengths.
    libc_blocks: BTreeMap<usize, usize>,
    /// Those blocks are pointer targets only: neither copied nor followed.
    libc_opaque: bool,
}

impl<'a> Walker<'a> {
    /// Start a walk over `map`, ignoring stack extents registered at or after
    /// `stack_cutoff`.
    pub fn new(map: &'a ExtentMap, stack_cutoff: u64, limits: Limits) -> Self {
        Walker {
            map,
            stack_cutoff,
            limits,
            index: HashMap::new(),
            found: Vec::new(),
            extents: Vec::new(),
            queue: VecDeque::new(),
            copied: 0,
            partial: false,
            file_table: None,
            streams: Vec::new(),
            files: Vec::new(),
            libc_blocks: BTreeMap::new(),
            libc_opaque: false,
        }
    }

    /// Describe the open file behind each `FILE` extent met, from `table`.
    pub fn with_files(mut self, table: &'a FileTable) -> Self {
        self.file_table = Some(table);
        self
    }

    /// Keep the C library's own blocks as pointer targets only, their bytes neither
    /// copied nor followed: for the memory after a call. Before it they are copied
    /// whole, for a replay to restore the automaton a `regexec` runs; after it they
    /// hold the C library's private scratch (states it added, blocks it took from
    /// its free lists with a former user's bytes), no more the program's result than
    /// a `FILE`'s private fields are.
    pub fn libc_blocks_opaque(mut self, opaque: bool) -> Self {
        self.libc_opaque = opaque;
        self
    }

    /// The value of a word: a pointer into a known extent (visiting it), a function
    /// address, or plain bits.
    pub fn value_of(&mut self, word: u64) -> Value {
        let addr = word as usize;
        if let Some(f) = self
            .map
            .find(addr, self.stack_cutoff)
            .or_else(|| self.map.heap_just_after(addr))
        {
            if let Some(idx) = self.visit(f) {
                // Below the start (one before a heap block): a negative offset.
                return Value::Ptr {
                    extent: idx,
                    offset: addr.wrapping_sub(f.start) as u64,
                };
            }
        }
        if let Some(id) = self.map.func_at(addr) {
            return Value::Func { id, offset: 0 };
        }
        if let Some(f) = self.libc_block(addr) {
            if let Some(idx) = self.visit(f) {
                return Value::Ptr {
                    extent: idx,
                    offset: (addr - f.start) as u64,
                };
            }
        }
        Value::Bits(word)
    }

    /// The block of the C library's own that `addr` points into: one met before in
    /// this walk that holds it, or one starting there ([`crate::libc_heap::block_at`]).
    /// An address in the middle of a block no pointer to its start came before stays
    /// plain bits, alike in a recording and its replay (the walk's order is the same).
    fn libc_block(&mut self, addr: usize) -> Option<Found> {
        if let Some((&start, &len)) = self.libc_blocks.range(..=addr).next_back() {
            if addr < start + len {
                return Some(Found {
                    start,
                    len,
                    kind: ExtentKind::LibcHeap,
                });
            }
        }
        let len = crate::libc_heap::block_at(addr)?;
        self.libc_blocks.insert(addr, len);
        Some(Found {
            start: addr,
            len,
            kind: ExtentKind::LibcHeap,
        })
    }

    /// Visit the global `id` as a root.
    pub fn visit_global(&mut self, id: u64) {
        if let Some((start, len, constant)) = self.map.global(id) {
            self.visit(Found {
                start,
                len,
                kind: ExtentKind::Global { id, constant },
            });
        }
    }

    fn visit(&mut self, f: Found) -> Option<u32> {
        if let Some(&i) = self.index.get(&f.start) {
            return Some(i);
        }
        if self.extents.len() >= self.limits.extents {
            self.partial = true;
            return None;
        }
        let i = self.extents.len() as u32;
        self.index.insert(f.start, i);
        self.found.push(f);
        self.extents.push(Extent {
            kind: f.kind,
            len: f.len as u64,
            align: align_of_addr(f.start),
            bytes: None,
            pointers: Vec::new(),
        });
        self.queue.push_back(i);
        Some(i)
    }

    /// Explore everything queued and return the graph.
    pub fn finish(self) -> Graph {
        self.finish_with_streams().0
    }

    /// Finish the walk ([`Walker::finish`]); also the read positions of the input
    /// streams whose `FILE` the graph holds.
    pub fn finish_with_streams(mut self) -> (Graph, Vec<StreamPos>) {
        while let Some(i) = self.queue.pop_front() {
            let f = self.found[i as usize];
            if f.kind == ExtentKind::Freed || (f.kind == ExtentKind::LibcHeap && self.libc_opaque) {
                // The allocator's now, or the C library's scratch: no state of the
                // program.
                continue;
            }
            let constant = matches!(f.kind, ExtentKind::Global { constant: true, .. });
            let fits =
                f.len <= self.limits.extent_bytes && self.copied + f.len <= self.limits.bytes;
            if !fits {
                self.partial = true;
                continue;
            }
            // SAFETY: every extent in the map is live memory of this process: globals
            // for its lifetime, heap extents until freed (they are then removed), stack
            // extents in a mapped stack.
            let bytes = unsafe { std::slice::from_raw_parts(f.start as *const u8, f.len) };
            if !constant {
                self.copied += f.len;
                let mut copy = bytes.to_vec();
                if f.kind == ExtentKind::File {
                    crate::files::clear_padding(&mut copy);
                }
                self.extents[i as usize].bytes = Some(copy);
            }
            let mut pointers = Vec::new();
            let first = (f.start + 7) & !7;
            let mut a = first;
            while a + 8 <= f.start + f.len {
                if f.kind == ExtentKind::File && !crate::files::is_edge_offset(a - f.start) {
                    // The rest of a FILE (its chain of all other streams, the C
                    // library's private state) is not the program's data.
                    a += 8;
                    continue;
                }
                // SAFETY: `a..a+8` lies inside the extent and is 8-aligned.
                let word = unsafe { *(a as *const u64) };
                if word != 0 {
                    let v = self.value_of(word);
                    if !matches!(v, Value::Bits(_)) {
                        pointers.push(PtrSlot {
                            offset: (a - f.start) as u64,
                            target: v,
                        });
                    }
                }
                a += 8;
            }
            if !constant {
                self.extents[i as usize].pointers = pointers;
            }
            if f.kind == ExtentKind::File {
                let info = self.file_table.and_then(|t| t.get(&f.start));
                // SAFETY: a registered FILE is live.
                let fd = unsafe { crate::files::fileno_of(f.start) };
                // SAFETY: lseek on a descriptor number only queries it.
                let off = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
                let open = OpenFile {
                    extent: i,
                    fd,
                    offset: (off >= 0).then_some(off as u64),
                    path: info.and_then(|i| i.path.clone()),
                    flags: info.map_or(-1, |i| i.flags),
                    standard: crate::files::std_stream_fd(f.start as *mut libc::FILE)
                        .map(|i| i as u8),
                };
                // SAFETY: a registered FILE is live.
                if let Some(s) = unsafe { crate::files::stream_pos(f.start, &open) } {
                    self.streams.push(StreamPos { file: Some(i), ..s });
                }
                self.files.push(open);
            }
        }
        (
            Graph {
                extents: self.extents,
                partial: self.partial,
                files: self.files,
            },
            self.streams,
        )
    }
}

/// The largest power of two (at most 4096) dividing `addr`.
pub fn align_of_addr(addr: usize) -> u32 {
    if addr == 0 {
        return 4096;
    }
    (1u32 << addr.trailing_zeros().min(12)).min(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_structures_at_different_addresses_give_equal_graphs() {
        // Two copies of a two-node list, in different places.
        #[repr(C, align(16))]
        struct Node {
            next: u64,
            val: u64,
        }
        let graph_of = |a: &mut Node, b: &mut Node| {
            a.next = b as *mut Node as u64;
            b.next = 0;
            let mut m = ExtentMap::new([], []);
            m.insert_heap(a as *mut Node as usize, 16, ExtentKind::Heap);
            m.insert_heap(b as *mut Node as usize, 16, ExtentKind::Heap);
            let mut w = Walker::new(&m, u64::MAX, Limits::default());
            let root = w.value_of(a as *mut Node as u64);
            (root, w.finish())
        };
        let (mut a1, mut b1) = (Node { next: 0, val: 1 }, Node { next: 0, val: 2 });
        let (mut a2, mut b2) = (Node { next: 0, val: 1 }, Node { next: 0, val: 2 });
        let (r1, g1) = graph_of(&mut a1, &mut b1);
        let (r2, g2) = graph_of(&mut a2, &mut b2);
        assert_eq!(
            r1,
            Value::Ptr {
                extent: 0,
                offset: 0
            }
        );
        assert_eq!(r1, r2);
        assert_eq!(g1.extents.len(), 2);
        assert_eq!(
            g1.extents[0].pointers,
            vec![PtrSlot {
                offset: 0,
                target: Value::Ptr {
                    extent: 1,
                    offset: 0
                }
            }]
        );
        assert_eq!(trestle_abi::context::diff_graphs(&g1, &g2), None);
    }

    #[test]
    fn the_size_bound_marks_partial() {
        let big = vec![1u8; 4096];
        let mut m = ExtentMap::new([], []);
        m.insert_heap(big.as_ptr() as usize, big.len(), ExtentKind::Heap);
        let mut w = Walker::new(
            &m,
            u64::MAX,
            Limits {
                bytes: 100,
                extent_bytes: 100,
                extents: 10,
            },
        );
        w.value_of(big.as_ptr() as u64);
        let g = w.finish();
        assert!(g.partial);
        assert!(g.extents[0].bytes.is_none());
    }
}
