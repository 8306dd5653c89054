//! Compiles the kernel side (bpf/tlsprof.bpf.c, which includes one header per feature)
//! with clang and the layout printer (bpf/layout.c) with the host compiler; the agent
//! embeds the object and its layout test reads what the printer says.
use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

/// The one compilation unit, compiled into `$OUT_DIR/tlsprof.bpf.o`.
const OBJECT: &str = "tlsprof";

fn run(cmd: &mut Command) -> Result<Vec<u8>> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?} (is clang installed? run `make deps`)"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

fn main() -> Result<()> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let bpf_dir = manifest.join("../bpf").canonicalize().context("bpf/ not found")?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // The kernel side's register macros (PT_REGS_*) and its vmlinux header are per
    // architecture: bpf/tlsprof.bpf.c picks vmlinux.h or vmlinux-arm64.h by this define.
    let arch = match env::var("CARGO_CFG_TARGET_ARCH")?.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => bail!("tlsprof's kernel side has kernel types for x86_64 and aarch64, not {other}"),
    };
    version(&manifest)?;

    for entry in std::fs::read_dir(&bpf_dir)? {
        let path = entry?.path();
        if matches!(path.extension().and_then(|e| e.to_str()), Some("c" | "h")) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }

    run(Command::new(&clang)
        .args(["-g", "-O2", "-target", "bpfel", "-Wall", "-Werror"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .arg("-I")
        .arg(&bpf_dir)
        .arg("-c")
        .arg(bpf_dir.join(format!("{OBJECT}.bpf.c")))
        .arg("-o")
        .arg(out.join(format!("{OBJECT}.bpf.o"))))?;

    layout(&clang, &bpf_dir, &out)
}

/// What `tlsprof --version` names besides the version: the commit built (TLSPROF_COMMIT
/// if set, else git's HEAD; "unknown" from a tarball without .git) and the target triple.
fn version(manifest: &Path) -> Result<()> {
    println!("cargo:rerun-if-env-changed=TLSPROF_COMMIT");
    let git = |args: &[&str]| {
        let out = Command::new("git").current_dir(manifest).args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    // Only tlsprof's own checkout: sources unpacked inside another repository are not it.
    let ours = git(&["rev-parse", "--show-toplevel"])
        .and_then(|top| Path::new(&top).canonicalize().ok())
        .is_some_and(|top| manifest.parent().and_then(|p| p.canonicalize().ok()) == Some(top));
    let commit = match env::var("TLSPROF_COMMIT") {
        Ok(c) if !c.is_empty() => c,
        _ => ours
            .then(|| git(&["rev-parse", "--short=12", "HEAD"]))
            .flatten()
            .unwrap_or_else(|| "unknown".into()),
    };
    // A commit or checkout moves HEAD or its log: the commit named is then read again. Only
    // files that exist are named (cargo reruns the script every build for a missing one).
    for name in ["HEAD", "logs/HEAD"].into_iter().filter(|_| ours) {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", name]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rustc-env=TLSPROF_COMMIT={commit}");
    println!("cargo:rustc-env=TLSPROF_TARGET={}", env::var("TARGET")?);
    Ok(())
}

/// Builds and runs bpf/layout.c, saving its output for the layout test.
fn layout(clang: &str, bpf_dir: &Path, out: &Path) -> Result<()> {
    let exe = out.join("layout");
    run(Command::new(clang)
        .arg("-I")
        .arg(bpf_dir)
        .arg(bpf_dir.join("layout.c"))
        .arg("-o")
        .arg(&exe))?;
    let text = run(&mut Command::new(&exe))?;
    std::fs::write(out.join("layout.txt"), text)?;
    Ok(())
}
