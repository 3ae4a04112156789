//! The dynamic offset allocator (ggml's `ggml_dyn_tallocr`): hands out aligned byte ranges in a
//! "virtual buffer" of up to [`MAX_CHUNKS`] chunks, recycles freed ranges, and records how large
//! each chunk ever had to be. It touches no memory: the graph allocator runs it once per graph to
//! find offsets, then allocates real buffers of the recorded sizes.

/// Most chunks one virtual buffer is split into (`GGML_VBUFFER_MAX_CHUNKS`). The last one is
/// unbounded, so an allocation can always be placed somewhere.
pub const MAX_CHUNKS: usize = 16;

/// Capacity of an unbounded chunk: half the address space, so sums cannot overflow.
const UNBOUNDED: usize = usize::MAX / 2;

/// Where an allocation lies: a chunk and the byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address {
    /// Index of the chunk (one backend buffer each).
    pub chunk: usize,
    /// Byte offset in the chunk (a multiple of the alignment).
    pub offset: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    offset: usize,
    size: usize,
}

impl Block {
    fn end(self) -> usize {
        self.offset + self.size
    }
}

#[derive(Debug, Clone)]
struct Chunk {
    /// Free ranges, sorted by offset, never adjacent (merged on free), never empty.
    free: Vec<Block>,
    /// Bytes this chunk may span (`max_size` of the buffer type, more for one oversized tensor,
    /// unbounded for the last chunk).
    capacity: usize,
    /// Highest end of any allocation so far: the size the chunk's buffer must have.
    high_water: usize,
}

impl Chunk {
    /// Index of the growable tail block: the last free block, when it runs to the capacity.
    fn tail(&self) -> Option<usize> {
        let last = self.free.len().checked_sub(1)?;
        (self.free[last].end() == self.capacity).then_some(last)
    }
}

/// A best-fit free-list allocator over up to [`MAX_CHUNKS`] chunks (see the module docs).
#[derive(Debug, Clone)]
pub struct DynAllocator {
    alignment: usize,
    max_chunk_size: usize,
    chunks: Vec<Chunk>,
}

impl DynAllocator {
    /// An empty allocator: offsets and sizes rounded to `alignment`, chunks of at most
    /// `max_size` bytes (unless one allocation alone is larger, or all chunks but the last are
    /// used up).
    pub fn new(alignment: usize, max_size: usize) -> Self {
        DynAllocator {
            alignment: alignment.max(1),
            max_chunk_size: max_size.clamp(1, UNBOUNDED),
            chunks: Vec::new(),
        }
    }

    /// The alignment of every offset and size.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// `size` as this allocator counts it: rounded up to the alignment, and at least one
    /// alignment unit, so that even empty tensors get an address of their own.
    pub fn aligned_size(&self, size: usize) -> usize {
        size.max(1).div_ceil(self.alignment) * self.alignment
    }

    /// Forgets every allocation and chunk.
    pub fn reset(&mut self) {
        self.chunks.clear();
    }

    /// Reserves `size` bytes; `None` only if no chunk can take them (the address space is
    /// exhausted).
    ///
    /// The choice, as ggml makes it: the smallest free block that fits, among all blocks but each
    /// chunk's growable tail (so holes are reused before any chunk grows); else a chunk's tail,
    /// preferring one whose already-reached size covers the request with least waste, else the
    /// one that must grow least; else a new chunk.
    pub fn alloc(&mut self, size: usize) -> Option<Address> {
        let size = self.aligned_size(size);
        let mut best: Option<(usize, usize)> = None;
        let mut best_size = usize::MAX;
        for (c, chunk) in self.chunks.iter().enumerate() {
            let tail = chunk.tail();
            for (i, b) in chunk.free.iter().enumerate() {
                if Some(i) != tail && b.size >= size && b.size < best_size {
                    best = Some((c, i));
                    best_size = b.size;
                }
            }
        }
        if best.is_none() {
            // reuse > 0: bytes of the chunk's reached size left unused; < 0: growth needed.
            let mut best_reuse = i128::MIN;
            for (c, chunk) in self.chunks.iter().enumerate() {
                let Some(t) = chunk.tail() else { continue };
                let b = chunk.free[t];
                if b.size < size {
                    continue;
                }
                let reuse = chunk.high_water as i128 - b.offset as i128 - size as i128;
                let better_reuse = best_reuse < 0 && reuse > best_reuse;
                let better_fit = reuse >= 0 && reuse < best_reuse;
                if better_reuse || better_fit {
                    best = Some((c, t));
                    best_reuse = reuse;
                }
            }
        }
        let (c, i) = match best {
            Some(found) => found,
            None => (self.new_chunk(size)?, 0),
        };
        let chunk = &mut self.chunks[c];
        let block = &mut chunk.free[i];
        let addr = Address { chunk: c, offset: block.offset };
        block.offset += size;
        block.size -= size;
        if block.size == 0 {
            chunk.free.remove(i);
        }
        chunk.high_water = chunk.high_water.max(addr.offset + size);
        Some(addr)
    }

    fn new_chunk(&mut self, min_size: usize) -> Option<usize> {
        let n = self.chunks.len();
        if n >= MAX_CHUNKS {
            return None;
        }
        let capacity =
            if n == MAX_CHUNKS - 1 { UNBOUNDED } else { min_size.max(self.max_chunk_size) };
        if capacity < min_size {
            return None;
        }
        self.chunks.push(Chunk {
            free: vec![Block { offset: 0, size: capacity }],
            capacity,
            high_water: 0,
        });
        Some(n)
    }

    /// Returns `size` bytes at `addr` (as given to, or carved from, an earlier [`alloc`]),
    /// merging them with free neighbours.
    ///
    /// # Panics
    /// If `addr` names a chunk that does not exist. Freeing bytes that are already free is a bug
    /// of the caller, caught by a debug assertion.
    ///
    /// [`alloc`]: DynAllocator::alloc
    pub fn free(&mut self, addr: Address, size: usize) {
        let size = self.aligned_size(size);
        let free = &mut self.chunks[addr.chunk].free;
        let new = Block { offset: addr.offset, size };
        let pos = free.partition_point(|b| b.offset < addr.offset);
        debug_assert!(pos == 0 || free[pos - 1].end() <= new.offset, "double free at {addr:?}");
        debug_assert!(
            pos == free.len() || new.end() <= free[pos].offset,
            "double free at {addr:?}"
        );
        let joins_prev = pos > 0 && free[pos - 1].end() == new.offset;
        let joins_next = pos < free.len() && new.end() == free[pos].offset;
        match (joins_prev, joins_next) {
            (true, true) => {
                free[pos - 1].size += size + free[pos].size;
                free.remove(pos);
            }
            (true, false) => free[pos - 1].size += size,
            (false, true) => {
                free[pos].offset = new.offset;
                free[pos].size += size;
            }
            (false, false) => free.insert(pos, new),
        }
    }

    /// Number of chunks opened so far.
    pub fn n_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// The size each chunk had to reach (its high-water mark), in chunk order.
    pub fn chunk_sizes(&self) -> Vec<usize> {
        self.chunks.iter().map(|c| c.high_water).collect()
    }

    /// Sum of [`chunk_sizes`](DynAllocator::chunk_sizes).
    pub fn total_size(&self) -> usize {
        self.chunks.iter().map(|c| c.high_water).sum()
    }

    /// Number of free blocks across all chunks (fragmentation, for diagnostics).
    pub fn n_free_blocks(&self) -> usize {
        self.chunks.iter().map(|c| c.free.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(chunk: usize, offset: usize) -> Address {
        Address { chunk, offset }
    }

    #[test]
    fn rounds_to_alignment_and_bumps() {
        let mut a = DynAllocator::new(64, usize::MAX);
        assert_eq!(a.alloc(10), Some(at(0, 0)));
        assert_eq!(a.alloc(64), Some(at(0, 64)));
        assert_eq!(a.alloc(0), Some(at(0, 128)));
        assert_eq!(a.chunk_sizes(), vec![192]);
    }

    #[test]
    fn best_fit_prefers_smallest_hole_and_merges() {
        let mut a = DynAllocator::new(16, usize::MAX);
        let x = a.alloc(64).unwrap();
        let y = a.alloc(16).unwrap();
        let z = a.alloc(32).unwrap();
        let _w = a.alloc(16).unwrap();
        a.free(x, 64);
        a.free(z, 32);
        // Holes of 64 and 32 bytes: a 32-byte request takes the 32-byte hole.
        assert_eq!(a.alloc(32), Some(z));
        a.free(z, 32);
        // Freeing y joins x's hole and z's hole into one block of 112 bytes.
        a.free(y, 16);
        assert_eq!(a.n_free_blocks(), 2, "one hole plus the tail");
        assert_eq!(a.alloc(112), Some(at(0, 0)));
        assert_eq!(a.chunk_sizes(), vec![128]);
    }

    #[test]
    fn tail_is_used_only_when_no_hole_fits() {
        let mut a = DynAllocator::new(16, usize::MAX);
        let x = a.alloc(32).unwrap();
        let _y = a.alloc(32).unwrap();
        a.free(x, 32);
        // 48 bytes fit no hole: they go to the tail and grow the chunk.
        assert_eq!(a.alloc(48), Some(at(0, 64)));
        assert_eq!(a.alloc(32), Some(x));
        assert_eq!(a.chunk_sizes(), vec![112]);
    }

    #[test]
    fn chunks_respect_max_size() {
        let mut a = DynAllocator::new(16, 100);
        let addrs: Vec<_> = (0..6).map(|_| a.alloc(48).unwrap()).collect();
        // 100-byte chunks hold two 48-byte blocks each.
        assert_eq!(addrs, vec![at(0, 0), at(0, 48), at(1, 0), at(1, 48), at(2, 0), at(2, 48)]);
        assert!(a.chunk_sizes().iter().all(|&s| s <= 100));
        // An oversized request gets a chunk of its own.
        assert_eq!(a.alloc(400), Some(at(3, 0)));
        assert_eq!(a.chunk_sizes()[3], 400);
    }

    #[test]
    fn last_chunk_is_unbounded() {
        let mut a = DynAllocator::new(16, 16);
        for i in 0..MAX_CHUNKS - 1 {
            assert_eq!(a.alloc(16), Some(at(i, 0)));
        }
        for i in 0..10 {
            assert_eq!(a.alloc(16), Some(at(MAX_CHUNKS - 1, 16 * i)));
        }
        assert_eq!(a.n_chunks(), MAX_CHUNKS);
    }

    #[test]
    fn grows_the_tail_that_needs_least() {
        let mut a = DynAllocator::new(16, 128);
        let x = a.alloc(128).unwrap(); // fills chunk 0
        let y = a.alloc(64).unwrap(); // chunk 1
        let _z = a.alloc(32).unwrap(); // chunk 1 at 64
        a.free(x, 128);
        // Chunk 0 is wholly free again (its tail, 128 bytes reached): a 96-byte request fits
        // there without growth; chunk 1's tail would have to grow.
        assert_eq!(a.alloc(96), Some(at(0, 0)));
        a.free(y, 64);
        assert_eq!(a.alloc(64), Some(y));
    }
}
