//! What the node should have: a profile's `[status]` keys and `--expect-gpus`.

use gpuhost_profile::Profile;

use crate::verdict::{self, Expect};

/// What the node should have, from a profile name or path and an `--expect-gpus` count:
/// `--expect-gpus` over the profile's `status.expect_gpus`; the driver version from the
/// profile's `status.expect_driver_version`, else its local repo RPM name;
/// `status.require_docker` and `status.require_fabric_manager`; the thresholds and free-space
/// floors. A profile that cannot be read is `Expect::profile_error`.
pub fn expectations_for(profile: Option<&str>, expect_gpus: Option<u32>) -> Expect {
    let mut e = Expect::default();
    if let Some(name) = profile {
        match Profile::resolve(name, &[]) {
            Ok(p) => {
                if let Some(n) = p.status.expect_gpus {
                    e.gpus = Some(n);
                    e.gpus_source = Some(format!("profile {name}"));
                }
                if let Some(v) = &p.status.expect_driver_version {
                    e.driver_version = Some(v.trim().to_string());
                    e.driver_source =
                        Some(format!("profile {name} (status.expect_driver_version)"));
                } else if let Some(rpm) = &p.driver.local_repo_rpm {
                    let file = rpm.file_name().map(|f| f.to_string_lossy().to_string());
                    if let Some(v) = file.as_deref().and_then(verdict::driver_version_from_rpm) {
                        e.driver_version = Some(v);
                        e.driver_source = Some(format!("profile {name}"));
                    }
                }
                e.require_docker = p.status.require_docker;
                e.require_fabric_manager = p.status.require_fabric_manager;
                e.thresholds = verdict::Thresholds::from_profile(&p.status);
                e.min_free_gib = verdict::MinFree::from_profile(&p.status);
            }
            Err(err) => e.profile_error = Some(format!("{err:#}")),
        }
    }
    if let Some(n) = expect_gpus {
        e.gpus = Some(n);
        e.gpus_source = Some("--expect-gpus".into());
    }
    e
}
