"""Allocation-heavy Python work for bench/real.py (run with
PYTHONMALLOC=malloc so that every object goes through malloc): a dict of
many strings churned, lists and tuples built and dropped, JSON dumps/loads
of a nested structure, objects sorted by several keys. Seeded; prints one
line per part and a SHA-256 digest of everything it computed."""

import hashlib
import json
import random

rng = random.Random(12345)
digest = hashlib.sha256()


def note(label, value):
    line = "%s: %s" % (label, value)
    digest.update(line.encode())
    print(line)


VOCAB = ["".join(rng.choices("etaoinshrdlcumwfgyp", k=rng.randint(3, 12)))
         for _ in range(4096)]


def word():
    return VOCAB[rng.getrandbits(12)]


# a dict of many strings, churned: insert, grow values, delete
d = {}
for i in range(100000):
    d["key-%d-%s" % (i, word())] = word() * rng.randint(1, 4)
keys = list(d)
for k in rng.sample(keys, 30000):
    del d[k]
for k in rng.sample(list(d), 30000):
    d[k] = d[k] + "-" + d[k].upper()
note("dict", "%d entries, %d value bytes" % (len(d), sum(map(len, d.values()))))

# list/tuple churn
total = 0
for r in range(10):
    rows = [(i, str(i), float(i) / 7, (i % 13, VOCAB[i % 4096] * (i % 3))) for i in range(20000)]
    rows = [t for t in rows if t[0] % 3] + rows[: 5000]
    pairs = list(zip(rows[::2], rows[1::2]))
    total += len(pairs) + sum(len(t[3][1]) for t in rows[::50])
    del rows, pairs
note("tuples", total)

# JSON of a nested structure, round trips
doc = [{"id": i, "name": word(), "tags": [word() for _ in range(rng.randint(0, 8))],
        "attrs": {word(): rng.randint(0, 10 ** 6) for _ in range(rng.randint(1, 6))},
        "children": [{"n": j, "v": rng.random()} for j in range(rng.randint(0, 5))]}
       for i in range(12000)]
for _ in range(3):
    text = json.dumps(doc, sort_keys=True)
    doc = json.loads(text)
    doc.append({"id": len(doc), "name": "appended", "tags": [], "attrs": {}, "children": []})
note("json", "%d bytes, sha256 %s" % (len(text), hashlib.sha256(text.encode()).hexdigest()[:16]))


class Item:
    __slots__ = ("name", "group", "weight")

    def __init__(self, name, group, weight):
        self.name, self.group, self.weight = name, group, weight


# sorting objects
items = [Item(word(), rng.randint(0, 999), rng.randint(0, 10 ** 9)) for _ in range(60000)]
items.sort(key=lambda o: (o.group, o.name, o.weight))
first = "|".join("%s/%d" % (o.name, o.group) for o in items[:5])
items.sort(key=lambda o: o.weight, reverse=True)
note("sort", "%s; heaviest %d" % (first, items[0].weight))

print("digest", digest.hexdigest())
