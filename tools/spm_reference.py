#!/usr/bin/env python3
"""SentencePiece in slowpipe against Debian's own command-line tools: spm_train makes two models
from the fortunes corpus (a unigram model with its default NFKC normalisation, and a BPE model with
byte fallback and no normalisation, the shape of Llama 2's tokenizer.model); spm_encode and
`slowpipe model tokenize` encode the same lines; every id must agree.

  spm_reference.py --bin build/slowpipe --work DIR [--lines 10000]
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_reference import corpus_lines  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--lines", type=int, default=10000)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    lines = corpus_lines(a.lines)
    text = os.path.join(a.work, "lines.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    models = {
        "unigram": ["--model_type=unigram", "--vocab_size=800"],
        "bpe": ["--model_type=bpe", "--vocab_size=600", "--byte_fallback=true", "--normalization_rule_name=identity",
                "--split_digits=true", "--character_coverage=0.9995"],
    }
    failures = []
    for name, args in models.items():
        prefix = os.path.join(a.work, name)
        r = subprocess.run(["spm_train", f"--input={text}", f"--model_prefix={prefix}", "--minloglevel=2", *args],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"spm_train {name} failed: {r.stderr.strip()[-500:]}")
        with open(text, encoding="utf-8") as f:
            ref = subprocess.run(["spm_encode", f"--model={prefix}.model", "--output_format=id"], stdin=f, capture_output=True,
                                 text=True, check=True).stdout.split("\n")[:-1]
        # A checkpoint folder's tokenizer.model, the way a Llama 2 folder holds it.
        folder = prefix + "-folder"
        os.makedirs(folder, exist_ok=True)
        with open(prefix + ".model", "rb") as src, open(os.path.join(folder, "tokenizer.model"), "wb") as dst:
            dst.write(src.read())
        got = subprocess.run([a.bin, "model", "tokenize", folder, "--lines", text], capture_output=True, text=True)
        if got.returncode != 0:
            sys.exit(f"slowpipe model tokenize {name} failed: {got.stderr.strip()}")
        mine = [l.replace(",", " ") for l in got.stdout.split("\n")[:-1]]
        if len(mine) != len(ref):
            failures.append(f"{name}: {len(mine)} lines from slowpipe, {len(ref)} from spm_encode")
            continue
        bad = [i for i, (x, y) in enumerate(zip(mine, ref)) if x != y]
        tokens = sum(len(l.split()) for l in ref)
        print(f"{name}: {len(lines)} lines, {tokens} tokens, {len(lines) - len(bad)} lines identical to spm_encode")
        for i in bad[:3]:
            failures.append(f"{name} line {i + 1} {lines[i]!r}: slowpipe {mine[i]} vs spm_encode {ref[i]}")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
