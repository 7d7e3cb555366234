#!/usr/bin/env python3
"""Build an English text corpus from documentation that exists offline on this machine.

Sources (all read locally, nothing is downloaded):
  doc     /usr/share/doc/**          READMEs, prose .txt/.md/.rst, HTML manuals (tags stripped),
                                     NEWS and changelogs (de-noised, capped per package)
  man     /usr/share/man/man[1-8]/*  English man pages rendered to plain text with man-db + groff
  info    /usr/share/info/*           GNU manuals (coreutils, sed, grep, find, ...), nodes joined
  python  the CPython stdlib         docstrings of modules/classes/functions (read with `ast`, no
                                     imports), C modules' docstrings (read with `inspect` in a child
                                     process), and the language-reference topics in pydoc_data

Cleaning: binaries skipped, text decoded as UTF-8 (else Latin-1 when free of control bytes),
low-prose files dropped, e-mail addresses removed, and every paragraph of >= 64 chars kept only
the first time it is seen (kills licence boilerplate, `gcloud` flag blurbs, repeated changelog lines).

Output (in --out, an ignored folder):
  train.txt / valid.txt   documents separated by a line "<|endoftext|>"; ~2% of documents held out
                          (chosen by a hash of the document id, so stable across runs)
  stats.json              per-source document counts and bytes, licences of contributing packages
  manifest.tsv            source, id, package, split, bytes for every document kept

Usage: python3 gather_corpus.py --out tools/train-demo/work/corpus [--jobs 2] [--gcloud-mb 20]
Run it on the machine whose docs you want; it takes ~10-20 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures as cf
import gzip
import hashlib
import html
import html.parser
import json
import lzma
import bz2
import os
import re
import subprocess
import sys
import time

SEP = "<|endoftext|>"
DOC_ROOT = "/usr/share/doc"
MAN_ROOT = "/usr/share/man"
PY_STDLIB_DEFAULT = "/root/.pyenv/versions/3.11.7/lib/python3.11"
PY_EXE_DEFAULT = "/root/.pyenv/versions/3.11.7/bin/python3"

MAX_FILE_BYTES = 4 << 20          # skip anything bigger once decompressed (logs, dumps)
CHANGELOG_CAP = 96 << 10          # per package, after de-noising: the newest entries come first
VALID_PERCENT = 2
PARA_DEDUP_MIN = 64

EMAIL = re.compile(r"<?[\w.+-]+@[\w-]+(\.[\w-]+)+>?")
CODE_EXT = {
    ".c", ".h", ".cc", ".cpp", ".hpp", ".py", ".pl", ".pm", ".sh", ".awk", ".cocci", ".css", ".js",
    ".json", ".xml", ".svg", ".png", ".gif", ".jpg", ".jpeg", ".ico", ".pdf", ".ps", ".dvi",
    ".conf", ".cfg", ".ini", ".example", ".examples", ".el", ".vim", ".rb", ".java", ".tcl",
    ".diff", ".patch", ".yaml", ".yml", ".toml", ".tar", ".zip", ".jar", ".so", ".a", ".o",
    ".mk", ".m4", ".in", ".am", ".ac", ".supp", ".sed", ".csv", ".tsv", ".dat", ".bin", ".gpg",
    ".asc", ".sig", ".pem", ".crt", ".key", ".sql", ".php", ".lua", ".go", ".rs", ".s", ".S",
    ".desktop", ".service", ".rules", ".map", ".lst", ".dtd", ".xsl", ".xsd", ".ttf", ".otf",
    ".woff", ".woff2", ".eot", ".wav", ".ogg", ".mp3", ".bat", ".ps1", ".cmake", ".mak", ".vbs",
}
PROSE_EXT = {"", ".txt", ".md", ".rst", ".text", ".markdown", ".html", ".htm", ".debian",
             ".gnu", ".linux", ".source", ".news", ".faq", ".readme"}
SKIP_NAMES = re.compile(r"^(copyright|authors|thanks|credits|contributors|maintainers|"
                        r"copying|license|licence|notice|buildinfo|md5sums|install)(\..*)?$", re.I)
CHANGELOG_NAMES = re.compile(r"^(changelog|changes|history|news|relnotes)", re.I)


# ----------------------------------------------------------------------------- reading files

def read_bytes(path: str) -> bytes | None:
    """The file's bytes, decompressed; None when too large or unreadable."""
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            return None
        opener = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}.get(
            os.path.splitext(path)[1], open)
        with opener(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        return None if len(data) > MAX_FILE_BYTES else data
    except (OSError, EOFError, lzma.LZMAError):
        return None


def decode_text(data: bytes) -> str | None:
    """Text if the bytes look like text (no NULs, few control bytes); else None."""
    if b"\x00" in data[:65536]:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    controls = sum(1 for ch in text[:65536] if ord(ch) < 32 and ch not in "\n\t\r\f")
    if controls > 0.001 * max(1, min(len(text), 65536)):
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")


def prose_score(text: str) -> float:
    """Share of characters that are letters or spaces: ~0.85 for prose, ~0.6 for code/tables."""
    sample = text[:200000]
    if not sample:
        return 0.0
    good = sum(1 for ch in sample if ch.isalpha() or ch == " " or ch == "\n")
    return good / len(sample)


def english_enough(text: str) -> bool:
    """Cheap English check: common function words make up a decent share of the words."""
    words = re.findall(r"[A-Za-z]+", text[:100000].lower())
    if len(words) < 30:
        return False
    common = {"the", "of", "and", "to", "a", "in", "is", "for", "that", "this", "be", "it", "with",
              "as", "on", "are", "or", "by", "not", "if", "an", "can", "from", "you", "will"}
    return sum(1 for w in words if w in common) / len(words) > 0.08


# ----------------------------------------------------------------------------- cleaning

class _HtmlText(html.parser.HTMLParser):
    BLOCK = {"p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table",
             "pre", "dt", "dd", "dl", "blockquote", "hr", "section", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "head"):
            self.skip += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.parts.append("\n\n" if tag not in ("br", "li", "tr", "dt", "dd") else "\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "head"):
            self.skip = max(0, self.skip - 1)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def html_to_text(text: str) -> str:
    p = _HtmlText()
    try:
        p.feed(text)
        p.close()
    except Exception:  # malformed HTML: keep what was parsed
        pass
    return "".join(p.parts)


def normalize(text: str) -> str:
    """Strip e-mail addresses and trailing spaces, collapse runs of blank lines."""
    text = EMAIL.sub("", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


DEB_CL_HEADER = re.compile(r"^[a-z0-9][a-z0-9+.-]* \([^)]*\) [^;]*; .*urgency=", re.I)
DEB_CL_TRAILER = re.compile(r"^ -- .*\d{4}")
CLOSES = re.compile(r"\(?\b(closes|lp):\s*#?\d+(,\s*#?\d+)*\)?\.?", re.I)
BRACKET_NAME = re.compile(r"^\s*\[ [^\]]+ \]\s*$")
VERSION_LINE = re.compile(r"^\s*(version|v|release)?\s*[\d.]+[\w.~+-]*\s*[:(-]?.{0,40}$", re.I)


def clean_changelog(text: str, seen_lines: set[int]) -> str:
    """Keep the human sentences of a changelog; drop headers, trailers, bug refs, repeats."""
    out = []
    for line in text.split("\n"):
        if DEB_CL_HEADER.match(line) or DEB_CL_TRAILER.match(line) or BRACKET_NAME.match(line):
            continue
        line = CLOSES.sub("", line)
        if re.match(r"^\s*(\d{4}-\d\d-\d\d|[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+)", line):
            continue  # GNU ChangeLog "2020-01-01  Name" lines
        stripped = line.strip(" \t*-+")
        if stripped:
            key = hash(stripped.lower())
            if key in seen_lines or len(stripped) < 12:
                continue
            seen_lines.add(key)
        out.append(line)
    return normalize("\n".join(out))


class ParagraphDedup:
    """Drops every paragraph (blank-line separated) of >= PARA_DEDUP_MIN chars seen before."""

    def __init__(self):
        self.seen: set[bytes] = set()

    def __call__(self, text: str) -> str:
        kept = []
        for para in text.split("\n\n"):
            norm = re.sub(r"\s+", " ", para).strip().lower()
            if len(norm) >= PARA_DEDUP_MIN:
                key = hashlib.blake2b(norm.encode(), digest_size=12).digest()
                if key in self.seen:
                    continue
                self.seen.add(key)
            kept.append(para)
        return "\n\n".join(kept).strip()


# ----------------------------------------------------------------------------- licences

LICENCE_PATTERNS = [
    ("GPL-3+", r"\bGPL-?3|GNU General Public License.{0,40}version 3"),
    ("GPL-2+", r"\bGPL-?2|GNU General Public License.{0,40}version 2"),
    ("GPL", r"\bGPL\b|GNU General Public License"),
    ("LGPL", r"\bLGPL|GNU (Library|Lesser) General Public"),
    ("BSD", r"\bBSD\b|Redistribution and use in source and binary forms"),
    ("MIT/Expat", r"\b(MIT|Expat)\b|Permission is hereby granted, free of charge"),
    ("Apache-2.0", r"Apache[- ]2|Apache License"),
    ("Artistic", r"\bArtistic\b"),
    ("PSF", r"\bPSF\b|Python Software Foundation License"),
    ("MPL", r"\bMPL\b|Mozilla Public License"),
    ("ISC", r"\bISC\b"),
    ("Zlib", r"\bZlib\b"),
    ("GFDL", r"\bGFDL\b|GNU Free Documentation License"),
    ("public-domain", r"public[- ]domain"),
    ("CC", r"Creative Commons|\bCC-BY"),
]


def package_licences(pkg: str) -> list[str]:
    """Licence families named in /usr/share/doc/PKG/copyright (DEP-5 'License:' fields first)."""
    data = read_bytes(os.path.join(DOC_ROOT, pkg, "copyright"))
    text = decode_text(data) if data else None
    if not text:
        return ["(no copyright file)"]
    found = []
    fields = re.findall(r"^License:\s*(\S.*)$", text, re.M)
    haystack = "\n".join(fields) if fields else text
    for name, pat in LICENCE_PATTERNS:
        if re.search(pat, haystack, re.I):
            if name == "GPL" and any(f.startswith("GPL-") for f in found):
                continue
            found.append(name)
    return found or ["other"]


def dpkg_owner_map() -> dict[str, str]:
    """Installed file path -> Debian package, read from dpkg's .list files (fast, no dpkg -S)."""
    owners = {}
    info = "/var/lib/dpkg/info"
    try:
        names = os.listdir(info)
    except OSError:
        return owners
    for name in names:
        if not name.endswith(".list"):
            continue
        pkg = name[:-5].split(":")[0]
        try:
            with open(os.path.join(info, name), encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith(MAN_ROOT) or line.startswith("/usr/share/info/"):
                        owners[line.rstrip("\n")] = pkg
        except OSError:
            pass
    return owners


# ----------------------------------------------------------------------------- sources

def doc_documents():
    """Yield (id, package, kind, text) from /usr/share/doc."""
    seen_cl_lines: set[int] = set()
    for pkg in sorted(os.listdir(DOC_ROOT)):
        top = os.path.join(DOC_ROOT, pkg)
        if os.path.islink(top) or not os.path.isdir(top):
            continue
        changelog_budget = CHANGELOG_CAP
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))
                                 and d.lower() not in ("examples", "example", "test", "tests"))
            for fn in sorted(filenames):
                path = os.path.join(dirpath, fn)
                if os.path.islink(path):
                    continue
                base = fn
                for comp in (".gz", ".xz", ".bz2"):
                    if base.endswith(comp):
                        base = base[: -len(comp)]
                ext = os.path.splitext(base)[1].lower()
                if SKIP_NAMES.match(base) or ext in CODE_EXT:
                    continue
                is_cl = bool(CHANGELOG_NAMES.match(base))
                if not is_cl and ext not in PROSE_EXT and not base.upper().startswith("README"):
                    continue
                data = read_bytes(path)
                text = decode_text(data) if data else None
                if not text:
                    continue
                if ext in (".html", ".htm"):
                    text = html.unescape(html_to_text(text))
                if is_cl:
                    if changelog_budget <= 0:
                        continue
                    text = clean_changelog(text, seen_cl_lines)[:changelog_budget]
                    changelog_budget -= len(text)
                    kind = "changelog"
                else:
                    text = normalize(text)
                    kind = "html" if ext in (".html", ".htm") else "readme"
                if len(text) < 200 or prose_score(text) < 0.72 or not english_enough(text):
                    continue
                yield os.path.relpath(path, DOC_ROOT), pkg, kind, text


INFO_ROOT = "/usr/share/info"


def info_documents():
    """Yield (id, package-path, kind, text): each GNU info manual (its split parts joined) as one
    document, node headers, menus, indexes and the bundled licence text removed."""
    manuals: dict[str, list[str]] = collections.defaultdict(list)
    try:
        names = sorted(os.listdir(INFO_ROOT))
    except OSError:
        return
    for fn in names:
        m = re.match(r"^(.+?)\.info(-\d+)?(\.gz|\.xz|\.bz2)?$", fn)
        if m:
            manuals[m.group(1)].append(fn)
    for manual, parts in sorted(manuals.items()):
        # foo.info first, then foo.info-1, foo.info-2, ... in numeric order
        parts.sort(key=lambda f: int(re.search(r"info-(\d+)", f).group(1)) if "info-" in f else 0)
        nodes = []
        for fn in parts:
            data = read_bytes(os.path.join(INFO_ROOT, fn))
            if not data:
                continue
            text = data.decode("utf-8", errors="replace")
            for node in text.split("\x1f")[1:]:  # the preamble before the first node is boilerplate
                lines = node.strip("\n").split("\n")
                if not lines or not lines[0].startswith("File:"):
                    continue
                header = lines[0]
                if re.search(r"Node: (Top|[^,]*(Index|License|Licence|Copying|GPL|FDL)[^,]*),", header):
                    continue
                body, in_menu = [], False
                for line in lines[1:]:
                    if line.startswith("* Menu:"):
                        in_menu = True
                        continue
                    if in_menu:
                        if not line.strip() or line.startswith("* ") or line.startswith(" "):
                            continue
                        in_menu = False
                    if line.startswith("Tag Table:") or line.startswith("End Tag Table"):
                        break
                    body.append(line)
                nodes.append("\n".join(body))
        text = normalize("\n\n".join(nodes))
        if len(text) >= 200 and english_enough(text):
            yield "info/" + manual, os.path.join(INFO_ROOT, parts[0]), "info", text


def render_man(path: str) -> str | None:
    """One man page as plain text: no hyphenation or justification, paragraphs on one line."""
    env = dict(os.environ, MANWIDTH="1000", LANG="C.UTF-8", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    try:
        p1 = subprocess.run(["man", "--nj", "--nh", "-l", path], env=env, capture_output=True,
                            timeout=60)
        p2 = subprocess.run(["col", "-bx"], input=p1.stdout, capture_output=True, timeout=60, env=env)
    except (subprocess.TimeoutExpired, OSError):
        return None
    text = p2.stdout.decode("utf-8", errors="replace")
    lines = text.split("\n")
    # drop the running header and footer lines (page title, date, "Linux" ...)
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines:
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if lines:
        lines.pop()
    out = []
    for line in lines:
        # man indents the body by 7 columns; keep deeper structure but drop that margin
        if line.startswith("       "):
            line = line[7:]
        out.append(re.sub(r"(?<=\S) {3,}(?=\S)", "  ", line))
    return normalize("\n".join(out))


def man_paths(gcloud_limit_mb: float):
    """English man pages in man1..man8; symlinks and .so duplicates are de-duplicated later.
    gcloud's ~16k generated pages are sampled by a stable hash, since they repeat each other."""
    regular, gcloud = [], []
    seen_real = set()
    for sec in sorted(os.listdir(MAN_ROOT)):
        if not re.fullmatch(r"man[1-8]", sec):
            continue
        d = os.path.join(MAN_ROOT, sec)
        for fn in sorted(os.listdir(d)):
            path = os.path.join(d, fn)
            real = os.path.realpath(path)
            if real in seen_real or not os.path.isfile(real):
                continue
            seen_real.add(real)
            (gcloud if fn.startswith("gcloud") else regular).append(path)
    gcloud.sort(key=lambda p: hashlib.md5(p.encode()).hexdigest())
    return regular, gcloud


def python_documents(stdlib: str, py_exe: str):
    """Yield (id, package, kind, text): stdlib docstrings and the reference topics."""
    skip_dirs = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo", "__pycache__",
                 "ensurepip", "config-3.11-x86_64-linux-gnu", "tkinter", "distutils"}
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs and not d.startswith("test"))
        for fn in sorted(filenames):
            if not fn.endswith(".py") or fn.startswith("test_") or fn == "topics.py":
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, stdlib)
            modname = rel[:-3].replace(os.sep, ".").removesuffix(".__init__")
            try:
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
                continue
            text = docstrings_of(modname, tree)
            if text and len(text) >= 200:
                yield "stdlib/" + rel, "python3.11", "docstrings", normalize(text)
    # C modules: their docstrings exist only at run time; read them in a child process
    child = r'''
import sys, inspect, importlib, json, os, glob
names = set(sys.builtin_module_names)
for so in glob.glob(os.path.join(sys.argv[1], "lib-dynload", "*.so")):
    names.add(os.path.basename(so).split(".")[0])
out = {}
for name in sorted(names):
    if name.startswith("_test") or name in ("_tkinter", "xxlimited", "xxlimited_35", "xxsubtype", "_xxtestfuzz"):
        continue
    try:
        m = importlib.import_module(name)
    except Exception:
        continue
    parts = []
    if m.__doc__:
        parts.append("Module %s\n\n%s" % (name, inspect.cleandoc(m.__doc__)))
    for attr, obj in sorted(vars(m).items()):
        if attr.startswith("__") or not (inspect.isroutine(obj) or inspect.isclass(obj)):
            continue
        doc = obj.__doc__
        if not doc or not isinstance(doc, str) or len(doc) < 20:
            continue
        parts.append("%s.%s\n%s" % (name, attr, inspect.cleandoc(doc)))
        if inspect.isclass(obj):
            for mname, meth in sorted(vars(obj).items()):
                d = getattr(meth, "__doc__", None)
                if mname.startswith("_") or not isinstance(d, str) or len(d) < 20:
                    continue
                parts.append("%s.%s.%s\n%s" % (name, attr, mname, inspect.cleandoc(d)))
    if parts:
        out[name] = "\n\n".join(parts)
json.dump(out, sys.stdout)
'''
    try:
        res = subprocess.run([py_exe, "-I", "-c", child, stdlib], capture_output=True, timeout=300,
                             stdin=subprocess.DEVNULL, cwd="/tmp")
        cmods = json.loads(res.stdout or b"{}")
    except (subprocess.TimeoutExpired, OSError, json.JSONDecodeError):
        cmods = {}
    for name, text in sorted(cmods.items()):
        if len(text) >= 200:
            yield "cmodule/" + name, "python3.11", "docstrings", normalize(text)
    # the language reference / library topics that `help()` shows (from the Python docs)
    topics_path = os.path.join(stdlib, "pydoc_data", "topics.py")
    try:
        with open(topics_path, encoding="utf-8") as f:
            topics = ast.literal_eval(f.read().split("=", 1)[1].strip())
    except (OSError, ValueError, SyntaxError, IndexError):
        topics = {}
    for key, text in sorted(topics.items()):
        if len(text) >= 200:
            yield "topics/" + key, "python3.11", "reference", normalize(text)


def _signature(node: ast.AST) -> str:
    try:
        return ast.unparse(node.args)
    except Exception:
        return "..."


def docstrings_of(modname: str, tree: ast.Module) -> str:
    parts = []
    doc = ast.get_docstring(tree)
    if doc:
        parts.append(f"Module {modname}\n\n{doc}")

    def walk(body, prefix: str, depth: int):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node)
                if d and len(d) >= 20:
                    parts.append(f"{prefix}{node.name}({_signature(node)})\n{d}")
            elif isinstance(node, ast.ClassDef) and depth < 2:
                d = ast.get_docstring(node)
                if d and len(d) >= 20:
                    bases = ", ".join(ast.unparse(b) for b in node.bases)
                    parts.append(f"class {prefix}{node.name}({bases})\n{d}")
                walk(node.body, f"{prefix}{node.name}.", depth + 1)

    walk(tree.body, f"{modname}.", 0)
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------- main

class Sink:
    """Dedupes documents and paragraphs, splits train/valid, writes files and stats."""

    def __init__(self, out: str):
        os.makedirs(out, exist_ok=True)
        self.train = open(os.path.join(out, "train.txt"), "w", encoding="utf-8")
        self.valid = open(os.path.join(out, "valid.txt"), "w", encoding="utf-8")
        self.manifest = open(os.path.join(out, "manifest.tsv"), "w", encoding="utf-8")
        self.manifest.write("source\tkind\tid\tpackage\tsplit\tbytes\n")
        self.dedup = ParagraphDedup()
        self.doc_hashes: set[bytes] = set()
        self.stats = collections.defaultdict(lambda: collections.Counter())
        self.packages = collections.defaultdict(set)

    def add(self, source: str, doc_id: str, pkg: str, kind: str, text: str) -> int:
        key = hashlib.blake2b(re.sub(r"\s+", " ", text).encode(), digest_size=16).digest()
        if key in self.doc_hashes:
            self.stats[source]["dup_docs"] += 1
            return 0
        self.doc_hashes.add(key)
        text = self.dedup(text)
        if len(text) < 200 or not english_enough(text):
            self.stats[source]["dropped_docs"] += 1
            return 0
        split = "valid" if int(hashlib.md5(doc_id.encode()).hexdigest(), 16) % 100 < VALID_PERCENT \
            else "train"
        f = self.valid if split == "valid" else self.train
        f.write(text)
        f.write("\n" + SEP + "\n")
        n = len(text.encode("utf-8"))
        self.stats[source]["docs"] += 1
        self.stats[source]["bytes"] += n
        self.stats[source][f"{kind}_bytes"] += n
        self.stats[source][f"{split}_bytes"] += n
        self.packages[source].add(pkg)
        self.manifest.write(f"{source}\t{kind}\t{doc_id}\t{pkg}\t{split}\t{n}\n")
        return n

    def close(self):
        for f in (self.train, self.valid, self.manifest):
            f.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "work", "corpus"))
    ap.add_argument("--jobs", type=int, default=2, help="parallel man renderers")
    ap.add_argument("--gcloud-mb", type=float, default=5.0,
                    help="stop adding gcloud man pages once they contributed this many MB")
    ap.add_argument("--python-stdlib", default=PY_STDLIB_DEFAULT)
    ap.add_argument("--python-exe", default=PY_EXE_DEFAULT)
    ap.add_argument("--sources", default="python,doc,info,man")
    ap.add_argument("--limit", type=int, default=0, help="max documents per source (smoke tests)")
    ap.add_argument("--restat", action="store_true",
                    help="only rewrite stats.json from an existing manifest.tsv (e.g. after Ctrl-C)")
    args = ap.parse_args()
    if args.restat:
        print(json.dumps(write_stats(args.out), indent=2, sort_keys=True))
        return

    sink = Sink(args.out)
    owners = dpkg_owner_map()
    t0 = time.time()
    sources = args.sources.split(",")

    def log(msg):
        print(f"[{time.time() - t0:7.1f}s] {msg}", flush=True)

    if "python" in sources:
        for i, (doc_id, pkg, kind, text) in enumerate(python_documents(args.python_stdlib, args.python_exe)):
            if args.limit and i >= args.limit:
                break
            sink.add("python", doc_id, pkg, kind, text)
        log(f"python: {dict(sink.stats['python'])}")

    if "doc" in sources:
        for i, (doc_id, pkg, kind, text) in enumerate(doc_documents()):
            if args.limit and i >= args.limit:
                break
            sink.add("doc", doc_id, pkg, kind, text)
            if i % 500 == 0:
                log(f"doc: {i} files, {sink.stats['doc']['bytes'] / 1e6:.1f} MB")
        log(f"doc: {dict(sink.stats['doc'])}")

    if "info" in sources:
        for i, (doc_id, path, kind, text) in enumerate(info_documents()):
            if args.limit and i >= args.limit:
                break
            sink.add("info", doc_id, owners.get(path, "unknown"), kind, text)
        log(f"info: {dict(sink.stats['info'])}")

    if "man" in sources:
        regular, gcloud = man_paths(args.gcloud_mb)
        if args.limit:
            regular, gcloud = regular[: args.limit], gcloud[: args.limit]
        log(f"man: {len(regular)} regular pages, {len(gcloud)} gcloud pages")
        with cf.ThreadPoolExecutor(args.jobs) as pool:
            for group, cap in (("man", None), ("man-gcloud", args.gcloud_mb * 1e6)):
                paths = regular if group == "man" else gcloud
                # render in chunks so the gcloud cap can stop early without rendering everything
                for start in range(0, len(paths), 64):
                    if cap is not None and sink.stats[group]["bytes"] >= cap:
                        break
                    chunk = paths[start: start + 64]
                    for path, text in zip(chunk, pool.map(render_man, chunk)):
                        if not text:
                            continue
                        name = os.path.relpath(path, MAN_ROOT)
                        sink.add(group, name, owners.get(path, "google-cloud-cli" if group != "man"
                                                         else "unknown"), "man", text)
                    if start % 640 == 0:
                        log(f"{group}: {start}/{len(paths)} pages, {sink.stats[group]['bytes'] / 1e6:.1f} MB")
                log(f"{group}: {dict(sink.stats[group])}")

    sink.close()
    stats = write_stats(args.out)
    stats["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True)
    print(json.dumps(stats, indent=2, sort_keys=True))


def write_stats(out: str) -> dict:
    """Per-source sizes and the licences of contributing packages, from manifest.tsv alone (so an
    interrupted run can be summarised with --restat)."""
    sizes = collections.defaultdict(collections.Counter)
    packages = collections.defaultdict(set)
    with open(os.path.join(out, "manifest.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            source, kind, _doc_id, pkg, split, n = line.rstrip("\n").split("\t")
            n = int(n)
            sizes[source]["docs"] += 1
            sizes[source]["bytes"] += n
            sizes[source][f"{kind}_bytes"] += n
            sizes[source][f"{split}_bytes"] += n
            packages[source].add(pkg)
    licences = {}
    for source, pkgs in packages.items():
        counter = collections.Counter()
        for pkg in pkgs:
            if pkg == "python3.11":
                counter["PSF-2.0"] += 1
                continue
            for lic in package_licences(pkg):
                counter[lic] += 1
        licences[source] = {"packages": len(pkgs), "licence_families": dict(counter.most_common())}
    stats = {
        "sources": {k: dict(v) for k, v in sizes.items()},
        "licences": licences,
        "total_bytes": sum(v["bytes"] for v in sizes.values()),
        "train_bytes": sum(v["train_bytes"] for v in sizes.values()),
        "valid_bytes": sum(v["valid_bytes"] for v in sizes.values()),
    }
    with open(os.path.join(out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True)
    return stats

if __name__ == "__main__":
    main()
