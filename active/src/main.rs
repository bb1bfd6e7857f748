//! `gpuhost-active-probe`: the child `gpuhost status --active` runs. It runs the active checks
//! on every GPU and prints one line of JSON (`gpuhost_active::ActiveReport`); see the crate's
//! documentation. Not for people: `gpuhost status --active` judges and renders its answer.
//!
//! Usage: gpuhost-active-probe [--seconds S] [--force] [--inject-fault hbm|fp32|fp64|mix32|mix64]
//! [--p2p-self]

fn main() {
    let mut o = gpuhost_active::ChildOptions {
        seconds: 15.0,
        force: false,
        fault: None,
        p2p_self: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let parsed: Result<(), String> = match a.as_str() {
            "--seconds" => args
                .next()
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                .map(|s| o.seconds = s)
                .ok_or_else(|| "--seconds: give seconds, more than 0 and at most 3600".to_string()),
            "--force" => {
                o.force = true;
                Ok(())
            }
            "--p2p-self" => {
                o.p2p_self = true;
                Ok(())
            }
            "--inject-fault" => args
                .next()
                .ok_or_else(|| "--inject-fault: which fault?".to_string())
                .and_then(|f| f.parse().map(|f| o.fault = Some(f))),
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = parsed {
            eprintln!("gpuhost-active-probe: {e}");
            std::process::exit(2);
        }
    }
    std::process::exit(gpuhost_active::child_main(&o));
}
