#!/usr/bin/env python3
"""Makes the inputs of the validation corpus (scripts/corpus.py) in a
directory, deterministically: the same files, byte for byte, every time.

usage: corpus_inputs.py DIR
"""
import os
import random
import subprocess
import sys

def c_project(d, nfiles=40):
    """A C project of `nfiles` translation units and a Makefile: `make -j2`
    runs gcc (cc1, as) per file and gcc (collect2, ld) to link, ~4 execs
    per file."""
    os.makedirs(d, exist_ok=True)
    rnd = random.Random(13)
    objs = []
    for i in range(nfiles):
        name = f"unit{i:02d}"
        objs.append(name + ".o")
        with open(os.path.join(d, name + ".c"), "w") as f:
            f.write("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n")
            for j in range(12):
                n = rnd.randint(3, 9)
                f.write(f"static int table_{j}[{64 * n}] = {{{', '.join(str(rnd.randint(0, 999)) for _ in range(16))}}};\n")
                f.write(f"int {name}_f{j}(int x) {{\n  int s = 0;\n")
                for k in range(n):
                    f.write(f"  for (int i = 0; i < {rnd.randint(5, 50)}; i++) s += table_{j}[(x * {k + 1} + i) % {64 * n}] ^ (s << {k % 5});\n")
                f.write(f"  if (s % {rnd.randint(2, 9)} == 0) {{ char buf[64]; snprintf(buf, sizeof buf, \"%d\", s); s += (int)strlen(buf); }}\n")
                f.write("  return s;\n}\n")
    with open(os.path.join(d, "main.c"), "w") as f:
        f.write("#include <stdio.h>\n")
        for i in range(nfiles):
            f.write(f"int unit{i:02d}_f0(int);\n")
        f.write("int main(void) { long s = 0;\n")
        for i in range(nfiles):
            f.write(f"  s += unit{i:02d}_f0({i});\n")
        f.write("  printf(\"%ld\\n\", s); return 0; }\n")
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write("CFLAGS = -O2\nOBJS = main.o " + " ".join(objs) + "\n")
        f.write("prog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n")
        f.write("%.o: %.c\n\t$(CC) $(CFLAGS) -c -o $@ $<\n")
        f.write("clean:\n\trm -f prog *.o\n")

def text_file(path, nbytes, seed):
    """Words from a small vocabulary, as a compressor's or sort's input."""
    rnd = random.Random(seed)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9))) for _ in range(5000)]
    with open(path, "w") as f:
        n = 0
        while n < nbytes:
            line = " ".join(rnd.choice(words) for _ in range(rnd.randint(3, 14))) + "\n"
            f.write(line)
            n += len(line)

def numbers_file(path, count, seed):
    rnd = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            f.write(f"{rnd.randint(0, 10**9)}\n")

PYTHON = """\
import json, random
rnd = random.Random(5)
d = {}
for i in range(200000):
    d["k%07d" % rnd.randrange(10**7)] = [i, str(i) * 3, {"v": i * 0.5}]
items = sorted(d.items(), key=lambda kv: kv[1][0] % 977)
s = json.dumps(items[:50000])
back = json.loads(s)
words = [w[::-1] for w, _ in items]
print(len(d), len(s), len(back), sum(len(w) for w in words))
"""

NODE = """\
let seed = 5;
function rnd() { seed = (seed * 1103515245 + 12345) % 2147483648; return seed; }
const m = new Map();
for (let i = 0; i < 200000; i++) m.set('k' + rnd(), { i, s: String(i).repeat(3), a: [i, i * 2] });
const arr = Array.from(m.values()).sort((a, b) => (a.i % 977) - (b.i % 977));
const s = JSON.stringify(arr.slice(0, 50000));
const back = JSON.parse(s);
let t = 0; for (const o of arr) t += o.s.length;
console.log(m.size, s.length, back.length, t);
"""

SQL = """\
PRAGMA cache_size = -65536;
CREATE TABLE t(a INTEGER, b TEXT, c REAL);
WITH RECURSIVE cnt(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM cnt WHERE x < 400000)
INSERT INTO t SELECT (x * 7919) % 100003, printf('row%08d', x), x * 0.25 FROM cnt;
CREATE INDEX ta ON t(a);
SELECT count(*), sum(a), max(b) FROM t WHERE a % 3 = 1;
SELECT a, count(*) FROM t GROUP BY a ORDER BY 2 DESC, 1 LIMIT 5;
SELECT b FROM t ORDER BY c DESC LIMIT 3;
"""

PERL = """\
my %h; my $seed = 5;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }
for my $i (0 .. 99999) { $h{"k" . rnd()} = [$i, "$i" x 3]; }
my @k = sort { $h{$a}[0] % 977 <=> $h{$b}[0] % 977 } keys %h;
my $n = 0; for my $k (@k) { $n++ if $h{$k}[1] =~ /7.*7/; }
print scalar(keys %h), " $n\n";
"""

JAVA = """\
import java.util.*;
public class Workload {
    public static void main(String[] a) {
        long seed = 5;
        HashMap<String, int[]> m = new HashMap<>();
        for (int i = 0; i < 200000; i++) {
            seed = (seed * 1103515245L + 12345L) % 2147483648L;
            m.put("k" + seed, new int[] {i, i * 2, i * 3});
        }
        ArrayList<int[]> l = new ArrayList<>(m.values());
        l.sort(Comparator.comparingInt(x -> x[0] % 977));
        StringBuilder sb = new StringBuilder();
        for (int[] x : l) sb.append(x[1]).append(',');
        System.out.println(m.size() + " " + sb.length());
    }
}
"""

TCL = """\
set seed 5
proc rnd {} { global seed; set seed [expr {($seed * 1103515245 + 12345) % 2147483648}]; return $seed }
set d [dict create]
for {set i 0} {$i < 150000} {incr i} { dict set d "k[rnd]" [list $i [string repeat $i 3]] }
set l {}
dict for {k v} $d { lappend l [list [expr {[lindex $v 0] % 977}] $k] }
set l [lsort -integer -index 0 $l]
set n 0
foreach x $l { if {[string match *7*7* [lindex $x 1]]} { incr n } }
puts "[dict size $d] $n"
"""

SERVER = """\
# A small HTTP server under a local load: the server is a forked child on
# a loopback port the kernel picks; the parent makes 400 requests to it.
import http.client, http.server, os, signal, socket, sys

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.path * 200).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

srv = http.server.HTTPServer(("127.0.0.1", 0), H)
port = srv.server_address[1]
pid = os.fork()
if pid == 0:
    try:
        srv.serve_forever()
    finally:
        os._exit(0)
srv.socket.close()
total = 0
for i in range(400):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/item/%d" % (i % 37))
    total += len(c.getresponse().read())
    c.close()
os.kill(pid, signal.SIGTERM)
os.waitpid(pid, 0)
print(total)
"""

def scripts(d):
    for name, text in [("workload.py", PYTHON), ("workload.js", NODE), ("workload.sql", SQL),
                       ("workload.pl", PERL), ("Workload.java", JAVA), ("server.py", SERVER),
                       ("workload.tcl", TCL)]:
        with open(os.path.join(d, name), "w") as f:
            f.write(text)

def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    c_project(os.path.join(d, "cproj"))
    text_file(os.path.join(d, "text.txt"), 12 << 20, 1)
    text_file(os.path.join(d, "small.txt"), 2 << 20, 3)
    numbers_file(os.path.join(d, "numbers.txt"), 1_500_000, 2)
    scripts(d)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "exec_folios.c")
    subprocess.run(["gcc", "-O1", "-o", os.path.join(d, "exec_folios"), src], check=True)

if __name__ == "__main__":
    main()
