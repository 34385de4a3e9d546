#!/usr/bin/env python3
"""Checks that comments and docs name files that exist.

Reads the comments of every tracked source file (`//` and `/* */` in Rust and WGSL, `#` comments and
docstrings in Python, `#` comments in shell scripts and TOML) and the whole text of every Markdown
file, finds each file name with a `.rs`, `.wgsl`, `.py`, `.sh` or `.md` extension (`unary.rs`,
`gpu/attention/decode.wgsl`, `docs/ARCHITECTURE.md`), and fails when no tracked file has that name:
a bare name must be some file's name, a path must be the end of some file's path (relative to the
repository, to the naming file's folder, or to any folder, as `cpu/unary.rs` names
`crates/kiln/src/cpu/unary.rs`). Placeholders (`NAME.wgsl`, `*.rs`, `<shape>.py`) and URLs are
skipped, and so are the names of other projects' files listed in ELSEWHERE (and the files about another
project's tree, in FOREIGN), and paths that leave the repository (`../../../shared/...`). Prints one
line per stale name (`file:line: name`) and the totals; exits 1 when there is one.

Usage: .ci/check_comment_paths.py [--under DIR]... (report only names found in files under DIR)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
EXTS = ("rs", "wgsl", "py", "sh", "md")
NAME = re.compile(r"(?<![\w./\-<>{}*$])((?:[\w\-]+/|\.\./|\./)*[\w\-]*[A-Za-z0-9_]\.(?:%s))(?![\w\-])" % "|".join(EXTS))
URL = re.compile(r"\w+://\S+")
# Files of other projects, or written by a run, that comments name on purpose.
ELSEWHERE = {
    "convert_hf_to_gguf.py": "llama.cpp's converter",
    "table.md": "written by bench/llm/run_nvidia.sh into $OUT",
}
# Files whose names are of another project's tree.
FOREIGN = {
    "docs/wgpu30-notes.md": "notes on wgpu's and naga's own sources",
    "docs/PERFORMANCE.md": "dated measurement records, each naming the files of its day's tree",
}


def tracked():
    # Tracked files and new ones not yet added (ignored ones excluded).
    cmd = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def comments(path, text):
    """(line number, comment text) of the comments and docs of one file."""
    ext = path.rsplit(".", 1)[-1] if "." in os.path.basename(path) else ""
    if ext == "md":
        return list(enumerate(text.split("\n"), 1))
    out = []
    if ext in ("rs", "wgsl"):
        # Strings first (they may hold `//`), then line and block comments.
        pattern = re.compile(r'r(#*)"(?:.|\n)*?"\1|"(?:\\.|[^"\\])*"|//[^\n]*|/\*(?:.|\n)*?\*/')
        for m in pattern.finditer(text):
            s = m.group(0)
            if s.startswith("//") or s.startswith("/*"):
                out.append((text.count("\n", 0, m.start()) + 1, s))
        return out
    if ext == "py":
        pattern = re.compile(r'"""(?:.|\n)*?"""|\'\'\'(?:.|\n)*?\'\'\'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|#[^\n]*')
        for m in pattern.finditer(text):
            s = m.group(0)
            if s.startswith("#") or s.startswith('"""') or s.startswith("'''"):
                out.append((text.count("\n", 0, m.start()) + 1, s))
        return out
    if ext in ("sh", "toml") or path.startswith(".ci/"):
        for i, line in enumerate(text.split("\n"), 1):
            # A `#` that starts a comment: at the line start or after a space, not `$#` or `"#`.
            m = re.search(r"(?:^|\s)#(?!!)", line)
            if m:
                out.append((i, line[m.end() - 1:]))
        return out
    return out


def main():
    args = sys.argv[1:]
    under = [args[i + 1].rstrip("/") + "/" for i, a in enumerate(args) if a == "--under"]
    files = tracked()
    names = {os.path.basename(p) for p in files}
    paths = set(files)
    stale = []
    checked = 0
    for path in files:
        if (under and not any(path.startswith(u) for u in under)) or path in FOREIGN:
            continue
        full = os.path.join(ROOT, path)
        if not os.path.isfile(full):
            continue
        try:
            with open(full, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        folder = os.path.dirname(path)
        for line, comment in comments(path, text):
            comment = URL.sub("", comment)
            for m in NAME.finditer(comment):
                name = m.group(1)
                checked += 1
                if exists(name, folder, names, paths):
                    continue
                stale.append(f"{path}:{line}: {name}")
    for s in stale:
        print(s)
    print(f"check_comment_paths: {checked} file names in comments and docs, {len(stale)} naming no file")
    return 1 if stale else 0


def exists(name, folder, names, paths):
    stem = os.path.basename(name).rsplit(".", 1)[0]
    if name in ELSEWHERE or stem.isupper():
        return True  # another project's file, or a placeholder (`DIR/NAME.wgsl`)
    if os.path.normpath(os.path.join(folder, name)).startswith(".."):
        return True  # outside the repository
    if "/" not in name:
        return name in names
    rel = os.path.normpath(os.path.join(folder, name))
    if rel in paths or os.path.normpath(name) in paths:
        return True
    tail = "/" + name.lstrip("./")
    return any(("/" + p).endswith(tail) for p in paths)


if __name__ == "__main__":
    sys.exit(main())
