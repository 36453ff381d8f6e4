//! The `brainloop` binary: parses the command line and hands over to [`brainloop::cli`].

fn main() {
    std::process::exit(brainloop::cli::main());
}
