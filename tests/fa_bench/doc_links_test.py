#!/usr/bin/env python3
"""The docs' links and the records' index hold together:
- every relative markdown link in README.md, docs/*.md, bench/README.md,
  bench/results/README.md and dev/experiments/README.md names a file or folder of the
  repository, and a #fragment names a heading of the target page (GitHub's anchors);
- every `bench/results/...` path quoted in those pages (no wildcard) exists;
- every file at the top of bench/results/ is named in its README.md, and every folder under
  bench/results/archive/ has its line there (habit 15 of the style guide)."""
import glob
import os
import re
import sys
import unicodedata

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PAGES = (["README.md", "bench/README.md", "bench/results/README.md", "dev/experiments/README.md"]
         + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
QUOTED = re.compile(r"`(bench/results/[^`\s]+)`")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def prose(text):
    """The page without its fenced code blocks (whose brackets are not links)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def slug(heading):
    """GitHub's anchor of a heading: lower case, letters / marks / digits / '-' / '_' kept,
    spaces to '-'."""
    out = []
    for ch in heading.strip().lower():
        cat = unicodedata.category(ch)
        if ch == " ":
            out.append("-")
        elif ch in "-_" or cat[0] in "LMN":
            out.append(ch)
    return "".join(out)


def anchors(path):
    seen, found = {}, set()
    for line in prose(open(path, encoding="utf-8").read()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
    return found


for page in PAGES:
    path = os.path.join(ROOT, page)
    if not os.path.exists(path):
        continue
    text = prose(open(path, encoding="utf-8").read())
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            failures.append(f"{page}: link to {target}: no such file")
            continue
        if fragment and dest.endswith(".md"):
            check(fragment in anchors(dest), f"{page}: link to {target}: no such heading")
    for quoted in QUOTED.findall(text):
        if "*" in quoted or "…" in quoted or "{" in quoted or "<" in quoted:
            continue
        check(os.path.exists(os.path.join(ROOT, quoted)), f"{page}: `{quoted}`: no such file")

results = os.path.join(ROOT, "bench", "results")
index_path = os.path.join(results, "README.md")
check(os.path.exists(index_path), "bench/results/README.md is missing")
if os.path.exists(index_path):
    index = open(index_path, encoding="utf-8").read()
    for name in sorted(os.listdir(results)):
        full = os.path.join(results, name)
        if name == "README.md":
            continue
        if os.path.isdir(full):
            check(name == "archive", f"bench/results/{name}/: only archive/ may hold folders")
            continue
        check(name in index, f"bench/results/{name} is not named in bench/results/README.md")
    archive = os.path.join(results, "archive")
    for name in sorted(os.listdir(archive)) if os.path.isdir(archive) else []:
        check(re.fullmatch(r"\d{4}-\d\d-\d\d", name) is not None and os.path.isdir(os.path.join(archive, name)),
              f"bench/results/archive/{name}: not a <yyyy-mm-dd> folder")
        check(f"archive/{name}/" in index, f"bench/results/archive/{name}/ has no line in the index")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"doc_links: ok ({len(PAGES)} pages)")
