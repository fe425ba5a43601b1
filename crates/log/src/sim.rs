//! [`SimStorage`]: an in-memory disk for crash tests, fuzzing and fault injection.
//!
//! It keeps two views of everything: what the running process sees, and what is durable.
//! Every file write is positional — an append at the handle's logical end (which may overwrite
//! zero fill) or a zero fill past the physical end — and each one is remembered, as (offset,
//! bytes), until the file's next [`StorageFile::sync_data`], which makes them durable; a
//! create, rename or remove becomes durable at [`Storage::sync_dir`] of its directory.
//! [`SimStorage::crash`] throws the non-durable view away — files created or renamed without a
//! directory fsync disappear or revert, and every file goes back to its durable content — then,
//! per [`CrashMode`], replays the unsynced writes of each file onto it: none of them, or all
//! but the last whole and the last cut at a random byte (and, for
//! [`CrashMode::TornWriteWithGarbage`], 1–64 bytes of garbage right after the cut, overwriting
//! what is there or extending the file). The crash ends the "boot": every handle from before
//! it fails from then on, so a dead log cannot write into the next boot's disk.
//! [`SimStorage::fail_next_sync`] makes the next file fsync fail the way Linux does after a
//! write-back error: the dirty pages are dropped (the durable content keeps what it had where
//! they overwrote it, and reads as zeros where they extended the file) and the error is
//! reported once. Directories themselves are durable as soon as they are created.
//!
//! Random choices (where a write tears) come from a seeded RNG, so a failing seed replays.
//! This module knows nothing about the log format.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{self, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::storage::{Storage, StorageFile};

/// What a simulated crash keeps of the data that was not fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashMode {
    /// Nothing: every file reverts to its last fsynced content.
    DropUnsynced,
    /// Every unsynced write but the last survives; the last one is cut at a random byte
    /// (possibly keeping none of it). Where it overwrote durable bytes (zero fill), what lies
    /// past the cut is the durable content.
    TornWrite,
    /// Like `TornWrite`, then 1–64 bytes of garbage (random or zero) follow the cut, overwriting
    /// what is there or extending the file, as when the file size or some sectors reached the
    /// disk but the right data did not.
    TornWriteWithGarbage,
}

impl CrashMode {
    /// Every mode.
    pub const ALL: [CrashMode; 3] = [
        CrashMode::DropUnsynced,
        CrashMode::TornWrite,
        CrashMode::TornWriteWithGarbage,
    ];
}

/// Handle to a simulated disk. Clones share the disk and the boot; see the module docs.
#[derive(Clone)]
pub struct SimStorage {
    disk: Arc<Mutex<Disk>>,
    /// The boot this handle belongs to; storage operations fail once the disk has crashed
    /// since (that is, once `disk.boot` moved on).
    boot: u64,
}

impl std::fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimStorage")
            .field("boot", &self.boot)
            .finish_non_exhaustive()
    }
}

/// One file's content, independent of its names (a rename keeps the inode).
#[derive(Default)]
struct Inode {
    /// What the running process reads.
    data: Vec<u8>,
    /// What survives a crash.
    durable: Vec<u8>,
    /// The writes since the last sync, in order, as (offset, bytes written): replaying them
    /// onto `durable` gives `data` (unless `diverged`).
    unsynced_writes: Vec<(usize, Vec<u8>)>,
    /// `data` is no longer `durable` plus the unsynced writes (the file was truncated or
    /// re-created since the last sync).
    diverged: bool,
}

/// Writes `bytes` into `content` at `offset`, overwriting what is there and extending it
/// (with zeros before `offset` if it starts past the end). Copies only, no per-byte loops:
/// zero fill makes files megabytes long even in unoptimized test builds.
fn write_at(content: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
    if content.len() < offset {
        content.extend_from_slice(&vec![0; offset - content.len()]);
    }
    let overlap = (content.len() - offset).min(bytes.len());
    content[offset..offset + overlap].copy_from_slice(&bytes[..overlap]);
    content.extend_from_slice(&bytes[overlap..]);
}

/// The whole simulated disk, behind one mutex so every operation (and a crash) is atomic.
struct Disk {
    boot: u64,
    next_inode: u64,
    inodes: HashMap<u64, Inode>,
    /// Directory entries as the running process sees them.
    names: BTreeMap<PathBuf, u64>,
    /// Directory entries as of each directory's last fsync.
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    rng: StdRng,
    fail_next_syncs: u32,
    sync_latency: Duration,
    file_syncs: u64,
    dir_syncs: u64,
    /// See [`SimStorage::pad_segments`].
    pad_block: usize,
    /// See [`SimStorage::set_capacity`].
    capacity: Option<u64>,
}

fn stale_handle() -> io::Error {
    io::Error::other("sim: storage handle from before a crash")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("sim: no such file or directory: {}", path.display()),
    )
}

impl Disk {
    fn check_parent(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(parent) if self.dirs.contains(parent) => Ok(()),
            _ => Err(not_found(path)),
        }
    }

    fn inode_of(&self, path: &Path) -> io::Result<u64> {
        self.names.get(path).copied().ok_or_else(|| not_found(path))
    }

    /// Bytes all files hold together.
    fn used(&self) -> u64 {
        self.inodes.values().map(|i| i.data.len() as u64).sum()
    }

    /// `ENOSPC` if growing a file by `growth` bytes would go past the capacity.
    fn check_space(&self, growth: usize) -> io::Result<()> {
        let Some(capacity) = self.capacity else {
            return Ok(());
        };
        if growth > 0 && self.used() + growth as u64 > capacity {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::NOSPC.raw_os_error(),
            ));
        }
        Ok(())
    }
}

impl SimStorage {
    /// A fresh, empty disk whose random choices derive from `seed`.
    pub fn new(seed: u64) -> SimStorage {
        SimStorage {
            disk: Arc::new(Mutex::new(Disk {
                boot: 0,
                next_inode: 1,
                inodes: HashMap::new(),
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                dirs: BTreeSet::new(),
                rng: StdRng::seed_from_u64(seed),
                fail_next_syncs: 0,
                sync_latency: Duration::ZERO,
                file_syncs: 0,
                dir_syncs: 0,
                pad_block: 0,
                capacity: None,
            })),
            boot: 0,
        }
    }

    /// Limits the bytes all files may hold together (`None`: no limit). A write or zero fill
    /// that would grow the files past it fails with `ENOSPC` and writes nothing; overwrites
    /// within a file's size still succeed.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.disk.lock().capacity = bytes;
    }

    /// Bytes all files hold together.
    pub fn used_bytes(&self) -> u64 {
        self.disk.lock().used()
    }

    /// From now on, files made with [`Storage::create_padded`] (log segments) are written the
    /// way [`crate::OsStorage`] writes them with direct I/O: every append is followed, in the
    /// same write, by zeros up to the next multiple of `block` bytes, which the next append
    /// overwrites. (Direct I/O also writes the partial block's earlier bytes again; they are
    /// the same bytes, so on a device whose sector writes are atomic a crash cannot change
    /// them, and the model leaves them out of the write a crash tears.) 0 turns it off.
    pub fn pad_segments(&self, block: usize) {
        self.disk.lock().pad_block = block;
    }

    /// Creates (or truncates) `path`; appends to it are padded to multiples of `pad` (0: not).
    fn create_file(&self, path: &Path, pad: usize) -> io::Result<Box<dyn StorageFile>> {
        let mut disk = self.live_disk()?;
        disk.check_parent(path)?;
        let id = match disk.names.get(path).copied() {
            Some(id) => {
                let inode = disk.inodes.entry(id).or_default();
                inode.data.clear();
                inode.unsynced_writes.clear();
                inode.diverged = !inode.durable.is_empty();
                id
            }
            None => {
                let id = disk.next_inode;
                disk.next_inode += 1;
                disk.inodes.insert(id, Inode::default());
                disk.names.insert(path.to_path_buf(), id);
                id
            }
        };
        Ok(Box::new(SimFile {
            disk: Arc::clone(&self.disk),
            boot: self.boot,
            inode: id,
            len: 0,
            pad,
        }))
    }

    /// A handle for the disk's current boot (use it to reopen the log after [`Self::crash`]).
    pub fn reboot(&self) -> SimStorage {
        SimStorage {
            disk: Arc::clone(&self.disk),
            boot: self.disk.lock().boot,
        }
    }

    /// Simulates power loss: keeps only what was durable (plus, per `mode`, a torn part of the
    /// unsynced tail of each file) and invalidates every handle of the current boot.
    pub fn crash(&self, mode: CrashMode) {
        let mut guard = self.disk.lock();
        let disk = &mut *guard;
        let live: HashSet<u64> = disk.durable_names.values().copied().collect();
        disk.inodes.retain(|id, _| live.contains(id));
        for inode in disk.inodes.values_mut() {
            let mut content = std::mem::take(&mut inode.durable);
            let writes = std::mem::take(&mut inode.unsynced_writes);
            if let (false, Some(((last_offset, last_bytes), earlier)), false) = (
                mode == CrashMode::DropUnsynced,
                writes.split_last(),
                inode.diverged,
            ) {
                for (offset, bytes) in earlier {
                    write_at(&mut content, *offset, bytes);
                }
                // Writes are never empty (see `SimFile`), so this range is too.
                let keep = disk.rng.gen_range(0..last_bytes.len());
                write_at(&mut content, *last_offset, &last_bytes[..keep]);
                if mode == CrashMode::TornWriteWithGarbage {
                    let garbage_len = disk.rng.gen_range(1..=64usize);
                    let zeros = disk.rng.gen_bool(0.5);
                    let garbage: Vec<u8> = (0..garbage_len)
                        .map(|_| if zeros { 0 } else { disk.rng.gen() })
                        .collect();
                    write_at(&mut content, last_offset + keep, &garbage);
                }
            }
            inode.data = content.clone();
            inode.durable = content;
            inode.unsynced_writes.clear();
            inode.diverged = false;
        }
        disk.names = disk.durable_names.clone();
        disk.boot += 1;
    }

    /// Makes the next file fsync fail with an I/O error (its dirty data is dropped).
    pub fn fail_next_sync(&self) {
        self.disk.lock().fail_next_syncs += 1;
    }

    /// Makes every file fsync take this long (to let group commit batch up).
    pub fn set_sync_latency(&self, latency: Duration) {
        self.disk.lock().sync_latency = latency;
    }

    /// File fsyncs attempted so far, all boots.
    pub fn file_syncs(&self) -> u64 {
        self.disk.lock().file_syncs
    }

    /// Directory fsyncs so far, all boots.
    pub fn dir_syncs(&self) -> u64 {
        self.disk.lock().dir_syncs
    }

    /// Names of the files in `dir` as the running process sees them, sorted.
    pub fn file_names(&self, dir: &Path) -> Vec<String> {
        let disk = self.disk.lock();
        let mut names: Vec<String> = disk
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// The content of `path` as the running process sees it.
    pub fn file_contents(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk.lock();
        let id = disk.names.get(path)?;
        disk.inodes.get(id).map(|inode| inode.data.clone())
    }

    /// Creates (or replaces) `path` with `content`, durable at once, creating its directory
    /// if needed. For setting up a disk image (fuzzing, format tests).
    pub fn put_file(&self, path: &Path, content: &[u8]) {
        let mut disk = self.disk.lock();
        if let Some(parent) = path.parent() {
            for dir in parent.ancestors() {
                disk.dirs.insert(dir.to_path_buf());
            }
        }
        let id = disk.next_inode;
        disk.next_inode += 1;
        disk.inodes.insert(
            id,
            Inode {
                data: content.to_vec(),
                durable: content.to_vec(),
                ..Inode::default()
            },
        );
        disk.names.insert(path.to_path_buf(), id);
        disk.durable_names.insert(path.to_path_buf(), id);
    }

    /// Locks the disk after checking this handle still belongs to the current boot.
    fn live_disk(&self) -> io::Result<parking_lot::MutexGuard<'_, Disk>> {
        let disk = self.disk.lock();
        if disk.boot != self.boot {
            return Err(stale_handle());
        }
        Ok(disk)
    }
}

/// A file of a [`SimStorage`], open for appending.
struct SimFile {
    disk: Arc<Mutex<Disk>>,
    boot: u64,
    inode: u64,
    /// Logical length: where the next append goes (the physical size is the inode's `data`).
    len: u64,
    /// Appends are padded with zeros to a multiple of this (0: not padded).
    pad: usize,
}

impl SimFile {
    fn live_disk(&self) -> io::Result<parking_lot::MutexGuard<'_, Disk>> {
        let disk = self.disk.lock();
        if disk.boot != self.boot {
            return Err(stale_handle());
        }
        Ok(disk)
    }
}

impl StorageFile for SimFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut disk = self.live_disk()?;
        let inode = disk.inodes.get_mut(&self.inode).ok_or_else(stale_handle)?;
        let offset = usize::try_from(self.len).map_err(io::Error::other)?;
        let end = offset + buf.len();
        let padded_end = if self.pad > 0 && !buf.is_empty() {
            end.div_ceil(self.pad) * self.pad
        } else {
            end
        };
        let growth = padded_end.saturating_sub(inode.data.len());
        disk.check_space(growth)?;
        let inode = disk.inodes.get_mut(&self.inode).ok_or_else(stale_handle)?;
        let mut bytes = buf.to_vec();
        bytes.resize(padded_end - offset, 0);
        write_at(&mut inode.data, offset, &bytes);
        if !bytes.is_empty() {
            inode.unsynced_writes.push((offset, bytes));
        }
        drop(disk);
        self.len += buf.len() as u64;
        Ok(())
    }

    fn preallocate(&mut self, physical_len: u64) -> io::Result<()> {
        let mut disk = self.live_disk()?;
        let inode = disk.inodes.get_mut(&self.inode).ok_or_else(stale_handle)?;
        let target = usize::try_from(physical_len).map_err(io::Error::other)?;
        let offset = inode.data.len();
        disk.check_space(target.saturating_sub(offset))?;
        let inode = disk.inodes.get_mut(&self.inode).ok_or_else(stale_handle)?;
        if target > offset {
            let zeros = vec![0; target - offset];
            inode.data.extend_from_slice(&zeros);
            inode.unsynced_writes.push((offset, zeros));
        }
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let (latency, writes_at_call) = {
            let mut disk = self.live_disk()?;
            disk.file_syncs += 1;
            let latency = disk.sync_latency;
            let fail = disk.fail_next_syncs > 0;
            if fail {
                disk.fail_next_syncs -= 1;
            }
            let inode = disk.inodes.get_mut(&self.inode).ok_or_else(stale_handle)?;
            if fail {
                // Linux after a write-back error: the dirty pages are marked clean without
                // reaching the disk, so the disk keeps what it had under them (zeros where
                // they extended the file), and a later fsync would "succeed" without bringing
                // them back.
                if !inode.diverged && inode.data.len() > inode.durable.len() {
                    let end = inode.data.len();
                    write_at(&mut inode.durable, end, &[]);
                }
                inode.unsynced_writes.clear();
                return Err(io::Error::other("sim: injected fsync failure (EIO)"));
            }
            (latency, inode.unsynced_writes.len())
        };
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        let mut disk = self.live_disk()?;
        let inode = disk.inodes.get_mut(&self.inode).ok_or_else(stale_handle)?;
        if inode.diverged {
            inode.durable = inode.data.clone();
            inode.diverged = false;
            inode.unsynced_writes.clear();
        } else {
            // The writes made before the call are durable; any made during it (while the
            // latency elapsed) are not yet.
            let synced = writes_at_call.min(inode.unsynced_writes.len());
            for (offset, bytes) in inode.unsynced_writes.drain(..synced) {
                write_at(&mut inode.durable, offset, &bytes);
            }
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

impl Storage for SimStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut disk = self.live_disk()?;
        for d in dir.ancestors() {
            disk.dirs.insert(d.to_path_buf());
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let disk = self.live_disk()?;
        if !disk.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(disk
            .names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.create_file(path, 0)
    }

    fn create_padded(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let pad = self.disk.lock().pad_block;
        self.create_file(path, pad)
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        let disk = self.live_disk()?;
        let id = disk.inode_of(path)?;
        let data = disk
            .inodes
            .get(&id)
            .map(|inode| inode.data.clone())
            .unwrap_or_default();
        Ok(Box::new(Cursor::new(data)))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut disk = self.live_disk()?;
        let id = disk.inode_of(path)?;
        let inode = disk.inodes.get_mut(&id).ok_or_else(|| not_found(path))?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        inode.data.resize(len, 0);
        // Storage::truncate is durable when it returns.
        inode.durable = inode.data.clone();
        inode.unsynced_writes.clear();
        inode.diverged = false;
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.live_disk()?;
        disk.check_parent(to)?;
        let id = disk.names.remove(from).ok_or_else(|| not_found(from))?;
        disk.names.insert(to.to_path_buf(), id);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.live_disk()?;
        disk.names.remove(path).ok_or_else(|| not_found(path))?;
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut guard = self.live_disk()?;
        let disk = &mut *guard;
        if !disk.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        disk.dir_syncs += 1;
        disk.durable_names.retain(|p, _| p.parent() != Some(dir));
        for (path, id) in &disk.names {
            if path.parent() == Some(dir) {
                disk.durable_names.insert(path.clone(), *id);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        PathBuf::from("/sim/log")
    }

    fn setup() -> SimStorage {
        let sim = SimStorage::new(7);
        sim.create_dir_all(&dir()).unwrap();
        sim
    }

    #[test]
    fn unsynced_bytes_are_lost_synced_bytes_survive() {
        let sim = setup();
        let path = dir().join("a");
        let mut f = sim.create(&path).unwrap();
        f.append(b"hello ").unwrap();
        f.sync_data().unwrap();
        sim.sync_dir(&dir()).unwrap();
        f.append(b"world").unwrap();
        assert_eq!(sim.file_contents(&path).unwrap(), b"hello world");
        sim.crash(CrashMode::DropUnsynced);
        assert_eq!(sim.file_contents(&path).unwrap(), b"hello ");
        // The old handles are dead.
        assert!(f.append(b"x").is_err());
        assert!(sim.list(&dir()).is_err());
        assert_eq!(sim.reboot().list(&dir()).unwrap(), vec!["a".to_string()]);
    }

    #[test]
    fn a_file_without_a_directory_fsync_disappears() {
        let sim = setup();
        let path = dir().join("new");
        let mut f = sim.create(&path).unwrap();
        f.append(b"data").unwrap();
        f.sync_data().unwrap();
        sim.crash(CrashMode::DropUnsynced);
        assert!(sim.file_contents(&path).is_none());
    }

    #[test]
    fn renames_and_removes_revert_without_a_directory_fsync() {
        let sim = setup();
        let (a, b, c) = (dir().join("a"), dir().join("b"), dir().join("c"));
        for p in [&a, &c] {
            let mut f = sim.create(p).unwrap();
            f.append(b"x").unwrap();
            f.sync_data().unwrap();
        }
        sim.sync_dir(&dir()).unwrap();
        sim.rename(&a, &b).unwrap();
        sim.remove(&c).unwrap();
        assert_eq!(sim.file_names(&dir()), vec!["b"]);
        sim.crash(CrashMode::DropUnsynced);
        assert_eq!(sim.file_names(&dir()), vec!["a", "c"]);

        let sim = sim.reboot();
        sim.rename(&a, &b).unwrap();
        sim.sync_dir(&dir()).unwrap();
        sim.crash(CrashMode::DropUnsynced);
        assert_eq!(sim.file_names(&dir()), vec!["b", "c"]);
    }

    #[test]
    fn torn_write_keeps_earlier_writes_and_a_prefix_of_the_last() {
        for seed in 0..50 {
            let sim = SimStorage::new(seed);
            sim.create_dir_all(&dir()).unwrap();
            let path = dir().join("t");
            let mut f = sim.create(&path).unwrap();
            f.append(b"durable|").unwrap();
            f.sync_data().unwrap();
            sim.sync_dir(&dir()).unwrap();
            f.append(b"first|").unwrap();
            f.append(b"second-write").unwrap();
            sim.crash(CrashMode::TornWrite);
            let got = sim.file_contents(&path).unwrap();
            assert!(got.starts_with(b"durable|first|"), "{got:?}");
            assert!(b"durable|first|second-write".starts_with(&got));
            assert!(got.len() < b"durable|first|second-write".len());
        }
    }

    #[test]
    fn a_failed_fsync_drops_the_dirty_data() {
        let sim = setup();
        let path = dir().join("f");
        let mut f = sim.create(&path).unwrap();
        sim.sync_dir(&dir()).unwrap();
        f.append(b"abc").unwrap();
        sim.fail_next_sync();
        assert!(f.sync_data().is_err());
        f.append(b"def").unwrap();
        f.sync_data().unwrap(); // "succeeds", but abc never reached the disk
        sim.crash(CrashMode::DropUnsynced);
        assert_eq!(sim.file_contents(&path).unwrap(), b"\0\0\0def");
    }

    /// A file with `durable|` synced and zero-filled to 64 bytes, then `unsynced` appended.
    fn zero_filled(sim: &SimStorage, unsynced: &[&[u8]]) -> (PathBuf, Box<dyn StorageFile>) {
        let path = dir().join("z");
        let mut f = sim.create(&path).unwrap();
        f.append(b"durable|").unwrap();
        f.preallocate(64).unwrap();
        assert_eq!(f.len(), 8, "preallocate leaves the logical length alone");
        f.sync_data().unwrap();
        sim.sync_dir(&dir()).unwrap();
        for buf in unsynced {
            f.append(buf).unwrap();
        }
        (path, f)
    }

    #[test]
    fn appends_overwrite_zero_fill_in_place() {
        let sim = setup();
        let (path, mut f) = zero_filled(&sim, &[b"abc"]);
        assert_eq!(f.len(), 11);
        let mut want = b"durable|abc".to_vec();
        want.resize(64, 0);
        assert_eq!(sim.file_contents(&path).unwrap(), want);
        // Smaller or equal sizes change nothing; a larger one zero-fills from the physical end.
        f.preallocate(10).unwrap();
        f.preallocate(64).unwrap();
        assert_eq!(sim.file_contents(&path).unwrap().len(), 64);
        f.preallocate(100).unwrap();
        want.resize(100, 0);
        assert_eq!(sim.file_contents(&path).unwrap(), want);
        // An append past the zero fill extends the file.
        f.append(&[b'x'; 95]).unwrap();
        assert_eq!(sim.file_contents(&path).unwrap().len(), 11 + 95);
        f.sync_data().unwrap();
        sim.crash(CrashMode::TornWrite);
        let got = sim.file_contents(&path).unwrap();
        assert_eq!(&got[..11], b"durable|abc");
        assert_eq!(got.len(), 106);
    }

    #[test]
    fn unsynced_overwrites_of_zero_fill_are_lost() {
        let sim = setup();
        let (path, _f) = zero_filled(&sim, &[b"one|", b"two|"]);
        sim.crash(CrashMode::DropUnsynced);
        let mut want = b"durable|".to_vec();
        want.resize(64, 0);
        assert_eq!(sim.file_contents(&path).unwrap(), want);
    }

    #[test]
    fn a_torn_overwrite_leaves_the_zero_fill_after_the_cut() {
        for seed in 0..50 {
            let sim = SimStorage::new(seed);
            sim.create_dir_all(&dir()).unwrap();
            let (path, _f) = zero_filled(&sim, &[b"first|", b"second-write"]);
            sim.crash(CrashMode::TornWrite);
            let got = sim.file_contents(&path).unwrap();
            assert_eq!(got.len(), 64, "the zero fill was durable: the size stays");
            let end = b"durable|first|".len();
            assert_eq!(&got[..end], b"durable|first|");
            let kept = got[end..]
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |i| i + 1);
            assert!(kept < b"second-write".len(), "seed {seed}: {got:?}");
            assert_eq!(&got[end..end + kept], &b"second-write"[..kept]);
            assert!(got[end + kept..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn garbage_after_a_torn_overwrite_overwrites_or_extends() {
        let (mut overwrote, mut extended) = (0, 0);
        for seed in 0..200 {
            let sim = SimStorage::new(seed);
            sim.create_dir_all(&dir()).unwrap();
            // The last write ends 2 bytes before the end of the zero fill, so garbage after
            // its cut mostly stays inside the file but may run past its end.
            let (path, _f) = zero_filled(&sim, &[b"first|", &[b'L'; 42]]);
            sim.crash(CrashMode::TornWriteWithGarbage);
            let got = sim.file_contents(&path).unwrap();
            assert!(got.starts_with(b"durable|first|"), "seed {seed}: {got:?}");
            // (At or past the cut: garbage may start with an `L` too.)
            let cut = 14 + got[14..].iter().take_while(|&&b| b == b'L').count();
            // Garbage is 1-64 bytes right after the cut; the rest is untouched zero fill.
            assert!(
                got.len() >= 64 && got.len() <= cut + 64,
                "seed {seed}: {got:?}"
            );
            let garbage_end = got.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            assert!(garbage_end <= cut + 64);
            if got.len() > 64 {
                extended += 1;
            } else {
                overwrote += 1;
            }
        }
        assert!(overwrote > 0 && extended > 0, "{overwrote} {extended}");
    }

    #[test]
    fn a_failed_fsync_keeps_the_zero_fill_under_dropped_overwrites() {
        let sim = setup();
        let (path, mut f) = zero_filled(&sim, &[b"lost"]);
        f.preallocate(80).unwrap();
        sim.fail_next_sync();
        assert!(f.sync_data().is_err());
        f.append(b"kept").unwrap();
        f.sync_data().unwrap();
        sim.crash(CrashMode::DropUnsynced);
        let mut want = b"durable|\0\0\0\0kept".to_vec();
        want.resize(80, 0);
        assert_eq!(sim.file_contents(&path).unwrap(), want);
    }

    #[test]
    fn truncate_is_durable() {
        let sim = setup();
        let path = dir().join("t");
        let mut f = sim.create(&path).unwrap();
        f.append(b"0123456789").unwrap();
        f.sync_data().unwrap();
        sim.sync_dir(&dir()).unwrap();
        sim.truncate(&path, 4).unwrap();
        sim.crash(CrashMode::TornWrite);
        assert_eq!(sim.file_contents(&path).unwrap(), b"0123");
    }
}
