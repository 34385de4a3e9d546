//! `--devices` and `--split` of the model commands: one model's layers over several devices
//! (kiln-llm's `Placement`), every mistake reported before a weight loads.

use kiln::{Device, DeviceRequest};
use kiln_llm::Placement;

/// `--devices`: devices in layer order.
#[derive(Debug, Clone)]
pub struct DeviceList(pub Vec<DeviceRequest>);

/// `--split`: layers per device.
#[derive(Debug, Clone)]
pub struct LayerSplit(pub Vec<usize>);

/// `--devices`' parser: comma-separated `cpu`, `gpu` or `gpu:N` (`auto` would pick a device the
/// others may already be).
pub fn parse_devices(s: &str) -> Result<DeviceList, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let r = crate::parse_device(part)?;
        if r == DeviceRequest::Auto {
            return Err(format!("'{}' is not a device of a split: name each one (cpu, gpu or gpu:N)", part.trim()));
        }
        out.push(r);
    }
    Ok(DeviceList(out))
}

/// `--split`'s parser: comma-separated layer counts, each at least 1.
pub fn parse_split(s: &str) -> Result<LayerSplit, String> {
    s.split(',')
        .map(|p| match p.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("'{}' is not a layer count (a whole number >= 1)", p.trim())),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(LayerSplit)
}

/// The devices of `--devices` (else `--device`'s one), opened: an unknown device or one listed twice
/// (also under two spellings, `gpu` and `gpu:0`) is an error.
pub fn open(device: Option<DeviceRequest>, devices: Option<&DeviceList>) -> Result<Vec<Device>, String> {
    let Some(list) = devices else { return Ok(vec![crate::open_device(device)?]) };
    let mut opened: Vec<Device> = Vec::new();
    for req in &list.0 {
        let d = req.open().map_err(|e| format!("cannot open device {req} of --devices: {e}"))?;
        if let Some(j) = opened.iter().position(|o| *o == d) {
            return Err(format!(
                "--devices lists one device twice ({} and {req} are both {d}): name each device once",
                list.0[j]
            ));
        }
        opened.push(d);
    }
    Ok(opened)
}

/// The placement of a model of `num_layers` layers: all on the one device, or `--split`'s counts
/// (else an equal split, which `generate::load` replaces by the split by free memory once the
/// model's size is known) over several.
pub fn placement(devices: Vec<Device>, split: Option<&LayerSplit>, num_layers: usize) -> Result<Placement, String> {
    if devices.len() == 1 && split.is_none() {
        return Ok(Placement::single(&devices[0], num_layers));
    }
    Placement::new(devices, split.map(|s| s.0.as_slice()), num_layers).map_err(|e| format!("--split: {e}"))
}

/// The devices of `p` for messages: `gpu:0 (NAME), gpu:1 (NAME) with 16 + 16 layers`.
pub fn describe(p: &Placement) -> String {
    let names: Vec<String> = p.devices().iter().map(|d| d.to_string()).collect();
    if !p.is_split() {
        return names.join("");
    }
    let counts: Vec<String> = p.counts().iter().map(|c| c.to_string()).collect();
    format!("{} with {} layers", names.join(", "), counts.join(" + "))
}
