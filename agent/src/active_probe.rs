//! `gpuhost-active-probe`: the child `gpuhost status --active` runs: known-answer work on
//! every GPU, its figures printed as one line of JSON (`gpuhost_active`). A program of its own,
//! not the 10 MB `gpuhost`, so that its memory is the driver's and little more; installed in
//! `/usr/libexec/gpuhost/` (or beside `gpuhost`). Without it, `gpuhost active-probe` does the
//! same.
//!
//! Usage: gpuhost-active-probe [--seconds S] [--force] [--inject-fault hbm|fp32|fp64|mix32|mix64]
//! [--p2p-self]

fn main() {
    std::process::exit(gpuhost_active::main_with_args(std::env::args().skip(1)));
}
