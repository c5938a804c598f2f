#!/usr/bin/env python3
"""The structure of the library as its build shows it: for each object file
of build/obj (make), the object files that define the symbols it uses (nm),
as file -> file arrows; the call loops (strongly connected components); and
the arrows that run back up the layers listed in LAYERS below.

  python3 tools/structure.py [-v] [OBJDIR]     (make structure)

Prints the loops, the arrows back up (with -v, the symbols each one
uses), and a summary line of counts."""
import os
import subprocess
import sys

# The layers from the top down, each a list of the folders of src/ that
# hold it. An arrow from a file to one in a layer above it runs back up.
# The allocation path runs from the entry points (api) down to the OS
# layer; the services sit beside it, above the tiers they drive and read
# (the tiers reach them only through hooks and counters), and the base
# (options, text output, memory checkers) below every tier that reads it.
LAYERS = [
    ('entry points', ['api']),
    ('services', ['services']),
    ('thread heaps and caches', ['heap']),
    ('slabs and large blocks', ['slab', 'large']),
    ('address space', ['arena']),
    ('base', ['base']),
    ('os', ['os']),
]


def nm(path, *flags):
    """nm's lines for path, each split into its fields (the symbol last,
    its kind before it)."""
    out = subprocess.run(['nm', *flags, path], capture_output=True, text=True, check=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def graph(objdir):
    # the objects of the sources the Makefile compiles (SRCS), not whatever
    # an earlier tree left in objdir
    objs = sorted(os.path.relpath(os.path.join(d, f), 'src')[:-2]
                  for d, _, fs in os.walk('src') for f in fs if f.endswith('.c'))
    owner = {}
    for o in objs:
        for fields in nm(os.path.join(objdir, o + '.o'), '--defined-only'):
            kind, sym = fields[-2:]
            if kind.isupper():   # global symbols only: a static one is its file's own
                owner[sym] = o
    arrows = {o: {} for o in objs}   # file -> {file it uses: the symbols}
    for o in objs:
        for sym in (fields[-1] for fields in nm(os.path.join(objdir, o + '.o'), '-u')):
            if sym in owner and owner[sym] != o:
                arrows[o].setdefault(owner[sym], []).append(sym)
    return objs, arrows


def loops(objs, arrows):
    """Tarjan's strongly connected components, those of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(arrows[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in objs:
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def main():
    args = sys.argv[1:]
    verbose = '-v' in args
    args = [a for a in args if a != '-v']
    objdir = args[0] if args else 'build/obj'
    objs, arrows = graph(objdir)
    folder_rank = {d: i for i, (_, folders) in enumerate(LAYERS) for d in folders}
    rank = {o: folder_rank[os.path.dirname(o)] for o in objs if os.path.dirname(o) in folder_rank}
    unplaced = [o for o in objs if o not in rank]
    if unplaced:
        sys.exit('structure.py: not in LAYERS: ' + ' '.join(unplaced))
    comps = loops(objs, arrows)
    up = sorted((a, b) for a in objs for b in arrows[a] if rank[b] < rank[a])
    print('layers, top down:')
    for i, (name, folders) in enumerate(LAYERS):
        print(f'  {name}: {" ".join(o for o in objs if rank[o] == i)}')
    print('call loops (files that reach each other):')
    for c in comps:
        print(f'  {len(c)}: {" ".join(c)}')
    print('arrows back up the layers:')
    for a, b in up:
        print(f'  {a} -> {b}' + (f': {" ".join(sorted(arrows[a][b]))}' if verbose else ''))
    srcs = [os.path.join(d, f) for d, _, fs in os.walk('src') for f in fs if f.endswith(('.c', '.h'))]
    lines = {p: sum(1 for _ in open(p)) for p in srcs}
    largest = max(srcs, key=lines.get)
    n = sum(len(v) for v in arrows.values())
    print(f'arrows {n}, back up {len(up)}, largest loop {len(comps[0]) if comps else 1} files, '
          f'objects {len(objs)}, src files {len(srcs)}, largest {largest} {lines[largest]} lines')


if __name__ == '__main__':
    main()
