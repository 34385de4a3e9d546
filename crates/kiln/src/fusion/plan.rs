//! The planner: a trace becomes steps, each either one recorded op replayed eagerly (matmul, views,
//! norms, ...) or a fused group. A group is a maximal set of elementwise ops (unary, binary with
//! broadcasting, comparisons, casts, `where`, clamp) evaluated over one iteration shape `S`, plus any
//! number of reductions (sum, max, min) over the last axis of `S` and the ops after them that work
//! on whole rows (a softmax or a norm written with primitives): such a group is a row group.
//!
//! Rules (see `group_nodes`):
//! - every value of a group has a shape that broadcasts to `S`; a value whose last axis is 1 while
//!   `S`'s is not is a row value (computed once per row);
//! - a node joins the groups of its fusable inputs when the shapes agree: groups with reductions keep
//!   their `S`; a group without one may grow into a larger broadcast shape;
//! - a group whose value is read by anything outside it is closed (later nodes cannot join it), so
//!   groups never depend on each other in a circle;
//! - a value needed outside its group (a result of the function, an input of an eager op or of
//!   another group) must have shape `S` (or be a row value of a row group); otherwise the value is
//!   made a boundary (its consumers read it from memory) and the grouping is redone.

use super::trace::{Kind, Node, Value};
use crate::gpu::fused::{Op, Spec, Src, Val};
use crate::op::ReduceOp;
use crate::{DType, Result, Shape, Tensor};
use std::collections::HashSet;

/// A fused group.
pub(crate) struct Group {
    /// Trace nodes, in order.
    pub nodes: Vec<usize>,
    /// The iteration shape.
    pub shape: Vec<usize>,
    /// External values the group reads.
    pub leaves: Vec<Value>,
    /// Nodes whose values leave the group.
    pub outputs: Vec<usize>,
    /// The GPU program (leaves that are one-element constants become literals: `gpu_leaves` maps
    /// the program's leaves to `leaves`).
    pub spec: Spec,
    pub gpu_leaves: Vec<usize>,
    /// Pipeline cache key of the program.
    pub key: String,
    /// The user's ops, for errors.
    pub what: String,
}

pub(crate) enum Step {
    Eager(usize),
    Group(usize),
}

/// Right-aligned NumPy broadcast of two shapes, `None` when they do not broadcast.
fn bc(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    Shape::broadcast("compile", &Shape::new(a.to_vec()), &Shape::new(b.to_vec())).ok().map(|s| s.dims().to_vec())
}

fn fusable(n: &Node, shape_of: &dyn Fn(Value) -> Vec<usize>) -> bool {
    match &n.kind {
        Kind::Unary(_) | Kind::Binary(_) | Kind::Cmp(_) | Kind::Where | Kind::Cast => true,
        Kind::Reduce { op, axes, .. } => {
            let r = shape_of(n.inputs[0]).len();
            matches!(op, ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min) && r >= 1 && axes.as_slice() == [r - 1]
        }
        Kind::Other => false,
    }
}

struct G {
    nodes: Vec<usize>,
    shape: Vec<usize>,
    reduce: bool,
    open: bool,
}

/// Whether node `j` of group shape `s` (with reductions: `reduce`) is a row value.
fn is_row(n: &Node, s: &[usize], reduce: bool) -> bool {
    if !reduce {
        return false;
    }
    if matches!(n.kind, Kind::Reduce { .. }) {
        return true;
    }
    let last = *s.last().unwrap_or(&1);
    last > 1 && n.shape.dims().last().is_none_or(|&d| d == 1)
}

/// Assigns fusable nodes to groups (see the module docs).
fn group_nodes(
    nodes: &[Node],
    outputs: &[Value],
    shape_of: &dyn Fn(Value) -> Vec<usize>,
) -> (Vec<Option<usize>>, Vec<G>) {
    let mut boundary: HashSet<usize> = HashSet::new();
    for (i, n) in nodes.iter().enumerate() {
        if matches!(n.kind, Kind::Reduce { keepdim: false, .. }) {
            boundary.insert(i);
        }
    }
    loop {
        let mut groups: Vec<G> = vec![];
        let mut gof: Vec<Option<usize>> = vec![None; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            let ins: Vec<(usize, usize)> = n
                .inputs
                .iter()
                .filter_map(|v| match v {
                    Value::Node(j) => gof[*j].map(|g| (*j, g)),
                    _ => None,
                })
                .collect();
            if !fusable(n, shape_of) {
                for &(_, g) in &ins {
                    groups[g].open = false;
                }
                continue;
            }
            let red = matches!(n.kind, Kind::Reduce { .. });
            let own = if red { shape_of(n.inputs[0]) } else { n.shape.dims().to_vec() };
            // Candidates that fit with this node alone.
            let mut cands: Vec<usize> = vec![];
            for &(j, g) in &ins {
                if cands.contains(&g) {
                    continue;
                }
                let gr = &groups[g];
                let ok = gr.open
                    && !boundary.contains(&j)
                    && match bc(&gr.shape, &own) {
                        None => false,
                        Some(m) if red => gr.shape == own && m == own,
                        Some(m) => m == gr.shape || (!gr.reduce && m == own),
                    };
                if ok {
                    cands.push(g);
                }
            }
            // The merged shape, and the candidates consistent with it.
            let mut s = own.clone();
            for &g in &cands {
                s = bc(&s, &groups[g].shape).unwrap_or(s);
            }
            if red && s != own {
                cands.clear();
                s = own.clone();
            }
            let fits = |g: &G| if g.reduce { g.shape == s } else { bc(&g.shape, &s).as_deref() == Some(&s[..]) };
            cands.retain(|&g| fits(&groups[g]));
            for &(_, g) in &ins {
                if !cands.contains(&g) {
                    groups[g].open = false;
                }
            }
            let target = match cands.first() {
                None => {
                    groups.push(G { nodes: vec![], shape: s.clone(), reduce: false, open: true });
                    groups.len() - 1
                }
                Some(&t) => t,
            };
            for &g in cands.iter().skip(1) {
                let moved = std::mem::take(&mut groups[g].nodes);
                for &m in &moved {
                    gof[m] = Some(target);
                }
                groups[target].nodes.extend(moved);
                groups[target].reduce |= groups[g].reduce;
                groups[g].open = false;
            }
            groups[target].nodes.push(i);
            groups[target].nodes.sort_unstable();
            groups[target].shape = s;
            groups[target].reduce |= red;
            gof[i] = Some(target);
        }
        // Values leaving their group must have the group's shape (or be row values).
        let mut bad = vec![];
        for (i, n) in nodes.iter().enumerate() {
            let Some(g) = gof[i] else { continue };
            let gr = &groups[g];
            let leaves = outputs.contains(&Value::Node(i))
                || nodes.iter().enumerate().any(|(k, m)| gof[k] != Some(g) && m.inputs.contains(&Value::Node(i)));
            if !leaves {
                continue;
            }
            let rows: usize = gr.shape[..gr.shape.len().saturating_sub(1)].iter().product();
            let ok = n.shape.dims() == gr.shape.as_slice()
                || (is_row(n, &gr.shape, gr.reduce) && n.shape.elem_count() == rows);
            if !ok && !boundary.contains(&i) {
                bad.push(i);
            }
        }
        if bad.is_empty() {
            return (gof, groups);
        }
        boundary.extend(bad);
    }
}

/// The steps of a trace and its groups. `consts` are the trace's constants (one-element ones become
/// literals of the GPU programs).
pub(crate) fn plan(
    nodes: &[Node],
    outputs: &[Value],
    inputs: &[Tensor],
    consts: &[Tensor],
) -> Result<(Vec<Step>, Vec<Group>)> {
    let shape_of = |v: Value| -> Vec<usize> {
        match v {
            Value::Input(i) => inputs[i].dims().to_vec(),
            Value::Const(i) => consts[i].dims().to_vec(),
            Value::Node(j) => nodes[j].shape.dims().to_vec(),
        }
    };
    let dtype_of = |v: Value| -> DType {
        match v {
            Value::Input(i) => inputs[i].dtype(),
            Value::Const(i) => consts[i].dtype(),
            Value::Node(j) => nodes[j].dtype,
        }
    };
    let (gof, raw) = group_nodes(nodes, outputs, &shape_of);
    let mut groups = vec![];
    let mut index = vec![usize::MAX; raw.len()];
    for (gi, g) in raw.iter().enumerate() {
        if g.nodes.is_empty() {
            continue;
        }
        index[gi] = groups.len();
        let members: HashSet<usize> = g.nodes.iter().copied().collect();
        let mut leaves: Vec<Value> = vec![];
        for &j in &g.nodes {
            for &v in &nodes[j].inputs {
                let inside = matches!(v, Value::Node(k) if members.contains(&k));
                if !inside && !leaves.contains(&v) {
                    leaves.push(v);
                }
            }
        }
        let outs: Vec<usize> = g
            .nodes
            .iter()
            .copied()
            .filter(|&j| {
                outputs.contains(&Value::Node(j))
                    || nodes
                        .iter()
                        .enumerate()
                        .any(|(k, m)| !members.contains(&k) && m.inputs.contains(&Value::Node(j)))
            })
            .collect();
        // The GPU program.
        let mut gpu_leaves = vec![];
        let mut lit = vec![None; leaves.len()];
        for (li, &v) in leaves.iter().enumerate() {
            if let Value::Const(c) = v {
                let t = &consts[c];
                if t.elem_count() == 1 && t.dtype() != DType::I64 {
                    lit[li] = Some((t.to_f64_vec()?[0], t.dtype()));
                    continue;
                }
            }
            gpu_leaves.push(li);
        }
        let src = |v: Value, pos: &dyn Fn(usize) -> usize| -> Src {
            if let Value::Node(k) = v {
                if members.contains(&k) {
                    return Src::Val(pos(k));
                }
            }
            let li = leaves.iter().position(|&l| l == v).expect("a leaf");
            match lit[li] {
                Some((x, d)) => Src::Lit(x, d),
                None => Src::Leaf(gpu_leaves.iter().position(|&p| p == li).expect("a GPU leaf")),
            }
        };
        let pos = |k: usize| g.nodes.iter().position(|&m| m == k).expect("a member");
        let mut vals = vec![];
        for &j in &g.nodes {
            let n = &nodes[j];
            let args: Vec<Src> = n.inputs.iter().map(|&v| src(v, &pos)).collect();
            let op = match &n.kind {
                Kind::Unary(op) => Op::Unary(*op),
                Kind::Binary(op) => Op::Binary(*op),
                Kind::Cmp(op) => Op::Cmp(*op, dtype_of(n.inputs[0]).promote(dtype_of(n.inputs[1]))),
                Kind::Where => Op::Where,
                Kind::Cast => Op::Cast,
                Kind::Reduce { op, .. } => Op::Reduce(*op),
                Kind::Other => unreachable!("only fusable nodes are grouped"),
            };
            vals.push(Val { op, args, dtype: n.dtype, row: is_row(n, &g.shape, g.reduce) });
        }
        let spec = Spec {
            vals,
            leaves: gpu_leaves.iter().map(|&li| dtype_of(leaves[li])).collect(),
            outputs: outs.iter().map(|&j| pos(j)).collect(),
        };
        let key = format!("{spec:?}");
        let what = g
            .nodes
            .iter()
            .map(|&j| format!("{} {} {}", nodes[j].name, nodes[j].shape, nodes[j].dtype))
            .collect::<Vec<_>>()
            .join(", ");
        groups.push(Group {
            nodes: g.nodes.clone(),
            shape: g.shape.clone(),
            leaves,
            outputs: outs,
            spec,
            gpu_leaves,
            key,
            what: format!("[{what}]"),
        });
    }
    // A group runs where its last node was recorded; eager nodes where they were.
    let mut steps = vec![];
    for (i, _) in nodes.iter().enumerate() {
        match gof[i] {
            None => steps.push(Step::Eager(i)),
            Some(g) => {
                let gi = index[g];
                if groups[gi].nodes.last() == Some(&i) {
                    steps.push(Step::Group(gi));
                }
            }
        }
    }
    Ok((steps, groups))
}
