//! `gpuhost kmod build`: what every node paid — compiling NVIDIA's kernel interface layer
//! through DKMS, with a compiler and (under Secure Boot) the signing key on the node — paid once,
//! on a build host, per (driver, kernel):
//! - [`dkmsconf`]: how NVIDIA's DKMS package says its modules are built (its `dkms.conf`);
//! - [`build`]: the modules built from the local repo package's own DKMS source for each kernel
//!   a node can boot, with that kernel's compiler and every CPU, each `.ko` signed with the
//!   fleet's key;
//! - [`inputs`]: the key, certificate, kernel releases and `--out`, checked before anything is
//!   compiled;
//! - [`sandbox`]: the compile, as an unprivileged user confined to its build folder;
//! - [`signer`]: the modules taken out of the build folder and signed by a verified
//!   `sign-file`, once no process of the build is left;
//! - [`package`]: one RPM per (driver, kernel), in a dnf repo with a manifest
//!   ([`gpuhost_host::kmodrepo`]) that nodes install from (`driver.kmod_repo`).

mod build;
mod dkmsconf;
mod inputs;
mod model;
mod package;
mod sandbox;
mod signer;

pub use build::{build, KmodBuildOptions, KmodBuildReport};
pub use model::BuiltKmod;
