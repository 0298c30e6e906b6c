//! Where the time of `Communicator::new` goes ([`SetupTimes`]): one
//! duration per phase (the rendezvous's request exchange, topology, kernel
//! load split into unpack, load and resolve, the verdicts, symmetric
//! memory, NCCL), recorded on every construction, so that a slow start
//! (on a fresh machine, the driver JIT compiling the PTX can take close to
//! a minute) shows which phase took the time.

use std::fmt;
use std::time::{Duration, Instant};

/// The phases of one communicator's construction, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SetupTimes {
    phases: Vec<(&'static str, Duration)>,
    kernel_image: Option<String>,
}

impl SetupTimes {
    /// Every phase with its duration, in the order they ran.
    pub fn phases(&self) -> &[(&'static str, Duration)] {
        &self.phases
    }

    /// The duration of `phase`, if it ran.
    pub fn phase(&self, phase: &str) -> Option<Duration> {
        self.phases
            .iter()
            .find(|(name, _)| *name == phase)
            .map(|(_, d)| *d)
    }

    /// The sum of the phases.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|(_, d)| *d).sum()
    }

    /// The kernel image the communicator loaded (`cubin sm_90`,
    /// `ptx sm_90`), if it loaded kernels during set-up.
    pub fn kernel_image(&self) -> Option<&str> {
        self.kernel_image.as_deref()
    }

    pub(crate) fn record(&mut self, phase: &'static str, duration: Duration) {
        self.phases.push((phase, duration));
    }

    /// Records the time since `*since` as `phase` and restarts `*since`.
    pub(crate) fn lap(&mut self, phase: &'static str, since: &mut Instant) {
        let now = Instant::now();
        self.record(phase, now.saturating_duration_since(*since));
        *since = now;
    }

    pub(crate) fn set_kernel_image(&mut self, image: &str) {
        self.kernel_image = Some(image.to_owned());
    }
}

impl fmt::Display for SetupTimes {
    /// `total 812.4 ms: requests 3.1 ms, topology 40.2 ms, ... (kernels:
    /// cubin sm_90)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(f, "total {:.1} ms:", ms(self.total()))?;
        for (i, (name, d)) in self.phases.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}{name} {:.1} ms", ms(*d))?;
        }
        if let Some(image) = &self.kernel_image {
            write!(f, " (kernels: {image})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_sum_and_print_in_order() {
        let mut t = SetupTimes::default();
        t.record("requests", Duration::from_millis(3));
        t.record("nccl", Duration::from_micros(1500));
        t.set_kernel_image("cubin sm_90");
        assert_eq!(t.total(), Duration::from_micros(4500));
        assert_eq!(t.phase("nccl"), Some(Duration::from_micros(1500)));
        assert_eq!(t.phase("kernels"), None);
        assert_eq!(
            t.to_string(),
            "total 4.5 ms: requests 3.0 ms, nccl 1.5 ms (kernels: cubin sm_90)"
        );
        let mut since = Instant::now();
        t.lap("lap", &mut since);
        assert_eq!(t.phases().len(), 3);
    }
}
