//! Flame graphs (`tlsprof flamegraph`): samples folded into stacks, rendered as SVG with
//! TLS frames in red.
use std::collections::{HashMap, HashSet};

use super::{
    classify::user_frames,
    symbols::{KClass, Kallsyms, Mapping},
};
use crate::bpf::cpu as pc;

/// Distinct stacks collected at most (each a line of up to 113 frames: ~1-4 KiB). Beyond,
/// a new stack's samples go to the one stack `[other stacks]`, counted by the owner:
/// tlsprof_table_full_total{table="flame_stacks"}.
pub const MAX_FLAME_STACKS: usize = 20_000;
/// Where the samples of stacks beyond MAX_FLAME_STACKS go.
const OTHER_STACKS: &str = "[other stacks]";

/// Flame graph stacks being collected (`tlsprof flamegraph`).
#[derive(Default)]
pub struct Folded {
    pub stacks: HashMap<String, u64>,
    /// Frame names that are TLS code, to highlight (of the stacks kept).
    pub tls_frames: HashSet<String>,
    /// Samples of new stacks sent to OTHER_STACKS, not exported yet.
    pub dropped: u64,
}

fn frame_name(addr: u64, m: Option<&Mapping>, leaf: bool) -> (String, bool) {
    let Some(m) = m else { return ("[unknown]".into(), false) };
    let Some(f) = &m.file else {
        return (if m.anon { "[jit]".into() } else { "[unknown]".into() }, false);
    };
    // a return address may be the first byte after a call that ends its function
    let va = m.vaddr(if leaf { addr } else { addr.saturating_sub(1) });
    let tls = va.is_some_and(|v| f.is_tls(v));
    match va.and_then(|v| f.name(v)) {
        Some(n) => (n.to_string(), tls),
        None => (format!("{} (no symbols)", f.base), tls),
    }
}

/// Adds a sample to the flame graph: process name, `[handshake]` for samples inside a
/// handshake call, `[stack cut]` where the user stack could not be followed further, the
/// user frames outermost first, then kernel frames (suffixed `_[k]`).
pub fn fold(out: &mut Folded, s: &pc::cpu_sample, comm: &str, maps: &[Mapping], ks: Option<&Kallsyms>) {
    let mut parts: Vec<String> = vec![comm.to_string()];
    let mut tls_frames = Vec::new();
    if s.flags & pc::CPU_SAMPLE_HANDSHAKE != 0 {
        parts.push("[handshake]".into());
    }
    let (frames, cut) = user_frames(s, maps);
    if cut {
        parts.push("[stack cut]".into());
    }
    for (i, (addr, m)) in frames.iter().enumerate().rev() {
        let (name, tls) = frame_name(*addr, *m, i == 0);
        if tls {
            tls_frames.push(name.clone());
        }
        parts.push(name);
    }
    for addr in s.kernel_frames().iter().rev() {
        let name = ks
            .and_then(|k| k.name(*addr))
            .map_or_else(|| "[kernel]".to_string(), str::to_string);
        if ks.is_some_and(|k| k.class(*addr) == KClass::Ktls) {
            tls_frames.push(format!("{name}_[k]"));
        }
        parts.push(format!("{name}_[k]"));
    }
    let line = parts.iter().map(|p| p.replace(';', ":")).collect::<Vec<_>>().join(";");
    add_stack(out, line, tls_frames);
}

/// One sample of a stack (its line) and its TLS frames, within MAX_FLAME_STACKS.
fn add_stack(out: &mut Folded, line: String, tls_frames: Vec<String>) {
    if let Some(n) = out.stacks.get_mut(&line) {
        *n += 1;
        return;
    }
    if out.stacks.len() >= MAX_FLAME_STACKS {
        out.dropped += 1;
        *out.stacks.entry(OTHER_STACKS.to_string()).or_default() += 1;
        return;
    }
    out.tls_frames.extend(tls_frames);
    out.stacks.insert(line, 1);
}

/// Writes the collected stacks as an SVG flame graph, TLS frames in red, the rest in blue.
pub fn render(folded: &Folded, title: &str, out: impl std::io::Write) -> std::io::Result<()> {
    use inferno::flamegraph::{
        color::{BasicPalette, Color, PaletteMap},
        FuncFrameAttrsMap, Options, Palette,
    };
    let mut palette = PaletteMap::default();
    let mut attrs = String::new();
    for f in &folded.tls_frames {
        palette.insert(f, Color { r: 220, g: 50, b: 40 });
        attrs.push_str(&format!("{f}\tclass=tls\n"));
    }
    let mut opt = Options::default();
    opt.colors = Palette::Basic(BasicPalette::Aqua);
    opt.palette_map = Some(&mut palette);
    opt.func_frameattrs = FuncFrameAttrsMap::from_reader(attrs.as_bytes())?;
    opt.title = title.to_string();
    opt.subtitle = Some("red: TLS library code and kernel TLS; [handshake]: inside a TLS handshake call".into());
    opt.count_name = "samples".into();
    let mut lines: Vec<String> = folded.stacks.iter().map(|(k, v)| format!("{k} {v}")).collect();
    lines.sort();
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_bounded() {
        let mut f = Folded::default();
        for i in 0..MAX_FLAME_STACKS + 10 {
            add_stack(&mut f, format!("nginx;f{i}"), vec![format!("f{i}")]);
        }
        add_stack(&mut f, "nginx;f0".into(), Vec::new());
        // the cap, and one more line for the rest
        assert_eq!(f.stacks.len(), MAX_FLAME_STACKS + 1);
        assert_eq!((f.stacks[OTHER_STACKS], f.dropped, f.stacks["nginx;f0"]), (10, 10, 2));
        assert_eq!(f.tls_frames.len(), MAX_FLAME_STACKS);
    }
}
