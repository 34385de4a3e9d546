//! `kiln::compile`: traces a function over tensors once per signature and runs it as fused kernels.
//!
//! ```
//! use kiln::{DType, Device, Tensor};
//! # fn main() -> kiln::Result<()> {
//! let dev = Device::cpu();
//! let hypot = kiln::compile(|xs: &[Tensor]| Ok(vec![xs[0].square()?.add(&xs[1].square()?)?.sqrt()?]));
//! let a = Tensor::from_vec(vec![3.0f32, 5.0], 2, &dev)?;
//! let b = Tensor::from_vec(vec![4.0f32, 12.0], 2, &dev)?;
//! assert_eq!(hypot.call(&[a, b])?[0].to_vec::<f32>()?, vec![5.0, 13.0]);
//! # Ok(()) }
//! ```
//!
//! How it works (tracing is separate from code generation, as in MLX's `compile` and burn's fusion
//! backend; the grouping resembles tinygrad's scheduler):
//! 1. trace (`trace.rs`): the first call with a new signature (the inputs' shapes and dtypes, and
//!    the device) runs the function eagerly while every op records itself as a node;
//! 2. plan (`plan.rs`): fusable nodes form groups (elementwise chains with broadcasting, optionally
//!    with reductions over the last axis and the row ops after them); everything else runs eagerly
//!    between the groups;
//! 3. run: each group goes to the backend (`ExtOps::fused`): on a GPU one generated WGSL kernel
//!    (`gpu/fused/`), cached by the group's program; where the backend declines (the CPU) the group
//!    is replayed (`replay.rs`), on the CPU chunk by chunk (blocks of rows of about 32K elements, in
//!    parallel), every op of the chunk through the CPU backend's kernels, so intermediates stay in
//!    the cache and results are the eager ones bit for bit.
//!
//! Numbers. On the CPU the fused result equals the eager ops' result bit for bit: every value is
//! rounded to its dtype after its op, as the unfused ops store it (f16/bf16 intermediates are
//! rounded, u8 wraps). On a GPU the fused and the eager result are each within a stated bound of
//! the exact result of the same ops (`tests/conformance/fusion.rs` derives it op by op), but they
//! may differ from each other: a shader compiler may contract a multiply and an add into one fused
//! multiply-add in one kernel and not the other, fused sums add in another order than the unfused
//! reduction, and drivers' exp/tanh differ within their stated accuracy (NVIDIA's fused f16 row gave
//! -1.40533e-2 where eager gave -1.41602e-2). Integer ops and comparisons are exact everywhere.
//!
//! Fallback. What the tracer cannot see (an op without a trace hook, a host readback such as
//! `to_vec` or a Python `if` on a tensor's value) makes the signature run eagerly from then on, with
//! a one-time warning on stderr; the answer is never wrong. Groups the GPU generator cannot handle
//! (i64 values, integer sums, too many inputs, empty shapes) are replayed eagerly.

pub(crate) mod plan;
mod replay;
pub(crate) mod trace;

use crate::storage::Storage;
use crate::{DType, Device, Result, Tensor};
use plan::{Group, Step};
use std::sync::{Arc, Mutex};
use trace::{Node, Value};

type Func = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;
/// A signature: each input's dtype and shape (the device is kept beside it).
type Signature = Vec<(DType, Vec<usize>)>;

/// A compiled function: see [`compile`].
pub struct Compiled {
    f: Arc<Func>,
    cache: Mutex<Vec<(Signature, Device, Arc<Entry>)>>,
}

enum Entry {
    Plan(Plan),
    Eager,
}

struct Plan {
    nodes: Vec<Node>,
    consts: Vec<Tensor>,
    outputs: Vec<Value>,
    steps: Vec<Step>,
    groups: Vec<Group>,
}

/// What [`Compiled::stats`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Signatures traced so far.
    pub traces: usize,
    /// Of those, signatures that run eagerly (the trace could not be replayed).
    pub eager: usize,
    /// Fused groups over all plans.
    pub groups: usize,
    /// Ops replayed eagerly between groups, over all plans.
    pub eager_ops: usize,
    /// Ops inside fused groups, over all plans.
    pub fused_ops: usize,
}

/// Compiles `f`, a function from tensors to tensors: the returned [`Compiled`] traces `f` once per
/// signature (shapes, dtypes, device of the inputs) and runs chains of elementwise ops, with their
/// row reductions, as one kernel each. See the module docs for what fuses, the rules for numbers and
/// the fallback. `f` must be pure: tensors it creates or captures are constants of the trace.
pub fn compile<F>(f: F) -> Compiled
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    Compiled { f: Arc::new(f), cache: Mutex::new(vec![]) }
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Compiled({:?})", self.stats())
    }
}

impl Compiled {
    /// Runs the function on `xs` (tracing it first for a new signature).
    pub fn call(&self, xs: &[Tensor]) -> Result<Vec<Tensor>> {
        if trace::active() {
            // Called while another function is traced: becomes part of that trace.
            return (self.f)(xs);
        }
        let Some(first) = xs.first() else { return (self.f)(xs) };
        for t in &xs[1..] {
            first.same_device("compile", t)?;
        }
        let sig: Signature = xs.iter().map(|t| (t.dtype(), t.dims().to_vec())).collect();
        let hit = {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.iter().find(|(s, d, _)| *s == sig && d == first.device()).map(|(_, _, e)| e.clone())
        };
        let entry = match hit {
            Some(e) => e,
            None => {
                let (entry, eager_out) = self.trace(xs)?;
                let entry = Arc::new(entry);
                self.cache.lock().unwrap_or_else(|e| e.into_inner()).push((sig, first.device().clone(), entry.clone()));
                if let Some(out) = eager_out {
                    return Ok(out);
                }
                entry
            }
        };
        match &*entry {
            Entry::Eager => (self.f)(xs),
            Entry::Plan(p) => p.run(xs),
        }
    }

    /// Traces `f` on `xs`; a trace that cannot be replayed also returns the eager results.
    fn trace(&self, xs: &[Tensor]) -> Result<(Entry, Option<Vec<Tensor>>)> {
        // Fresh tensor objects, so two arguments that are one tensor stay two inputs.
        let fresh: Vec<Tensor> = xs.iter().map(|t| t.with_layout(t.layout().clone())).collect();
        trace::begin(&fresh);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.f)(&fresh)));
        let tr = trace::end(match &r {
            Ok(Ok(o)) => Some(o.as_slice()),
            _ => None,
        });
        let out = match r {
            Ok(r) => r?,
            Err(p) => std::panic::resume_unwind(p),
        };
        if let Some(why) = tr.invalid {
            eprintln!("kiln: compile: running this function eagerly for inputs {}: {why}", describe(xs));
            return Ok((Entry::Eager, Some(out)));
        }
        let (steps, groups) = plan::plan(&tr.nodes, &tr.outputs, xs, &tr.consts)?;
        Ok((Entry::Plan(Plan { nodes: tr.nodes, consts: tr.consts, outputs: tr.outputs, steps, groups }), None))
    }

    /// Counts over the signatures traced so far.
    pub fn stats(&self) -> CompileStats {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = CompileStats { traces: cache.len(), ..Default::default() };
        for (_, _, e) in cache.iter() {
            match &**e {
                Entry::Eager => s.eager += 1,
                Entry::Plan(p) => {
                    s.groups += p.groups.len();
                    s.fused_ops += p.groups.iter().map(|g| g.nodes.len()).sum::<usize>();
                    s.eager_ops += p.steps.iter().filter(|st| matches!(st, Step::Eager(_))).count();
                }
            }
        }
        s
    }
}

fn describe(xs: &[Tensor]) -> String {
    xs.iter().map(|t| format!("{} {}", t.shape(), t.dtype())).collect::<Vec<_>>().join(", ")
}

impl Plan {
    fn run(&self, xs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut env: Vec<Option<Tensor>> = vec![None; self.nodes.len()];
        for step in &self.steps {
            match *step {
                Step::Eager(j) => {
                    let n = &self.nodes[j];
                    let ins: Vec<Tensor> = n.inputs.iter().map(|&v| self.get(v, xs, &env)).collect();
                    env[j] = Some((n.replay)(&ins)?);
                }
                Step::Group(g) => {
                    let g = &self.groups[g];
                    let leaves: Vec<Tensor> = g.leaves.iter().map(|&v| self.get(v, xs, &env)).collect();
                    let outs = self.run_group(g, &leaves)?;
                    for (&j, t) in g.outputs.iter().zip(outs) {
                        env[j] = Some(t);
                    }
                }
            }
        }
        Ok(self.outputs.iter().map(|&v| self.get(v, xs, &env)).collect())
    }

    fn get(&self, v: Value, xs: &[Tensor], env: &[Option<Tensor>]) -> Tensor {
        match v {
            Value::Input(i) => xs[i].clone(),
            Value::Const(i) => self.consts[i].clone(),
            Value::Node(j) => env[j].clone().expect("the plan orders every value before its use"),
        }
    }

    /// The group through the backend (`ExtOps::fused`: one generated kernel on a GPU), else its ops
    /// replayed (`replay.rs`; in blocks of rows on the CPU).
    fn run_group(&self, g: &Group, leaves: &[Tensor]) -> Result<Vec<Tensor>> {
        let Some(dev) = leaves.first().map(|t| t.device().clone()) else {
            return replay::run(&self.nodes, g, leaves, false);
        };
        if !g.gpu_leaves.is_empty() {
            if let Some(outs) = self.run_fused(g, leaves, &dev)? {
                return Ok(outs);
            }
        }
        replay::run(&self.nodes, g, leaves, dev.is_cpu())
    }

    fn run_fused(&self, g: &Group, leaves: &[Tensor], dev: &Device) -> Result<Option<Vec<Tensor>>> {
        let shape = crate::Shape::new(g.shape.clone());
        let used: Vec<&Tensor> = g.gpu_leaves.iter().map(|&i| &leaves[i]).collect();
        let layouts = used.iter().map(|t| t.layout().broadcast_as("compile", &shape)).collect::<Result<Vec<_>>>()?;
        // Read-lock each storage once (two read locks of one RwLock on one thread can deadlock).
        let mut owners: Vec<&Tensor> = vec![];
        let mut which = vec![];
        for &t in &used {
            match owners.iter().position(|o| o.shares_storage_with(t)) {
                Some(i) => which.push(i),
                None => {
                    which.push(owners.len());
                    owners.push(t);
                }
            }
        }
        let guards: Vec<_> = owners.iter().map(|t| t.storage()).collect();
        let views: Vec<_> = which.iter().zip(&layouts).map(|(&w, l)| (&*guards[w], l)).collect();
        let Some(outs) = Storage::fused(g, &views)? else { return Ok(None) };
        drop(guards);
        Ok(Some(
            outs.into_iter()
                .zip(&g.outputs)
                .map(|(s, &j)| Tensor::from_storage(s, self.nodes[j].shape.clone(), dev))
                .collect(),
        ))
    }
}
