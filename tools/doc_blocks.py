#!/usr/bin/env python3
"""Runs every command block of README.md and docs/ that is marked runnable, so a renamed flag or a
moved file fails CI instead of a reader.

A block is runnable when the line just above its opening fence is

    <!-- runnable -->

or, where the text says the test uses small settings,

    <!-- runnable small="TEXT=>REPLACEMENT" small="..." -->

which replaces TEXT in the block before it runs (the block's own flags still run). The marker is
an HTML comment: rendered Markdown does not show it.

The blocks of one page run in order in one scratch folder of their own (a page may build on its
earlier blocks, as a reader does), with `build`, `experiments`, `docs`, `results`, `examples`,
`tools` and `data` linked to the source tree and the build, under bash -euo pipefail.

    doc_blocks.py --root SRC --build BUILD [--min N] [--only PAGE] [--list]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r'^<!--\s*runnable((?:\s+small="[^"]*")*)\s*-->\s*$')
SMALL = re.compile(r'small="([^"]*)"')


def pages(root):
    out = [os.path.join(root, 'README.md')]
    for d, _, files in os.walk(os.path.join(root, 'docs')):
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith('.md')]
    return sorted(out)


def blocks(path):
    """(line, code, small) of each runnable block of a page."""
    lines = open(path, encoding='utf-8').read().split('\n')
    found = []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i].strip())
        if m and i + 1 < len(lines) and lines[i + 1].lstrip().startswith('```'):
            fence = lines[i + 1].lstrip()[:3]
            j = i + 2
            while j < len(lines) and not lines[j].lstrip().startswith(fence):
                j += 1
            if j == len(lines):
                raise SystemExit('%s:%d: a runnable block is never closed' % (path, i + 2))
            small = []
            for s in SMALL.findall(m.group(1)):
                if '=>' not in s:
                    raise SystemExit('%s:%d: small="%s" is not TEXT=>REPLACEMENT' % (path, i + 1, s))
                small.append(tuple(s.split('=>', 1)))
            found.append((i + 3, '\n'.join(lines[i + 2:j]), small))
            i = j
        elif m:
            raise SystemExit('%s:%d: <!-- runnable --> is not just above a ``` block' % (path, i + 1))
        i += 1
    return found


def scratch(root, build):
    d = tempfile.mkdtemp(prefix='slowpipe-doc-')
    for name in ('experiments', 'docs', 'results', 'examples', 'tools', 'data'):
        if os.path.exists(os.path.join(root, name)):
            os.symlink(os.path.join(root, name), os.path.join(d, name))
    os.symlink(os.path.abspath(build), os.path.join(d, 'build'))
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', required=True)
    ap.add_argument('--build', required=True)
    ap.add_argument('--min', type=int, default=0, help='fail with fewer runnable blocks')
    ap.add_argument('--only', help='run only the pages whose path contains this')
    ap.add_argument('--list', action='store_true', help='list the blocks, run nothing')
    ap.add_argument('--timeout', type=float, default=600)
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    todo = [(p, b) for p in pages(root) for b in blocks(p) if not a.only or a.only in p]
    if a.list:
        for p, (line, code, small) in todo:
            print('%s:%d: %s' % (os.path.relpath(p, root), line, code.split('\n')[0]))
        print('%d runnable blocks' % len(todo))
        return 0
    failed, ran = [], 0
    dirs = {}
    t0 = time.time()
    for p, (line, code, small) in todo:
        if p not in dirs:
            dirs[p] = scratch(root, a.build)
        for old, new in small:
            if old not in code:
                failed.append((p, line, 'small="%s=>%s": "%s" is not in the block' % (old, new, old)))
                break
            code = code.replace(old, new)
        else:
            ran += 1
            start = time.time()
            try:
                r = subprocess.run(['bash', '-euo', 'pipefail', '-c', code], cwd=dirs[p],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   timeout=a.timeout, stdin=subprocess.DEVNULL)
                status, out = r.returncode, r.stdout.decode(errors='replace')
            except subprocess.TimeoutExpired as e:
                status, out = 'timeout', (e.stdout or b'').decode(errors='replace')
            where = '%s:%d' % (os.path.relpath(p, root), line)
            print('%-40s %s %6.1f s' % (where, 'ok' if status == 0 else 'FAILED', time.time() - start),
                  flush=True)
            if status != 0:
                failed.append((p, line, 'exit %s\n$ %s\n%s' % (status, code, out[-3000:])))
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
    for p, line, why in failed:
        print('\n--- %s:%d failed: %s' % (os.path.relpath(p, root), line, why))
    print('doc blocks: %d runnable, %d ran, %d failed, %.0f s' % (len(todo), ran, len(failed),
                                                                 time.time() - t0))
    if len(todo) < a.min:
        print('doc blocks: %d runnable blocks, fewer than --min %d' % (len(todo), a.min))
        return 1
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
