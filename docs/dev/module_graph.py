#!/usr/bin/env python3
"""Module graph of host/src at the level of its top-level modules.

An arrow A -> B: a non-test source file of module A names `crate::B`
(in a `use` line, a `use crate::{...}` group, or a path in code; names
re-exported at the crate root are mapped to their defining module).
Comments and test code are left out: files `tests.rs` / `test_*.rs` and an inline
`#[cfg(test)] mod ... {` with everything after it.

Prints the arrows, the strongly connected components with more than one
module (the cycles), and the fewest arrows that must point up under the
best floor order (a minimum feedback arc set, exact by dynamic
programming over subsets: fine for <= 20 modules).

Usage: python3 docs/dev/module_graph.py [host/src]
"""
import os, re, sys
from itertools import combinations

src = sys.argv[1] if len(sys.argv) > 1 else "host/src"
mods = sorted({f[:-3] if f.endswith(".rs") else f for f in os.listdir(src)
               if f != "lib.rs" and (f.endswith(".rs") or os.path.isdir(os.path.join(src, f)))})
lib = open(os.path.join(src, "lib.rs")).read()
# Crate-root re-exports: `pub use module::{A, B};` / `pub use module::A;`.
root = {}
for m in re.finditer(r"pub(?:\(crate\))?\s+use\s+(\w+)::(\{[^}]*\}|\w+)\s*;", lib):
    for name in re.findall(r"\w+", m.group(2)):
        root[name] = m.group(1)

def strip_test(text):
    # An inline test module (`#[cfg(test)] mod tests {`) ends the file's
    # code; `#[cfg(test)] mod tests;` (a file of its own) is skipped below.
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod \w+ \{", text)
    text = text if m is None else text[:m.start()]
    # Comments (doc links included) are no imports.
    return re.sub(r"//.*", "", text)

def targets(text):
    out = set()
    for m in re.finditer(r"crate::(\{|\w+)", text):
        if m.group(1) != "{":
            out.add(m.group(1)); continue
        depth, j, start, items = 1, m.end(), m.end(), []
        while depth and j < len(text):
            c = text[j]
            if c == "{": depth += 1
            elif c == "}": depth -= 1
            if (c == "," and depth == 1) or depth == 0:
                items.append(text[start:j]); start = j + 1
            j += 1
        for it in items:
            w = re.match(r"\s*(\w+)", it)
            if w: out.add(w.group(1))
    return {root.get(t, t) for t in out}

edges = set()
for m in mods:
    p = os.path.join(src, m)
    files = [p + ".rs"] if os.path.isfile(p + ".rs") else [
        os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs if f.endswith(".rs")]
    for f in files:
        b = os.path.basename(f)
        if b == "tests.rs" or b.startswith("test_"):
            continue
        for t in targets(strip_test(open(f).read())):
            if t in mods and t != m:
                edges.add((m, t))

n = len(mods); idx = {m: i for i, m in enumerate(mods)}
adj = {m: sorted(t for s, t in edges if s == m) for m in mods}
# Tarjan's strongly connected components.
index, low, stack, on, sccs, c = {}, {}, [], set(), [], [0]
def dfs(v):
    index[v] = low[v] = c[0]; c[0] += 1; stack.append(v); on.add(v)
    for w in adj[v]:
        if w not in index: dfs(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        sccs.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in mods:
    if v not in index: dfs(v)
cycles = [s for s in sccs if len(s) > 1]
# Minimum feedback arc set: order modules bottom-up; best[S] = fewest
# upward arrows among the modules of S placed on the lowest |S| floors.
# Placing v on top of S: arrows from S into v point up.
into = [0] * n
for s, t in edges:
    into[idx[t]] |= 1 << idx[s]
INF = 1 << 30
best = [INF] * (1 << n); best[0] = 0; choice = [0] * (1 << n)
for S in range(1 << n):
    if best[S] == INF: continue
    for v in range(n):
        if S >> v & 1: continue
        cost = best[S] + bin(into[v] & S).count("1")
        T = S | 1 << v
        if cost < best[T]: best[T] = cost; choice[T] = v
order, S = [], (1 << n) - 1
while S:
    v = choice[S]; order.append(mods[v]); S &= ~(1 << v)
order.reverse()  # bottom floor first
pos = {m: i for i, m in enumerate(order)}
up = sorted((s, t) for s, t in edges if pos[t] > pos[s])
print(f"modules: {n}, arrows: {len(edges)}")
for s, t in sorted(edges): print(f"  {s} -> {t}")
print(f"cycles (strongly connected components of >1 module): {len(cycles)}")
for s in cycles: print(f"  {len(s)} modules: {', '.join(s)}")
print(f"fewest upward arrows under any floor order: {len(up)}")
print("  best order, bottom first: " + " < ".join(order))
for s, t in up: print(f"  up: {s} -> {t}")
