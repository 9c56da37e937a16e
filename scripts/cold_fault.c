// What a 4 KiB anonymous fault costs when the program has run through its
// own data between faults (issue 14, seed 004; docs/kbuild-recording.md):
// the time of the first store to each fresh page (rdtsc, fenced), with a
// sweep of S bytes of the program's own buffer (one write per 64-byte line)
// before each, against S = 0 (back to back, as `mmlab calibrate` times
// faults). With FRESH = 0 the pages are faulted in first, so the same store
// is timed without a fault. With C > 0 the program also runs C bytes of its
// own code before each fault: C / 64 blocks of 64 bytes, each three
// add/test/conditional-branch groups and a jump to the next block, the
// blocks chained in a fixed random order (so that neither the next-line
// prefetcher nor a warm branch predictor carries the fault path's code and
// branch history through, as a compiler's large code does between faults).
// Touches no knob; the host's defaults map 4 KiB folios (and
// MADV_NOHUGEPAGE keeps THP off either way).
//
//     gcc -O2 -o cold_fault scripts/cold_fault.c
//     ./cold_fault [PAGES=20000] [S=0] [FRESH=1] [C=0]
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
// C bytes of chained code blocks (see the header), returned callable.
static void (*make_code(size_t c))(void) {
    size_t n = c / 64;
    unsigned char *b = mmap(NULL, c + 64, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    size_t *order = malloc(n * sizeof *order);
    if (b == MAP_FAILED || !order) return NULL;
    memset(b, 0xcc, c + 64);
    for (size_t i = 0; i < n; i++) order[i] = i;
    srand(1);
    for (size_t i = n - 1; i > 0; i--) { size_t j = rand() % (i + 1), x = order[i]; order[i] = order[j]; order[j] = x; }
    for (size_t k = 0; k < n; k++) {
        unsigned char *p = b + order[k] * 64;
        for (int g = 0; g < 3; g++) {
            unsigned char grp[] = {0x48, 0x05, 0x35, 0x9e, 0x37, 0x00, /* add rax, imm32 */
                                   0xa8, (unsigned char)(1 << g),     /* test al, imm8 */
                                   0x74, 0x02, 0xff, 0xc1};           /* jz +2; inc ecx */
            memcpy(p, grp, sizeof grp); p += sizeof grp;
        }
        unsigned char *next = k + 1 < n ? b + order[k + 1] * 64 : b + n * 64;
        int32_t rel = (int32_t)(next - (p + 5));
        *p++ = 0xe9; memcpy(p, &rel, 4);
    }
    b[n * 64] = 0xc3; /* ret */
    if (mprotect(b, c + 64, PROT_READ|PROT_EXEC)) return NULL;
    return (void (*)(void))(b + order[0] * 64);
}
static int cmp(const void *a, const void *b) { uint64_t x = *(uint64_t*)a, y = *(uint64_t*)b; return x < y ? -1 : x > y; }

int main(int argc, char **argv) {
    size_t npages = argc > 1 ? atol(argv[1]) : 20000;
    size_t ws = argc > 2 ? atol(argv[2]) : 0;   // bytes swept between faults
    int fresh = argc > 3 ? atoi(argv[3]) : 1;   // 0: the pages are faulted in first (no fault timed)
    size_t cs = argc > 4 ? atol(argv[4]) / 64 * 64 : 0; // bytes of code run between faults
    void (*code)(void) = cs ? make_code(cs) : NULL;
    if (cs && !code) { perror("code"); return 1; }
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
        if (code) code();
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
    printf("ws=%zu code=%zu fresh=%d mean=%.0f ns median=%.0f ns p10=%.0f p90=%.0f\n", ws, cs, fresh,
           sum / npages / f, t[npages/2] / f, t[npages/10] / f, t[npages*9/10] / f);
    return 0;
}
