//! Which device holds which decoder layers: one device (the usual case), or several in a row, as
//! llama.cpp's `--split-mode layer`. The embedding goes with the first device's layers, the final
//! norm and the LM head with the last's; each layer's KV cache lives with the layer. Between two
//! devices the hidden states `(rows, hidden)` move with `Tensor::to_device` (through host memory:
//! wgpu has no peer-to-peer copies).
//!
//! The split: wgpu reports no memory size for a discrete GPU, so by default every device takes the
//! same number of layers (the first ones one more when the count does not divide); an explicit list
//! of layer counts (`--split 20,12`) sets it.

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
