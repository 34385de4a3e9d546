//! Fused groups the backend declines (all of them on the CPU): the group's ops replayed, on the CPU
//! on blocks of rows (about `CHUNK` elements, blocks in parallel), so each intermediate is a
//! cache-sized block instead of a full tensor, and every op runs through the CPU backend's own
//! vectorised kernels (results bit for bit as unfused). Blocks split the first axis of the group's
//! shape, which no fused reduction touches (they reduce the last axis of a rank >= 2 shape).

use super::plan::Group;
use super::trace::{Node, Value};
use crate::{Result, Tensor};
use rayon::prelude::*;

/// Elements per block.
const CHUNK: usize = 32 * 1024;

/// The group's outputs (in `g.outputs` order) from its `leaves`; `chunked`: split into blocks.
pub(crate) fn run(nodes: &[Node], g: &Group, leaves: &[Tensor], chunked: bool) -> Result<Vec<Tensor>> {
    let n: usize = g.shape.iter().product();
    let reduces = g.nodes.iter().any(|&j| matches!(nodes[j].kind, super::trace::Kind::Reduce { .. }));
    let rank = g.shape.len();
    if !chunked || rank == 0 || g.shape[0] < 2 || n <= CHUNK || (rank == 1 && reduces) {
        return replay(nodes, g, leaves);
    }
    let s0 = g.shape[0];
    let per = (CHUNK / (n / s0).max(1)).max(1);
    let blocks: Vec<(usize, usize)> = (0..s0).step_by(per).map(|a| (a, per.min(s0 - a))).collect();
    let parts: Vec<Vec<Tensor>> = blocks
        .par_iter()
        .map(|&(a, len)| {
            let ls = leaves
                .iter()
                .map(|t| if t.rank() == rank && t.dims()[0] == s0 { t.narrow(0, a, len) } else { Ok(t.clone()) })
                .collect::<Result<Vec<_>>>()?;
            replay(nodes, g, &ls)
        })
        .collect::<Result<_>>()?;
    let mut outs = vec![];
    for (k, &j) in g.outputs.iter().enumerate() {
        let want = nodes[j].shape.dims();
        let first = &parts[0][k];
        let narrowed = first.rank() >= 1 && first.dims()[0] == blocks[0].1 && want.first() == Some(&s0);
        let t = if narrowed {
            let all: Vec<&Tensor> = parts.iter().map(|p| &p[k]).collect();
            Tensor::concat(&all, 0)?
        } else {
            first.clone()
        };
        if t.dims() != want {
            // A value the blocks do not split along the first axis as assumed: run whole.
            return replay(nodes, g, leaves);
        }
        outs.push(t);
    }
    Ok(outs)
}

/// The group's ops run one after another on `leaves`.
fn replay(nodes: &[Node], g: &Group, leaves: &[Tensor]) -> Result<Vec<Tensor>> {
    let mut vals: Vec<(usize, Tensor)> = vec![];
    for &j in &g.nodes {
        let n = &nodes[j];
        let ins: Vec<Tensor> = n
            .inputs
            .iter()
            .map(|v| match v {
                Value::Node(k) if g.nodes.contains(k) => {
                    vals.iter().find(|(m, _)| m == k).map(|(_, t)| t.clone()).expect("computed before")
                }
                _ => leaves[g.leaves.iter().position(|l| l == v).expect("a leaf")].clone(),
            })
            .collect();
        vals.push((j, (n.replay)(&ins)?));
    }
    Ok(g.outputs
        .iter()
        .map(|o| vals.iter().find(|(m, _)| m == o).map(|(_, t)| t.clone()).expect("an output"))
        .collect())
}
