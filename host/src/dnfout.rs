//! What dnf said about a transaction that resolved to less than was asked: its own lines, to be
//! quoted as the reason. Parsed separately from running dnf, on its captured output
//! (`tests/fixtures/dnf/`, dnf 4.14 against the test world's roots).
//!
//! dnf 4 does not always fail when it does less than it was asked: a `dnf shell` line that
//! errs is logged and the lines after it run (`install` of a package no repo has, `module
//! enable` of a stream that does not exist — the packages then come from the default stream);
//! a request that conflicts prints `Problem: … conflicting requests` and then runs what is left,
//! exit 0 (NVIDIA's module profile listing the DKMS kmod beside a prebuilt kmod); with
//! `--skip-broken` (or `best=False`) it skips packages. So gpuhost reads its words: [`problems`]
//! on any output, [`dry_run_problems`] on the output of the same command run with `--assumeno`
//! first (what it would do, nothing done).

/// The lines of dnf's output (stdout and stderr) that say it could not do all it was asked,
/// trimmed, in order, each once: `Problem:` with its `- …` lines, `Error: …` (but the
/// `Operation aborted.` of `--assumeno`), `No match for argument`, `Unable to resolve argument`,
/// `No match for package`, `Cannot enable multiple streams`, `missing`/`broken groups or
/// modules`, `All matches were filtered out`, `Modular dependency problems` and the packages
/// under `Skipping packages with …`. Empty when dnf said none of these.
pub fn problems(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let push = |l: &str, out: &mut Vec<String>| {
        let l = l.split_whitespace().collect::<Vec<_>>().join(" ");
        if !l.is_empty() && !out.contains(&l) {
            out.push(l);
        }
    };
    // Inside a `Problem` (its `- …` lines follow) or a `Skipping packages` section (its table
    // rows follow, indented).
    let (mut in_problem, mut in_skip) = (false, false);
    for line in text.lines() {
        let t = line.trim();
        if in_problem && t.starts_with("- ") {
            push(t, &mut out);
            continue;
        }
        in_problem = false;
        if in_skip {
            if t.starts_with("(add ") {
                continue;
            }
            if line.starts_with(' ') && !t.is_empty() {
                // ` name  arch  version  repo  size`: the package dnf skips.
                let words: Vec<&str> = t.split_whitespace().collect();
                if let [name, _arch, version, ..] = words.as_slice() {
                    push(&format!("skipped: {name}-{version}"), &mut out);
                }
                continue;
            }
            in_skip = false;
        }
        if t.starts_with("Problem") || t.starts_with("Modular dependency problem") {
            in_problem = true;
            push(t, &mut out);
        } else if t.starts_with("Skipping packages with") {
            in_skip = true;
            push(t.trim_end_matches(':'), &mut out);
        } else if t.starts_with("Error:") {
            let rest = t.trim_start_matches("Error:").trim();
            if rest == "Operation aborted." {
                continue;
            }
            if rest.is_empty() {
                // `Error: ` alone, its Problem on the next lines.
                continue;
            }
            push(t, &mut out);
        } else if [
            "No match for argument",
            "Unable to resolve argument",
            "No match for package",
            "Cannot enable multiple streams",
            "missing groups or modules",
            "broken groups or modules",
            "All matches were filtered out",
            "Module or Group",
        ]
        .iter()
        .any(|m| t.starts_with(m))
        {
            push(t, &mut out);
        }
    }
    out
}

/// [`problems`] of a command run with `--assumeno` and without `--quiet` (dnf resolves, prints
/// what it would do, does nothing): besides those lines, `Nothing to do.` when it would run no
/// transaction at all (it prints `Operation aborted.` exactly when it had one to refuse). Every
/// transaction gpuhost runs asks for something, so nothing to do is less than was asked.
pub fn dry_run_problems(text: &str) -> Vec<String> {
    let mut out = problems(text);
    if !text
        .lines()
        .any(|l| l.trim().ends_with("Operation aborted."))
    {
        out.push("Nothing to do.".to_string());
    }
    out
}

/// True when dnf refuses because of the host's own dnf configuration rather than what was
/// asked: a package `protected_packages` protects, or one dnf.conf's `excludepkgs` hides.
/// (The exit code follows where the fault lies: the host's configuration is not the profile's
/// or the repos'.)
pub fn host_refuses(problems: &[String]) -> bool {
    problems.iter().any(|p| {
        p.contains("protected packages") || p.contains("filtered out by exclude filtering")
    })
}

/// Where the fault of dnf's [`problems`] lies, for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// What was asked cannot be resolved from the repos: a conflict (`Problem: … conflicting
    /// requests`, a package nothing provides, one filtered out by modular filtering), a package
    /// or module stream no repo has, packages skipped, nothing to do. The profile (or the repos
    /// it names) must change.
    Request,
    /// The host's own dnf configuration refuses it (a protected package).
    Host,
    /// Anything else: a repo that cannot be read, rpm's transaction test, a package that
    /// cannot be opened.
    Other,
}

/// [`Fault`] of a non-empty list of [`problems`]: `Request` only when every line is one of
/// dnf's resolution lines.
pub fn fault(problems: &[String]) -> Fault {
    const REQUEST: &[&str] = &[
        "Problem",
        "- ",
        "Modular dependency problem",
        "No match for argument",
        "No match for package",
        "Unable to resolve argument",
        "Error: Unable to find a match",
        "Cannot enable multiple streams",
        "Error: Problems in request",
        "missing groups or modules",
        "broken groups or modules",
        "All matches were filtered out",
        "Module or Group",
        "Skipping packages with",
        "skipped: ",
        "Nothing to do.",
        "Error: It is not possible to switch enabled streams",
    ];
    if host_refuses(problems) {
        Fault::Host
    } else if !problems.is_empty()
        && problems
            .iter()
            .all(|p| REQUEST.iter().any(|r| p.starts_with(r)))
    {
        Fault::Request
    } else {
        Fault::Other
    }
}

/// The problems in one line, for a reason: joined with ` | `, at most `n` of them (and how many
/// more).
pub fn quoted(problems: &[String], n: usize) -> String {
    let mut s = problems
        .iter()
        .take(n)
        .cloned()
        .collect::<Vec<_>>()
        .join(" | ");
    if problems.len() > n {
        s.push_str(&format!(" | … ({} more)", problems.len() - n));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The captured outputs (`tests/fixtures/dnf/README.md` says how each was made).
    fn fixture(name: &str) -> String {
        let text = match name {
            "shell-profile-conflict.txt" => {
                include_str!("../../tests/fixtures/dnf/shell-profile-conflict.txt")
            }
            "dry-shell-profile-conflict.txt" => {
                include_str!("../../tests/fixtures/dnf/dry-shell-profile-conflict.txt")
            }
            "dry-shell-resolves.txt" => {
                include_str!("../../tests/fixtures/dnf/dry-shell-resolves.txt")
            }
            "dry-shell-no-match-in-the-middle.txt" => {
                include_str!("../../tests/fixtures/dnf/dry-shell-no-match-in-the-middle.txt")
            }
            "dry-shell-stream-missing.txt" => {
                include_str!("../../tests/fixtures/dnf/dry-shell-stream-missing.txt")
            }
            "dry-shell-nothing-to-do.txt" => {
                include_str!("../../tests/fixtures/dnf/dry-shell-nothing-to-do.txt")
            }
            "dry-install-skip-broken.txt" => {
                include_str!("../../tests/fixtures/dnf/dry-install-skip-broken.txt")
            }
            "install-no-match.txt" => include_str!("../../tests/fixtures/dnf/install-no-match.txt"),
            "install-file-conflict.txt" => {
                include_str!("../../tests/fixtures/dnf/install-file-conflict.txt")
            }
            "module-enable-two-streams.txt" => {
                include_str!("../../tests/fixtures/dnf/module-enable-two-streams.txt")
            }
            _ => "",
        };
        assert!(!text.is_empty(), "no fixture {name}");
        text.to_string()
    }

    #[test]
    fn the_profile_conflict_of_issue_51_is_dnfs_problem_even_with_exit_0() {
        // `dnf -y -q shell` (exit 0): the prebuilt kmod beside NVIDIA's profile.
        let p = problems(&fixture("shell-profile-conflict.txt"));
        assert_eq!(
            p,
            vec![
                "Problem: package kmod-nvidia-open-5.15.0-206.153.7.el9uek.x86_64-3:570.124.06-1.x86_64 conflicts with kmod-nvidia-open-dkms provided by kmod-nvidia-open-dkms-3:570.124.06-1.el9.x86_64",
                "- conflicting requests",
            ]
        );
        // The same, resolved with --assumeno: dnf would enable the stream and mark the profile
        // installed, and install nothing.
        let dry = dry_run_problems(&fixture("dry-shell-profile-conflict.txt"));
        assert_eq!(dry, p);
    }

    #[test]
    fn a_line_that_errs_in_the_middle_of_a_shell_script_is_found_before_run() {
        let p = dry_run_problems(&fixture("dry-shell-no-match-in-the-middle.txt"));
        assert_eq!(
            p,
            vec![
                "No match for argument: no-such-package",
                "Error: Unable to find a match: no-such-package"
            ]
        );
        // A stream that does not exist: dnf would install from the default stream instead.
        let p = dry_run_problems(&fixture("dry-shell-stream-missing.txt"));
        assert_eq!(
            p,
            vec![
                "Error: Problems in request:",
                "missing groups or modules: nvidia-driver:999-open"
            ]
        );
    }

    #[test]
    fn a_dry_run_that_would_do_nothing_or_skip_says_so() {
        assert_eq!(
            dry_run_problems(&fixture("dry-shell-nothing-to-do.txt")),
            vec!["Nothing to do."]
        );
        assert!(dry_run_problems(&fixture("dry-shell-resolves.txt")).is_empty());
        let p = dry_run_problems(&fixture("dry-install-skip-broken.txt"));
        assert!(
            p.iter().any(|l| l == "Skipping packages with conflicts"),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|l| l == "skipped: kmod-nvidia-open-dkms-3:570.124.06-1.el9"),
            "{p:?}"
        );
        assert!(!p.iter().any(|l| l.contains("--best")), "{p:?}");
    }

    #[test]
    fn plain_commands_that_fail_are_quoted_too() {
        assert_eq!(
            problems(&fixture("install-no-match.txt")),
            vec!["Error: Unable to find a match: no-such-package"]
        );
        assert_eq!(
            problems(&fixture("module-enable-two-streams.txt")),
            vec![
                "Cannot enable multiple streams for module 'nvidia-driver'",
                "Unable to resolve argument nvidia-driver:570-open",
                "Error: Problems in request:",
                "broken groups or modules: nvidia-driver:570-open"
            ]
        );
        assert_eq!(problems(&fixture("install-file-conflict.txt")).len(), 2);
        assert!(problems("Installed:\n  x-1-1.x86_64\n\nComplete!\n").is_empty());
        assert!(!host_refuses(&problems(&fixture(
            "install-file-conflict.txt"
        ))));
        assert!(host_refuses(&["Problem: The operation would result in removing the following protected packages: nvidia-fabric-manager".to_string()]));
        assert_eq!(
            quoted(&["a".into(), "b".into(), "c".into()], 2),
            "a | b | … (1 more)"
        );
        for f in [
            "shell-profile-conflict.txt",
            "install-no-match.txt",
            "module-enable-two-streams.txt",
            "install-file-conflict.txt",
        ] {
            assert_eq!(fault(&problems(&fixture(f))), Fault::Request, "{f}");
        }
        assert_eq!(
            fault(&["Error: Failed to download metadata for repo 'docker-ce-stable': Cannot download repomd.xml".to_string()]),
            Fault::Other
        );
        assert_eq!(
            fault(&[
                "Error: Transaction test error:".to_string(),
                "Problem: x".to_string()
            ]),
            Fault::Other
        );
    }
}
