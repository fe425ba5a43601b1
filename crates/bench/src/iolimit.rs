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
    let (dir, description) = if v2 {
        let _ = std::fs::write(v2_root.join("cgroup.subtree_control"), "+io");
        let dir = v2_root.join(&name);
        std::fs::create_dir(&dir).map_err(|e| cgroup_err(&dir, e))?;
        let limit = format!("{device} riops={iops} wiops={iops}");
        std::fs::write(dir.join("io.max"), &limit).map_err(|e| cgroup_err(&dir, e))?;
        (dir, format!("cgroup v2 io.max {limit}"))
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
        for file in [
            "blkio.throttle.read_iops_device",
            "blkio.throttle.write_iops_device",
        ] {
            std::fs::write(dir.join(file), format!("{device} {iops}"))
                .map_err(|e| cgroup_err(&dir, e))?;
        }
        (
            dir,
            format!("cgroup v1 blkio {device} read_iops={iops} write_iops={iops}"),
        )
    };
    let limit = IopsLimit { dir, description };
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
