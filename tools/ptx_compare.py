#!/usr/bin/env python3
"""Compares the PTX of a .cu file before and after a refactor that must not change what its kernels compute
(no GPU needed). Usage, from the repo root:

    python3 tools/ptx_compare.py src/cuda/FILE.cu [REV]      # REV (default HEAD): the version to compare against

It writes the PTX of both versions (nvcc -std=c++17 -O3 -arch=compute_90a -ptx -Isrc -DFD_HAVE_CUDA: the
Makefile's NVFLAGS, as PTX), the old one from `git show REV:...` with every header of src/ taken from REV too,
and compares each function (.entry kernels and .func device functions, by mangled name) in three steps:

 1. normalised text: comments, blank lines and .reg declarations dropped; registers renumbered per class (%r,
    %rd, %f, %fd, %p, %rs, %h, ...) in order of first appearance; labels likewise; the translation unit's hash in
    the names of static symbols (_INTERNAL_xxxxxxxx_) dropped. Everything else (every instruction, operand
    order, immediate, param and shared symbol) must match: "byte-identical" or "identical up to numbering".
 2. for a function that differs: the ordered sequence of its float instructions' opcodes with all modifiers
    (add/sub/mul/fma/div/rcp/sqrt/rsqrt/ex2/lg2/min/max/neg/abs/cvt/setp/selp on f32/f64/f16/bf16/tf32, mma,
    shfl) and the multiset of its memory instructions (ld/st/cp.async/atom/red with space and width). The same
    float sequence means every float value is made by the same operations in the same order.
 3. the multiset difference of all its opcodes (what was added and removed).
Exit status 0 when every function is identical in step 1, 1 otherwise."""
import collections
import os
import re
import subprocess
import sys
import tempfile

NVCC = os.environ.get('NVCC', '/usr/local/cuda/bin/nvcc')
FLAGS = ['-std=c++17', '-O3', '-arch=compute_90a', '-ptx', '-DFD_HAVE_CUDA']


def functions(text):
    funcs, cur, name, depth = {}, None, None, 0
    for line in text.split('\n'):
        s = line.split('//')[0].rstrip()
        if cur is None:
            m = re.match(r'\s*(?:\.visible\s+|\.weak\s+)?(?:\.entry|\.func)\s+(?:\([^)]*\)\s*)?([\w$]+)', s)
            if not m:
                continue
            name, cur, depth = m.group(1), [], 0
        if s.strip():
            cur.append(s.strip())
        depth += s.count('{') - s.count('}')
        if '{' in ''.join(cur) and depth == 0 and s.strip().endswith('}'):
            funcs[name], cur = cur, None
    return funcs


def normalise(body):
    regs, labels, count, out = {}, {}, collections.Counter(), []

    def reg(m):
        if m.group(0) not in regs:
            regs[m.group(0)] = '%%%s#%d' % (m.group(1), count[m.group(1)])
            count[m.group(1)] += 1
        return regs[m.group(0)]

    def lab(m):
        labels.setdefault(m.group(0), '$L#%d' % len(labels))
        return labels[m.group(0)]

    for l in body:
        if l.startswith('.reg '):
            continue
        l = re.sub(r'\$L__\w+', lab, l)
        l = re.sub(r'_INTERNAL_[0-9a-f]{8}_', '_INTERNAL_<tu>_', l)
        l = re.sub(r'%(rd|rs|rl|r|fd|f|p|hh|h|b)(\d+)\b', reg, l)
        out.append(re.sub(r'\s+', ' ', l))
    return out


FP = re.compile(r'^(?:@!?%\w+\s+)?((?:add|sub|mul|fma|div|rcp|sqrt|rsqrt|ex2|lg2|min|max|neg|abs|cvt|mma|setp|'
                r'selp|shfl|copysign|tanh|sin|cos)\.[\w.]*)')
MEM = re.compile(r'^(?:@!?%\w+\s+)?((?:ld|st|cp\.async|atom|red)\.[\w.]*)')
OP = re.compile(r'^(?:@!?%\w+\s+)?([a-z][\w.]*)')


def float_and_memory(body):
    seq, mem = [], collections.Counter()
    for l in body:
        m = FP.match(l)
        if m and (re.search(r'\.(f32|f64|f16|bf16|f16x2|bf16x2|tf32)\b', m.group(1))
                  or m.group(1).startswith(('mma', 'shfl'))):
            seq.append(m.group(1))
        m = MEM.match(l)
        if m:
            mem[m.group(1)] += 1
    return seq, mem


def opcodes(body):
    c = collections.Counter()
    for l in body:
        m = OP.match(l)
        if m and not l.startswith('.') and not l.endswith(':'):
            c[m.group(1)] += 1
    return c


def ptx(src_path, include_dirs):
    with tempfile.NamedTemporaryFile(suffix='.ptx', delete=False) as f:
        out = f.name
    cmd = [NVCC] + FLAGS + sum([['-I', d] for d in include_dirs], []) + ['-o', out, src_path]
    subprocess.run(cmd, check=True)
    text = open(out).read()
    os.unlink(out)
    return text


def old_tree(rev, cu_path, tmp):
    """REV's src/ headers and the .cu, under tmp (so the old file includes the old headers)."""
    files = subprocess.run(['git', 'ls-tree', '-r', '--name-only', rev, 'src/'], check=True, capture_output=True,
                           text=True).stdout.split()
    for p in files:
        if p.endswith(('.h', '.cuh')) or p == cu_path:
            dst = os.path.join(tmp, p)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, 'wb') as f:
                f.write(subprocess.run(['git', 'show', '%s:%s' % (rev, p)], check=True, capture_output=True).stdout)
    return os.path.join(tmp, cu_path)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cu, rev = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else 'HEAD'
    with tempfile.TemporaryDirectory() as tmp:
        before = functions(ptx(old_tree(rev, cu, tmp), [os.path.join(tmp, 'src')]))
    after = functions(ptx(cu, ['src']))
    bad = 0
    for n in sorted(set(before) | set(after)):
        if n not in before or n not in after:
            print('%s: only %s' % (n, 'before' if n in before else 'after'))
            bad += 1
            continue
        x, y = normalise(before[n]), normalise(after[n])
        if x == y:
            print('%s: %s (%d lines)' % (n, 'byte-identical' if before[n] == after[n] else
                                          'identical up to register/label numbering', len(x)))
            continue
        bad += 1
        (sa, ma), (sb, mb) = float_and_memory(before[n]), float_and_memory(after[n])
        print('%s: DIFFERENT (%d vs %d normalised lines)' % (n, len(x), len(y)))
        print('    float ops: %s (%d vs %d)' % ('the same, in the same order' if sa == sb else 'DIFFER', len(sa),
                                                 len(sb)))
        print('    memory ops: %s' % ('the same' if ma == mb else 'before %s, after %s' % (
            dict(ma - mb), dict(mb - ma))))
        oa, ob = opcodes(before[n]), opcodes(after[n])
        print('    opcodes removed %s, added %s' % (dict(oa - ob), dict(ob - oa)))
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
