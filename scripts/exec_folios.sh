#!/bin/bash
# Live micro-test of which exec-time regions get large folios on this kernel
# (scripts/corpus/exec_folios.c), under 4K, 16K, 64K, 2M and all sizes.
# Needs root; holds /tmp/mmlab-live-kernel.lock and restores the host's
# defaults on every way out. Prints one line per (config, region).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "SKIPPED (cannot run here): needs root to set THP knobs"; exit 0; }
T=/sys/kernel/mm/transparent_hugepage
bin=$(mktemp -d)
cleanup() {
  echo madvise > $T/enabled
  for d in $T/hugepages-*kB; do
    [ -w "$d/enabled" ] || continue
    case $d in *hugepages-2048kB) echo inherit > "$d/enabled";; *) echo never > "$d/enabled";; esac
  done
  rm -rf "$bin"
}
trap cleanup EXIT INT TERM HUP
gcc -O1 -o "$bin/exec_folios" "$(dirname "$0")/corpus/exec_folios.c"
exec 9>/tmp/mmlab-live-kernel.lock
flock 9
for cfg in 4k 16k 64k 2m all; do
  echo madvise > $T/enabled
  for d in $T/hugepages-*kB; do
    [ -w "$d/enabled" ] || continue
    case $d in *hugepages-2048kB) echo inherit > "$d/enabled";; *) echo never > "$d/enabled";; esac
  done
  case $cfg in
    4k) echo never > $T/enabled;;
    16k) echo never > $T/enabled; echo always > $T/hugepages-16kB/enabled;;
    64k) echo never > $T/enabled; echo always > $T/hugepages-64kB/enabled;;
    2m) echo always > $T/enabled;;
    all) echo always > $T/enabled
         for d in $T/hugepages-*kB; do [ -w "$d/enabled" ] && echo always > "$d/enabled"; done;;
  esac
  for m in bss bssr data brk "stack 256" "stack 16"; do
    printf '%-4s ' "$cfg"; "$bin/exec_folios" $m
  done
done
