//! `NVIDIA_REQUIRE_*` expressions, evaluated exactly as the container runtime evaluates them.
//!
//! With `docker run --gpus`, the NVIDIA Container Runtime Hook hands every requirement to
//! `nvidia-container-cli configure --require=EXPR`, and libnvidia-container decides. This
//! module reproduces that decision, quirks included, from the source:
//!
//! - libnvidia-container `src/cli/dsl.c` (`dsl_evaluate`, `evaluate_rule`,
//!   `dsl_compare_version`, `dsl_compare_string`): within one expression, space-separated
//!   terms are OR'ed and comma-separated factors AND'ed, evaluated left to right and
//!   short-circuited — so a malformed factor is an error only when evaluation reaches it;
//!   operators are `=`, `!=`, `<`, `<=`, `>`, `>=` (a lone `!` reads as `!=`); rule names are
//!   case-insensitive; a false factor whose "name op value" text is 128 bytes or longer is an
//!   error ("invalid expression"); an unsatisfied expression reports its first space-separated
//!   term, with "please update your driver…" when that term starts with `cuda>=`.
//! - libnvidia-container `src/cli/configure.c` (`check_cuda_version`, `check_driver_version`,
//!   `check_device_arch`, `check_device_brand`, `configure_command`): rules `cuda` (the driver's
//!   CUDA version, NVML `nvmlSystemGetCudaDriverVersion` as `major.minor`), `driver` (NVML
//!   `nvmlSystemGetDriverVersion`), `arch` (the device's compute capability, `major.minor`) and
//!   `brand` (the device's NVML brand by libnvidia-container's names: `Quadro`, `Tesla`, `NVS`,
//!   `GRID`, `GeForce`, `TITAN`, and `Unknown` for every other brand — `src/driver.c`
//!   `driver_get_device_brand_1_svc`); a fact that is not known makes its rule true; every
//!   requirement is evaluated for every visible GPU, and once without a device when none is
//!   visible (then `arch` and `brand` are true).
//!
//! Which requirements a container has is the toolkit's business: see [`super::require`].

/// A comparison operator, in libnvidia-container's table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// libnvidia-container's operator table, in its order (the order decides how a one-character
/// operator run such as `!` is read).
const OPERATORS: [(&str, Cmp); 6] = [
    ("=", Cmp::Eq),
    ("!=", Cmp::Ne),
    ("<", Cmp::Lt),
    ("<=", Cmp::Le),
    (">", Cmp::Gt),
    (">=", Cmp::Ge),
];

/// The longest "name op value" text libnvidia-container can report (its `EXPR_MAX` buffer is
/// 128 bytes including the terminating NUL).
const EXPR_MAX: usize = 128;

const OP_CHARS: &[u8] = b"<>=!";

/// `dsl_compare_version`: compare dotted numeric versions. `None` where libnvidia-container
/// returns -1 (a side with a character other than digits and dots, a component that is not a
/// number, or a number at or past `UINTMAX_MAX`).
pub(crate) fn compare_version(v1: &str, cmp: Cmp, v2: &str) -> Option<bool> {
    let digits_dots = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if !digits_dots(v1) || !digits_dots(v2) {
        return None;
    }
    let (mut a, mut b) = (v1.as_bytes(), v2.as_bytes());
    while !a.is_empty() && !b.is_empty() {
        let (n1, rest1) = leading_number(a)?;
        let (n2, rest2) = leading_number(b)?;
        if n1 != n2 {
            return Some(match cmp {
                Cmp::Eq => false,
                Cmp::Ne => true,
                Cmp::Lt | Cmp::Le => n1 < n2,
                Cmp::Gt | Cmp::Ge => n1 > n2,
            });
        }
        a = skip(rest1, b".");
        b = skip(rest2, b".");
    }
    let a = skip(a, b".0");
    let b = skip(b, b".0");
    match cmp {
        Cmp::Ne => Some(!a.is_empty() || !b.is_empty()),
        Cmp::Eq => Some(a.is_empty() && b.is_empty()),
        Cmp::Le | Cmp::Ge if a.is_empty() && b.is_empty() => Some(true),
        Cmp::Lt | Cmp::Le => Some(a.is_empty() && !b.is_empty()),
        Cmp::Gt | Cmp::Ge => Some(!a.is_empty() && b.is_empty()),
    }
}

/// `strtoumax` on a string of digits and dots: the number and the rest; `None` when there is no
/// digit first or the value reaches `UINTMAX_MAX` (which libnvidia-container treats as failure).
fn leading_number(s: &[u8]) -> Option<(u64, &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let mut v: u64 = 0;
    for d in &s[..n] {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(d - b'0')))?;
    }
    (v != u64::MAX).then_some((v, &s[n..]))
}

/// `s + strspn(s, set)`.
fn skip<'a>(s: &'a [u8], set: &[u8]) -> &'a [u8] {
    let n = s.iter().take_while(|b| set.contains(b)).count();
    &s[n..]
}

/// `dsl_compare_string`: ASCII case-insensitive equality; only `=` and `!=` are valid.
pub(crate) fn compare_string(s1: &str, cmp: Cmp, s2: &str) -> Option<bool> {
    match cmp {
        Cmp::Eq => Some(s1.eq_ignore_ascii_case(s2)),
        Cmp::Ne => Some(!s1.eq_ignore_ascii_case(s2)),
        _ => None,
    }
}

/// What the driver says, as libnvidia-container reads it (`None`: not known, the rule is true).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverFacts {
    /// `nvmlSystemGetDriverVersion`, e.g. `535.104.05`.
    pub nvrm_version: Option<String>,
    /// `nvmlSystemGetCudaDriverVersion` as `major.minor`, e.g. `12.2`.
    pub cuda_version: Option<String>,
}

/// One visible GPU, as libnvidia-container reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceFacts {
    /// libnvidia-container's brand name (`Tesla`, `Unknown`, …); see [`super::gpu::libnvc_brand`].
    pub brand: Option<String>,
    /// Compute capability `major.minor`, e.g. `9.0`.
    pub arch: Option<String>,
}

/// The result of one expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Satisfied,
    /// libnvidia-container's message, e.g. `unsatisfied condition: cuda>=12.4, please update
    /// your driver to a newer version, or use an earlier cuda container`.
    Unsatisfied(String),
    /// libnvidia-container's "invalid expression" (a malformed factor, an unknown rule, an
    /// operator the rule does not take, a value that is not a version).
    Invalid,
}

impl Outcome {
    /// The message nvidia-container-cli prints after `requirement error: `.
    pub fn message(&self) -> Option<&str> {
        match self {
            Outcome::Satisfied => None,
            Outcome::Unsatisfied(m) => Some(m),
            Outcome::Invalid => Some("invalid expression"),
        }
    }
}

/// `evaluate_rule` for one factor: `Some(true|false)`, or `None` for -1.
fn evaluate_factor(factor: &str, drv: &DriverFacts, dev: Option<&DeviceFacts>) -> Option<bool> {
    let bytes = factor.as_bytes();
    let name_len = bytes.iter().take_while(|b| !OP_CHARS.contains(b)).count();
    if name_len == 0 {
        return None;
    }
    let op_len = bytes[name_len..]
        .iter()
        .take_while(|b| OP_CHARS.contains(b))
        .count();
    if op_len == 0 {
        return None;
    }
    let run = &bytes[name_len..name_len + op_len];
    // strncmp(ptr, op, n) == 0: the operator is at least n long and starts with the run.
    let (op_str, cmp) = OPERATORS
        .iter()
        .find(|(s, _)| s.len() >= op_len && &s.as_bytes()[..op_len] == run)?;
    let name = &factor[..name_len];
    let value = &factor[name_len + op_len..];
    if value.is_empty() {
        return None;
    }
    let result = if name.eq_ignore_ascii_case("cuda") {
        match &drv.cuda_version {
            None => Some(true),
            Some(v) => compare_version(v, *cmp, value),
        }
    } else if name.eq_ignore_ascii_case("driver") {
        match &drv.nvrm_version {
            None => Some(true),
            Some(v) => compare_version(v, *cmp, value),
        }
    } else if name.eq_ignore_ascii_case("arch") {
        match dev.and_then(|d| d.arch.as_deref()) {
            None => Some(true),
            Some(v) => compare_version(v, *cmp, value),
        }
    } else if name.eq_ignore_ascii_case("brand") {
        match dev.and_then(|d| d.brand.as_deref()) {
            None => Some(true),
            Some(v) => compare_string(v, *cmp, value),
        }
    } else {
        return None;
    }?;
    // A false factor is formatted for the error message; too long a text is itself an error.
    if !result && name.len() + op_str.len() + value.len() + 2 >= EXPR_MAX {
        return None;
    }
    Some(result)
}

/// `dsl_evaluate`: one `NVIDIA_REQUIRE_*` expression against the driver and one device (`None`:
/// no visible device).
pub fn evaluate(predicate: &str, drv: &DriverFacts, dev: Option<&DeviceFacts>) -> Outcome {
    let mut ret = true;
    for or_term in predicate.split(' ') {
        if or_term.is_empty() {
            continue;
        }
        let mut all_true = true;
        for factor in or_term.split(',') {
            if factor.is_empty() {
                continue;
            }
            match evaluate_factor(factor, drv, dev) {
                None => return Outcome::Invalid,
                Some(v) => ret = v,
            }
            if !ret {
                all_true = false;
                break;
            }
        }
        if all_true {
            break;
        }
    }
    if ret {
        return Outcome::Satisfied;
    }
    let first = predicate.split(' ').next().unwrap_or_default();
    Outcome::Unsatisfied(if first.starts_with("cuda>=") {
        format!("unsatisfied condition: {first}, please update your driver to a newer version, or use an earlier cuda container")
    } else {
        format!("unsatisfied condition: {first}")
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn drv(nvrm: &str, cuda: &str) -> DriverFacts {
        DriverFacts {
            nvrm_version: Some(nvrm.into()),
            cuda_version: Some(cuda.into()),
        }
    }

    fn dev(brand: &str, arch: &str) -> DeviceFacts {
        DeviceFacts {
            brand: Some(brand.into()),
            arch: Some(arch.into()),
        }
    }

    #[rstest]
    #[case("535.104.05", Cmp::Ge, "535", Some(true))]
    #[case("535.104.05", Cmp::Lt, "536", Some(true))]
    #[case("535.104.05", Cmp::Lt, "535", Some(false))]
    #[case("12.2", Cmp::Ge, "12.4", Some(false))]
    #[case("12.10", Cmp::Ge, "12.9", Some(true))]
    #[case("12.0", Cmp::Eq, "12", Some(true))]
    #[case("12.0.0", Cmp::Ge, "12", Some(true))]
    #[case("12", Cmp::Lt, "12.0.1", Some(true))]
    #[case("1.05", Cmp::Eq, "1.5", Some(true))]
    #[case("1..5", Cmp::Eq, "1.5", Some(true))]
    #[case("12.4", Cmp::Ne, "12.4.0", Some(false))]
    #[case("12.4", Cmp::Ge, "12.4x", None)]
    #[case("12.4", Cmp::Ge, ".4", None)]
    #[case("18446744073709551615", Cmp::Ge, "1", None)]
    #[case("99999999999999999999", Cmp::Ge, "1", None)]
    #[case("", Cmp::Eq, "0", Some(true))]
    fn versions_compare_like_libnvidia_container(
        #[case] a: &str,
        #[case] cmp: Cmp,
        #[case] b: &str,
        #[case] want: Option<bool>,
    ) {
        assert_eq!(compare_version(a, cmp, b), want, "{a} {cmp:?} {b}");
    }

    #[test]
    fn brands_compare_case_insensitively_and_only_for_equality() {
        assert_eq!(compare_string("Tesla", Cmp::Eq, "tesla"), Some(true));
        assert_eq!(compare_string("Unknown", Cmp::Ne, "tesla"), Some(true));
        assert_eq!(compare_string("Tesla", Cmp::Ge, "tesla"), None);
    }

    #[test]
    fn or_of_ands_with_the_real_brand_terms() {
        let e =
            "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=535,driver<536";
        // Driver 550 supports CUDA 12.4 itself.
        assert_eq!(
            evaluate(e, &drv("550.54.15", "12.4"), Some(&dev("Unknown", "9.0"))),
            Outcome::Satisfied
        );
        // 535 on an H100 (NVML brand NVIDIA, which libnvidia-container calls Unknown): the
        // forward-compatibility term lets it start.
        assert_eq!(
            evaluate(e, &drv("535.104.05", "12.2"), Some(&dev("Unknown", "9.0"))),
            Outcome::Satisfied
        );
        // 535 on a Tesla-branded GPU: only the 470 term names Tesla.
        assert_eq!(
            evaluate(e, &drv("535.104.05", "12.2"), Some(&dev("Tesla", "7.0"))),
            Outcome::Unsatisfied("unsatisfied condition: cuda>=12.4, please update your driver to a newer version, or use an earlier cuda container".into())
        );
        // No visible device: brand is true, so only the driver ranges count.
        assert_eq!(
            evaluate(e, &drv("470.256.02", "11.4"), None),
            Outcome::Satisfied
        );
    }

    #[test]
    fn malformed_factors_count_only_when_reached() {
        let d = drv("535.104.05", "12.2");
        assert_eq!(
            evaluate("cuda>=12.0 nonsense", &d, None),
            Outcome::Satisfied
        );
        assert_eq!(evaluate("cuda>=12.4 nonsense", &d, None), Outcome::Invalid);
        assert_eq!(
            evaluate("cuda>=12.4,nonsense", &d, None),
            Outcome::Unsatisfied("unsatisfied condition: cuda>=12.4,nonsense, please update your driver to a newer version, or use an earlier cuda container".into())
        );
        assert_eq!(evaluate("cuda=>12.0", &d, None), Outcome::Invalid);
        assert_eq!(evaluate("cuda>=", &d, None), Outcome::Invalid);
        assert_eq!(evaluate(">=12", &d, None), Outcome::Invalid);
        assert_eq!(evaluate("gpu>=1", &d, None), Outcome::Invalid);
        // brand only takes = and !=, but only a present device compares.
        assert_eq!(evaluate("brand>=tesla", &d, None), Outcome::Satisfied);
        assert_eq!(
            evaluate("brand>=tesla", &d, Some(&dev("Tesla", "8.0"))),
            Outcome::Invalid
        );
    }

    #[test]
    fn operator_runs_read_as_libnvidia_container_reads_them() {
        let d = drv("535.104.05", "12.2");
        // A lone `!` matches `!=` (strncmp over one character).
        assert_eq!(evaluate("driver!535", &d, None), Outcome::Satisfied);
        assert_eq!(
            evaluate("CUDA>=12.2,Driver=535.104.5", &d, None),
            Outcome::Satisfied
        );
        assert_eq!(evaluate("driver==535", &d, None), Outcome::Invalid);
        assert_eq!(evaluate("driver<>535", &d, None), Outcome::Invalid);
    }

    #[test]
    fn empty_terms_and_unknown_facts() {
        let d = drv("535.104.05", "12.2");
        assert_eq!(evaluate("", &d, None), Outcome::Satisfied);
        assert_eq!(evaluate("  ,, ", &d, None), Outcome::Satisfied);
        assert_eq!(
            evaluate("cuda>=13.0", &DriverFacts::default(), None),
            Outcome::Satisfied
        );
        // An empty OR term after a failing one keeps the failure.
        assert_eq!(
            evaluate("cuda>=13.0 ,", &d, None),
            Outcome::Unsatisfied("unsatisfied condition: cuda>=13.0, please update your driver to a newer version, or use an earlier cuda container".into())
        );
        // A leading space makes the reported term empty, as in libnvidia-container.
        assert_eq!(
            evaluate(" cuda>=13.0", &d, None),
            Outcome::Unsatisfied("unsatisfied condition: ".into())
        );
    }

    #[test]
    fn a_false_factor_too_long_to_report_is_invalid() {
        let d = drv("535.104.05", "12.2");
        let long = format!("brand={}", "x".repeat(120));
        assert_eq!(
            evaluate(&long, &d, Some(&dev("Tesla", "8.0"))),
            Outcome::Invalid
        );
        let fits = format!("brand={}", "x".repeat(100));
        assert_eq!(
            evaluate(&fits, &d, Some(&dev("Tesla", "8.0"))),
            Outcome::Unsatisfied(format!("unsatisfied condition: {fits}"))
        );
    }
}
