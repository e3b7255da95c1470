#!/usr/bin/env bash
# A GPU lease's middle call K: adds carry .gpu/cK's part of the real weights to /tmp/llbgpu.
set -eu
cp .gpu/c"$1"/real.part-* /tmp/llbgpu/
ls -l /tmp/llbgpu/real.part-*
