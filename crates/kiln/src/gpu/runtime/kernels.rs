//! The pipeline cache. A kernel is WGSL text made from a `.wgsl` template by substitution (dtype, op,
//! variant, workgroup size); its key is that full specialisation, so each variant compiles once per
//! device. Bind group 0 holds the output (binding 0, read-write) and the inputs (read-only); bind group
//! 1 holds the dispatch's parameters (up to `PARAM_WORDS` words at a dynamic offset in the batch's
//! arena; kiln's kernels declare them as a typed struct, see `params.rs`).

use super::device::Gpu;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// Words of parameters one dispatch may pass.
pub(crate) const PARAM_WORDS: usize = 64;

pub(crate) struct Kernel {
    pub(crate) name: String,
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
}

pub(crate) struct Pipelines {
    cache: RwLock<HashMap<String, Arc<Kernel>>>,
    /// One lock per key being compiled: a second thread that wants the same kernel waits for the
    /// first, while kernels of other keys compile at the same time and cached ones stay readable.
    /// (Compiling under the cache's write lock serialised every thread of a process behind each
    /// driver compile; on NVIDIA that kept the conformance suite from finishing in 7 minutes.)
    building: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    pub(crate) params_layout: wgpu::BindGroupLayout,
}

/// Replaces each `{{NAME}}` in `template` with its value.
pub(crate) fn render(template: &str, subs: &[(&str, &str)]) -> String {
    let mut out = template.to_string();
    for (k, v) in subs {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    debug_assert!(!out.contains("{{"), "unfilled placeholder in kernel:\n{out}");
    out
}

impl Pipelines {
    pub(crate) fn new(device: &wgpu::Device) -> Pipelines {
        let params_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("kiln params"),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: true },
                    has_dynamic_offset: true,
                    min_binding_size: wgpu::BufferSize::new((PARAM_WORDS * 4) as u64),
                },
                count: None,
            }],
        });
        Pipelines { cache: RwLock::new(HashMap::new()), building: Mutex::new(HashMap::new()), params_layout }
    }

    /// The compiled kernel for `key`, building `source()` on a miss. `inputs` is the number of
    /// read-only buffers after the output.
    pub(crate) fn get(
        &self,
        ctx: &Gpu,
        key: &str,
        inputs: usize,
        source: impl FnOnce() -> String,
    ) -> Result<Arc<Kernel>> {
        self.get_with(ctx, key, 1, inputs, source)
    }

    /// [`Self::get`] for a kernel with `outputs` read-write bindings before its inputs.
    pub(crate) fn get_with(
        &self,
        ctx: &Gpu,
        key: &str,
        outputs: usize,
        inputs: usize,
        source: impl FnOnce() -> String,
    ) -> Result<Arc<Kernel>> {
        if let Some(k) = self.cache.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            return Ok(k.clone());
        }
        let slot = self.building.lock().unwrap_or_else(|e| e.into_inner()).entry(key.to_string()).or_default().clone();
        let _building = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = self.cache.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            return Ok(k.clone());
        }
        let kernel = self.compile(ctx, key, outputs, inputs, &source(), "main").map(Arc::new);
        if let Ok(k) = &kernel {
            self.cache.write().unwrap_or_else(|e| e.into_inner()).insert(key.to_string(), k.clone());
        }
        self.building.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
        kernel
    }

    /// Whether a kernel with this key has been compiled.
    #[cfg(test)]
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.cache.read().unwrap_or_else(|e| e.into_inner()).contains_key(key)
    }

    /// Whether the key of a compiled kernel satisfies `f`.
    #[cfg(test)]
    pub(crate) fn any_key(&self, f: impl Fn(&str) -> bool) -> bool {
        self.cache.read().unwrap_or_else(|e| e.into_inner()).keys().any(|k| f(k))
    }

    /// Number of compiled kernels.
    pub(crate) fn len(&self) -> usize {
        self.cache.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// A user kernel, cached by its full source, entry point and binding counts; `check` runs once,
    /// before the first compile (the caller's validation of the source).
    pub(crate) fn get_custom(
        &self,
        ctx: &Gpu,
        src: &str,
        entry: &str,
        (outputs, inputs): (usize, usize),
        check: impl FnOnce() -> Result<()>,
    ) -> Result<Arc<Kernel>> {
        let key = format!("custom:{entry}:{outputs}:{inputs}:{src}");
        if let Some(k) = self.cache.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(k.clone());
        }
        check()?;
        let kernel = Arc::new(self.compile(ctx, &format!("custom:{entry}"), outputs, inputs, src, entry)?);
        self.cache.write().unwrap_or_else(|e| e.into_inner()).insert(key, kernel.clone());
        Ok(kernel)
    }

    /// Compiles `src` with `outputs` read-write bindings followed by `inputs` read-only ones.
    pub(crate) fn compile(
        &self,
        ctx: &Gpu,
        name: &str,
        outputs: usize,
        inputs: usize,
        src: &str,
        entry: &str,
    ) -> Result<Kernel> {
        let device = &ctx.device;
        let entries: Vec<_> = (0..(outputs + inputs) as u32).map(|b| storage_entry(b, b as usize >= outputs)).collect();
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let layout =
            device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(name), entries: &entries });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(name),
            bind_group_layouts: &[Some(&layout), Some(&self.params_layout)],
            immediate_size: 0,
        });
        dump_wgsl(name, src);
        let desc = wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(src.into()) };
        let module = if name.starts_with("custom:") || shader_checks() {
            device.create_shader_module(desc)
        } else {
            // SAFETY: kiln's own kernels index only inside the buffers they are bound to (every
            // access is guarded by the element count or lies in the whole-word tail of a pooled
            // buffer) and their loops are bounded by their parameters; the conformance suite runs
            // them with poisoned outputs. wgpu's injected bounds checks and loop counters cost
            // the inner loops of matmul and attention a large share of their speed. User kernels
            // keep every check. `KILN_SHADER_CHECKS=1` turns the checks back on for debugging.
            unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
        };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(name),
            layout: Some(&pl),
            module: &module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Gpu { op: "compile", msg: format!("kernel {name}: {e}") });
        }
        Ok(Kernel { name: name.to_string(), pipeline, layout })
    }
}

/// With `KILN_DUMP_WGSL=DIR`, every kernel compiled is also written to `DIR/NAME.wgsl` (the name
/// reduced to letters, digits, `.`, `_` and `-`), to read or compile outside kiln the exact code a
/// run used. Failures to write are ignored: this is a debugging aid.
fn dump_wgsl(name: &str, src: &str) {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let Some(dir) = DIR.get_or_init(|| crate::settings::DUMP_WGSL.get_os().map(Into::into)) else { return };
    let file: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    let _ = std::fs::create_dir_all(dir).and_then(|_| std::fs::write(dir.join(format!("{file}.wgsl")), src));
}

/// Whether kiln's kernels keep wgpu's runtime checks (`KILN_SHADER_CHECKS=1`).
fn shader_checks() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::SHADER_CHECKS.is_one())
}

fn storage_entry(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}
