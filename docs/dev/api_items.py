#!/usr/bin/env python3
"""Public API items of `intranode`, from rustdoc's JSON.

  cargo +nightly-2026-05-20 rustdoc -p intranode -- -Z unstable-options --output-format json
  python3 docs/dev/api_items.py target/doc/intranode.json [--list]

Counts the items a user of the crate (default features) can name, walking
from the crate root: modules, structs, enums, unions, traits, functions,
constants, statics, type aliases, macros; the variants of public enums,
the public fields of public structs, the methods and associated items of
their inherent impls, and the items of public traits. A re-export
(`pub use`) of an item of this crate counts the item it names (once,
whichever path reaches it first); a re-export of another crate counts as
one item. Trait impls (derives, blanket and auto impls) are not counted.
"""
import json, sys

doc = json.load(open(sys.argv[1]))
index = doc["index"]
seen, paths = set(), []

def kind(item):
    return next(iter(item["inner"])) if isinstance(item["inner"], dict) else item["inner"]

def visit(i, path):
    i = str(i)
    if i in seen or i not in index:
        return
    item = index[i]
    if item.get("crate_id", 0) != 0:
        return
    seen.add(i)
    k = kind(item)
    inner = item["inner"][k] if isinstance(item["inner"], dict) else {}
    name = item.get("name") or ""
    here = f"{path}::{name}" if name else path
    if k == "use":
        target = inner.get("id")
        if target is not None and str(target) in index and index[str(target)].get("crate_id", 0) == 0:
            visit(target, path if inner.get("is_glob") else path)
            return
        paths.append(f"use {path}::{inner.get('name')} = {inner.get('source')}")
        return
    if k == "impl":
        if inner.get("trait") is not None:
            return
        for c in inner.get("items", []):
            visit(c, path)
        return
    # Trait items and enum variants carry rustdoc visibility "default".
    if item.get("visibility") not in ("public", "default"):
        return
    paths.append(f"{k} {here}")
    if k == "module":
        for c in inner.get("items", []):
            visit(c, here)
    elif k == "struct":
        sk = inner.get("kind", {})
        fields = []
        if isinstance(sk, dict):
            if "plain" in sk: fields = sk["plain"].get("fields", [])
            elif "tuple" in sk: fields = [f for f in sk["tuple"] if f is not None]
        for f in fields: visit(f, here)
        for im in inner.get("impls", []): visit(im, here)
    elif k == "enum":
        for v in inner.get("variants", []): visit(v, here)
        for im in inner.get("impls", []): visit(im, here)
    elif k == "union":
        for f in inner.get("fields", []): visit(f, here)
        for im in inner.get("impls", []): visit(im, here)
    elif k == "trait":
        for c in inner.get("items", []): visit(c, here)

visit(doc["root"], "")
paths = [p.replace(" ::", " ") for p in paths]
by_kind = {}
for p in paths:
    k = p.split()[0]
    by_kind[k] = by_kind.get(k, 0) + 1
print(len(paths), "items:", ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
if "--list" in sys.argv:
    for p in sorted(paths): print(p)
