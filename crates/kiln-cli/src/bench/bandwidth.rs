//! The machine's memory bandwidth limit, measured with a large parallel copy (what `memcpy` reaches),
//! counted as bytes read plus bytes written per second, best of several runs.

use rayon::prelude::*;
use std::time::Instant;

/// Measured copy bandwidth.
#[derive(Debug, Clone, Copy)]
pub struct CopyBandwidth {
    /// Bytes in the copied buffer (each run reads and writes this many).
    pub buffer_bytes: usize,
    /// Best (shortest) run in seconds.
    pub best_s: f64,
    /// Bytes read + written per second in the best run.
    pub bytes_per_s: f64,
}

/// Copies a buffer of `buffer_bytes` (far larger than the caches) `runs` times after a warm-up and keeps
/// the fastest run. Split in chunks across rayon's threads, so it uses every core like kiln's kernels do.
pub fn measure(buffer_bytes: usize, runs: usize) -> CopyBandwidth {
    let n = (buffer_bytes / 4).max(1);
    let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut dst = vec![0f32; n];
    let chunk = n.div_ceil(rayon::current_num_threads() * 4).max(1 << 14);
    let copy = |dst: &mut [f32]| {
        dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s));
    };
    copy(&mut dst); // warm-up: faults in the destination pages
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let t0 = Instant::now();
        copy(&mut dst);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    let bytes = n * 4;
    CopyBandwidth { buffer_bytes: bytes, best_s: best, bytes_per_s: 2.0 * bytes as f64 / best }
}

#[cfg(test)]
mod tests {
    #[test]
    fn copy_bandwidth_is_positive() {
        let bw = super::measure(1 << 20, 2);
        assert!(bw.bytes_per_s.is_finite() && bw.bytes_per_s > 0.0);
        assert_eq!(bw.buffer_bytes, 1 << 20);
    }
}
