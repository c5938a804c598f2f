#!/usr/bin/env python3
"""Writes the inputs of bench/real.py into DIR (seeded: the same files on
every machine with the same git and Python; words.txt.xz and the log only
where xz is installed, the repository only where git is):

  words.txt   ~100 MB of lines of random words and numbers (sort), and
              words.txt.xz, it compressed by xz -T2 -0 (unxz)
  log.txt     ~64 MB of a web server's log lines (xz)
  repo.git    a bare git repository: 40 files edited by 1200 commits, made
              with git fast-import and packed once (git log, blame, repack)
  script.sql  an SQL script: two indexed tables filled with 200k + 20k rows,
              then joins, GROUP BY, an UPDATE, a DELETE, ORDER BY (sqlite3)

Usage: python3 bench/real/gen.py DIR
"""

import os
import random
import shutil
import subprocess
import sys

SEED = 20240601


def vocabulary(rng, n):
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = [26 - i for i in range(len(letters))]
    return sorted({"".join(rng.choices(letters, weights, k=rng.randint(3, 10)))
                   for _ in range(n)})


def words_file(path, rng, vocab, size):
    with open(path, "w") as f:
        written = 0
        while written < size:
            lines = []
            for _ in range(10000):
                ws = rng.choices(vocab, k=rng.randint(2, 12))
                ws.insert(rng.randrange(len(ws)), str(rng.getrandbits(rng.randint(4, 40))))
                lines.append(" ".join(ws))
            chunk = "\n".join(lines) + "\n"
            f.write(chunk)
            written += len(chunk)


def log_file(path, rng, vocab, size):
    paths = ["/api/v1/%s/%s" % (rng.choice(vocab), rng.choice(vocab)) for _ in range(300)]
    users = vocab[:2000]
    t = 1500000000000
    with open(path, "w") as f:
        written = 0
        while written < size:
            lines = []
            for _ in range(10000):
                t += rng.randint(0, 50)
                lines.append("%d.%03d %s [worker-%d] %s %s status=%d bytes=%d took=%dms user=%s" % (
                    t // 1000, t % 1000, rng.choice(["INFO ", "INFO ", "WARN ", "DEBUG"]),
                    rng.randint(0, 15), rng.choice(["GET", "GET", "POST", "PUT"]),
                    rng.choice(paths), rng.choice([200, 200, 200, 304, 404, 500]),
                    rng.randint(0, 99999), rng.randint(0, 999), rng.choice(users)))
            chunk = "\n".join(lines) + "\n"
            f.write(chunk)
            written += len(chunk)


def code_line(rng, vocab):
    ws = rng.choices(vocab, k=rng.randint(1, 8))
    indent = "    " * rng.randint(0, 3)
    kind = rng.random()
    if kind < 0.3:
        return "%s%s = %s(%s);" % (indent, ws[0], ws[-1], ", ".join(ws[1:-1]))
    if kind < 0.4:
        return "%sif (%s > %d) {" % (indent, ws[0], rng.randint(0, 999))
    if kind < 0.5:
        return indent + "}"
    return "%s/* %s */" % (indent, " ".join(ws))


def repository(path, rng, vocab, nfiles=40, ncommits=1200):
    """A bare repository made by git fast-import (fixed names and dates, so
    the same commit ids everywhere), then packed."""
    subprocess.run(["git", "init", "-q", "--bare", path], check=True)
    files = [[code_line(rng, vocab) for _ in range(rng.randint(200, 1500))]
             for _ in range(nfiles)]
    p = subprocess.Popen(["git", "-C", path, "fast-import", "--quiet"], stdin=subprocess.PIPE)

    def emit(s):
        p.stdin.write(s if isinstance(s, bytes) else s.encode())

    for c in range(ncommits):
        # file 0 (blame's) changes in every commit, up to 4 others at random
        touched = {0} | {rng.randrange(nfiles) for _ in range(rng.randint(0, 4))}
        if c == 0:
            touched = set(range(nfiles))
        for i in sorted(touched):
            lines = files[i]
            for _ in range(rng.randint(1, 6)):
                at = rng.randrange(len(lines) + 1)
                op = rng.random()
                if op < 0.4:
                    lines[at:at] = [code_line(rng, vocab) for _ in range(rng.randint(1, 20))]
                elif op < 0.7 and len(lines) > 100:
                    del lines[at:at + rng.randint(1, 10)]
                else:
                    lines[at:at + 3] = [code_line(rng, vocab) for _ in range(3)]
        msg = "change %d: %s\n" % (c, " ".join(rng.choices(vocab, k=rng.randint(3, 12))))
        when = 1500000000 + c * 3600
        emit("commit refs/heads/main\nmark :%d\n" % (c + 1))
        emit("author A U Thor <author@example.com> %d +0000\n" % when)
        emit("committer C O Mitter <committer@example.com> %d +0000\n" % when)
        emit("data %d\n%s" % (len(msg), msg))
        if c:
            emit("from :%d\n" % c)
        for i in sorted(touched):
            data = ("\n".join(files[i]) + "\n").encode()
            emit("M 100644 inline src/f%02d.c\ndata %d\n" % (i, len(data)))
            emit(data)
            emit("\n")
    p.stdin.close()
    if p.wait():
        sys.exit("gen.py: git fast-import failed")
    subprocess.run(["git", "-C", path, "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    subprocess.run(["git", "-C", path, "repack", "-adfq"], check=True)


def sql_script(path, rng, vocab, ncustomers=20000, norders=200000):
    cities = rng.sample(vocab, 300)
    items = rng.sample(vocab, 5000)
    out = [
        "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT, score INTEGER);",
        "CREATE INDEX customers_city ON customers(city);",
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER, item TEXT, "
        "qty INTEGER, cents INTEGER, note TEXT);",
        "CREATE INDEX orders_customer ON orders(customer);",
        "CREATE INDEX orders_item ON orders(item, qty);",
        "BEGIN;",
    ]

    def inserts(table, rows):
        for i in range(0, len(rows), 500):
            out.append("INSERT INTO %s VALUES %s;" % (table, ",".join(rows[i:i + 500])))

    inserts("customers", ["(%d,'%s %s','%s',%d)" % (
        i, rng.choice(vocab), rng.choice(vocab), rng.choice(cities), rng.randint(0, 100000))
        for i in range(1, ncustomers + 1)])
    inserts("orders", ["(%d,%d,'%s',%d,%d,'%s')" % (
        i, rng.randint(1, ncustomers), rng.choice(items), rng.randint(1, 50),
        rng.randint(50, 100000), " ".join(rng.choices(vocab, k=rng.randint(0, 6))))
        for i in range(1, norders + 1)])
    out += [
        "COMMIT;",
        "SELECT c.city, count(*), sum(o.qty * o.cents) FROM orders o JOIN customers c "
        "ON c.id = o.customer GROUP BY c.city ORDER BY 3 DESC, 1 LIMIT 25;",
        "UPDATE orders SET cents = cents * 11 / 10, note = note || ' repriced' "
        "WHERE item < 'k';",
        "SELECT item, count(*), sum(qty), max(cents) FROM orders GROUP BY item "
        "ORDER BY 2 DESC, 1 LIMIT 25;",
        "SELECT c.name, count(o.id) AS n, group_concat(DISTINCT o.item) FROM customers c "
        "JOIN orders o ON o.customer = c.id WHERE c.score > 90000 GROUP BY c.id "
        "ORDER BY n DESC, c.name LIMIT 25;",
        "SELECT note, count(*) FROM orders GROUP BY note ORDER BY 2 DESC, 1 LIMIT 25;",
        "DELETE FROM orders WHERE qty > 45;",
        "SELECT count(*), sum(cents), count(DISTINCT customer) FROM orders;",
        "SELECT id, customer, item, qty, cents FROM orders ORDER BY cents DESC, id LIMIT 25;",
    ]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen.py DIR")
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    vocab = vocabulary(random.Random(SEED), 30000)

    def rng(name):
        return random.Random("%s-%d" % (name, SEED))

    words_file(os.path.join(d, "words.txt"), rng("words"), vocab, 100 << 20)
    sql_script(os.path.join(d, "script.sql"), rng("sql"), vocab)
    if shutil.which("xz"):
        subprocess.run(["xz", "-T2", "-0", "-k", os.path.join(d, "words.txt")], check=True)
        log_file(os.path.join(d, "log.txt"), rng("log"), vocab, 64 << 20)
    if shutil.which("git"):
        repository(os.path.join(d, "repo.git"), rng("repo"), vocab)


if __name__ == "__main__":
    main()
