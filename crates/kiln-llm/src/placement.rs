//! Which device holds which decoder layers: one device (the usual case), or several in a row, as
//! llama.cpp's `--split-mode layer`. The embedding goes with the first device's layers, the final
//! norm and the LM head with the last's; each layer's KV cache lives with the layer. Between two
//! devices the hidden states `(rows, hidden)` move with `Tensor::to_device` (through host memory:
//! wgpu has no peer-to-peer copies).
//!
//! The split ([`Placement::by_memory`]): GPUs take layers in proportion to the memory they have free
//! (Vulkan's memory budget: wgpu itself reports no memory size), and a CPU in the list takes the
//! layers the GPUs cannot hold; where a device's memory is unknown (Metal, DX12), every device takes
//! the same number of layers. An explicit list of layer counts (`--split 20,12`) sets it.

use crate::model::MemoryEstimate;
use crate::{LlmError, Result};
use kiln::Device;

/// Devices and the layers on each.
#[derive(Clone, Debug)]
pub struct Placement {
    devices: Vec<Device>,
    /// The device index of every layer.
    layer_device: Vec<usize>,
}

impl Placement {
    /// Every layer on `device`.
    pub fn single(device: &Device, num_layers: usize) -> Placement {
        Placement { devices: vec![device.clone()], layer_device: vec![0; num_layers] }
    }

    /// `num_layers` layers over `devices` in order: `counts[i]` on device `i` when given, else the
    /// same number on each (the first devices one more when it does not divide). Every device takes
    /// at least one layer.
    pub fn new(devices: Vec<Device>, counts: Option<&[usize]>, num_layers: usize) -> Result<Placement> {
        let n = devices.len();
        if n == 0 {
            return Err(LlmError::Arg("no device to place the model on".into()));
        }
        let counts: Vec<usize> = match counts {
            Some(c) => {
                if c.len() != n {
                    return Err(LlmError::Arg(format!(
                        "the split lists {} layer counts for {n} devices: give one count per device",
                        c.len()
                    )));
                }
                let sum: usize = c.iter().sum();
                if sum != num_layers {
                    return Err(LlmError::Arg(format!(
                        "the split's layer counts add up to {sum}, but the model has {num_layers} layers"
                    )));
                }
                c.to_vec()
            }
            None => (0..n).map(|i| num_layers / n + usize::from(i < num_layers % n)).collect(),
        };
        if let Some(i) = counts.iter().position(|&c| c == 0) {
            return Err(LlmError::Arg(format!(
                "device {} ({}) would hold no layer: the model has {num_layers} layers for {n} devices",
                i, devices[i]
            )));
        }
        let layer_device = counts.iter().enumerate().flat_map(|(d, &c)| std::iter::repeat_n(d, c)).collect();
        Ok(Placement { devices, layer_device })
    }

    /// `num_layers` layers over `devices` by their memory ([`crate::memory::capacity`]) for a model
    /// of estimate `est`: the GPUs hold as many layers as fit them, in proportion to what each has
    /// free; the CPUs (host memory, slower) take the rest, and at least one layer each. Every device
    /// takes at least one layer. Where a device's memory is unknown, the equal split of
    /// [`Placement::new`].
    pub fn by_memory(devices: Vec<Device>, num_layers: usize, est: &MemoryEstimate) -> Result<Placement> {
        let caps: Option<Vec<u64>> = devices.iter().map(crate::memory::capacity).collect();
        match caps {
            Some(caps) if devices.len() > 1 && num_layers >= devices.len() => {
                let cpu: Vec<bool> = devices.iter().map(Device::is_cpu).collect();
                let counts = memory_counts(&cpu, &caps, num_layers, est.total());
                Placement::new(devices, Some(&counts), num_layers)
            }
            _ => Placement::new(devices, None, num_layers),
        }
    }

    /// The devices, in layer order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Whether the layers are spread over more than one device.
    pub fn is_split(&self) -> bool {
        self.devices.len() > 1
    }

    /// The device of the embedding (and of the first layers).
    pub fn first(&self) -> &Device {
        &self.devices[0]
    }

    /// The device of the final norm and the LM head (and of the last layers).
    pub fn last(&self) -> &Device {
        &self.devices[self.devices.len() - 1]
    }

    /// The index in [`Placement::devices`] of layer `l`'s device.
    pub fn device_index(&self, layer: usize) -> usize {
        self.layer_device.get(layer).copied().unwrap_or(self.devices.len() - 1)
    }

    /// The number of layers on each device.
    pub fn counts(&self) -> Vec<usize> {
        (0..self.devices.len()).map(|d| self.layer_device.iter().filter(|&&x| x == d).count()).collect()
    }

    /// The device of the weight `name` (Hugging Face names): a layer's weights go with the layer,
    /// the embedding table with the first device, everything else (final norm, LM head) with the
    /// last.
    pub fn device_of(&self, name: &str) -> &Device {
        if name.starts_with("model.embed_tokens.") {
            return self.first();
        }
        let layer = name.strip_prefix("model.layers.").and_then(|r| r.split('.').next()?.parse::<usize>().ok());
        match layer {
            Some(l) => &self.devices[self.device_index(l)],
            None => self.last(),
        }
    }

    /// An error (before anything loads) when a device's share cannot fit, by
    /// [`crate::memory::check_fits`]: each device is checked for its layers' fraction of the weights
    /// and of the KV cache (an approximation: the embedding and the LM head are counted as spread over
    /// the layers) and for the largest tensor.
    pub fn check_fits(&self, est: &MemoryEstimate) -> Result<()> {
        if !self.is_split() {
            return crate::memory::check_fits(est, self.first());
        }
        let total = self.layer_device.len().max(1) as u64;
        for (dev, n) in self.devices.iter().zip(self.counts()) {
            let share = MemoryEstimate {
                weight_bytes: est.weight_bytes * n as u64 / total,
                kv_cache_bytes: est.kv_cache_bytes * n as u64 / total,
                largest_tensor_bytes: est.largest_tensor_bytes,
            };
            crate::memory::check_fits(&share, dev).map_err(|e| match e {
                LlmError::Memory(m) => LlmError::Memory(format!("{dev}'s share ({n} layers) cannot fit: {m}")),
                e => e,
            })?;
        }
        Ok(())
    }
}

/// The layer counts of [`Placement::by_memory`] for devices (`cpu[i]`: device i is a CPU) of
/// capacities `caps` (bytes) and a model of `total` bytes over `num_layers` layers (at least one per
/// device).
fn memory_counts(cpu: &[bool], caps: &[u64], num_layers: usize, total: u64) -> Vec<usize> {
    let per_layer = total.div_ceil(num_layers as u64).max(1);
    let cpus = cpu.iter().filter(|&&c| c).count();
    let gpus: Vec<usize> = (0..cpu.len()).filter(|&i| !cpu[i]).collect();
    let fit: Vec<u64> = gpus.iter().map(|&i| caps[i] / per_layer).collect();
    // With a CPU the GPUs take what fits them (leaving a layer per CPU); without, all layers.
    let on_gpus =
        if cpus == 0 { num_layers } else { (fit.iter().sum::<u64>() as usize).clamp(gpus.len(), num_layers - cpus) };
    let weights: Vec<u64> = gpus.iter().map(|&i| caps[i]).collect();
    let mut counts = vec![0; cpu.len()];
    for (&i, c) in gpus.iter().zip(proportional(on_gpus, &weights)) {
        counts[i] = c;
    }
    let cpu_ix: Vec<usize> = (0..cpu.len()).filter(|&i| cpu[i]).collect();
    for (&i, c) in cpu_ix.iter().zip(proportional(num_layers - on_gpus, &vec![1; cpus])) {
        counts[i] = c;
    }
    counts
}

/// `total` split over `weights.len()` parts in proportion to `weights` (largest remainders first),
/// each part at least 1 when `total >= weights.len()`.
fn proportional(total: usize, weights: &[u64]) -> Vec<usize> {
    let n = weights.len();
    if n == 0 {
        return vec![];
    }
    let sum: u128 = weights.iter().map(|&w| w as u128).sum::<u128>().max(1);
    let exact: Vec<u128> = weights.iter().map(|&w| w as u128 * total as u128).collect();
    let mut counts: Vec<usize> = exact.iter().map(|&e| (e / sum) as usize).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(exact[i] % sum));
    let given: usize = counts.iter().sum();
    for &i in order.iter().take(total - given) {
        counts[i] += 1;
    }
    // At least one each: taken from the largest parts.
    while total >= n && counts.contains(&0) {
        let z = counts.iter().position(|&c| c == 0).expect("a zero");
        let big = (0..n).max_by_key(|&i| counts[i]).expect("parts");
        counts[big] -= 1;
        counts[z] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_split_gives_the_remainder_to_the_first_devices() {
        let cpu = Device::cpu();
        let p = Placement::new(vec![cpu.clone(), cpu.clone(), cpu.clone()], None, 8).unwrap();
        assert_eq!(p.counts(), [3, 3, 2]);
        assert_eq!((p.device_index(2), p.device_index(3), p.device_index(7)), (0, 1, 2));
    }

    #[test]
    fn explicit_splits_are_checked() {
        let devs = vec![Device::cpu(), Device::cpu()];
        assert_eq!(Placement::new(devs.clone(), Some(&[3, 1]), 4).unwrap().counts(), [3, 1]);
        let err = |c: &[usize], n| Placement::new(devs.clone(), Some(c), n).unwrap_err().to_string();
        assert!(err(&[3, 2], 4).contains("add up to 5, but the model has 4 layers"), "{}", err(&[3, 2], 4));
        assert!(err(&[4], 4).contains("1 layer counts for 2 devices"));
        assert!(err(&[4, 0], 4).contains("would hold no layer"));
        assert!(Placement::new(devs, None, 1).unwrap_err().to_string().contains("would hold no layer"));
    }

    #[test]
    fn a_share_that_cannot_fit_is_refused() {
        let p = Placement::new(vec![Device::cpu(), Device::cpu()], Some(&[3, 1]), 4).unwrap();
        let est = |bytes: u64| MemoryEstimate { weight_bytes: bytes, kv_cache_bytes: 0, largest_tensor_bytes: 1 };
        p.check_fits(&est(1 << 20)).unwrap();
        let e = p.check_fits(&est(1 << 62)).unwrap_err().to_string();
        assert!(e.contains("cpu's share (3 layers) cannot fit"), "{e}");
    }

    #[test]
    fn layers_follow_free_memory() {
        assert_eq!(proportional(80, &[100, 100]), [40, 40]);
        assert_eq!(proportional(80, &[150, 50]), [60, 20]);
        assert_eq!(proportional(7, &[1, 1, 1]), [3, 2, 2]);
        assert_eq!(proportional(3, &[1000, 1, 1]), [1, 1, 1]);
        assert_eq!(proportional(0, &[1]), [0]);
        // 80 layers of 1 GiB: two GPUs by what they have free.
        let g = 1u64 << 30;
        assert_eq!(memory_counts(&[false, false], &[100 * g, 60 * g], 80, 80 * g), [50, 30]);
        // A CPU takes what the GPU cannot hold (the GPU fits 30 layers), and a GPU that could hold
        // everything still leaves the CPU one layer.
        assert_eq!(memory_counts(&[true, false], &[500 * g, 30 * g], 80, 80 * g), [50, 30]);
        assert_eq!(memory_counts(&[false, true], &[200 * g, 500 * g], 80, 80 * g), [79, 1]);
        // CPUs alone share equally (one host).
        assert_eq!(memory_counts(&[true, true], &[8, 8], 5, 10), [3, 2]);
    }

    #[test]
    fn weights_go_with_their_layers() {
        let p = Placement::new(vec![Device::cpu(), Device::cpu()], Some(&[1, 1]), 2).unwrap();
        let ix = |n: &str| p.devices().iter().position(|d| std::ptr::eq(d, p.device_of(n))).unwrap();
        assert_eq!(ix("model.embed_tokens.weight"), 0);
        assert_eq!(ix("model.layers.0.mlp.up_proj.weight"), 0);
        assert_eq!(ix("model.layers.1.input_layernorm.weight"), 1);
        assert_eq!(ix("model.norm.weight"), 1);
        assert_eq!(ix("lm_head.weight"), 1);
    }
}
