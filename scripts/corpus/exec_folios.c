/*
 * Which exec-time regions get large anonymous folios on the live kernel
 * (issue 13): writes (or reads) one byte per 4 KiB page of the program's
 * .bss, its initialized .data (a private file mapping: copy-on-write), a
 * brk heap, or the stack below the current frame, and prints the task's
 * faults (ru_minflt) and the system-wide per-size anon_fault_alloc deltas
 * around the loop. Run by scripts/exec_folios.sh under each configuration.
 *
 * usage: exec_folios bss|bssr|data|brk [x]  or  exec_folios stack N_PAGES
 * (bss and brk: 8 MiB; data: 4 MiB; a third argument also prints the maps)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <stdint.h>

char bss[8 << 20];
char data[4 << 20] = {1};

static long minflt(void) { struct rusage r; getrusage(RUSAGE_SELF, &r); return r.ru_minflt; }
static long stat64k(const char *sz) {
  char p[256]; snprintf(p, sizeof p, "/sys/kernel/mm/transparent_hugepage/hugepages-%s/stats/anon_fault_alloc", sz);
  FILE *f = fopen(p, "r"); long v = -1; if (f) { fscanf(f, "%ld", &v); fclose(f); } return v;
}
static void maps(const char *filt) {
  FILE *f = fopen("/proc/self/maps", "r"); char l[512];
  while (fgets(l, sizeof l, f)) if (!filt || strstr(l, filt)) fputs(l, stdout);
  fclose(f);
}
__attribute__((noinline)) static void stack_touch(int n) {
  volatile char local = 0;
  volatile char *p = (volatile char *)(((uintptr_t)&local) & ~4095UL);
  for (int i = 1; i <= n; i++) p[-(long)i * 4096] = 1;
}
int main(int argc, char **argv) {
  const char *m = argv[1];
  long f0 = minflt(), a16 = stat64k("16kB"), a64 = stat64k("64kB"), a2 = stat64k("2048kB");
  if (!strcmp(m, "stack")) stack_touch(atoi(argv[2]));
  else if (!strcmp(m, "bss")) for (long i = 0; i < (long)sizeof bss; i += 4096) bss[i] = 1;
  else if (!strcmp(m, "bssr")) { volatile long s=0; for (long i = 0; i < (long)sizeof bss; i += 4096) s += bss[i]; }
  else if (!strcmp(m, "data")) for (long i = 0; i < (long)sizeof data; i += 4096) data[i] = 2;
  else if (!strcmp(m, "brk")) { char *p = sbrk(8 << 20); for (long i = 0; i < (8 << 20); i += 4096) p[i] = 1; }
  long f1 = minflt();
  printf("%s faults=%ld 16k=%ld 64k=%ld 2m=%ld\n", m, f1 - f0, stat64k("16kB") - a16, stat64k("64kB") - a64, stat64k("2048kB") - a2);
  if (argc > 3) maps(NULL);
  return 0;
}
