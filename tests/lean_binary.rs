//! Issue 36 item 9: the release binary was 192 MB, the line tables of every dependency (38 MB
//! stripped). The release profile keeps line tables for brainloop only: the binary under test
//! (the one `cargo install` and `scripts/install.sh` install) carries a fraction of that debug
//! info, and a backtrace still names brainloop's and the tests' file:line.

mod common;

/// (name, size) of every section of the ELF64 little-endian file `bytes`.
fn sections(bytes: &[u8]) -> Vec<(String, u64)> {
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(bytes[4], 2, "not ELF64");
    let u16_at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28) as usize,
        u16_at(0x3a),
        u16_at(0x3c),
        u16_at(0x3e),
    );
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let h = header(i);
            let name_at = strtab + u32_at(h);
            let end = bytes[name_at..].iter().position(|&b| b == 0).unwrap();
            (
                String::from_utf8_lossy(&bytes[name_at..name_at + end]).into_owned(),
                u64_at(h + 0x20),
            )
        })
        .collect()
}

#[test]
fn the_release_binary_is_lean_and_a_backtrace_still_names_file_and_line() {
    assert!(
        !cfg!(debug_assertions),
        "CANNOT RUN HERE: a debug build; the release profile is what ships (cargo test --release)"
    );
    let bytes = std::fs::read(common::BIN).expect("read the binary under test");
    let debug: Vec<(String, u64)> = sections(&bytes)
        .into_iter()
        .filter(|(n, _)| n.starts_with(".debug_"))
        .collect();
    let debug_bytes: u64 = debug.iter().map(|(_, s)| s).sum();
    const MB: u64 = 1024 * 1024;
    // Was 154 MiB of .debug_* sections in a 192 MiB file.
    assert!(
        debug_bytes < 40 * MB,
        "{} MiB of debug info: {debug:?}",
        debug_bytes / MB
    );
    assert!(
        (bytes.len() as u64) < 100 * MB,
        "a {} MiB binary",
        bytes.len() as u64 / MB
    );
    assert!(
        debug.iter().any(|(n, s)| n == ".debug_line" && *s > 0),
        "brainloop's own line tables are kept: {debug:?}"
    );
    // The tests are built with the same profile: a backtrace names this file and line.
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    assert!(bt.contains("tests/lean_binary.rs:"), "{bt}");
}
