//! The tracer: while `kiln::compile` runs a function for the first time with a new signature, every
//! hooked op (one line at the top of its public function: [`hook`]) runs as usual and is recorded as
//! a node with its inputs, its result's shape and dtype, and a closure that replays it. Only the
//! outermost op is recorded (ops built from other ops nest), so composite ops either appear as one
//! node (softmax, matmul) or decompose into the primitives they call (mean = cast, sum, div).
//!
//! Anything the tracer cannot see makes the trace invalid instead of wrong: a tensor that depends
//! on the inputs being read by an unhooked op or read back to the host (both go through
//! `Tensor::storage`, which calls [`touch`]) or viewed by an unhooked view (`Tensor::with_layout`).
//! Tensors that do not depend on the inputs (captured weights, scalars made inside the function)
//! are constants of the trace.

use crate::{DType, Result, Shape, Tensor};
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

/// Replays one recorded op on new inputs (eager execution).
pub(crate) type Replay = Arc<dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync>;

/// What a recorded op is, as far as fusion cares.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Unary(crate::op::UnaryOp),
    Binary(crate::op::BinaryOp),
    Cmp(crate::op::CmpOp),
    /// `where_(mask, on_true, on_false)`.
    Where,
    /// `to_dtype`, and `contiguous` (a cast to the same dtype).
    Cast,
    /// A reduction over sorted axes.
    Reduce {
        op: crate::op::ReduceOp,
        axes: Vec<usize>,
        keepdim: bool,
    },
    /// Anything else (matmul, views, norms, ...): replayed eagerly between fused groups.
    Other,
}

/// Where a value of the trace comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Value {
    Input(usize),
    Const(usize),
    Node(usize),
}

/// One recorded op.
#[derive(Clone)]
pub(crate) struct Node {
    pub kind: Kind,
    /// The user-facing op name (errors and warnings name it).
    pub name: &'static str,
    pub inputs: Vec<Value>,
    pub dtype: DType,
    pub shape: Shape,
    pub replay: Replay,
}

/// A finished trace.
pub(crate) struct Trace {
    pub nodes: Vec<Node>,
    pub consts: Vec<Tensor>,
    pub outputs: Vec<Value>,
    /// Why the trace cannot be replayed (then the function runs eagerly).
    pub invalid: Option<String>,
}

struct Recorder {
    values: HashMap<usize, Value>,
    /// Keeps every recorded tensor object's allocation alive (weakly), so addresses stay unique.
    keep: Vec<Box<dyn Any + Send + Sync>>,
    nodes: Vec<Node>,
    consts: Vec<Tensor>,
    invalid: Option<String>,
}

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static REC: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// Whether this thread is tracing (a compiled function called inside another one's trace runs its
/// function inline instead of tracing it separately).
pub(crate) fn active() -> bool {
    ACTIVE.get()
}

/// Starts a trace whose inputs are `inputs` (fresh tensor objects, one per argument).
pub(crate) fn begin(inputs: &[Tensor]) {
    let mut rec = Recorder { values: HashMap::new(), keep: vec![], nodes: vec![], consts: vec![], invalid: None };
    for (i, t) in inputs.iter().enumerate() {
        let (key, weak) = t.trace_id();
        rec.values.insert(key, Value::Input(i));
        rec.keep.push(weak);
    }
    REC.with(|r| *r.borrow_mut() = Some(rec));
    DEPTH.set(0);
    ACTIVE.set(true);
}

/// Ends the trace; `outputs` are the function's results (`None` when it failed).
pub(crate) fn end(outputs: Option<&[Tensor]>) -> Trace {
    ACTIVE.set(false);
    DEPTH.set(0);
    let mut rec = REC.with(|r| r.borrow_mut().take()).expect("a trace was begun");
    let outputs = outputs
        .unwrap_or(&[])
        .iter()
        .map(|t| {
            let (key, _) = t.trace_id();
            match rec.values.get(&key) {
                Some(v) => *v,
                None => {
                    // A tensor made from nothing the tracer saw: a constant, unless the trace is
                    // already invalid (then it may depend on the inputs, but it is not replayed).
                    rec.consts.push(t.clone());
                    Value::Const(rec.consts.len() - 1)
                }
            }
        })
        .collect();
    Trace { nodes: rec.nodes, consts: rec.consts, outputs, invalid: rec.invalid }
}

/// Resets the depth if an op panics while recorded.
struct Depth;
impl Drop for Depth {
    fn drop(&mut self) {
        DEPTH.set(DEPTH.get().saturating_sub(1));
    }
}

/// The hook at the top of a traced op. Not tracing (or inside another recorded op): `None`, and the
/// op runs its own body. Tracing: runs `replay` (which calls the op again, now nested), records the
/// result and returns it.
pub(crate) fn hook(
    kind: impl FnOnce() -> Kind,
    name: &'static str,
    inputs: &[&Tensor],
    replay: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
) -> Option<Result<Tensor>> {
    if !ACTIVE.get() || DEPTH.get() > 0 {
        return None;
    }
    let owned: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
    DEPTH.set(DEPTH.get() + 1);
    let guard = Depth;
    let r = replay(&owned);
    drop(guard);
    if let Ok(out) = &r {
        let replay: Replay = Arc::new(replay);
        REC.with(|rec| {
            if let Some(rec) = rec.borrow_mut().as_mut() {
                rec.record(kind(), name, &owned, out, replay);
            }
        });
    }
    Some(r)
}

/// Called where a tensor's storage is read or re-viewed outside a recorded op: when `t` depends on
/// the trace's inputs, the trace cannot capture what happens to it.
pub(crate) fn touch(t: &Tensor, what: &'static str) {
    if !ACTIVE.get() || DEPTH.get() > 0 {
        return;
    }
    REC.with(|rec| {
        if let Ok(mut rec) = rec.try_borrow_mut() {
            if let Some(rec) = rec.as_mut() {
                let (key, _) = t.trace_id();
                if matches!(rec.values.get(&key), Some(Value::Input(_) | Value::Node(_))) && rec.invalid.is_none() {
                    rec.invalid = Some(format!(
                        "a traced tensor of shape {} ({}) was {what} outside the ops kiln.compile traces \
                         (an untraced op, a host readback or data-dependent control flow)",
                        t.shape(),
                        t.dtype()
                    ));
                }
            }
        }
    });
}

impl Recorder {
    fn record(&mut self, kind: Kind, name: &'static str, inputs: &[Tensor], out: &Tensor, replay: Replay) {
        let (key, weak) = out.trace_id();
        if self.values.contains_key(&key) {
            // The op returned one of its inputs (a cast to the same dtype, an identity view).
            return;
        }
        let mut values = Vec::with_capacity(inputs.len());
        for t in inputs {
            let (k, w) = t.trace_id();
            let v = match self.values.get(&k) {
                Some(v) => *v,
                None => {
                    self.consts.push(t.clone());
                    let v = Value::Const(self.consts.len() - 1);
                    self.values.insert(k, v);
                    self.keep.push(w);
                    v
                }
            };
            values.push(v);
        }
        if values.iter().all(|v| matches!(v, Value::Const(_))) {
            // Depends on no input: its result is a constant of the trace when used.
            return;
        }
        self.nodes.push(Node { kind, name, inputs: values, dtype: out.dtype(), shape: out.shape().clone(), replay });
        self.values.insert(key, Value::Node(self.nodes.len() - 1));
        self.keep.push(weak);
    }
}
