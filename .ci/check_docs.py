#!/usr/bin/env python3
"""Checks that what README.md and docs/*.md tell a user to type still works, without building anything.

- Every `kiln ...` command (a `kiln`, `target/release/kiln` or `BIN_DIR/kiln` invocation, or `cargo run
  ... -p kiln-cli -- ...`) in an `sh` block or an inline code span names a subcommand and flags that the
  CLI defines. The definitions are read from the clap derive structs under crates/kiln-cli/src: the
  `Subcommand` enum's variants, each `#[arg(long)]` / `#[arg(short)]` field, `#[command(flatten)]`
  structs followed through.
- Every `cargo run/test/bench` names a package of the workspace, and its `--example`, `--test` or
  `--bench` target exists.
- Every repository path a doc names (in an inline code span, a link or an `sh` block) exists: a path
  from the root, from the doc's folder, or as the tail of a path in the tree (`gpu/`, `real_model.rs`);
  an ignored path (a build output such as `fuzz/target/`) counts as existing. Not checked: the
  measurement sections of docs/PERFORMANCE.md, which record the tree of their day, and
  docs/wgpu30-notes.md, whose paths are in wgpu's and naga's sources.
- User docs do not speak of the development log ("session 8", "issue 26"): that history belongs to the
  measurement sections of docs/PERFORMANCE.md (from its first "## Results" heading on).
Prints what it checked; exits 1 with one line per problem.
"""
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CLI_SRC = os.path.join(ROOT, "crates", "kiln-cli", "src")
SHELL_LANGS = {"sh", "bash", "shell", "console"}
CODE_EXTS = (".rs", ".py", ".sh", ".wgsl", ".pyi", ".toml", ".md")
DATA_EXTS = (".json", ".gguf", ".safetensors", ".txt", ".supp")
EXTERNAL_PATHS = {os.path.join("docs", "wgpu30-notes.md")}
DEV_LOG = re.compile(r"\b(?:[Ss]ession|[Ii]ssue)[- ]\d+")


# ---- the CLI's definitions, from the clap derive structs -------------------------------------------


def kebab(name):
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", name).replace("_", "-").lower()


def split_top(text, sep=","):
    """Splits at `sep` outside (), [], {} and <> and outside string literals."""
    parts, depth, cur, quote = [], 0, [], None
    for i, ch in enumerate(text):
        if quote:
            cur.append(ch)
            if ch == quote and text[i - 1] != "\\":
                quote = None
            continue
        if ch == '"' or (ch == "'" and i + 2 < len(text) and text[i + 2] == "'"):
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>" and not (ch == ">" and text[i - 1] == "-"):
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def body_after(text, start):
    """The text between the brace or parenthesis opening at or after `start` and its match."""
    open_at = min(i for i in (text.find("{", start), text.find("(", start)) if i >= 0)
    pair = {"{": "}", "(": ")"}[text[open_at]]
    depth = 0
    for i in range(open_at, len(text)):
        depth += text[i] == text[open_at]
        depth -= text[i] == pair
        if depth == 0:
            return text[open_at + 1 : i]
    raise ValueError("unbalanced")


ITEM = re.compile(r"#\[derive\(([^)]*)\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?(struct|enum)\s+(\w+)")
ATTR = re.compile(r"#\[(arg|command)\((.*?)\)\]\s*", re.S)


def attrs_and_rest(member):
    """(attributes [(kind, args)], the member without them)."""
    found = []
    while True:
        m = ATTR.match(member)
        if m:
            found.append((m.group(1), m.group(2)))
            member = member[m.end() :]
        elif member.startswith("#["):
            member = member[member.index("]") + 1 :].lstrip()
        else:
            return found, member


def fields(body):
    """(attributes, name, type) of each field of a struct body."""
    out = []
    for member in split_top(body):
        attrs, rest = attrs_and_rest(member)
        m = re.match(r"(?:pub(?:\([^)]*\))?\s+)?(\w+)\s*:\s*(.+)", rest, re.S)
        if m:
            out.append((attrs, m.group(1), m.group(2).strip()))
    return out


def flags_of(attrs, name):
    out = set()
    for kind, args in attrs:
        if kind != "arg":
            continue
        for a in split_top(args):
            key, _, value = a.partition("=")
            key, value = key.strip(), value.strip().strip("\"'")
            if key == "long":
                out.add("--" + (value or kebab(name)))
            elif key == "short":
                out.add("-" + (value or name[0]))
            elif key in ("alias", "visible_alias"):
                out.add("--" + value)
    return out


def read_cli():
    """{subcommand: set of flags} from the derive structs under crates/kiln-cli/src."""
    structs, enums = {}, {}
    for folder, _, names in os.walk(CLI_SRC):
        for n in names:
            if not n.endswith(".rs"):
                continue
            text = re.sub(r"//[^\n]*", "", open(os.path.join(folder, n)).read())
            for m in ITEM.finditer(text):
                derives, kind, name = m.group(1), m.group(2), m.group(3)
                if not re.search(r"\b(Parser|Args|Subcommand)\b", derives):
                    continue
                (structs if kind == "struct" else enums)[name] = body_after(text, m.end())

    def struct_flags(name, seen=()):
        flags = set()
        for attrs, fname, ftype in fields(structs.get(name, "")):
            if any(k == "command" and "flatten" in a for k, a in attrs):
                inner = ftype.split("::")[-1]
                if inner in seen:
                    raise ValueError(f"flatten cycle at {inner}")
                flags |= struct_flags(inner, seen + (inner,))
            flags |= flags_of(attrs, fname)
        return flags

    commands = {}
    for body in enums.values():
        for member in split_top(body):
            attrs, rest = attrs_and_rest(member)
            m = re.match(r"(\w+)\s*(.*)", rest, re.S)
            if not m:
                continue
            variant, payload = m.group(1), m.group(2).strip()
            name = kebab(variant)
            for kind, args in attrs:
                nm = re.search(r'\bname\s*=\s*"([^"]+)"', args)
                if kind == "command" and nm:
                    name = nm.group(1)
            if payload.startswith("{"):
                structs[f"<{variant}>"] = payload[1:-1]
                commands[name] = struct_flags(f"<{variant}>")
            elif payload.startswith("("):
                commands[name] = struct_flags(payload[1:-1].split("::")[-1].strip())
            else:
                commands[name] = set()
    for flags in commands.values():
        flags |= {"--help", "-h"}
    return commands


# ---- the docs ----------------------------------------------------------------------------------------


def docs():
    out = [os.path.join(ROOT, "README.md")]
    folder = os.path.join(ROOT, "docs")
    out += sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".md"))
    return out


def pieces(text):
    """(kind, text, line) of each piece worth checking: 'sh' command lines of shell blocks, 'span'
    inline code spans, 'link' link targets. Other fenced blocks (Rust, Python, the architecture map)
    are skipped."""
    out, fence, lang, start = [], None, "", 0
    lines = text.split("\n")
    prose = []
    for n, line in enumerate(lines, 1):
        m = re.match(r"\s*(```+)\s*([\w,]*)", line)
        if m and fence is None:
            fence, lang = m.group(1), m.group(2).split(",")[0]
            continue
        if m and fence is not None and m.group(1) == fence:
            fence = None
            continue
        if fence is not None:
            if lang in SHELL_LANGS:
                out.append(("sh", line, n))
            continue
        prose.append((n, line))
    # Spans may wrap across lines: join each paragraph, remembering where it starts.
    para, para_start = [], 0
    for n, line in prose + [(len(lines) + 1, "")]:
        if line.strip():
            if not para:
                para_start = n
            para.append(line)
            continue
        joined = " ".join(para)
        for m in re.finditer(r"(`+)(.+?)\1", joined):
            out.append(("span", m.group(2).strip(), para_start))
        for m in re.finditer(r"\]\(([^)\s]+)\)", joined):
            out.append(("link", m.group(1), para_start))
        para = []
    return out


def shell_commands(line):
    """The simple commands of a shell line (split at `&&`, `||`, `;` and a pipe between spaces: `a|b`
    is a doc's list of alternatives), comments dropped."""
    line = re.sub(r"(^|\s)#.*", "", line).rstrip(" \\")
    out = []
    for part in re.split(r"&&|\|\||;| \| ", line):
        part = part.strip().lstrip("(").rstrip(")")
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            out.append(words)
    return out


def is_kiln_binary(word):
    return word == "kiln" or word.endswith("/kiln") and not word.startswith("crates/")


def check_kiln(words, commands, problems, where):
    """`words` after the binary: the subcommand (alternatives `a|b` allowed) and its flags."""
    if not words or words[0].startswith("-"):
        if words and words[0] not in ("--help", "-h", "--version", "-V"):
            problems.append(f"{where}: `kiln {' '.join(words)}`: {words[0]} is not a flag of kiln")
        return 0
    checked = 0
    for sub in words[0].split("|"):
        if sub not in commands:
            problems.append(f"{where}: `kiln {' '.join(words)}`: no subcommand {sub!r} (kiln has {', '.join(sorted(commands))})")
            continue
        for w in words[1:]:
            flag = w.strip("[]").split("=")[0]
            if re.match(r"^--?[A-Za-z]", flag) and flag not in commands[sub]:
                problems.append(f"{where}: `kiln {' '.join(words)}`: `kiln {sub}` has no flag {flag}")
        checked += 1
    return checked


def package_dir(name):
    for folder in ("crates", ""):
        d = os.path.join(ROOT, folder, name)
        if os.path.isfile(os.path.join(d, "Cargo.toml")):
            return d
    return None


def check_cargo(words, commands, problems, where):
    """`cargo run|test|bench ...`: the package and its named target; for kiln-cli, the kiln command."""
    if len(words) < 2 or words[1] not in ("run", "test", "bench", "build"):
        return 0
    args, rest = (words[2:], [])
    if "--" in args:
        i = args.index("--")
        args, rest = args[:i], args[i + 1 :]
    opts = {}
    for i, w in enumerate(args):
        if w in ("-p", "--package", "--example", "--test", "--bench", "--bin") and i + 1 < len(args):
            opts.setdefault(w, []).append(args[i + 1])
    pkg = (opts.get("-p") or opts.get("--package") or [None])[0]
    pdir = package_dir(pkg) if pkg else ROOT
    if pkg and not pdir:
        problems.append(f"{where}: `{' '.join(words)}`: no package {pkg}")
        return 1
    targets = {"--example": "examples", "--test": "tests", "--bench": "benches"}
    for opt, folder in targets.items():
        for t in opts.get(opt, []):
            if not any(os.path.exists(os.path.join(pdir, folder, p)) for p in (t + ".rs", os.path.join(t, "main.rs"))):
                problems.append(f"{where}: `{' '.join(words)}`: {pkg or 'the root'} has no {folder}/{t}")
    if words[1] == "run" and pkg == "kiln-cli":
        return 1 + check_kiln(rest, commands, problems, where)
    return 1


def tracked_paths():
    """Every file and folder of the tree (tracked, or new and not ignored), relative to the root."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split("\n")
    paths = set()
    for f in filter(None, out):
        if not os.path.exists(os.path.join(ROOT, f)):
            continue  # deleted in the work tree
        parts = f.split("/")
        for i in range(1, len(parts) + 1):
            paths.add("/".join(parts[:i]))
    return paths


def path_candidate(token):
    """The token as a repository path to check, or None when it is not one (a placeholder, a user's
    file, a URL, a dtype pair such as f16/bf16, ...)."""
    t = token.rstrip(".,;:")
    if t.startswith("./"):
        t = t[2:]
    if not t or re.search(r"[\s*{}<>|$~:()\[\]=`'\"]|\.\.|^/|^-|^#", t) or t.startswith(("models/", "target/")):
        return None
    top = t.split("/")[0]
    if "/" in t.rstrip("/"):
        if t.endswith(CODE_EXTS + DATA_EXTS) or t.endswith("/") or os.path.exists(os.path.join(ROOT, top)):
            return t
        return None
    if t.endswith("/") and re.match(r"^[\w.-]+/$", t):
        return t  # a folder, e.g. `gpu/`
    if t.endswith(CODE_EXTS) and re.match(r"^[\w.-]+$", t):
        return t  # a file name, e.g. `real_model.rs`
    return None


def path_exists(path, doc_dir, paths):
    p = path.rstrip("/")
    if os.path.exists(os.path.join(ROOT, p)) or os.path.exists(os.path.join(doc_dir, p)):
        return True
    if any(q == p or q.endswith("/" + p) for q in paths):
        return True
    ignored = lambda q: subprocess.run(["git", "check-ignore", "-q", q], cwd=ROOT).returncode == 0
    return ignored(p) or ignored(p + "/")


def main():
    commands = read_cli()
    paths = tracked_paths()
    problems = []
    n_kiln = n_cargo = n_paths = 0
    for doc in docs():
        rel = os.path.relpath(doc, ROOT)
        text = open(doc, encoding="utf-8").read()
        lines = text.split("\n")
        # The development log stays in PERFORMANCE.md's measurement sections.
        history_from = len(lines)
        if rel == os.path.join("docs", "PERFORMANCE.md"):
            history_from = next((i for i, l in enumerate(lines) if l.startswith("## Results")), len(lines))
        check_paths = rel not in EXTERNAL_PATHS
        for i, line in enumerate(lines[:history_from], 1):
            for m in DEV_LOG.finditer(line):
                problems.append(f"{rel}:{i}: names the development log ({m.group(0)!r}); keep that in PERFORMANCE.md's results")
        for kind, piece, line in pieces(text):
            where = f"{rel}:{line}"
            if kind == "link":
                if line <= history_from and not re.match(r"^[a-z]+:|^#", piece):
                    n_paths += 1
                    target = piece.split("#")[0]
                    if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(doc), target))):
                        problems.append(f"{where}: link to {piece}, which does not exist")
                continue
            cmds = shell_commands(piece)
            for words in cmds:
                if is_kiln_binary(words[0]) and (kind == "sh" or piece.startswith(words[0])):
                    n_kiln += check_kiln(words[1:], commands, problems, where)
                elif words[0] == "cargo":
                    n_cargo += check_cargo(words, commands, problems, where)
            tokens = [w for words in cmds for w in words] if kind == "sh" else [piece]
            for token in tokens if check_paths and line <= history_from else []:
                path = path_candidate(token)
                if path:
                    n_paths += 1
                    if not path_exists(path, os.path.dirname(doc), paths):
                        problems.append(f"{where}: names {path}, which is not in the tree")
    summary = ", ".join(f"{k} ({len(v) - 2} flags)" for k, v in sorted(commands.items()))
    print(f"check_docs: kiln's subcommands from crates/kiln-cli/src: {summary}")
    print(f"check_docs: {len(docs())} docs; {n_kiln} kiln commands, {n_cargo} cargo commands, {n_paths} paths checked", flush=True)
    for p in problems:
        print(f"check_docs: {p}", file=sys.stderr)
    if problems:
        print(f"check_docs: {len(problems)} problems", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
