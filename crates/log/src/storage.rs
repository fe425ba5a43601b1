//! The [`Storage`] trait, through which every file operation of the log goes, and
//! [`OsStorage`], its implementation on real files.
//!
//! The trait is deliberately small and spells out durability: data appended to a file is
//! durable only after [`StorageFile::sync_data`]; a file created, renamed or removed is durable
//! only after [`Storage::sync_dir`] on its directory. The log follows those rules and
//! [`crate::SimStorage`] enforces them, so a crash test can show that nothing the log called
//! durable depended on anything else. Nothing here knows about records or LSNs.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;

/// A file open for appending.
pub trait StorageFile: Send {
    /// Appends all of `buf` at the end of the file (handed to the OS, not yet durable).
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes every byte appended so far durable (`fdatasync`). After an error the log never
    /// retries: the OS may have dropped the dirty pages and a retry could falsely succeed.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Current length of the file in bytes (including anything appended but not yet durable).
    fn len(&self) -> u64;
    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every file and directory operation the log needs.
pub trait Storage: Send + Sync + 'static {
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names (not paths) of the files directly in `dir`, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates `path` (truncating it if it exists) and opens it for appending. The new name is
    /// durable only after [`Storage::sync_dir`].
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens `path` for reading from the start.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>>;
    /// Cuts `path` to `len` bytes and makes the new length durable before returning.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` if it exists (durable after `sync_dir`).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path` (durable after `sync_dir`).
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creates, renames, removes) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Reads the whole file at `path`.
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut data = Vec::new();
        self.open_read(path)?.read_to_end(&mut data)?;
        Ok(data)
    }
}

/// [`Storage`] on the real file system via `std::fs`: `fdatasync` through
/// [`File::sync_data`], directory fsync by opening the directory and calling `sync_all`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsStorage;

struct OsFile {
    file: File,
    len: u64,
}

impl StorageFile for OsFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)?;
        self.len += buf.len() as u64;
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }
}

impl Storage for OsStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_string());
                }
            }
        }
        Ok(names)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(OsFile { file, len: 0 }))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(io::BufReader::new(File::open(path)?)))
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        // The size is metadata: sync_all, not sync_data, so the shorter length is durable.
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
