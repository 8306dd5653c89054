//! Compiles the kernel side (bpf/tlsprof.bpf.c, which includes one header per feature)
//! with clang, and generates the agent's Rust twin of every type and constant those
//! headers share with it (bindgen over bpf/*.h): the agent embeds the object and includes
//! the types (agent/src/bpf/abi.rs), so the two sides cannot drift.
use std::{
    collections::BTreeMap,
    env,
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
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

    kernel_types(&bpf_dir, &out)
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

/// The headers the kernel side shares with the agent: every bpf/*.h but the kernel's own
/// types (vmlinux*.h), the kernel-only headers (*.bpf.h) and iface.h (which declares the
/// features' functions to each other).
fn shared_headers(bpf_dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(bpf_dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".h") else { continue };
        if !stem.contains('.') && !stem.starts_with("vmlinux") && stem != "iface" {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// What bindgen told of the headers' enums and structs, for the code written after it.
#[derive(Debug, Default)]
struct Seen {
    /// enum name -> (value, Rust variant name, C name), in the header's order.
    enums: BTreeMap<String, Vec<(u64, String, String)>>,
    structs: Vec<String>,
}

/// Names the enums' variants in Rust's style (`WIRE_END_CLIENT_ALERT` of `enum wire_end`
/// is `wire_end::ClientAlert`) and notes the enums and structs it is shown.
#[derive(Debug, Default)]
struct Namer(Arc<Mutex<Seen>>);

impl bindgen::callbacks::ParseCallbacks for Namer {
    fn enum_variant_name(
        &self,
        enum_name: Option<&str>,
        original: &str,
        value: bindgen::callbacks::EnumVariantValue,
    ) -> Option<String> {
        use bindgen::callbacks::EnumVariantValue::*;
        let enum_name = enum_name?.trim_start_matches("enum ").to_string();
        // Without the enum's name (WIRE_END_ of wire_end), or else its first word (HELLO_ of
        // hello_why).
        let upper = enum_name.to_uppercase();
        let first = upper.split('_').next().unwrap_or_default();
        let bare = original
            .strip_prefix(&format!("{upper}_"))
            .or_else(|| original.strip_prefix(&format!("{first}_")))
            .unwrap_or(original);
        let rust: String = bare
            .split('_')
            .filter(|w| !w.is_empty())
            .map(|w| w[..1].to_uppercase() + &w[1..].to_lowercase())
            .collect();
        let value = match value {
            Boolean(b) => b as u64,
            Signed(v) => v as u64,
            Unsigned(v) => v,
        };
        let mut seen = self.0.lock().unwrap();
        let variants = seen.enums.entry(enum_name).or_default();
        if !variants.iter().any(|(_, r, _)| *r == rust) {
            variants.push((value, rust.clone(), original.to_string()));
        }
        Some(rust)
    }

    fn add_derives(&self, info: &bindgen::callbacks::DeriveInfo<'_>) -> Vec<String> {
        if info.kind == bindgen::callbacks::TypeKind::Struct {
            let mut seen = self.0.lock().unwrap();
            if !seen.structs.iter().any(|s| s == info.name) {
                seen.structs.push(info.name.to_string());
            }
        }
        Vec::new()
    }
}

/// Generates `$OUT_DIR/kernel_types.rs` from the shared headers: their structs (with
/// aya's `Pod`: any bytes are a value, so ring records and map values may be read as them),
/// their constants, and their enums as Rust enums with `TryFrom<u8>`/`TryFrom<u32>`, which
/// refuse a value the header does not name (`UnknownValue`, defined beside the include).
fn kernel_types(bpf_dir: &Path, out: &Path) -> Result<()> {
    let headers = shared_headers(bpf_dir)?;
    // The headers use the kernel's fixed-width types (linux/types.h): declared here rather
    // than included, so no target's kernel headers are needed. Every shared type is made of
    // them with explicit padding, so its layout is the same on every target.
    let mut wrapper = String::from(
        "typedef unsigned char __u8;\ntypedef unsigned short __u16;\n\
         typedef unsigned int __u32;\ntypedef unsigned long long __u64;\n",
    );
    for h in &headers {
        writeln!(wrapper, "#include \"{h}\"")?;
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let bindings = bindgen::Builder::default()
        .header_contents("tlsprof_shared.h", &wrapper)
        .clang_arg(format!("-I{}", bpf_dir.display()))
        .allowlist_file(format!("{}/.*", regex_escape(&bpf_dir.display().to_string())))
        .rustified_enum(".*")
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .derive_ord(true)
        .parse_callbacks(Box::new(Namer(seen.clone())))
        .generate()
        .map_err(|e| anyhow::anyhow!("bindgen over bpf/*.h: {e} (is libclang installed? run `make deps`)"))?;
    let mut code = bindings.to_string();
    let seen = seen.lock().unwrap();
    for s in &seen.structs {
        writeln!(
            code,
            "// SAFETY: a C struct of fixed-width integers with explicit padding."
        )?;
        writeln!(code, "unsafe impl aya::Pod for {s} {{}}")?;
    }
    for (name, variants) in &seen.enums {
        for int in ["u8", "u32"] {
            writeln!(code, "impl TryFrom<{int}> for {name} {{ type Error = UnknownValue;")?;
            writeln!(
                code,
                "fn try_from(v: {int}) -> Result<Self, UnknownValue> {{ match v as u64 {{"
            )?;
            for (value, rust, _) in variants {
                writeln!(code, "{value} => Ok(Self::{rust}),")?;
            }
            writeln!(
                code,
                "_ => Err(UnknownValue {{ what: \"{name}\", value: v as u64 }}) }} }} }}"
            )?;
        }
    }
    std::fs::write(out.join("kernel_types.rs"), code)?;
    for h in &headers {
        println!("cargo:rerun-if-changed={}", bpf_dir.join(h).display());
    }
    Ok(())
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if "\\.+*?()|[]{}^$".contains(c) {
                vec!['\\', c]
            } else {
                vec![c]
            }
        })
        .collect()
}
