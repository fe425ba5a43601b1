//! The replication backlog: a ring buffer holding the last `repl-backlog-size` bytes of the
//! replication stream, addressed by replication offset (Redis' `repl_backlog`), so a replica that
//! lost its link for a moment can continue from the byte it lacks (`PSYNC` → `+CONTINUE`).
//!
//! Offsets are Redis': the stream's first byte ever written has offset 1, and
//! `master_repl_offset` is the offset of the last byte written (0 before any). The backlog holds
//! the bytes `first_offset() ..= master_offset()`; its `histlen` is their count.
//!
//! Pure data: no locks, no I/O (the owner, `repl::Repl`, keeps it under its mutex).
//!
//! May import: nothing of the server.

/// The ring buffer (see the module docs).
#[derive(Debug)]
pub struct Backlog {
    buf: Vec<u8>,
    /// Where the next byte goes in `buf`.
    write_at: usize,
    /// How many bytes of `buf` hold stream data (≤ `buf.len()`).
    histlen: usize,
    /// The offset of the last byte written (`master_repl_offset`).
    master_offset: u64,
}

impl Backlog {
    /// An empty backlog of `size` bytes (at least 1) whose next byte will have offset
    /// `master_offset + 1`.
    pub fn new(size: usize, master_offset: u64) -> Backlog {
        Backlog {
            buf: vec![0; size.max(1)],
            write_at: 0,
            histlen: 0,
            master_offset,
        }
    }

    /// The offset of the last byte written (`master_repl_offset`).
    pub fn master_offset(&self) -> u64 {
        self.master_offset
    }

    /// The offset of the oldest byte held (`repl_backlog_first_byte_offset`); when empty, the
    /// offset the next byte will have.
    pub fn first_offset(&self) -> u64 {
        self.master_offset + 1 - self.histlen as u64
    }

    /// How many bytes it holds (`repl_backlog_histlen`).
    pub fn histlen(&self) -> usize {
        self.histlen
    }

    /// Its capacity (`repl_backlog_size`).
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// Append stream bytes; the oldest fall out once it is full.
    pub fn append(&mut self, mut data: &[u8]) {
        self.master_offset += data.len() as u64;
        let size = self.buf.len();
        if data.len() >= size {
            data = &data[data.len() - size..];
        }
        while !data.is_empty() {
            let n = (size - self.write_at).min(data.len());
            self.buf[self.write_at..self.write_at + n].copy_from_slice(&data[..n]);
            self.write_at = (self.write_at + n) % size;
            self.histlen = (self.histlen + n).min(size);
            data = &data[n..];
        }
    }

    /// Whether a replica that needs the stream from `offset` on (PSYNC's offset: the first byte
    /// it lacks) can continue from here: `first_offset() ..= master_offset() + 1` (the upper
    /// end: it lacks nothing).
    pub fn covers(&self, offset: u64) -> bool {
        offset >= self.first_offset() && offset <= self.master_offset + 1
    }

    /// The bytes from `offset` to the end (`covers(offset)` must hold), or None when they are not
    /// all held any more (or `offset` is past the end).
    pub fn read_from(&self, offset: u64) -> Option<Vec<u8>> {
        if !self.covers(offset) {
            return None;
        }
        let len = (self.master_offset + 1 - offset) as usize;
        let size = self.buf.len();
        // The oldest byte is at write_at - histlen (mod size); the one at `offset` after
        // `offset - first_offset` more.
        let skip = (offset - self.first_offset()) as usize;
        let start = (self.write_at + size - self.histlen + skip) % size;
        let mut out = Vec::with_capacity(len);
        let first = (size - start).min(len);
        out.extend_from_slice(&self.buf[start..start + first]);
        out.extend_from_slice(&self.buf[..len - first]);
        Some(out)
    }

    /// Change the capacity (CONFIG SET repl-backlog-size), keeping the newest bytes that fit.
    pub fn resize(&mut self, size: usize) {
        let kept = self.read_from(self.first_offset()).unwrap_or_default();
        let mut fresh = Backlog::new(size, self.master_offset - kept.len() as u64);
        fresh.append(&kept);
        *self = fresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_start_after_the_given_one_and_count_bytes() {
        let mut b = Backlog::new(16, 100);
        assert_eq!(
            (b.first_offset(), b.master_offset(), b.histlen()),
            (101, 100, 0)
        );
        assert!(b.covers(101), "nothing lacking");
        assert_eq!(b.read_from(101), Some(vec![]));
        b.append(b"hello");
        assert_eq!(
            (b.first_offset(), b.master_offset(), b.histlen()),
            (101, 105, 5)
        );
        assert_eq!(b.read_from(103).unwrap(), b"llo");
        assert_eq!(b.read_from(106).unwrap(), b"");
    }

    #[test]
    fn wraparound_keeps_the_newest_bytes_in_order() {
        let mut b = Backlog::new(8, 0);
        b.append(b"abcdef");
        b.append(b"ghij");
        assert_eq!(b.histlen(), 8);
        assert_eq!(b.master_offset(), 10);
        assert_eq!(b.first_offset(), 3);
        assert_eq!(b.read_from(3).unwrap(), b"cdefghij");
        assert_eq!(b.read_from(7).unwrap(), b"ghij");
        // One append larger than the whole buffer.
        b.append(b"0123456789ABC");
        assert_eq!(b.master_offset(), 23);
        assert_eq!(b.read_from(16).unwrap(), b"56789ABC");
        // Many small appends across the seam.
        let mut model = Vec::new();
        let mut b = Backlog::new(7, 0);
        for i in 0..100u8 {
            let chunk = vec![i; (i % 5) as usize];
            b.append(&chunk);
            model.extend_from_slice(&chunk);
            let held = model.len().min(7);
            assert_eq!(
                b.read_from(b.first_offset()).unwrap(),
                &model[model.len() - held..]
            );
        }
    }

    #[test]
    fn offsets_out_of_range_are_refused() {
        let mut b = Backlog::new(4, 0);
        b.append(b"abcdefgh");
        assert_eq!(b.first_offset(), 5);
        assert!(!b.covers(4), "fell out");
        assert_eq!(b.read_from(4), None);
        assert!(!b.covers(10), "past the end");
        assert_eq!(b.read_from(10), None);
        assert!(b.covers(9));
        assert!(!b.covers(0));
    }

    #[test]
    fn resize_keeps_the_newest_bytes() {
        let mut b = Backlog::new(8, 0);
        b.append(b"abcdefgh");
        b.resize(3);
        assert_eq!((b.first_offset(), b.master_offset()), (6, 8));
        assert_eq!(b.read_from(6).unwrap(), b"fgh");
        b.resize(10);
        b.append(b"ij");
        assert_eq!(b.read_from(6).unwrap(), b"fghij");
    }
}
