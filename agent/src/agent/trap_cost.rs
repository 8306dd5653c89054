//! What a process's handshake probes cost it, as it pays it. The calibration (bpf/calib.rs)
//! times traps warm, in a loop of the agent's own, and charges a fixed multiple of that; a
//! server pays more or less, as its caches and the host's mood go (1.5 to 3 times the warm
//! figure in nginx's worker on this VM, over one day). The process's own samples say what
//! it paid: those taken in uprobe trap frames, split into time like all its samples
//! (cpu/profiler.rs). Once they are enough to say it, each window of them scales what the
//! calibration charges. The trap's program is not in them (cpu/classify.rs `in_trap`):
//! the programs time themselves, exactly, besides.
use crate::cpu::TrapTime;

/// Trap samples a window needs before it scales the charge: ±1/√10, about a third, for one
/// window, and each window's figure is averaged with the last.
pub const MIN_SAMPLES: u64 = 10;
/// How far the samples may move the calibration's charge, either way: below the warm trap
/// a hit cannot cost, and far above it a window's samples are more likely something else.
pub const SCALE_RANGE: (f64, f64) = (0.5, 4.0);

/// One process's scale of the calibrated charge by its samples.
#[derive(Debug, Clone, Default)]
pub struct TrapCost {
    /// The samples when the window being measured began.
    base: Option<TrapTime>,
    /// What the calibration charged since then.
    charged: f64,
    /// Charged per calibrated second, once a window is measured (1 until then).
    scale: Option<f64>,
}

impl TrapCost {
    /// What `calibrated` seconds of probe hits cost the process, given its trap samples so
    /// far (`sampled`; None where CPU attribution is off or the process is not sampled).
    pub fn charge(&mut self, calibrated: f64, sampled: Option<TrapTime>) -> f64 {
        if let Some(now) = sampled {
            let base = *self.base.get_or_insert(now);
            self.charged += calibrated;
            let n = now.samples.saturating_sub(base.samples);
            if n >= MIN_SAMPLES && self.charged > 0.0 {
                let window = (now.seconds - base.seconds) / self.charged;
                let s = self.scale.map_or(window, |last| (last + window) / 2.0);
                let s = s.clamp(SCALE_RANGE.0, SCALE_RANGE.1);
                log::debug!("budget: traps took {window:.2} x the calibration in {n} samples: charged at {s:.2} x");
                self.scale = Some(s);
                self.base = Some(now);
                self.charged = 0.0;
            }
        }
        calibrated * self.scale()
    }

    /// The scale now (1 until the samples said otherwise).
    pub fn scale(&self) -> f64 {
        self.scale.unwrap_or(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(samples: u64, seconds: f64) -> Option<TrapTime> {
        Some(TrapTime { samples, seconds })
    }

    #[test]
    fn calibration_until_enough_samples_then_their_measure() {
        let mut c = TrapCost::default();
        assert_eq!(c.charge(0.001, t(0, 0.0)), 0.001);
        // 9 samples: not enough yet, whatever they say
        assert_eq!(c.charge(0.001, t(9, 0.009)), 0.001);
        // 10 samples for 0.009 s against 0.003 s charged since the first: three times
        assert!((c.charge(0.001, t(10, 0.009)) - 0.003).abs() < 1e-12);
        assert!((c.scale() - 3.0).abs() < 1e-9);
        // the next window: 1.0 alone, averaged with the last
        c.charge(0.004, t(15, 0.011));
        c.charge(0.0, t(20, 0.013));
        assert!((c.scale() - 2.0).abs() < 1e-9, "{}", c.scale());
    }

    #[test]
    fn without_samples_the_calibration_stands() {
        let mut c = TrapCost::default();
        for _ in 0..100 {
            assert_eq!(c.charge(0.001, None), 0.001);
        }
        // sampling without a trap in the samples (no kernel symbols): nothing measured
        for _ in 0..100 {
            assert_eq!(c.charge(0.001, t(0, 0.0)), 0.001);
        }
    }

    #[test]
    fn the_scale_stays_in_its_range() {
        let mut c = TrapCost::default();
        c.charge(0.001, t(0, 0.0));
        c.charge(0.0, t(50, 1.0));
        assert_eq!(c.scale(), SCALE_RANGE.1);
        let mut c = TrapCost::default();
        c.charge(1.0, t(0, 0.0));
        c.charge(0.0, t(50, 0.001));
        assert_eq!(c.scale(), SCALE_RANGE.0);
    }
}
