#!/usr/bin/env python3
"""Checks the dependency rules of the GPU backend (docs/ARCHITECTURE.md, "The GPU backend").

Reads every `.rs` file under crates/kiln/src/gpu, resolves the module paths it names (`use` items and
inline paths: `super::x`, `crate::gpu::x`, `self::x`), and fails when
- a file of a lower layer names a higher one: runtime/ names nothing else of gpu/, pointwise/ names
  only runtime/, kit/ (pieces several families share) only runtime/ and pointwise/, a kernel
  family only runtime/, pointwise/, kit/ and itself;
- a folder under gpu/ is neither a layer nor a family listed in FAMILIES (a new family is declared
  here, as docs/ARCHITECTURE.md lists it);
- files import each other in a circle (at file level, tests excluded);
- a file names what stands above the GPU backend: `Storage`, `Tensor` or the `ops` module (the face
  files gpu/mod.rs and gpu/custom.rs, which implement the backend for `Storage`, and the in-crate
  test files excepted; tensor-level test probes live above, in crates/kiln/src/gpu_probes.rs).
The face (gpu/mod.rs, catalog.rs) and the in-crate test files may name every family.
Prints what it checked; exits 1 on a violation.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "kiln", "src")
GPU = os.path.join(ROOT, "gpu")
FACE = {"mod.rs", "ext.rs", "catalog.rs", "tests.rs", "variant_tests.rs"}
LOWER = {"runtime": set(), "pointwise": {"runtime"}, "kit": {"runtime", "pointwise"}}
# The kernel families (one folder each; single-file families: custom.rs).
FAMILIES = {"elementwise", "index", "reduce", "rowwise", "matmul", "matvec", "dequant", "kv", "attention", "fused"}
# Files that may name the layers above gpu/ (see the module docs).
ABOVE_OK = {"mod.rs", "custom.rs", "tests.rs", "variant_tests.rs"}
ABOVE = re.compile(r"(?<![\w:])(Storage|Tensor)\b|\b(?:crate|super)::(?:Storage|Tensor|storage|tensor|ops)\b")

PATH = re.compile(r"\b(super|crate|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(super|crate|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*?)\};", re.S)


def module_of(rel):
    """Module path (list of names under gpu) of a file path relative to gpu/."""
    parts = rel[:-3].split("/")
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    # Raw strings hold WGSL, not paths.
    return re.sub(r'r#"(.*?)"#', '""', text, flags=re.S)


def files():
    out = {}
    for d, _, names in os.walk(GPU):
        for n in names:
            if n.endswith(".rs"):
                rel = os.path.relpath(os.path.join(d, n), GPU).replace(os.sep, "/")
                out[rel] = module_of(rel)
    return out


def resolve(mod, head, tail):
    """The gpu-relative module path a path refers to, or None outside gpu."""
    names = [t for t in tail.split("::") if t]
    if head == "crate":
        return names[1:] if names[:1] == ["gpu"] else None
    base = list(mod) if head == "self" else list(mod[:-1])
    if head == "super" and not mod:
        return None
    while names and names[0] == "super":
        names.pop(0)
        if not base:
            return None
        base = base[:-1]
    return base + names


def targets(rel, mod, text):
    is_dir_mod = rel.endswith("mod.rs")
    out = set()
    body = strip(text)
    # Test modules inside a file may reach anything.
    cut = body.find("#[cfg(test)]\nmod tests")
    if cut >= 0:
        body = body[:cut]
    for m in GROUP.finditer(body):
        for item in m.group(3).split(","):
            item = item.strip().split(" as ")[0].strip()
            if item:
                p = resolve(mod, m.group(1), m.group(2) + "::" + item)
                if p is not None:
                    out.add(tuple(p))
    for m in PATH.finditer(body):
        p = resolve(mod, m.group(1), m.group(2))
        if p is not None:
            out.add(tuple(p))
    # Paths relative to this module through its own submodules (`use plan::Plan`, `coop::run(..)`).
    if is_dir_mod or rel == "mod.rs":
        for child in re.findall(r"^\s*(?:pub(?:\([a-z]+\))? )?mod ([a-z_0-9]+);", body, re.M):
            if re.search(r"(?<![:\w])" + child + r"::", body):
                out.add(tuple(list(mod) + [child]))
    return out


def above(rel, text):
    """What a file names of the layers above gpu/ (outside its test module)."""
    if rel in ABOVE_OK or rel.endswith("/tests.rs"):
        return []
    body = strip(text)
    cut = body.find("#[cfg(test)]\nmod tests")
    if cut >= 0:
        body = body[:cut]
    return sorted({m.group(0) for m in ABOVE.finditer(body)})


def owner(path, mods):
    """The file (gpu-relative) holding the longest prefix of a module path."""
    best = None
    for rel, m in mods.items():
        if tuple(m) == tuple(path[: len(m)]) and (best is None or len(m) > len(mods[best])):
            best = rel
    return best


def main():
    mods = files()
    edges = {}
    bad = []
    for top in sorted({rel.split("/")[0] for rel in mods if "/" in rel} - set(LOWER) - FAMILIES):
        bad.append(f"gpu/{top}/ is neither a layer nor a family listed in FAMILIES")
    for rel, mod in sorted(mods.items()):
        with open(os.path.join(GPU, rel)) as f:
            text = f.read()
        deps = set()
        for t in targets(rel, mod, text):
            o = owner(list(t), mods)
            if o and o != rel:
                deps.add(o)
        edges[rel] = deps
        for name in above(rel, text):
            bad.append(f"{rel} names {name}, which stands above the GPU backend")
        if rel in FACE or rel.endswith("/tests.rs"):
            continue
        mine = mod[0]
        for d in deps:
            top = mods[d][0] if mods[d] else ""
            if top == mine:
                continue
            if d in FACE:
                bad.append(f"{rel} names the face ({d})")
            elif mine in LOWER:
                if top not in LOWER[mine]:
                    bad.append(f"{rel} ({mine}) names {d}: {mine}/ may only use {sorted(LOWER[mine]) or 'itself'}")
            elif top not in LOWER:
                bad.append(f"{rel} (family {mine}) names {d} of family {top}")
    # Circles among files (tests excluded).
    graph = {r: {d for d in ds if not d.endswith("tests.rs")} for r, ds in edges.items() if not r.endswith("tests.rs")}
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            # A module file naming its own submodules is structure, not a dependency back.
            if state.get(d) == 1:
                cyc = stack[stack.index(d):] + [d]
                bad.append("import circle: " + " -> ".join(cyc))
            elif d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    n_edges = sum(len(v) for v in graph.values())
    print(f"check_layers: {len(mods)} files under crates/kiln/src/gpu, {n_edges} file dependencies")
    for b in bad:
        print("  " + b)
    if bad:
        print(f"check_layers: {len(bad)} violation(s)")
        return 1
    print("check_layers: layers respected, no import circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
