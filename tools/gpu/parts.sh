#!/usr/bin/env bash
# A model too large for one call to the GPU machine (64 MiB per call, the working tree
# included), sent in parts over back-to-back calls (the machine keeps /tmp while it stays
# warm: under 30 s between calls).
#
#   bash tools/gpu/parts.sh split MODEL.gguf [MB]   # -> gpu-parts-all/NAME.partNN + NAME.sha256
#   bash tools/gpu/parts.sh stage K                 # gpu-parts/ := part K (+ its checksum)
#
# Then, per part K = 0.., with `run` (carry .gpu, gpu-ref, gpu-parts):
#   bash .gpu/check.sh parts      # stores the part under /tmp and returns at once
# and last `bash .gpu/check.sh` (or `quick`): it assembles every complete model, checks its
# SHA-256 and adds it to the checks (Tessera CUDA vs Tessera CPU, llama.cpp beside them).
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  split)
    m=$2; mb=${3:-24}; name=$(basename "$m")
    mkdir -p gpu-parts-all
    split -b "${mb}M" -d -a 2 "$m" "gpu-parts-all/$name.part"
    sha256sum "$m" | awk -v n="$name" '{print $1 "  " n}' > "gpu-parts-all/$name.sha256"
    ls gpu-parts-all | grep -c "^$name.part" | xargs echo "$name: parts:" ;;
  stage)
    k=$(printf %02d "$2")
    rm -rf gpu-parts && mkdir gpu-parts
    for p in gpu-parts-all/*.part$k; do cp "$p" gpu-parts/; done
    cp gpu-parts-all/*.sha256 gpu-parts/
    ls -la gpu-parts ;;
  *) echo "usage: parts.sh split MODEL [MB] | stage K" >&2; exit 2 ;;
esac
