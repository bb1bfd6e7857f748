//! `gpuhost-nvml-probe`: the NVML probe `gpuhost status` runs under a deadline. It asks NVML
//! what can change (and, after a new boot, driver or GPU, what cannot), prints the answer as
//! one line of JSON and leaves. A program of its own, not the 10 MB `gpuhost`: its pages are
//! most of what a probe adds to NVML's own memory (`gpuhost_health::helper_main`).

fn main() {
    std::process::exit(gpuhost_health::helper_main());
}
