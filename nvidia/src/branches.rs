//! The driver branches NVIDIA ships, one row each: whether the branch still has the proprietary
//! kernel modules, its releases gpuhost's sources name, and where that comes from. Which GPUs
//! a branch drives is [`crate::support`]'s (per architecture and chip); this table adds what
//! is true of a branch as a whole.
//!
//! Sources:
//! - Release tags of NVIDIA/open-gpu-kernel-modules (one tag per release, both flavours ship in
//!   each release): R590 590.44.01 (beta) and 590.48.01 (the first non-beta), R595 595.44.02 to
//!   595.71.05, R610 610.43.02 and 610.57.04, R615 615.71.09.
//! - NVIDIA Driver Installation Guide, release 620: its table of contents has the section
//!   "Proprietary Kernel Modules Removed", and its Kernel Modules table lists only
//!   `nvidia-open` ("The kernel modules are open source and dual licensed MIT/GPLv2"); the 610
//!   guide still describes the two flavours.
//! - NVIDIA, Unix Graphics Feature Deprecation Schedule: R580 is the last branch for Maxwell,
//!   Pascal and Volta ([`crate::support`]).
//!
//! **A branch newer than the table** (R630 when the table ends at R620) is handled by one
//! documented rule, not by a silent yes: it is checked as the newest branch of the table
//! ([`NEWEST`]: open kernel modules only, the GPUs that branch drives), and the plan carries a
//! warning that says so ([`newer_than_table`]).

/// One branch NVIDIA ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Branch {
    pub branch: u32,
    /// The proprietary kernel modules ship in it (NVIDIA removed them in R620).
    pub proprietary: bool,
    /// Releases of the branch gpuhost's sources name (the first production one first).
    pub releases: &'static [&'static str],
    pub source: &'static str,
}

const TAGS: &str = "NVIDIA/open-gpu-kernel-modules release tags";

/// The branches gpuhost knows, oldest first.
pub const BRANCHES: &[Branch] = &[
    Branch {
        branch: 535,
        proprietary: true,
        releases: &["535.104.05", "535.129.03", "535.216.03"],
        source: TAGS,
    },
    Branch {
        branch: 550,
        proprietary: true,
        releases: &["550.54.15", "550.90.07", "550.163.01"],
        source: TAGS,
    },
    Branch {
        branch: 560,
        proprietary: true,
        releases: &["560.35.05"],
        source: TAGS,
    },
    Branch {
        branch: 565,
        proprietary: true,
        releases: &["565.57.01"],
        source: TAGS,
    },
    Branch {
        branch: 570,
        proprietary: true,
        releases: &["570.86.15", "570.124.06"],
        source: TAGS,
    },
    Branch {
        branch: 575,
        proprietary: true,
        releases: &["575.51.02"],
        source: TAGS,
    },
    Branch {
        branch: 580,
        proprietary: true,
        releases: &["580.82.07", "580.126.09"],
        source: "NVIDIA/open-gpu-kernel-modules release tags; R580 is the last branch for Maxwell, Pascal and Volta (Unix Graphics Feature Deprecation Schedule)",
    },
    Branch {
        branch: 590,
        proprietary: true,
        releases: &["590.48.01"],
        source: "NVIDIA/open-gpu-kernel-modules release tags (590.44.01 was the beta; 590.48.01 the first production release)",
    },
    Branch {
        branch: 595,
        proprietary: true,
        releases: &["595.44.02", "595.45.04", "595.71.05"],
        source: TAGS,
    },
    Branch {
        branch: 610,
        proprietary: true,
        releases: &["610.43.02", "610.57.04"],
        source: "NVIDIA/open-gpu-kernel-modules release tags; the 610 Driver Installation Guide still describes both kernel module flavours",
    },
    Branch {
        branch: 615,
        proprietary: true,
        releases: &["615.71.09"],
        source: "NVIDIA/open-gpu-kernel-modules release tags; the 615 guide's Fabric Manager profile serves \"driver branches 615 and earlier\"",
    },
    Branch {
        branch: 620,
        proprietary: false,
        releases: &[],
        source: "NVIDIA Driver Installation Guide 620, section \"Proprietary Kernel Modules Removed\"; its Kernel Modules table lists only nvidia-open",
    },
];

/// The newest branch in the table.
pub const NEWEST: u32 = 620;

/// The row that decides for `branch`: its own, or for a branch newer than the table the newest
/// (the documented rule); `None` for a branch older than the table or between its rows (such
/// a branch is judged by [`crate::support`]'s architecture rows alone).
pub fn row(branch: u32) -> Option<&'static Branch> {
    if branch > NEWEST {
        return BRANCHES.last();
    }
    BRANCHES.iter().find(|b| b.branch == branch)
}

/// Whether `branch` ships the proprietary kernel modules (a branch newer than the table: as the
/// newest, i.e. no).
pub fn has_proprietary(branch: u32) -> bool {
    row(branch).is_none_or(|b| b.proprietary)
}

/// The first branch without proprietary kernel modules.
pub fn proprietary_removed_in() -> u32 {
    BRANCHES
        .iter()
        .find(|b| !b.proprietary)
        .map_or(NEWEST, |b| b.branch)
}

/// The warning of a branch newer than the table: the rule it is checked by.
pub fn newer_than_table(branch: u32) -> Option<String> {
    (branch > NEWEST).then(|| {
        format!(
            "driver branch R{branch} is newer than gpuhost's branch table (read through R{NEWEST}): it is checked as R{NEWEST} (open kernel modules only, the GPUs R{NEWEST} drives); see docs/support-matrix.md"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r620_has_no_proprietary_modules_and_newer_branches_follow_it() {
        assert!(has_proprietary(535));
        assert!(has_proprietary(615));
        assert!(!has_proprietary(620));
        assert!(!has_proprietary(630), "a newer branch is checked as R620");
        assert_eq!(proprietary_removed_in(), 620);
        assert!(newer_than_table(620).is_none());
        assert!(newer_than_table(630).is_some_and(|w| w.contains("checked as R620")));
        let sorted = BRANCHES.windows(2).all(|w| w[0].branch < w[1].branch);
        assert!(sorted, "oldest first");
        assert_eq!(BRANCHES.last().map(|b| b.branch), Some(NEWEST));
    }
}
