//! File operations beneath a root directory that never follow a symlink in any component.
//!
//! Applying or undoing a change set (`changes.rs`) writes the real workspace from the unconfined
//! worker, while sandboxed commands may be writing the same workspace at that moment. A check of
//! the path followed by a path-based write (check → rename) leaves a window in which a
//! concurrent command swaps a directory for a symlink to, say, the data dir, and the worker's
//! write lands there. Here every operation first opens the parent directory with
//! `openat2(root, parent, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` and then acts relative to
//! that descriptor (`fstatat`, `openat(O_NOFOLLOW)`, `renameat`, `unlinkat`, `mkdirat`,
//! `symlinkat`): once the parent is open, no later swap can redirect the operation.
//!
//! Reads go the same way (issue 18: "the worker reads the workspace only beneath it"): the
//! change set of an overlay run, its diff and its hashes read both layers only through
//! [`Beneath::lookup`] (stat without following), [`Beneath::entry`] (state + content hash),
//! [`Beneath::list`] (a directory read by descriptor), [`Beneath::read_up_to`] (bounded content)
//! and [`Beneath::xattr`] (overlay metadata, on an `O_PATH` descriptor). A symlink is reported as
//! a symlink, never followed; a path whose parent is a symlink or a file is
//! [`Lookup::ParentInTheWay`] / [`Entry::Unreachable`], never the state of what the symlink
//! points to. [`usage`] measures a tree (bytes, entries) the same way, for the overlay caps.
//!
//! Every file the worker writes here has its setuid/setgid bits removed (`put`): no privilege
//! bit ever reaches the workspace through the worker ("No privilege bits").

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{openat, openat2, readlinkat, renameat, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

/// A directory opened once; every path is resolved beneath it without symlinks.
pub struct Beneath {
    root: OwnedFd,
}

enum Parent {
    Open(OwnedFd),
    Missing,
    InTheWay,
}

/// What is at a path, seen without following any symlink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Absent,
    Dir,
    Link(String),
    /// A regular file: SHA-256 of its content (hex) and its permission bits.
    File(String, u32),
    /// Anything else (a FIFO, a socket, a device): never what a change set expects, so it
    /// always reads as a conflict.
    Other,
    /// A parent component is not a plain directory (a symlink or a file in the way): the path
    /// does not exist beneath the root. Reads as `special` (a conflict) unless the change set
    /// itself replaces that parent (see `changes::ensure_no_conflicts`).
    Unreachable,
}

impl Entry {
    /// The state string of `changes.rs` (None: absent).
    pub fn state(&self) -> Option<String> {
        match self {
            Entry::Absent => None,
            Entry::Dir => Some("dir".into()),
            Entry::Link(t) => Some(format!("link:{t}")),
            Entry::File(h, m) => Some(format!("file:{h}:{m:o}")),
            Entry::Other | Entry::Unreachable => Some("special".into()),
        }
    }
}

/// Metadata of a path, read with `fstatat(AT_SYMLINK_NOFOLLOW)` relative to its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub size: u64,
    /// Allocated bytes (`st_blocks * 512`).
    pub allocated: u64,
    pub rdev: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Link,
    CharDevice,
    /// FIFO, socket, block device.
    Special,
}

impl Meta {
    fn of(st: &nix::sys::stat::FileStat) -> Meta {
        let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        let kind = if fmt == SFlag::S_IFREG {
            Kind::File
        } else if fmt == SFlag::S_IFDIR {
            Kind::Dir
        } else if fmt == SFlag::S_IFLNK {
            Kind::Link
        } else if fmt == SFlag::S_IFCHR {
            Kind::CharDevice
        } else {
            Kind::Special
        };
        Meta {
            kind,
            mode: st.st_mode & 0o7777,
            size: st.st_size.max(0) as u64,
            allocated: (st.st_blocks.max(0) as u64).saturating_mul(512),
            rdev: st.st_rdev,
        }
    }
}

/// What [`Beneath::lookup`] found at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Absent,
    /// A parent component is a symlink or not a directory: nothing beneath the root is there.
    ParentInTheWay,
    Found(Meta),
}

/// Bytes (allocated) and entries of a tree, see [`usage`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub entries: u64,
    /// A directory could not be measured (a path too long to open, say): the tree's size is
    /// unknown, which the overlay caps treat as over.
    pub unmeasured: bool,
}

/// Measures the tree beneath `root` (the root itself not counted): bytes (allocated blocks;
/// for a regular file the larger of that and its size) and entries, never following a symlink and opening every directory
/// beneath the root with `RESOLVE_NO_SYMLINKS` (a directory swapped for a symlink mid-walk is
/// skipped, not followed). Stops early once `stop_bytes` or `stop_entries` is exceeded.
pub fn usage(root: &Path, stop_bytes: u64, stop_entries: u64) -> Result<Usage> {
    let b = Beneath::open(root)?;
    let mut u = Usage::default();
    let mut todo: Vec<String> = vec![String::new()];
    while let Some(rel) = todo.pop() {
        let dir = match b.open_dir(&rel) {
            Ok(Some(d)) => d,
            // Removed or swapped for a symlink while we walk: nothing of ours to count.
            Ok(None) => continue,
            Err(_) => {
                u.unmeasured = true;
                return Ok(u);
            }
        };
        let mut d = match nix::dir::Dir::from_fd(dir) {
            Ok(d) => d,
            Err(_) => {
                u.unmeasured = true;
                return Ok(u);
            }
        };
        let dfd = d.as_raw_fd();
        for e in d.iter() {
            let Ok(e) = e else {
                u.unmeasured = true;
                return Ok(u);
            };
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            // SAFETY: `dfd` stays open while `d` lives (this loop).
            let bdfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(dfd) };
            let Ok(st) = fstatat(bdfd, e.file_name(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            let m = Meta::of(&st);
            u.entries += 1;
            // A file counts for what applying it would write, a sparse one included.
            let bytes = if m.kind == Kind::File {
                m.allocated.max(m.size)
            } else {
                m.allocated
            };
            u.bytes = u.bytes.saturating_add(bytes);
            if u.bytes > stop_bytes || u.entries > stop_entries {
                return Ok(u);
            }
            if m.kind == Kind::Dir {
                match std::str::from_utf8(name) {
                    Ok(n) => todo.push(if rel.is_empty() {
                        n.to_string()
                    } else {
                        format!("{rel}/{n}")
                    }),
                    // Not nameable in a change set (compute refuses it anyway): unmeasured.
                    Err(_) => {
                        u.unmeasured = true;
                        return Ok(u);
                    }
                }
            }
        }
    }
    Ok(u)
}

fn components(rel: &str) -> Result<(Option<&str>, &str)> {
    if rel.is_empty()
        || rel.starts_with('/')
        || rel
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
    {
        bail!("invalid path {rel:?} in a change set");
    }
    Ok(match rel.rsplit_once('/') {
        Some((parent, name)) => (Some(parent), name),
        None => (None, rel),
    })
}

/// SHA-256 (hex) of what remains to be read from `f`.
pub(crate) fn hash_file(mut f: File) -> Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

impl Beneath {
    pub fn open(root: &Path) -> Result<Beneath> {
        let fd = nix::fcntl::open(
            root,
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| format!("open {}", root.display()))?;
        Ok(Beneath { root: fd })
    }

    /// A directory already opened safely (e.g. by `clients::paths::open_dir_for_read`).
    pub fn from_fd(root: OwnedFd) -> Beneath {
        Beneath { root }
    }

    /// The parent directory of `rel`, opened beneath the root without symlinks.
    fn parent(&self, rel: &str) -> Result<(Parent, String)> {
        let (parent, name) = components(rel)?;
        let how = OpenHow::new()
            .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
        let p = match openat2(self.root.as_fd(), parent.unwrap_or("."), how) {
            Ok(fd) => Parent::Open(fd),
            // A component is absent (RESOLVE_NO_SYMLINKS turns any symlink into ELOOP).
            Err(Errno::ENOENT) => Parent::Missing,
            Err(Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => Parent::InTheWay,
            Err(e) => return Err(e).with_context(|| format!("open the directory of {rel}")),
        };
        Ok((p, name.to_string()))
    }

    /// The parent of `rel`, which must exist as a plain directory (for writes).
    fn parent_for_write(&self, rel: &str) -> Result<(OwnedFd, String)> {
        match self.parent(rel)? {
            (Parent::Open(fd), name) => Ok((fd, name)),
            _ => bail!(
                "the directory of {rel} is missing or no longer a plain directory (a symlink or file is in the way)"
            ),
        }
    }

    /// What is at `rel` now.
    pub fn entry(&self, rel: &str) -> Result<Entry> {
        let dir = match self.parent(rel)? {
            (Parent::Open(fd), _) => fd,
            // A missing parent means a missing path; a parent that is a symlink or a file is
            // never a state a change set was computed against.
            (Parent::Missing, _) => return Ok(Entry::Absent),
            (Parent::InTheWay, _) => return Ok(Entry::Unreachable),
        };
        let name = components(rel)?.1;
        let st = match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(Entry::Absent),
            Err(e) => return Err(e).with_context(|| format!("stat {rel}")),
        };
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        Ok(if kind == SFlag::S_IFDIR {
            Entry::Dir
        } else if kind == SFlag::S_IFLNK {
            let t = readlinkat(dir.as_fd(), name).with_context(|| format!("readlink {rel}"))?;
            Entry::Link(t.to_string_lossy().into_owned())
        } else if kind == SFlag::S_IFREG {
            let f = self.open_file_in(&dir, name, rel)?;
            let mode = fstat(&f).map(|s| s.st_mode & 0o7777)?;
            Entry::File(hash_file(f)?, mode)
        } else {
            Entry::Other
        })
    }

    /// What is at `rel`, without following any symlink (a symlinked parent is
    /// `ParentInTheWay`, never looked through).
    pub fn lookup(&self, rel: &str) -> Result<Lookup> {
        let dir = match self.parent(rel)? {
            (Parent::Open(fd), _) => fd,
            (Parent::Missing, _) => return Ok(Lookup::Absent),
            (Parent::InTheWay, _) => return Ok(Lookup::ParentInTheWay),
        };
        let name = components(rel)?.1;
        match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Lookup::Found(Meta::of(&st))),
            Err(Errno::ENOENT) => Ok(Lookup::Absent),
            Err(e) => Err(e).with_context(|| format!("stat {rel}")),
        }
    }

    /// Opens the directory `rel` ("" = the root) beneath the root with no symlink in any
    /// component, the last included; `None` when it is absent or not a plain directory.
    fn open_dir(&self, rel: &str) -> Result<Option<OwnedFd>> {
        if !rel.is_empty() {
            components(rel)?;
        }
        let how = OpenHow::new()
            .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
        let path = if rel.is_empty() { "." } else { rel };
        match openat2(self.root.as_fd(), path, how) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => Ok(None),
            Err(e) => Err(e).with_context(|| format!("open the directory {path}")),
        }
    }

    /// The names in directory `rel` ("" = the root), sorted; the directory is opened beneath
    /// the root without symlinks and read by descriptor. A name that is not UTF-8 is an error
    /// (a change set names paths as text). Absent or not a plain directory: an error.
    pub fn list(&self, rel: &str) -> Result<Vec<String>> {
        let fd = self.open_dir(rel)?.ok_or_else(|| {
            anyhow::anyhow!("{rel:?} is no longer a plain directory beneath the root")
        })?;
        let mut d = nix::dir::Dir::from_fd(fd).with_context(|| format!("read {rel:?}"))?;
        let mut v = Vec::new();
        for e in d.iter() {
            let e = e.with_context(|| format!("read {rel:?}"))?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            match std::str::from_utf8(name) {
                Ok(n) => v.push(n.to_string()),
                Err(_) => bail!(
                    "a file name that is not UTF-8: {:?}",
                    String::from_utf8_lossy(name)
                ),
            }
        }
        v.sort();
        Ok(v)
    }

    /// The content of the regular file `rel` if it is at most `max` bytes; `None` when it is
    /// absent, not a regular file (a symlink included), unreachable, or larger.
    pub fn read_up_to(&self, rel: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let dir = match self.parent(rel)? {
            (Parent::Open(fd), _) => fd,
            _ => return Ok(None),
        };
        let name = components(rel)?.1;
        let fd = match openat(
            dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ELOOP | Errno::ENXIO) => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("open {rel}")),
        };
        let f = File::from(fd);
        let md = f.metadata().with_context(|| format!("stat {rel}"))?;
        if !md.is_file() || md.len() > max {
            return Ok(None);
        }
        let mut buf = Vec::with_capacity(md.len() as usize);
        f.take(max + 1)
            .read_to_end(&mut buf)
            .with_context(|| format!("read {rel}"))?;
        Ok((buf.len() as u64 <= max).then_some(buf))
    }

    /// The extended attribute `name` of `rel` (a file or directory, never a symlink's
    /// target), up to 64 bytes; `None` when absent or unreadable. The path is opened `O_PATH`
    /// beneath the root without symlinks; the attribute is read through that descriptor's
    /// `/proc/self/fd` entry (`fgetxattr` refuses `O_PATH` descriptors).
    pub fn xattr(&self, rel: &str, name: &str) -> Option<Vec<u8>> {
        components(rel).ok()?;
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
        let fd = openat2(self.root.as_fd(), rel, how).ok()?;
        let p = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        let cn = std::ffi::CString::new(name).ok()?;
        let mut buf = [0u8; 64];
        // SAFETY: valid NUL-terminated strings and a buffer of the given length; `fd` is open.
        let n = unsafe {
            libc::getxattr(
                p.as_ptr(),
                cn.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        drop(fd);
        (n >= 0).then(|| buf[..n as usize].to_vec())
    }

    fn open_file_in(&self, dir: &OwnedFd, name: &str, rel: &str) -> Result<File> {
        let fd = openat(
            dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| format!("open {rel}"))?;
        let f = File::from(fd);
        if !f.metadata()?.is_file() {
            bail!("{rel} is not a regular file");
        }
        Ok(f)
    }

    /// Opens the regular file at `rel` for reading (no symlink anywhere on the way).
    pub fn open_file(&self, rel: &str) -> Result<File> {
        let (dir, name) = self.parent_for_write(rel)?;
        self.open_file_in(&dir, &name, rel)
    }

    /// Makes `rel` a directory (an existing non-directory there is replaced).
    pub fn make_dir(&self, rel: &str) -> Result<()> {
        let (dir, name) = self.parent_for_write(rel)?;
        match fstatat(dir.as_fd(), name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR => {
                return Ok(())
            }
            Ok(_) => unlinkat(dir.as_fd(), name.as_str(), UnlinkatFlags::NoRemoveDir)
                .with_context(|| format!("rm {rel}"))?,
            Err(_) => {}
        }
        mkdirat(dir.as_fd(), name.as_str(), Mode::from_bits_truncate(0o755))
            .with_context(|| format!("mkdir {rel}"))
    }

    /// Atomically puts a regular file with `content`'s bytes and `mode` (setuid/setgid removed)
    /// at `rel`, or a symlink to `link` (exactly one of the two), replacing what is there (an
    /// empty directory too). The bytes go first to `tmp` (a bare name, no `/`) in `rel`'s
    /// directory, then are renamed onto `rel`: a caller that may be killed half-way names the
    /// temp file so that its recovery finds it ([`Beneath::remove_temp`]); a stale `tmp` left
    /// there by an earlier kill is replaced.
    pub fn put(
        &self,
        rel: &str,
        tmp: &str,
        content: Option<&mut dyn Read>,
        mode: u32,
        link: Option<&str>,
    ) -> Result<()> {
        if tmp.is_empty() || tmp.contains('/') || tmp == "." || tmp == ".." {
            bail!("invalid temporary name {tmp:?} for {rel}");
        }
        let (dir, name) = self.parent_for_write(rel)?;
        remove_non_dir(&dir, tmp)
            .with_context(|| format!("remove the stale {tmp} beside {rel}"))?;
        match (content, link) {
            (_, Some(target)) => {
                symlinkat(target, dir.as_fd(), tmp).with_context(|| format!("symlink for {rel}"))?
            }
            (Some(src), None) => {
                let fd = openat(
                    dir.as_fd(),
                    tmp,
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                )
                .with_context(|| format!("create a temporary file for {rel}"))?;
                let mut f = File::from(fd);
                let written = std::io::copy(src, &mut f)
                    .and_then(|_| f.flush())
                    .map_err(anyhow::Error::from)
                    .and_then(|_| {
                        // Never a setuid/setgid file ("No privilege bits").
                        fchmod(&f, Mode::from_bits_truncate(mode & !0o6000)).map_err(Into::into)
                    });
                if let Err(e) = written {
                    let _ = unlinkat(dir.as_fd(), tmp, UnlinkatFlags::NoRemoveDir);
                    return Err(e.context(format!("write {rel}")));
                }
            }
            (None, None) => bail!("nothing to put at {rel}"),
        }
        if let Ok(st) = fstatat(dir.as_fd(), name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                if let Err(e) = unlinkat(dir.as_fd(), name.as_str(), UnlinkatFlags::RemoveDir) {
                    let _ = unlinkat(dir.as_fd(), tmp, UnlinkatFlags::NoRemoveDir);
                    return Err(e).with_context(|| format!("rmdir {rel}"));
                }
            }
        }
        if let Err(e) = renameat(dir.as_fd(), tmp, dir.as_fd(), name.as_str()) {
            let _ = unlinkat(dir.as_fd(), tmp, UnlinkatFlags::NoRemoveDir);
            return Err(e).with_context(|| format!("rename onto {rel}"));
        }
        Ok(())
    }

    /// Removes the temp file `tmp` that a killed [`Beneath::put`] of `rel` may have left in
    /// `rel`'s directory (not a directory; a missing directory or file is fine). Whether one
    /// was removed.
    pub fn remove_temp(&self, rel: &str, tmp: &str) -> Result<bool> {
        if tmp.is_empty() || tmp.contains('/') {
            bail!("invalid temporary name {tmp:?} for {rel}");
        }
        match self.parent(rel)? {
            (Parent::Open(dir), _) => {
                remove_non_dir(&dir, tmp).with_context(|| format!("remove {tmp} beside {rel}"))
            }
            _ => Ok(false),
        }
    }

    /// Removes `rel` (an empty directory, a file or a symlink); absent is fine.
    pub fn remove(&self, rel: &str) -> Result<()> {
        let (dir, name) = match self.parent(rel)? {
            (Parent::Open(fd), name) => (fd, name),
            (Parent::Missing, _) => return Ok(()),
            (Parent::InTheWay, _) => {
                bail!("the directory of {rel} is no longer a plain directory")
            }
        };
        let flag = match fstatat(dir.as_fd(), name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("stat {rel}")),
            Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR => {
                UnlinkatFlags::RemoveDir
            }
            Ok(_) => UnlinkatFlags::NoRemoveDir,
        };
        unlinkat(dir.as_fd(), name.as_str(), flag).with_context(|| format!("rm {rel}"))
    }
}

/// Removes `name` in `dir` unless it is a directory (absent is fine): a temp file or symlink
/// that [`Beneath::put`] left there when its process was killed.
fn remove_non_dir(dir: &OwnedFd, name: &str) -> Result<bool> {
    match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(false),
        Err(e) => Err(e.into()),
        Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR => {
            bail!("{name} is a directory")
        }
        Ok(_) => match unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(true),
            Err(e) => Err(e.into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let (ws, outside) = (t.path().join("ws"), t.path().join("outside"));
        fs::create_dir_all(ws.join("d")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret.db"), "precious").unwrap();
        (t, ws, outside)
    }

    #[test]
    fn entries_are_read_without_following_symlinks() {
        let (_t, ws, outside) = setup();
        fs::write(ws.join("d/f.txt"), "hi").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.db"), ws.join("s")).unwrap();
        let b = Beneath::open(&ws).unwrap();
        assert!(matches!(b.entry("d/f.txt").unwrap(), Entry::File(_, _)));
        assert_eq!(b.entry("d").unwrap(), Entry::Dir);
        assert_eq!(b.entry("nope/x/y").unwrap(), Entry::Absent);
        assert_eq!(b.entry("d/nope").unwrap(), Entry::Absent);
        assert_eq!(
            b.entry("s").unwrap(),
            Entry::Link(outside.join("secret.db").display().to_string())
        );
        // Through a symlinked directory: never the outside file's state.
        assert_eq!(b.entry("out/secret.db").unwrap(), Entry::Unreachable);
        assert_eq!(b.entry("d/f.txt/x").unwrap(), Entry::Unreachable);
        assert!(b.open_file("out/secret.db").is_err());
        assert!(b.open_file("s").is_err());
        for bad in ["", "/etc/passwd", "../x", "d/../../x", "d//x", "./d"] {
            assert!(b.entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn writes_never_land_outside_through_a_symlink() {
        let (_t, ws, outside) = setup();
        std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
        let b = Beneath::open(&ws).unwrap();
        let mut evil: &[u8] = b"evil";
        assert!(b
            .put(
                "out/secret.db",
                ".brainloop-t.tmp",
                Some(&mut evil),
                0o644,
                None
            )
            .is_err());
        assert!(b
            .put("out/new.db", ".brainloop-t.tmp", None, 0, Some("/etc"))
            .is_err());
        assert!(b.make_dir("out/newdir").is_err());
        assert!(b.remove("out/secret.db").is_err());
        assert_eq!(
            fs::read_to_string(outside.join("secret.db")).unwrap(),
            "precious"
        );
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
        // Replacing the symlink itself is a workspace change, and leaves the outside alone.
        let mut c: &[u8] = b"mine";
        b.put("out", ".brainloop-t.tmp", Some(&mut c), 0o640, None)
            .unwrap();
        assert_eq!(fs::read_to_string(ws.join("out")).unwrap(), "mine");
        assert_eq!(
            fs::metadata(ws.join("out")).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(
            fs::read_to_string(outside.join("secret.db")).unwrap(),
            "precious"
        );
    }

    #[test]
    fn put_make_dir_and_remove_inside() {
        let (_t, ws, _) = setup();
        let b = Beneath::open(&ws).unwrap();
        b.make_dir("d/sub").unwrap();
        b.make_dir("d/sub").unwrap();
        let mut c: &[u8] = b"x";
        b.put("d/sub/f", ".brainloop-t.tmp", Some(&mut c), 0o600, None)
            .unwrap();
        b.put("d/l", ".brainloop-t.tmp", None, 0, Some("sub/f"))
            .unwrap();
        assert_eq!(fs::read_link(ws.join("d/l")).unwrap(), Path::new("sub/f"));
        // An empty directory is replaced by a file.
        b.make_dir("d/e").unwrap();
        let mut c: &[u8] = b"y";
        b.put("d/e", ".brainloop-t.tmp", Some(&mut c), 0o644, None)
            .unwrap();
        assert_eq!(fs::read_to_string(ws.join("d/e")).unwrap(), "y");
        b.remove("d/sub/f").unwrap();
        b.remove("d/sub").unwrap();
        b.remove("d/sub").unwrap();
        b.remove("missing/deeper").unwrap();
        assert!(!ws.join("d/sub").exists());
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(ws.join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with(".brainloop-")),
            "{names:?}"
        );
        // A temp file a killed put left is replaced by the next put, and removed by name.
        fs::write(ws.join("d/.brainloop-t.tmp"), "stale").unwrap();
        let mut c: &[u8] = b"z";
        b.put("d/z", ".brainloop-t.tmp", Some(&mut c), 0o644, None)
            .unwrap();
        assert_eq!(fs::read_to_string(ws.join("d/z")).unwrap(), "z");
        assert!(!ws.join("d/.brainloop-t.tmp").exists());
        fs::write(ws.join("d/.brainloop-t.tmp"), "stale").unwrap();
        assert!(b.remove_temp("d/z", ".brainloop-t.tmp").unwrap());
        assert!(!b.remove_temp("d/z", ".brainloop-t.tmp").unwrap());
        assert!(!b.remove_temp("missing/z", ".brainloop-t.tmp").unwrap());
        assert!(b.put("d/z", "a/b", Some(&mut c), 0o644, None).is_err());
    }
}
