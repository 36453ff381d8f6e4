//! Path grants and opening files beneath their granted root.
//!
//! A FILE_READ / FILE_WRITE pattern is an absolute glob; its literal prefix (the components before
//! the first wildcard) is the *root*. A requested path is normalised lexically, matched against a
//! rule, then opened with `openat2(root_fd, rel, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: the
//! kernel refuses any `..`, absolute symlink or symlink that would leave the root, atomically, so a
//! component swapped to a symlink after the check cannot redirect the open. The path the opened
//! descriptor really names (`/proc/self/fd/N`) is then matched against the rule again and against
//! the deny list (the data dir, `/proc`, `/sys`, `/dev`), so a symlink inside the root to a file
//! the glob does not cover is refused too. Only regular files are returned (no FIFOs, devices).

use super::{ClientGrants, Grant, Permission};
use anyhow::{bail, Result};
use globset::{GlobBuilder, GlobMatcher};
use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// A compiled path grant.
#[derive(Debug, Clone)]
pub struct PathRule {
    pub permission: Permission,
    pub pattern: String,
    pub auto: bool,
    /// The literal prefix as written (after `{workspace}` expansion).
    lexical_root: PathBuf,
    /// The same, resolved (symlinks in the operator's own pattern are followed once, here).
    root: PathBuf,
    /// The glob re-rooted at `root`.
    matcher: GlobMatcher,
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

impl PathRule {
    pub fn new(g: &Grant, workspace: &Path) -> Result<PathRule> {
        let ws = workspace.to_string_lossy();
        let expanded = g.pattern.replace("{workspace}", &ws);
        let p = Path::new(&expanded);
        if !p.is_absolute() {
            bail!("path grants must be absolute (or start with {{workspace}}): {expanded:?}");
        }
        let mut root = PathBuf::from("/");
        let mut rest = PathBuf::new();
        let mut in_glob = false;
        for c in p.components().skip(1) {
            let s = c.as_os_str().to_string_lossy();
            if c == Component::ParentDir {
                bail!("path grants must not contain '..': {expanded:?}");
            }
            if in_glob || has_glob(&s) {
                in_glob = true;
                rest.push(c);
            } else {
                root.push(c);
            }
        }
        if !in_glob {
            // An exact file: its directory is the root.
            let name = root.file_name().map(PathBuf::from).unwrap_or_default();
            root.pop();
            rest = name;
        }
        let canon = root.canonicalize().unwrap_or_else(|_| root.clone());
        let full = canon.join(&rest);
        let matcher = GlobBuilder::new(&full.to_string_lossy())
            .literal_separator(true)
            .build()?
            .compile_matcher();
        Ok(PathRule {
            permission: g.permission,
            pattern: expanded,
            auto: g.auto,
            lexical_root: root,
            root: canon,
            matcher,
        })
    }

    /// The path relative to this rule's root, if `norm` lies beneath it (lexically).
    pub(crate) fn relative<'a>(&self, norm: &'a Path) -> Option<&'a Path> {
        norm.strip_prefix(&self.root)
            .ok()
            .or_else(|| norm.strip_prefix(&self.lexical_root).ok())
    }

    /// The resolved literal prefix of the pattern.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub fn matches(&self, canonical: &Path) -> bool {
        self.matcher.is_match(canonical)
    }
}

/// Lexical normalisation: absolute, no `.`, `..` applied; `None` if it climbs above `/`.
pub fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(s) => out.push(s),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// A file opened for reading under a grant.
#[derive(Debug)]
pub struct Opened {
    pub file: File,
    /// What the descriptor really names.
    pub real_path: PathBuf,
    /// The pattern of the grant that allowed it.
    pub grant: String,
}

/// Paths no reader may open whatever the grants say.
pub fn deny_roots(data_dir: &Path) -> Vec<PathBuf> {
    let mut v = vec![
        PathBuf::from("/proc"),
        PathBuf::from("/sys"),
        PathBuf::from("/dev"),
    ];
    v.push(
        data_dir
            .canonicalize()
            .unwrap_or_else(|_| data_dir.to_path_buf()),
    );
    v
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum PathError {
    /// No grant covers it: a `denied` result.
    NotGranted(String),
    /// Granted, but the file cannot be opened safely or does not exist: a `failed` result.
    Unusable(String),
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathError::NotGranted(s) | PathError::Unusable(s) => f.write_str(s),
        }
    }
}

/// A requested path made absolute (relative ones are beneath the workspace) and normalised;
/// `Ok(None)` when it climbs above `/`, an error when it is empty, too long or holds a NUL.
pub fn requested_path(
    grants: &ClientGrants,
    requested: &str,
) -> Result<Option<PathBuf>, PathError> {
    if requested.is_empty() || requested.contains('\0') || requested.len() > 4096 {
        return Err(PathError::Unusable(
            "path must be 1–4096 bytes without NUL".into(),
        ));
    }
    let abs = if Path::new(requested).is_absolute() {
        PathBuf::from(requested)
    } else {
        grants.workspace().join(requested)
    };
    Ok(normalize(&abs))
}

/// `requested` made absolute and normalised; one climbing above `/` is not granted.
fn normalized_for_read(grants: &ClientGrants, requested: &str) -> Result<PathBuf, PathError> {
    requested_path(grants, requested)?
        .ok_or_else(|| PathError::NotGranted(grants.missing(Permission::FileRead, requested)))
}

/// The FILE_READ rules whose root holds `norm`, with `norm` relative to that root.
fn read_rules_under<'a>(
    grants: &'a ClientGrants,
    norm: &'a Path,
) -> impl Iterator<Item = (&'a PathRule, &'a Path)> {
    grants
        .path_rules()
        .iter()
        .filter(|r| r.permission == Permission::FileRead)
        .filter_map(move |r| r.relative(norm).map(|rel| (r, rel)))
}

/// Opens `requested` (absolute, or relative to the workspace) for reading under the client's
/// FILE_READ grants, refusing anything in `deny`.
/// What a client may do at a path it asked for (the deny list's wording).
#[derive(Clone, Copy)]
pub(crate) enum Access {
    Read,
    Write,
}

/// The real path a grant let the worker open, judged again (the one decision of read, directory
/// and write checks): inside a deny root it is refused whatever the grant; outside the rule's
/// pattern (reached through a symlink) this rule does not cover it — `Ok(Some(e))`, the caller
/// tries its next rule; `Ok(None)`: covered.
pub(crate) fn judge_real(
    requested: &str,
    real: &Path,
    rule: Option<&PathRule>,
    deny: &[PathBuf],
    access: Access,
) -> Result<Option<PathError>, PathError> {
    if deny.iter().any(|d| real.starts_with(d)) {
        let (prep, verb) = match access {
            Access::Read => ("which", "read"),
            Access::Write => ("where", "write"),
        };
        return Err(PathError::NotGranted(format!(
            "{requested} resolves to {} {prep} no client may {verb} (brainloop's data dir or a kernel filesystem)",
            real.display()
        )));
    }
    Ok(rule.filter(|r| !r.matches(real)).map(|r| {
        PathError::NotGranted(format!(
            "{requested} resolves (through a symlink) to {}, which the grant {} does not cover",
            real.display(),
            r.pattern
        ))
    }))
}

pub fn open_for_read(
    grants: &ClientGrants,
    requested: &str,
    deny: &[PathBuf],
) -> Result<Opened, PathError> {
    let norm = normalized_for_read(grants, requested)?;
    let mut last_err = None;
    for (rule, rel) in read_rules_under(grants, &norm) {
        if !rule.matches(&rule.root.join(rel)) {
            continue;
        }
        match open_beneath(&rule.root, rel) {
            Ok(file) => {
                let real = real_path(&file)
                    .map_err(|e| PathError::Unusable(format!("{requested}: {e}")))?;
                if let Some(e) = judge_real(requested, &real, Some(rule), deny, Access::Read)? {
                    last_err = Some(e);
                    continue;
                }
                return Ok(Opened {
                    file,
                    real_path: real,
                    grant: rule.pattern.clone(),
                });
            }
            Err(e) => last_err = Some(e_to_path_error(requested, e)),
        }
    }
    Err(last_err.unwrap_or_else(|| {
        PathError::NotGranted(grants.missing(Permission::FileRead, &norm.to_string_lossy()))
    }))
}

/// A directory opened for reading beneath its granted root with no symlink in any component
/// (`read_code`'s directory mode, issue 25): what is beneath it is read only through
/// `fs::beneath` on this descriptor, and each file only when [`OpenedDir::covers`] it.
pub struct OpenedDir {
    pub fd: OwnedFd,
    pub real_path: PathBuf,
    /// The patterns of the FILE_READ grants whose root holds the directory.
    pub grant: String,
    rules: Vec<PathRule>,
    deny: Vec<PathBuf>,
}

impl OpenedDir {
    /// Whether a grant covers the file `rel` beneath the directory (and no deny root holds it).
    pub fn covers(&self, rel: &str) -> bool {
        let p = self.real_path.join(rel);
        self.rules.iter().any(|r| r.matches(&p)) && !self.denied(rel)
    }

    /// Whether `rel` beneath the directory is in a deny root (never descended into).
    pub fn denied(&self, rel: &str) -> bool {
        let p = self.real_path.join(rel);
        self.deny.iter().any(|d| p.starts_with(d))
    }
}

/// Opens `requested` as a directory under the client's FILE_READ grants, with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`. `Ok(None)` when it is not a plain directory reached
/// without symlinks (a file, or a symlink: the caller reads it as a file, under that policy).
pub fn open_dir_for_read(
    grants: &ClientGrants,
    requested: &str,
    deny: &[PathBuf],
) -> Result<Option<OpenedDir>, PathError> {
    let norm = normalized_for_read(grants, requested)?;
    let Some((first, rel)) = read_rules_under(grants, &norm).next() else {
        return Err(PathError::NotGranted(
            grants.missing(Permission::FileRead, &norm.to_string_lossy()),
        ));
    };
    let fd = match open_dir_beneath(&first.root, rel) {
        Ok(fd) => fd,
        Err(Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => return Ok(None),
        Err(e) => return Err(e_to_path_error(requested, e)),
    };
    let real = real_path(&fd).map_err(|e| PathError::Unusable(format!("{requested}: {e}")))?;
    judge_real(requested, &real, None, deny, Access::Read)?;
    let rules: Vec<PathRule> = read_rules_under(grants, &norm)
        .map(|(r, _)| r.clone())
        .collect();
    Ok(Some(OpenedDir {
        fd,
        real_path: real,
        grant: rules
            .iter()
            .map(|r| r.pattern.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        rules,
        deny: deny.to_vec(),
    }))
}

fn open_dir_beneath(root: &Path, rel: &Path) -> Result<OwnedFd, Errno> {
    openat2_beneath(
        root,
        rel,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS,
    )
}

/// `openat2(root, rel ("" = root itself), flags, resolve)`, the root opened `O_PATH`.
fn openat2_beneath(
    root: &Path,
    rel: &Path,
    flags: OFlag,
    resolve: ResolveFlag,
) -> Result<OwnedFd, Errno> {
    let root_fd: OwnedFd = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    openat2(
        root_fd.as_fd(),
        rel,
        OpenHow::new().flags(flags).resolve(resolve),
    )
}

pub(crate) fn e_to_path_error(requested: &str, e: Errno) -> PathError {
    match e {
        Errno::EXDEV | Errno::ELOOP => PathError::NotGranted(format!(
            "{requested} escapes its granted root (through '..' or a symlink); refused"
        )),
        Errno::ENOENT => PathError::Unusable(format!("{requested}: no such file")),
        Errno::ENXIO | Errno::ENODEV => {
            PathError::Unusable(format!("{requested}: not a regular file"))
        }
        other => PathError::Unusable(format!("{requested}: cannot open ({other})")),
    }
}

/// `openat2(root, rel, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, read-only, non-blocking (a FIFO
/// must not hang the reader), then only a regular file is accepted.
fn open_beneath(root: &Path, rel: &Path) -> Result<File, Errno> {
    let fd = openat2_beneath(
        root,
        rel,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK,
        ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    )?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|_| Errno::EIO)?;
    if !meta.is_file() {
        return Err(if meta.is_dir() {
            Errno::EISDIR
        } else {
            Errno::ENXIO
        });
    }
    Ok(file)
}

pub(crate) fn real_path(file: &impl std::os::fd::AsRawFd) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// A refused or unusable path: `denied` when no grant covers it, `failed` otherwise.
impl From<PathError> for crate::db::output::Outcome {
    fn from(e: PathError) -> crate::db::output::Outcome {
        match e {
            PathError::NotGranted(m) => crate::db::output::Outcome::denied(m),
            PathError::Unusable(m) => crate::db::output::Outcome::failed(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ClientGrants, Grant, Permission, Source};
    use super::*;

    fn grants(ws: &Path, patterns: &[&str]) -> ClientGrants {
        let g = patterns
            .iter()
            .map(|p| Grant {
                permission: Permission::FileRead,
                pattern: p.to_string(),
                auto: false,
                source: Source::Config,
            })
            .collect();
        ClientGrants::new("c", g, ws).unwrap()
    }

    #[test]
    fn normalization() {
        assert_eq!(
            normalize(Path::new("/a/./b/../c")),
            Some(PathBuf::from("/a/c"))
        );
        assert_eq!(normalize(Path::new("/..")), None);
    }

    #[test]
    fn reads_inside_the_grant_and_refuses_every_escape() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir_all(ws.join("docs")).unwrap();
        std::fs::write(ws.join("docs/a.md"), "hello").unwrap();
        std::fs::write(ws.join("notes.txt"), "notes").unwrap();
        std::fs::write(root.path().join("secret"), "SECRET").unwrap();
        std::os::unix::fs::symlink(root.path().join("secret"), ws.join("docs/abs_link.md"))
            .unwrap();
        std::os::unix::fs::symlink("../../secret", ws.join("docs/rel_link.md")).unwrap();
        std::os::unix::fs::symlink("../notes.txt", ws.join("docs/inside_link.md")).unwrap();
        let g = grants(&ws, &["{workspace}/docs/*.md"]);
        let deny = deny_roots(&root.path().join("data"));
        let ok = open_for_read(&g, "docs/a.md", &deny).unwrap();
        assert!(ok.real_path.ends_with("docs/a.md"));
        let cases = [
            "docs/../../secret",
            "/etc/passwd",
            "docs/abs_link.md",
            "docs/rel_link.md",
            "docs/inside_link.md", // stays in the workspace but leaves the glob
            "notes.txt",
            "docs/../notes.txt",
            "/proc/self/environ",
        ];
        for c in cases {
            let e = open_for_read(&g, c, &deny).unwrap_err();
            assert!(matches!(e, PathError::NotGranted(_)), "{c}: {e:?}");
        }
        assert!(matches!(
            open_for_read(&g, "docs/missing.md", &deny),
            Err(PathError::Unusable(_))
        ));
    }

    #[test]
    fn fifos_and_directories_are_not_opened() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().to_path_buf();
        nix::unistd::mkfifo(&ws.join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::create_dir(ws.join("dir")).unwrap();
        let g = grants(&ws, &["{workspace}/**"]);
        let deny = deny_roots(Path::new("/nonexistent-data"));
        assert!(matches!(
            open_for_read(&g, "pipe", &deny),
            Err(PathError::Unusable(_))
        ));
        assert!(matches!(
            open_for_read(&g, "dir", &deny),
            Err(PathError::Unusable(_))
        ));
    }

    #[test]
    fn the_data_dir_is_never_readable_even_with_a_root_grant() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("brainloop.output.db"), "x").unwrap();
        let g = grants(root.path(), &["/**"]);
        let deny = deny_roots(&data);
        let e = open_for_read(
            &g,
            &data.join("brainloop.output.db").to_string_lossy(),
            &deny,
        )
        .unwrap_err();
        assert!(e.to_string().contains("data dir"), "{e}");
    }
}
