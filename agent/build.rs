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
    let arch = match env::var("CARGO_CFG_TARGET_ARCH")?.as_str() {
        "x86_64" => "x86",
        other => bail!("tlsprof's kernel side has a vmlinux.h for x86_64 only, not {other}"),
    };

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
