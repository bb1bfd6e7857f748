//! `/etc/os-release`: which OS the host (or install root) runs.

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct OsRelease {
    /// `ID`, e.g. `ol`, `rhel`, `ubuntu`.
    pub id: String,
    /// `VERSION_ID`, e.g. `8.10`.
    pub version_id: String,
    /// `PRETTY_NAME`, for messages.
    pub pretty_name: String,
    /// `PLATFORM_ID`, e.g. `platform:el8`.
    pub platform_id: Option<String>,
}

impl OsRelease {
    /// Parse the shell-style `KEY=value` file.
    pub fn parse(text: &str) -> OsRelease {
        let map: BTreeMap<&str, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim(), unquote(v.trim())))
            .collect();
        let get = |k: &str| map.get(k).cloned().unwrap_or_default();
        OsRelease {
            id: get("ID"),
            version_id: get("VERSION_ID"),
            pretty_name: map
                .get("PRETTY_NAME")
                .cloned()
                .unwrap_or_else(|| format!("{} {}", get("ID"), get("VERSION_ID"))),
            platform_id: map.get("PLATFORM_ID").cloned(),
        }
    }

    /// The major version: `8.10` → 8.
    pub fn major(&self) -> Option<u32> {
        self.version_id.split('.').next()?.parse().ok()
    }

    pub fn is_oracle_linux(&self) -> bool {
        self.id == "ol"
    }
}

fn unquote(v: &str) -> String {
    let v = v
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
        .unwrap_or(v);
    v.replace("\\\"", "\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_oracle_linux_8() {
        let os = OsRelease::parse(
            "NAME=\"Oracle Linux Server\"\nVERSION=\"8.10\"\nID=\"ol\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"8.10\"\nPLATFORM_ID=\"platform:el8\"\nPRETTY_NAME=\"Oracle Linux Server 8.10\"\n",
        );
        assert!(os.is_oracle_linux());
        assert_eq!(os.major(), Some(8));
        assert_eq!(os.platform_id.as_deref(), Some("platform:el8"));
        assert_eq!(os.pretty_name, "Oracle Linux Server 8.10");
    }

    #[test]
    fn parses_ubuntu() {
        let os = OsRelease::parse("ID=ubuntu\nVERSION_ID=\"24.04\"\n");
        assert!(!os.is_oracle_linux());
        assert_eq!(os.major(), Some(24));
    }
}
