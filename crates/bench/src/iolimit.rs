//! A storage IOPS limit on a managed server, to test the exam-day rule of thumb "one concurrent
//! student per IOPS": the server's processes are moved into a fresh cgroup whose block-I/O
//! throttle allows `iops` reads and `iops` writes per second on the device holding its data
//! directory — cgroup v2 `io.max` (`riops=`/`wiops=`) where the `io` controller is available,
//! else cgroup v1 `blkio.throttle.{read,write}_iops_device`. Needs root and a writable cgroup
//! file system; when either is missing the limit is refused with the reason, never silently
//! skipped. Children the server forks later (PostgreSQL backends) inherit the cgroup. Only I/O
//! the server's own processes submit is throttled (direct I/O, and the writes an `fsync` of
//! theirs pushes out); page-cache writeback by the kernel's flusher threads is not, under
//! cgroup v1.
//!
//! May import: `error`.

use std::path::{Path, PathBuf};

use crate::error::{BenchError, Result};

/// A cgroup holding a throttled server; removed on drop (once its processes have exited).
#[derive(Debug)]
pub struct IopsLimit {
    dir: PathBuf,
    /// What was set, e.g. `cgroup v1 blkio 252:0 read_iops=100 write_iops=100`.
    pub description: String,
}

impl Drop for IopsLimit {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The `major:minor` of the device holding `path`.
pub fn device_of(path: &Path) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path)?.dev();
    Ok(format!("{}:{}", libc::major(dev), libc::minor(dev)))
}

/// Puts `pids` into a new cgroup limited to `iops` reads and writes per second on the device of
/// `data_dir`.
pub fn apply(pids: &[u32], data_dir: &Path, iops: u32) -> Result<IopsLimit> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(BenchError::Input(
            "--iops-limit needs root (it writes the cgroup file system)".into(),
        ));
    }
    let device = device_of(data_dir)?;
    let name = format!(
        "gradus-bench-{}-{}",
        std::process::id(),
        pids.first().unwrap_or(&0)
    );
    let v2_root = Path::new("/sys/fs/cgroup");
    let v2 = std::fs::read_to_string(v2_root.join("cgroup.controllers"))
        .map(|c| c.split_whitespace().any(|x| x == "io"))
        .unwrap_or(false);
    // The guard removes the cgroup again if a later step fails.
    let limit = if v2 {
        let _ = std::fs::write(v2_root.join("cgroup.subtree_control"), "+io");
        let dir = v2_root.join(&name);
        std::fs::create_dir(&dir).map_err(|e| cgroup_err(&dir, e))?;
        let mut guard = IopsLimit {
            dir,
            description: String::new(),
        };
        let limit = format!("{device} riops={iops} wiops={iops}");
        std::fs::write(guard.dir.join("io.max"), &limit).map_err(|e| cgroup_err(&guard.dir, e))?;
        guard.description = format!("cgroup v2 io.max {limit}");
        guard
    } else {
        let root = v2_root.join("blkio");
        if !root.join("blkio.throttle.read_iops_device").exists() {
            return Err(BenchError::Input(
                "--iops-limit: neither a cgroup v2 io controller nor cgroup v1 blkio throttling \
                 is available here"
                    .into(),
            ));
        }
        let dir = root.join(&name);
        std::fs::create_dir(&dir).map_err(|e| cgroup_err(&dir, e))?;
        let mut guard = IopsLimit {
            dir,
            description: String::new(),
        };
        for file in [
            "blkio.throttle.read_iops_device",
            "blkio.throttle.write_iops_device",
        ] {
            std::fs::write(guard.dir.join(file), format!("{device} {iops}"))
                .map_err(|e| cgroup_err(&guard.dir, e))?;
        }
        guard.description = format!("cgroup v1 blkio {device} read_iops={iops} write_iops={iops}");
        guard
    };
    for (i, pid) in pids.iter().enumerate() {
        match std::fs::write(limit.dir.join("cgroup.procs"), pid.to_string()) {
            Ok(()) => {}
            // A short-lived child (a PostgreSQL backend) that exited since it was listed.
            Err(e) if i > 0 && e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(cgroup_err(&limit.dir, e)),
        }
    }
    Ok(limit)
}

fn cgroup_err(dir: &Path, e: std::io::Error) -> BenchError {
    BenchError::Input(format!("--iops-limit: cgroup {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a PostgreSQL backend that exits between listing the server's processes and
    /// moving them made the whole limit fail with ESRCH.
    #[test]
    fn iops_limit_skips_a_child_that_exited() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let writable = std::fs::metadata("/sys/fs/cgroup/blkio/blkio.throttle.read_iops_device")
            .is_ok()
            || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
                .map(|c| c.contains("io"))
                .unwrap_or(false);
        if !root || !writable {
            eprintln!("skipped: needs root and a cgroup block-I/O controller");
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // A process that has exited (and been reaped): its pid names no process.
        let mut done = std::process::Command::new("true").spawn().unwrap();
        let gone = done.id();
        done.wait().unwrap();
        let limit = apply(&[child.id(), gone], &std::env::temp_dir(), 1000);
        let _ = child.kill();
        let _ = child.wait();
        let limit = limit.expect("the live process was moved, the vanished one skipped");
        assert!(limit.description.contains("1000"));
        let dir = limit.dir.clone();
        drop(limit);
        assert!(!dir.exists(), "the cgroup is removed with its guard");
        // The main process itself gone is an error, and leaves no cgroup behind.
        assert!(apply(&[gone], &std::env::temp_dir(), 1000).is_err());
        let name = format!("gradus-bench-{}-{gone}", std::process::id());
        assert!(!std::path::Path::new("/sys/fs/cgroup/blkio")
            .join(name)
            .exists());
    }

    #[test]
    fn device_numbers_read_from_the_file_system() {
        let d = device_of(Path::new("/")).unwrap();
        let (major, minor) = d.split_once(':').unwrap();
        assert!(
            major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok(),
            "{d}"
        );
    }
}
