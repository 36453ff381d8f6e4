//! Writing a file beneath a FILE_WRITE grant (generate_file, and the SQL writer's target check).
//!
//! [`check`] resolves a requested path against the client's FILE_WRITE rules the way
//! `paths::open_for_read` does for reads: lexical normalisation, a rule whose glob covers it,
//! then the parent directory opened with `openat2(root, rel, RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)` (no `..`, absolute symlink or symlink leaving the root, atomically),
//! and the real path of that descriptor + the file name re-matched against the rule and the deny
//! list. Missing parent directories are allowed (created at write time beneath the root).
//!
//! [`write`] re-does the check and then writes through the parent's descriptor only: a temporary
//! file created with `O_CREAT | O_EXCL | O_NOFOLLOW`, written, fsynced, then
//! `renameat2(RENAME_NOREPLACE)` onto the name (atomic: an existing file, or one created in the
//! meantime, is never replaced), or a plain `renameat` when overwriting was asked for (which
//! replaces a symlink itself, never the file it points to). A symlink swapped into the path
//! after the check cannot redirect the write: every step is relative to a descriptor opened
//! beneath the root.

use super::paths::{self, e_to_path_error, real_path, PathError};
use super::{ClientGrants, Permission};
use nix::errno::Errno;
use nix::fcntl::{openat, openat2, renameat, renameat2, OFlag, OpenHow, RenameFlags, ResolveFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// A write target that passed the grant check.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The real path the file would have (real parent directory + file name).
    pub real_path: PathBuf,
    /// A FILE_WRITE grant with `auto` covers it: no human validation needed.
    pub auto: bool,
    /// Something already exists at that name.
    pub exists: bool,
    /// The pattern of the grant that allowed it.
    pub grant: String,
    root: PathBuf,
    rel_parent: PathBuf,
    name: OsString,
}

const BENEATH: ResolveFlag = ResolveFlag::RESOLVE_BENEATH.union(ResolveFlag::RESOLVE_NO_MAGICLINKS);

fn open_dir(at: &impl AsFd, rel: &Path, flags: OFlag) -> Result<OwnedFd, Errno> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(BENEATH);
    openat2(at.as_fd(), rel, how)
}

fn open_root(root: &Path) -> Result<OwnedFd, Errno> {
    nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The real path of `rel` beneath `root`: its deepest existing ancestor resolved, plus the
/// missing components (plain names only).
fn resolve_parent(root: &Path, rel: &Path) -> Result<(PathBuf, bool), Errno> {
    let root_fd = open_root(root)?;
    let comps: Vec<Component<'_>> = rel.components().collect();
    for keep in (0..=comps.len()).rev() {
        let prefix: PathBuf = comps[..keep].iter().collect();
        match open_dir(&root_fd, &prefix, OFlag::O_PATH) {
            Ok(fd) => {
                let mut real = real_path(&fd).map_err(|_| Errno::EIO)?;
                for c in &comps[keep..] {
                    match c {
                        Component::Normal(n) => real.push(n),
                        _ => return Err(Errno::EXDEV),
                    }
                }
                return Ok((real, keep < comps.len()));
            }
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::ENOENT)
}

/// Checks `requested` (absolute, or relative to the workspace) under the client's FILE_WRITE
/// grants, refusing anything in `deny`.
pub fn check(
    grants: &ClientGrants,
    requested: &str,
    deny: &[PathBuf],
) -> Result<Target, PathError> {
    let norm = super::paths::requested_path(grants, requested)?
        .ok_or_else(|| PathError::NotGranted(grants.missing(Permission::FileWrite, requested)))?;
    let Some(name) = norm.file_name().map(|n| n.to_os_string()) else {
        return Err(PathError::Unusable(format!(
            "{requested} does not name a file"
        )));
    };
    if requested.ends_with('/') {
        return Err(PathError::Unusable(format!(
            "{requested} names a directory"
        )));
    }
    let mut last_err = None;
    for rule in grants
        .path_rules()
        .iter()
        .filter(|r| r.permission == Permission::FileWrite)
    {
        let Some(rel) = rule.relative(&norm) else {
            continue;
        };
        if !rule.matches(&rule.root().join(rel)) {
            continue;
        }
        let rel_parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
        let (real_parent, missing) = match resolve_parent(rule.root(), &rel_parent) {
            Ok(r) => r,
            Err(Errno::ENOENT) => {
                last_err = Some(PathError::Unusable(format!(
                    "the directory {} granted by {} does not exist; create it first",
                    rule.root().display(),
                    rule.pattern
                )));
                continue;
            }
            Err(e) => {
                last_err = Some(e_to_path_error(requested, e));
                continue;
            }
        };
        let real = real_parent.join(&name);
        if let Some(e) =
            paths::judge_real(requested, &real, Some(rule), deny, paths::Access::Write)?
        {
            last_err = Some(e);
            continue;
        }
        let exists = !missing && real.symlink_metadata().is_ok();
        if real.is_dir() {
            return Err(PathError::Unusable(format!("{requested} is a directory")));
        }
        let auto = grants
            .path_rules()
            .iter()
            .any(|r| r.permission == Permission::FileWrite && r.auto && r.matches(&real));
        return Ok(Target {
            real_path: real,
            auto,
            exists,
            grant: rule.pattern.clone(),
            root: rule.root().to_path_buf(),
            rel_parent,
            name,
        });
    }
    Err(last_err.unwrap_or_else(|| {
        PathError::NotGranted(grants.missing(Permission::FileWrite, &norm.to_string_lossy()))
    }))
}

impl Target {
    /// The root of the grant that allowed it.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteError {
    /// The name exists and overwriting was not asked for.
    Exists(PathBuf),
    /// The path now resolves elsewhere than what was checked (and approved).
    Moved {
        expected: PathBuf,
        now: PathBuf,
    },
    Path(PathError),
    Io(String),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Exists(p) => write!(
                f,
                "{} already exists; nothing was written (pass \"overwrite\": true to replace it)",
                p.display()
            ),
            WriteError::Moved { expected, now } => write!(
                f,
                "the target now resolves to {} instead of {}; nothing was written",
                now.display(),
                expected.display()
            ),
            WriteError::Path(e) => write!(f, "{e}"),
            WriteError::Io(e) => f.write_str(e),
        }
    }
}

/// Opens (creating missing components beneath the root) the parent directory of a target.
fn open_parent(t: &Target) -> Result<OwnedFd, Errno> {
    let root_fd = open_root(&t.root)?;
    match open_dir(&root_fd, &t.rel_parent, OFlag::O_RDONLY) {
        Err(Errno::ENOENT) => {}
        other => return other,
    }
    let mut cur = open_dir(&root_fd, Path::new(""), OFlag::O_RDONLY)?;
    for c in t.rel_parent.components() {
        let Component::Normal(n) = c else {
            return Err(Errno::EXDEV);
        };
        let n = Path::new(n);
        cur = match open_dir(&cur, n, OFlag::O_RDONLY) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => {
                match mkdirat(cur.as_fd(), n, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                open_dir(&cur, n, OFlag::O_RDONLY)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(cur)
}

fn temp_name(name: &OsString) -> OsString {
    let mut b = [0u8; 6];
    let _ = getrandom::fill(&mut b);
    let mut s = OsString::from(".");
    s.push(name);
    s.push(format!(".{}.brainloop-tmp", hex::encode(b)));
    s
}

/// Writes `content` at `requested` under the FILE_WRITE grants, only if it still resolves to
/// `expected` (the real path that was checked and approved). Returns the bytes written.
pub fn write(
    grants: &ClientGrants,
    requested: &str,
    deny: &[PathBuf],
    expected: &Path,
    content: &[u8],
    overwrite: bool,
) -> Result<u64, WriteError> {
    let t = check(grants, requested, deny).map_err(WriteError::Path)?;
    if t.real_path != expected {
        return Err(WriteError::Moved {
            expected: expected.to_path_buf(),
            now: t.real_path,
        });
    }
    let io = |what: &str, e: Errno| WriteError::Io(format!("{}: {what}: {e}", expected.display()));
    let dir = open_parent(&t).map_err(|e| match e {
        Errno::EXDEV | Errno::ELOOP => WriteError::Path(e_to_path_error(requested, e)),
        other => io("cannot open the directory", other),
    })?;
    // The directory really opened must be the one checked.
    let real_dir = real_path(&dir).map_err(|e| WriteError::Io(e.to_string()))?;
    if real_dir.join(&t.name) != expected {
        return Err(WriteError::Moved {
            expected: expected.to_path_buf(),
            now: real_dir.join(&t.name),
        });
    }
    let name = Path::new(&t.name);
    let existing = fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok();
    if existing.is_some() && !overwrite {
        return Err(WriteError::Exists(expected.to_path_buf()));
    }
    if let Some(st) = &existing {
        if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR {
            return Err(WriteError::Io(format!(
                "{} is a directory",
                expected.display()
            )));
        }
    }
    let mode = existing
        .filter(|st| SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG)
        .map(|st| Mode::from_bits_truncate(st.st_mode & 0o777))
        .unwrap_or_else(|| Mode::from_bits_truncate(0o644));
    let tmp = temp_name(&t.name);
    let tmp = Path::new(&tmp);
    let fd = openat(
        dir.as_fd(),
        tmp,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        mode,
    )
    .map_err(|e| io("cannot create a temporary file", e))?;
    let cleanup = |e: WriteError| {
        let _ = unlinkat(dir.as_fd(), tmp, UnlinkatFlags::NoRemoveDir);
        e
    };
    let mut f = File::from(fd);
    f.write_all(content)
        .and_then(|_| f.sync_all())
        .map_err(|e| cleanup(WriteError::Io(format!("{}: {e}", expected.display()))))?;
    drop(f);
    let renamed = if overwrite {
        renameat(dir.as_fd(), tmp, dir.as_fd(), name)
    } else {
        renameat2(
            dir.as_fd(),
            tmp,
            dir.as_fd(),
            name,
            RenameFlags::RENAME_NOREPLACE,
        )
    };
    match renamed {
        Ok(()) => {}
        Err(Errno::EEXIST) => return Err(cleanup(WriteError::Exists(expected.to_path_buf()))),
        Err(e) => return Err(cleanup(io("cannot move the file into place", e))),
    }
    let _ = nix::unistd::fsync(dir.as_fd());
    Ok(content.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::super::{ClientGrants, Grant, Permission, Source};
    use super::*;

    fn grants(ws: &Path, patterns: &[(&str, bool)]) -> ClientGrants {
        let g = patterns
            .iter()
            .map(|(p, auto)| Grant {
                permission: Permission::FileWrite,
                pattern: p.to_string(),
                auto: *auto,
                source: Source::Config,
            })
            .collect();
        ClientGrants::new("c", g, ws).unwrap()
    }

    #[test]
    fn writes_new_files_creates_dirs_and_never_overwrites_unasked() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let ws = ws.canonicalize().unwrap();
        let g = grants(
            &ws,
            &[("{workspace}/**", false), ("{workspace}/auto/**", true)],
        );
        let t = check(&g, "src/new/a.txt", &[]).unwrap();
        assert_eq!(t.real_path, ws.join("src/new/a.txt"));
        assert!(!t.auto && !t.exists);
        assert_eq!(
            write(&g, "src/new/a.txt", &[], &t.real_path, b"hello", false).unwrap(),
            5
        );
        assert_eq!(std::fs::read(ws.join("src/new/a.txt")).unwrap(), b"hello");
        let e = write(&g, "src/new/a.txt", &[], &t.real_path, b"other", false).unwrap_err();
        assert!(matches!(e, WriteError::Exists(_)), "{e:?}");
        assert_eq!(std::fs::read(ws.join("src/new/a.txt")).unwrap(), b"hello");
        write(&g, "src/new/a.txt", &[], &t.real_path, b"replaced", true).unwrap();
        assert_eq!(
            std::fs::read(ws.join("src/new/a.txt")).unwrap(),
            b"replaced"
        );
        assert!(check(&g, "auto/x.rs", &[]).unwrap().auto);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(ws.join("src/new")).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn escapes_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(ws.join("out")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("out/abs_link")).unwrap();
        std::os::unix::fs::symlink("../../outside", ws.join("out/rel_link")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), ws.join("out/file_link")).unwrap();
        let g = grants(&ws, &[("{workspace}/out/**", false)]);
        let data = root.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let deny = vec![data.canonicalize().unwrap()];
        for p in [
            "out/../x.txt",
            "out/../../outside/x.txt",
            "/etc/x.txt",
            "out/abs_link/x.txt",
            "out/rel_link/x.txt",
        ] {
            let e = check(&g, p, &deny).unwrap_err();
            assert!(matches!(e, PathError::NotGranted(_)), "{p}: {e:?}");
        }
        // A symlink at the final name is replaced only with overwrite, never followed.
        let t = check(&g, "out/file_link", &deny).unwrap();
        assert!(t.exists);
        assert!(matches!(
            write(&g, "out/file_link", &deny, &t.real_path, b"x", false),
            Err(WriteError::Exists(_))
        ));
        write(&g, "out/file_link", &deny, &t.real_path, b"x", true).unwrap();
        assert!(
            !outside.join("f").exists(),
            "the symlink's target is never written"
        );
        // The data dir, even with a root grant.
        let g = grants(root.path(), &[("/**", true)]);
        let e = check(
            &g,
            &data.join("brainloop.output.db").to_string_lossy(),
            &deny,
        )
        .unwrap_err();
        assert!(e.to_string().contains("data dir"), "{e}");
    }

    #[test]
    fn a_swap_after_the_check_writes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(ws.join("out/sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let g = grants(&ws, &[("{workspace}/out/**", false)]);
        let t = check(&g, "out/sub/x.txt", &[]).unwrap();
        // Swap the checked directory for a symlink leaving the grant.
        std::fs::remove_dir(ws.join("out/sub")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("out/sub")).unwrap();
        let e = write(&g, "out/sub/x.txt", &[], &t.real_path, b"x", false).unwrap_err();
        assert!(
            matches!(
                e,
                WriteError::Path(PathError::NotGranted(_)) | WriteError::Moved { .. }
            ),
            "{e:?}"
        );
        assert!(!outside.join("x.txt").exists());
        // A swap inside the grant changes the real path: refused as moved.
        std::fs::remove_file(ws.join("out/sub")).unwrap();
        std::fs::create_dir_all(ws.join("out/other")).unwrap();
        std::os::unix::fs::symlink("other", ws.join("out/sub")).unwrap();
        let e = write(&g, "out/sub/x.txt", &[], &t.real_path, b"x", false).unwrap_err();
        assert!(matches!(e, WriteError::Moved { .. }), "{e:?}");
        assert!(!ws.join("out/other/x.txt").exists());
    }
}
