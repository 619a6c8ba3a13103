#!/usr/bin/env bash
# Whether a change of shape changed training: the embedded default for 2 epochs on REV (default: HEAD) and on
# the working tree, each in a folder of its own, then torch.equal on every tensor of the two final models and
# the two metrics.json side by side. Exit 1 when a tensor differs.
# Both sides train on the same videos: REV's run makes the synthetic set and the working tree's run reuses it.
# (Making it twice is not enough: PyAV's RGB-to-YUV conversion inside the encoder can round a few frames
# differently with the process's memory layout, seen in 2 of 560 videos, and that alone changes the weights.)
# Usage (from the project root, with the venv made): bench/same_weights.sh [REV]
set -euo pipefail
rev=${1:-HEAD}
top=$(git rev-parse --show-toplevel)
py="$top/.venv/bin/python"
work=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$top" worktree add -q --detach "$work/old" "$rev"
mkdir -p "$work/new" && (cd "$top" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -xf - -C "$work/new"
printf 'overrides: {train: {epochs: 2}}\n' > "$work/two_epochs.yaml"
for side in old new; do
  if [ "$side" = new ]; then mkdir -p "$work/new/results" && cp -a "$work/old/results/data" "$work/new/results/"; fi
  echo "== $side: snakemake --cores 1 train_slowfast, 2 epochs"
  (cd "$work/$side" && PATH="$top/.venv/bin:$PATH" PYTHONPATH="$work/$side/src" \
    snakemake --cores 1 train_slowfast --configfile "$work/two_epochs.yaml" >"$work/$side.log" 2>&1) \
    || { tail -20 "$work/$side.log"; exit 1; }
done
"$py" - "$work" <<'PY'
import json, sys
import torch
work = sys.argv[1]
old, new = (torch.load(f"{work}/{s}/results/default/train/model_final.pt", weights_only=False)["model"]
            for s in ("old", "new"))
unequal = [name for name in old if name not in new or not torch.equal(old[name], new[name])]
print(f"{len(old)} tensors, {len(unequal)} unequal{': ' + ', '.join(unequal[:5]) if unequal else ''}")
metrics = [json.load(open(f"{work}/{s}/results/default/metrics.json")) for s in ("old", "new")]
for key in ("top1", "top5", "loss"):
    print(f"video {key}: {metrics[0][key]} / {metrics[1][key]}")
sys.exit(1 if unequal or old.keys() != new.keys() else 0)
PY
