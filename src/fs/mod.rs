//! Filesystem primitives below both `bash` and `sandbox`: file operations beneath a root that
//! never follow a symlink in any component (`beneath`). The worker reads or writes the
//! workspace by path only through them.

pub mod beneath;
