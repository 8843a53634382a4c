//! The extent map: every allocation the program made that trestle knows the bounds of.
//!
//! Three kinds live in three structures tuned to how they change:
//! - globals never change after start-up: a sorted vector;
//! - heap extents come and go in any order: a B-tree by start address;
//! - stack extents come and go with frames: a vector sorted by descending address,
//!   so new (deeper) allocations land at its end and dead frames are cut off the end.
//!
//! Stack extents carry a registration number, so a walk after a call returned can
//! ignore the ones registered during that call (their frames are gone).

use std::collections::{BTreeMap, HashMap};
use trestle_abi::ExtentKind;

/// How far before a heap block an address in no extent still counts as the block's
/// (one element before it, of up to this many bytes).
const BEFORE_BLOCK: usize = 64;

/// A known allocation found by [`ExtentMap::find`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Start address.
    pub start: usize,
    /// Length in bytes.
    pub len: usize,
    /// Kind.
    pub kind: ExtentKind,
}

#[derive(Debug, Clone, Copy)]
struct GlobalExt {
    start: usize,
    len: usize,
    id: u64,
    constant: bool,
}

#[derive(Debug, Clone, Copy)]
struct StackExt {
    start: usize,
    len: usize,
    seq: u64,
}

/// All known extents, plus function addresses.
#[derive(Default)]
pub struct ExtentMap {
    globals: Vec<GlobalExt>,
    heap: BTreeMap<usize, (usize, ExtentKind)>,
    stack: Vec<StackExt>,
    funcs: HashMap<usize, u64>,
    /// A returned aggregate's copy, while the post-state is walked: it lies in a frame
    /// whose stale stack extents (the optimiser shares stack slots) it must shadow.
    ret_copy: Option<(usize, usize)>,
    next_stack_seq: u64,
    lo: usize,
    hi: usize,
}

impl ExtentMap {
    /// Build from the program's global and function tables.
    pub fn new(
        globals: impl IntoIterator<Item = (usize, usize, u64, bool)>,
        funcs: impl IntoIterator<Item = (usize, u64)>,
    ) -> Self {
        let mut g: Vec<GlobalExt> = globals
            .into_iter()
            .map(|(start, len, id, constant)| GlobalExt {
                start,
                len,
                id,
                constant,
            })
            .collect();
        g.sort_by_key(|e| (e.start, std::cmp::Reverse(e.len)));
        // Identical or nested entries (merged string literals, one COMDAT global listed
        // by several modules): keep the first, outermost one.
        let mut globals: Vec<GlobalExt> = Vec::with_capacity(g.len());
        for e in g {
            match globals.last() {
                Some(last) if e.start < last.start + last.len.max(1) => {}
                _ => globals.push(e),
            }
        }
        let mut m = ExtentMap {
            globals,
            funcs: funcs.into_iter().collect(),
            lo: usize::MAX,
            hi: 0,
            ..Default::default()
        };
        let bounds: Vec<(usize, usize)> = m.globals.iter().map(|g| (g.start, g.len)).collect();
        for (s, l) in bounds {
            m.widen(s, l);
        }
        m
    }

    fn widen(&mut self, start: usize, len: usize) {
        self.lo = self.lo.min(start);
        self.hi = self.hi.max(start.saturating_add(len));
    }

    /// Register a heap (or argv, or restored) extent. Freed extents it overlaps are
    /// forgotten: their memory is in use again.
    pub fn insert_heap(&mut self, start: usize, len: usize, kind: ExtentKind) {
        if start == 0 {
            return;
        }
        let end = start.saturating_add(len.max(1));
        let reused: Vec<usize> = self
            .heap
            .range(..end)
            .rev()
            .take_while(|(&s, &(l, _))| s >= start || s + l > start)
            .filter(|(_, &(_, k))| k == ExtentKind::Freed)
            .map(|(&s, _)| s)
            .collect();
        for s in reused {
            self.heap.remove(&s);
        }
        self.heap.insert(start, (len, kind));
        self.widen(start, len);
    }

    /// Forget a heap extent (on free).
    pub fn remove_heap(&mut self, start: usize) {
        self.heap.remove(&start);
    }

    /// The program freed the heap extent at `start`: it becomes [`ExtentKind::Freed`].
    /// Returns its length, or `None` (and forgets it) if it was no live heap block.
    pub fn free_heap(&mut self, start: usize) -> Option<usize> {
        match self.heap.get_mut(&start) {
            Some((len, kind)) if *kind == ExtentKind::Heap => {
                *kind = ExtentKind::Freed;
                Some(*len)
            }
            Some(_) => {
                self.heap.remove(&start);
                None
            }
            None => None,
        }
    }

    /// The extent at `start` is gone (a closed `FILE`, freed by the C library out of
    /// the runtime's sight): it becomes [`ExtentKind::Freed`], until memory it
    /// overlaps is registered again.
    pub fn retire(&mut self, start: usize) {
        if let Some((_, kind)) = self.heap.get_mut(&start) {
            *kind = ExtentKind::Freed;
        }
    }

    /// Forget the freed extent at `start` (its block goes back to the allocator).
    pub fn forget_freed(&mut self, start: usize) {
        if self
            .heap
            .get(&start)
            .is_some_and(|&(_, k)| k == ExtentKind::Freed)
        {
            self.heap.remove(&start);
        }
    }

    /// Make `[start, start + len)` a stack extent that shadows every other until
    /// called with `None`: a returned aggregate's copy.
    pub fn set_return_copy(&mut self, copy: Option<(usize, usize)>) {
        self.ret_copy = copy;
        if let Some((start, len)) = copy {
            self.widen(start, len);
        }
    }

    /// Drop stack extents below `marker`: their frames have returned.
    pub fn purge_stack_below(&mut self, marker: usize) {
        while let Some(last) = self.stack.last() {
            if last.start < marker {
                self.stack.pop();
            } else {
                break;
            }
        }
    }

    /// Forget the stack extent that starts at `start`, if there is one.
    pub fn remove_stack_at(&mut self, start: usize) {
        if let Some(i) = self.stack.iter().rposition(|e| e.start == start) {
            self.stack.remove(i);
        }
    }

    /// The start of the nearest stack extent above `addr`, if any.
    pub fn stack_start_above(&self, addr: usize) -> Option<usize> {
        let pos = self.stack.partition_point(|e| e.start > addr);
        pos.checked_sub(1).map(|i| self.stack[i].start)
    }

    /// Register a stack allocation, replacing any stale extent it overlaps.
    pub fn insert_stack(&mut self, start: usize, len: usize) {
        if start == 0 {
            return;
        }
        let end = start + len;
        // Descending by start: find the first index whose start < `start`.
        let pos = self.stack.partition_point(|e| e.start >= start);
        // Remove overlapping neighbours on both sides.
        let mut lo = pos;
        while lo > 0 && self.stack[lo - 1].start < end {
            lo -= 1;
        }
        let mut hi = pos;
        while hi < self.stack.len() && self.stack[hi].start + self.stack[hi].len > start {
            hi += 1;
        }
        let seq = self.next_stack_seq;
        self.next_stack_seq += 1;
        self.stack.splice(lo..hi, [StackExt { start, len, seq }]);
        self.widen(start, len);
    }

    /// The registration number the next stack extent will get.
    pub fn stack_seq(&self) -> u64 {
        self.next_stack_seq
    }

    /// The known extent containing `addr`. Stack extents registered at or after
    /// `stack_cutoff` are ignored. An address one past the end of an extent (and inside
    /// no other) counts as inside it, at offset `len`.
    pub fn find(&self, addr: usize, stack_cutoff: u64) -> Option<Found> {
        if addr < self.lo || addr > self.hi {
            return None;
        }
        self.find_containing(addr, stack_cutoff).or_else(|| {
            let f = self.find_containing(addr.checked_sub(1)?, stack_cutoff)?;
            // Not for FILE objects: the C library lays the standard streams out back
            // to back, and a pointer to a closed one is no pointer past another.
            (f.start + f.len == addr && f.kind != ExtentKind::File).then_some(f)
        })
    }

    /// A live heap block starting at most [`BEFORE_BLOCK`] bytes after `addr`, a
    /// multiple of 8 away, for an address in no extent: C's pointer one element
    /// before an array (mawk keeps its regex run stack's "empty" mark at `base - 1`),
    /// which lies in the allocator's chunk header, means the block, not whatever bits
    /// the address has. (Odd distances are left alone: xmlwf's pointers into buffers
    /// its own allocator made, which end a few bytes before a block.)
    pub fn heap_just_after(&self, addr: usize) -> Option<Found> {
        let (&start, &(len, kind)) = self.heap.range(addr.checked_add(1)?..).next()?;
        let d = start - addr;
        (kind == ExtentKind::Heap && d <= BEFORE_BLOCK && d.is_multiple_of(8)).then_some(Found {
            start,
            len,
            kind,
        })
    }

    fn find_containing(&self, addr: usize, stack_cutoff: u64) -> Option<Found> {
        if let Some((start, len)) = self.ret_copy {
            if (start..start + len).contains(&addr) {
                return Some(Found {
                    start,
                    len,
                    kind: ExtentKind::Stack,
                });
            }
        }
        // Stack.
        let pos = self.stack.partition_point(|e| e.start > addr);
        if let Some(e) = self.stack.get(pos) {
            if e.seq < stack_cutoff && addr < e.start + e.len {
                return Some(Found {
                    start: e.start,
                    len: e.len,
                    kind: ExtentKind::Stack,
                });
            }
        }
        // Heap.
        if let Some((&start, &(len, kind))) = self.heap.range(..=addr).next_back() {
            // A zero-sized block (`malloc(0)` gives a unique pointer, which the
            // program may keep and free) is met at its own address.
            if addr < start + len || (len == 0 && addr == start) {
                return Some(Found { start, len, kind });
            }
        }
        // Globals.
        let pos = self.globals.partition_point(|g| g.start <= addr);
        if pos > 0 {
            let g = self.globals[pos - 1];
            if addr < g.start + g.len {
                return Some(Found {
                    start: g.start,
                    len: g.len,
                    kind: ExtentKind::Global {
                        id: g.id,
                        constant: g.constant,
                    },
                });
            }
        }
        None
    }

    /// The function whose address is `addr`.
    pub fn func_at(&self, addr: usize) -> Option<u64> {
        self.funcs.get(&addr).copied()
    }

    /// Start, length and read-only flag of the global `id`.
    pub fn global(&self, id: u64) -> Option<(usize, usize, bool)> {
        self.globals
            .iter()
            .find(|g| g.id == id)
            .map(|g| (g.start, g.len, g.constant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_sized_block_is_found_at_its_address() {
        let mut m = ExtentMap::new([], []);
        m.insert_heap(0x2000, 0, ExtentKind::Heap);
        m.insert_heap(0x2020, 8, ExtentKind::Heap);
        let f = m.find(0x2000, u64::MAX).expect("found");
        assert_eq!((f.start, f.len), (0x2000, 0));
        assert!(m.find(0x2008, u64::MAX).is_none());
    }

    #[test]
    fn finds_by_kind_and_one_past_the_end() {
        let mut m = ExtentMap::new([(0x1000, 16, 7, false)], [(0x9000, 3)]);
        m.insert_heap(0x2000, 8, ExtentKind::Heap);
        m.insert_stack(0x7000, 32);
        assert_eq!(
            m.find(0x1004, u64::MAX).unwrap().kind,
            ExtentKind::Global {
                id: 7,
                constant: false
            }
        );
        assert_eq!(m.find(0x2008, u64::MAX).unwrap().start, 0x2000);
        assert_eq!(m.find(0x7010, u64::MAX).unwrap().kind, ExtentKind::Stack);
        assert_eq!(
            m.find(0x7010, 0),
            None,
            "stack extents past the cutoff are invisible"
        );
        assert_eq!(m.find(0x3000, u64::MAX), None);
        assert_eq!(m.func_at(0x9000), Some(3));
        m.remove_heap(0x2000);
        assert_eq!(m.find(0x2004, u64::MAX), None);
    }

    #[test]
    fn freed_blocks_stay_known_until_reused() {
        let mut m = ExtentMap::new([], []);
        m.insert_heap(0x2000, 32, ExtentKind::Heap);
        assert_eq!(m.free_heap(0x2000), Some(32));
        assert_eq!(m.find(0x2008, u64::MAX).unwrap().kind, ExtentKind::Freed);
        assert_eq!(
            m.free_heap(0x2000),
            None,
            "a double free frees nothing more"
        );
        m.insert_heap(0x2010, 8, ExtentKind::Heap);
        assert_eq!(
            m.find(0x2004, u64::MAX),
            None,
            "the reused block's freed extent is gone"
        );
        m.insert_heap(0x3000, 8, ExtentKind::Heap);
        m.free_heap(0x3000);
        m.forget_freed(0x3000);
        assert_eq!(m.find(0x3000, u64::MAX), None);
    }

    #[test]
    fn an_element_before_a_heap_block_is_the_blocks() {
        let mut m = ExtentMap::new([], []);
        m.insert_heap(0x2000, 64, ExtentKind::Heap);
        m.insert_heap(0x3000, 64, ExtentKind::Freed);
        assert_eq!(
            m.heap_just_after(0x2000 - 40).map(|f| f.start),
            Some(0x2000)
        );
        assert_eq!(
            m.heap_just_after(0x2000 - 64).map(|f| f.start),
            Some(0x2000)
        );
        assert_eq!(m.heap_just_after(0x2000 - 72), None, "too far before");
        assert_eq!(m.heap_just_after(0x2000 - 31), None, "not an element away");
        assert_eq!(
            m.heap_just_after(0x3000 - 8),
            None,
            "a freed block is no array"
        );
    }

    #[test]
    fn the_nearest_stack_extent_above_and_one_removed() {
        let mut m = ExtentMap::new([], []);
        m.insert_stack(0x8000, 16);
        m.insert_stack(0x7000, 16);
        assert_eq!(m.stack_start_above(0x7800), Some(0x8000));
        assert_eq!(m.stack_start_above(0x6000), Some(0x7000));
        assert_eq!(m.stack_start_above(0x8000), None);
        m.remove_stack_at(0x7000);
        assert_eq!(m.find(0x7004, u64::MAX), None);
        assert_eq!(m.find(0x8004, u64::MAX).unwrap().start, 0x8000);
    }

    #[test]
    fn dead_frames_are_purged_and_overlaps_replaced() {
        let mut m = ExtentMap::new([], []);
        m.insert_stack(0x8000, 16);
        m.insert_stack(0x7000, 16);
        m.purge_stack_below(0x7800);
        assert!(m.find(0x7004, u64::MAX).is_none());
        m.insert_stack(0x8008, 16);
        assert_eq!(
            m.find(0x8002, u64::MAX),
            None,
            "the overlapped extent is gone"
        );
        assert_eq!(m.find(0x800a, u64::MAX).unwrap().start, 0x8008);
    }
}
