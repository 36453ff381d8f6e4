//! Issue 36 item 9: the release binary is 192 MB, the line tables of every dependency (38 MB
//! stripped). What ships is built with the `dist` profile (`cargo install --profile dist`, what
//! the README says; `cargo build --profile dist`, what `scripts/install.sh` installs): no debug
//! info, symbols kept. The tests keep `release` and its line tables, so their backtraces name
//! file:line. The dist binary is only checked where it was built (the suite never builds twice):
//! the test's name says so.

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
fn a_test_backtrace_names_file_and_line() {
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    assert!(bt.contains("tests/lean_binary.rs:"), "{bt}");
}

#[test]
fn the_dist_binary_is_lean_and_keeps_its_symbols_skipped_unless_cargo_build_profile_dist_ran() {
    let bin = std::path::Path::new(common::BIN);
    let dist = bin
        .parent()
        .and_then(|d| d.parent())
        .map(|t| t.join("dist").join("brainloop"))
        .expect("the target dir");
    let release = std::fs::metadata(bin).map(|m| m.len()).unwrap_or(0);
    if !dist.exists() {
        println!(
            "SKIPPED: {} does not exist (cargo build --profile dist builds it); the release binary is {} MiB",
            dist.display(),
            release >> 20
        );
        return;
    }
    let bytes = std::fs::read(&dist).expect("read the dist binary");
    let names: Vec<(String, u64)> = sections(&bytes);
    let debug: Vec<&(String, u64)> = names
        .iter()
        .filter(|(n, _)| n.starts_with(".debug_"))
        .collect();
    assert!(debug.is_empty(), "debug info in the dist binary: {debug:?}");
    assert!(
        names.iter().any(|(n, s)| n == ".symtab" && *s > 0),
        "symbols kept, so a backtrace names functions: {names:?}"
    );
    const MB: u64 = 1024 * 1024;
    assert!(
        (bytes.len() as u64) < 80 * MB,
        "a {} MiB binary",
        bytes.len() as u64 / MB
    );
    let out = std::process::Command::new(&dist)
        .arg("--version")
        .output()
        .expect("run the dist binary");
    assert!(out.status.success());
}
