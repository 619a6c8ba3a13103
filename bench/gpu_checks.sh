#!/bin/bash
# The CUDA and NCCL paths on a GPU machine, then bench/train_step.py on it.
#
# Needs: a python3 with torch (CUDA) and torchvision, and clipflow's other packages importable
# (pip install -e . where the machine has a registry; else carry wheels: pyzmq, jsonschema with
# referencing, rpds-py and jsonschema-specifications, av). Data: the synthetic video set and a
# synthetic CIFAR-10 set, made here by clipflow's own commands, one worker list each.
#
#   bash bench/gpu_checks.sh [WORKDIR]        # default /tmp/clipflow-gpu
#
# Prints, per run: the back end line (nccl / zmq, on cuda:0), the resume line after a worker
# is killed at epoch 2 iteration 3, and how far the resumed weights are from an unbroken run's;
# two unbroken SlowFast runs compared with each other (cuDNN's 3-D backward is not
# deterministic); then the training-step figures at batch 2, 8 and 32.
set -u
W=${1:-/tmp/clipflow-gpu}
export PYTHONPATH=${PYTHONPATH:-}:$PWD/src PYTHONUNBUFFERED=1 CLIPFLOW_HEARTBEAT_TIMEOUT=30
P="python3 -m clipflow"
V=$W/videos C=$W/cifar
mkdir -p "$W"
$P data synth --out-dir "$V" --num-train 64 --num-val 16 >/dev/null 2>&1 || exit 1
$P data scan --train-list "$V/train_labels.txt" --val-list "$V/val_labels.txt" --root "$V" --num-classes 8 \
  --out-dir "$V/index" >/dev/null 2>&1 || exit 1
$P splits --list "$V/index/train.lst" --num-workers 1 --out-dir "$V/splits1" || exit 1
$P data cifar-synth --out-dir "$C/batches" --num-train 512 --num-val 128 >/dev/null || exit 1
$P data cifar-index --root "$C/batches" --out-dir "$C/index" >/dev/null || exit 1
$P splits --list "$C/index/train.lst" --num-workers 1 --out-dir "$C/splits1" || exit 1

run() {  # NAME BACKEND RECIPE ROOT SPLITS OVERRIDES
  local name=$1 backend=$2 recipe=$3 root=$4 splits=$5 over=$6
  $P cluster plan --num-workers 1 --num-servers 1 --root-port $((29500 + RANDOM % 1000)) --out "$W/$name.plan.json" \
    >/dev/null || return 1
  timeout 300 $P train launch --plan "$W/$name.plan.json" --log-dir "$W/$name/logs" --recipe "$recipe" \
    --overrides "$over" --splits-dir "$splits" --root "$root" --checkpoint-root "$W/$name/ckpt" \
    --model-out "$W/$name/model.pt" --metrics-out "$W/$name/metrics.jsonl" --backend "$backend" --grace 5 2>&1 |
    grep -E "resumed|back end|failed|Error|final model"
  echo "== $name exit ${PIPESTATUS[0]}"
}
compare() {  # A B: model.pt of two runs
  python3 - "$W/$1/model.pt" "$W/$2/model.pt" <<'PY'
import sys
import torch
a, b = (torch.load(p, weights_only=False)["model"] for p in sys.argv[1:])
diff = max((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].is_floating_point())
print(f"{sys.argv[1]} against {sys.argv[2]}: bitwise equal {all(torch.equal(a[k], b[k]) for k in a)}, "
      f"max abs difference {diff:.3g}")
PY
}
CO='{"train": {"epochs": 3, "batch_size": 64, "save_every_iters": 2, "precision": "bf16", "channels_last": true}}'
VO='{"train": {"epochs": 3, "batch_size": 8, "save_every_iters": 2}}'
for b in ddp ps; do
  run "cifar_$b.whole" "$b" resnet18_cifar10 "$C/batches" "$C/splits1" "$CO"
  CLIPFLOW_FAULT_KILL=0:2:3 run "cifar_$b.cut" "$b" resnet18_cifar10 "$C/batches" "$C/splits1" "$CO"
  run "cifar_$b.cut" "$b" resnet18_cifar10 "$C/batches" "$C/splits1" "$CO"
  compare "cifar_$b.whole" "cifar_$b.cut"
  run "video_$b.whole" "$b" slowfast_tiny_synthetic "$V" "$V/splits1" "$VO"
  CLIPFLOW_FAULT_KILL=0:2:3 run "video_$b.cut" "$b" slowfast_tiny_synthetic "$V" "$V/splits1" "$VO"
  run "video_$b.cut" "$b" slowfast_tiny_synthetic "$V" "$V/splits1" "$VO"
  compare "video_$b.whole" "video_$b.cut"
done
run video_ddp.again ddp slowfast_tiny_synthetic "$V" "$V/splits1" "$VO"
compare video_ddp.whole video_ddp.again
for batch in 2 8 32; do
  python3 bench/train_step.py --device cuda --batch "$batch" --steps 20 --warmup 3 --compile 2>&1 | grep -v Warning | tail -8
done

# NVDEC: data.decoder nvdec (torchcodec on the GPU) against the PyAV reader and torchcodec on the CPU, on the
# synthetic videos above: clips/s of each (a SlowFast clip: 32 of 64 frames, one process, one torch thread, after a
# warm-up read), and how far each one's frames are from the PyAV reader's, at the videos' own size and at 224x168.
python3 - "$V" <<'PY'
import sys
import time
from pathlib import Path

import numpy as np
import torch

from clipflow.data.reader import frames_now, read_frames
from clipflow.data.torchcodec_reader import prepare
from clipflow.errors import ClipflowError

torch.set_num_threads(1)  # as a loader worker process
videos = sorted(Path(sys.argv[1]).rglob("*.mp4"))[:48]
decoders = ["pyav", "torchcodec", "nvdec"]
try:
    prepare("nvdec")
except ClipflowError as exc:
    print(f"nvdec refused: {exc}")
    decoders.remove("nvdec")
clips = []
for path in videos:
    n = frames_now(path)
    start = max(0, (n - 64) // 2)
    clips.append((path, list(range(start, min(n, start + 64), 2))))
with __import__("av").open(str(videos[0])) as container:
    own = (container.streams.video[0].width, container.streams.video[0].height)
for decoder in decoders:
    read_frames(*clips[0], *own, decoder)  # warm-up: CUDA context, NVDEC decoder, caches
    if decoder == "nvdec":
        torch.cuda.synchronize()
    began = time.perf_counter()
    for path, indices in clips:
        read_frames(path, indices, *own, decoder)
    rate = len(clips) / (time.perf_counter() - began)
    line = f"{decoder:10s} {rate:7.1f} clips/s ({len(clips)} clips at {own[0]}x{own[1]})"
    if decoder != "pyav":
        for size in (own, (224, 168)):
            worst_max, worst_mean = 0, 0.0
            for path, indices in clips[:16]:
                got = read_frames(path, indices, *size, decoder).astype(np.int16)
                diff = np.abs(got - read_frames(path, indices, *size, "pyav"))
                worst_max, worst_mean = max(worst_max, int(diff.max())), max(worst_mean, float(diff.mean()))
            line += f"; against pyav at {size[0]}x{size[1]}: max abs difference {worst_max}, mean {worst_mean:.2f}"
    print(line)
if "nvdec" in decoders:
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(str(videos[0]), device="cuda")
    decoder.get_frame_at(0)
    print(f"nvdec on {videos[0].name}: {decoder.cpu_fallback}")
PY
