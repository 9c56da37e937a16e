// What a 4 KiB anonymous fault costs when the program has run through its
// own data between faults (issue 14, seed 004; docs/kbuild-recording.md):
// the time of the first store to each fresh page (rdtsc, fenced), with a
// sweep of S bytes of the program's own buffer (one write per 64-byte line)
// before each, against S = 0 (back to back, as `mmlab calibrate` times
// faults). With FRESH = 0 the pages are faulted in first, so the same store
// is timed without a fault. Touches no knob; the host's defaults map 4 KiB
// folios (and MADV_NOHUGEPAGE keeps THP off either way).
//
//     gcc -O2 -o cold_fault scripts/cold_fault.c
//     ./cold_fault [PAGES=20000] [S=0] [FRESH=1]
//
// Prints the mean, median, 10th and 90th percentile in ns (the mean
// carries preemptions on a shared host; the median is the figure).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

static double tsc_per_ns(void) {
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t t0 = __rdtsc();
    do clock_gettime(CLOCK_MONOTONIC, &b); while ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec) < 2e8);
    uint64_t t1 = __rdtsc();
    return (t1 - t0) / ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
}
static int cmp(const void *a, const void *b) { uint64_t x = *(uint64_t*)a, y = *(uint64_t*)b; return x < y ? -1 : x > y; }

int main(int argc, char **argv) {
    size_t npages = argc > 1 ? atol(argv[1]) : 20000;
    size_t ws = argc > 2 ? atol(argv[2]) : 0;   // bytes swept between faults
    int fresh = argc > 3 ? atoi(argv[3]) : 1;   // 0: the pages are faulted in first (no fault timed)
    double f = tsc_per_ns();
    if (npages == 0 || f <= 0) { fprintf(stderr, "usage: cold_fault [PAGES>0] [S] [FRESH]\n"); return 2; }
    char *r = mmap(NULL, npages * 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(r, npages * 4096, MADV_NOHUGEPAGE);
    if (!fresh) for (size_t i = 0; i < npages; i++) r[i * 4096] = 1;
    volatile char *w = ws ? malloc(ws) : NULL;
    uint64_t *t = malloc(npages * sizeof *t);
    if ((ws && !w) || !t) { perror("malloc"); return 1; }
    if (ws) { madvise((void*)w, ws, MADV_NOHUGEPAGE); memset((void*)w, 1, ws); }
    for (size_t i = 0; i < npages; i++) {
        for (size_t j = 0; j < ws; j += 64) w[j]++;
        _mm_lfence();
        uint64_t t0 = __rdtsc();
        _mm_lfence();
        ((volatile char *)r)[i * 4096 + 64] = 2;
        _mm_mfence();
        uint64_t t1 = __rdtsc();
        t[i] = t1 - t0;
    }
    double sum = 0; for (size_t i = 0; i < npages; i++) sum += t[i];
    qsort(t, npages, sizeof *t, cmp);
    printf("ws=%zu fresh=%d mean=%.0f ns median=%.0f ns p10=%.0f p90=%.0f\n", ws, fresh,
           sum / npages / f, t[npages/2] / f, t[npages/10] / f, t[npages*9/10] / f);
    return 0;
}
