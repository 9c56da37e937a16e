#!/usr/bin/env python3
"""Makes the inputs of the validation corpus (scripts/corpus.py) in a
directory, deterministically: the same files, byte for byte, every time.

usage: corpus_inputs.py DIR
"""
import os
import random
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

def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    c_project(os.path.join(d, "cproj"))
    text_file(os.path.join(d, "text.txt"), 24 << 20, 1)
    numbers_file(os.path.join(d, "numbers.txt"), 1_500_000, 2)

if __name__ == "__main__":
    main()
