"""`clipflow data synth|cifar-synth|cifar-index|lists|kinetics|scan|reencode|frames` and `clipflow splits`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from clipflow.cli.args import count, json_object, setting
from clipflow.data.datasets.source import LIST_SOURCES
from clipflow.data.reader import DECODERS
from clipflow.schemas import config_defaults, config_enum


def cmd_synth(a: argparse.Namespace) -> int:
    from clipflow.data.synthetic import SyntheticSpec, generate

    spec = SyntheticSpec(a.num_train, a.num_val, a.seed, a.min_frames, a.max_frames, a.short_side)
    lists = generate(a.out_dir, spec, workers=a.workers)
    print(f"synthetic set in {a.out_dir}: {spec.num_train} train, {spec.num_val} val")
    print("labels:", ", ".join(map(str, lists.values())))
    return 0


def cmd_cifar_synth(a: argparse.Namespace) -> int:
    from clipflow.data.cifar.synthetic import make_synthetic_cifar

    files = make_synthetic_cifar(a.out_dir, a.num_train, a.num_val, a.seed)
    print(f"synthetic CIFAR-10 set in {a.out_dir}: {a.num_train} train, {a.num_val} val images, {len(files)} files")
    return 0


def cmd_cifar_index(a: argparse.Namespace) -> int:
    from clipflow.data.cifar.index import index_cifar

    summary = index_cifar(a.root, a.out_dir)
    print(f"CIFAR-10 index in {a.out_dir}: {summary['train']['images']} train, {summary['val']['images']} val images")
    return 0


def cmd_scan(a: argparse.Namespace) -> int:
    from clipflow.data.scan import ShortVideos, scan_lists

    short = ShortVideos(a.clip_span, a.short_videos == "leave_out")
    scan_lists(a.train_list, a.val_list, a.root, a.num_classes, a.classes or None, a.out_dir, a.workers,
               decoder=a.decoder, short_videos=short, dataset=a.dataset)  # fmt: skip
    return 0


def cmd_lists(a: argparse.Namespace) -> int:
    """A class-per-folder tree, or a published data set's split files, -> `path label` lists and the class index."""
    from clipflow.data.datasets.lists import check_out, write_dataset
    from clipflow.data.datasets.read import dataset_lists

    check_out(a.out_dir)  # someone else's file there is refused before the data set is read
    write_dataset(dataset_lists(a.source, a.root, a.annotations, a.split, a.val_fraction, a.seed), a.out_dir)
    return 0


def cmd_kinetics(a: argparse.Namespace) -> int:
    """Kinetics annotation CSVs -> `path label` lists and the class index, as the scan reads them."""
    from clipflow.data.kinetics import write_kinetics_lists

    write_kinetics_lists(a.train_csv, a.val_csv, a.root, a.classes or None, a.out_dir)
    return 0


def size(text: str) -> tuple[int, int]:
    """WIDTHxHEIGHT, e.g. 340x256."""
    width, sep, height = text.lower().partition("x")
    if not (sep and width.isdigit() and height.isdigit()):
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 340x256, got {text!r}")
    return int(width), int(height)


def number(text: str) -> int | float:
    """A frame rate: an int when whole (30), else a float (29.97)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    return int(value) if value.is_integer() else value


def cmd_reencode(a: argparse.Namespace) -> int:
    """Re-encodes every video of the lists under --out-root; done ones (in its reencode.jsonl) are skipped."""
    from clipflow.data.reencode import ReencodeSpec, reencode_lists

    width, height = a.size if a.size else (None, None)
    spec = ReencodeSpec(a.short_side, width, height, a.fps, a.gop, a.crf, a.preset, a.frame_step)
    reencode_lists(a.list, a.root, a.out_root, spec, a.out_list, a.workers)
    return 0


def cmd_frames(a: argparse.Namespace) -> int:
    """One JSON line per clip: the frames it reads and its crop; per video, or per view in test mode
    (test_clips x test_crops, clip-major)."""
    from clipflow.data.frames import frame_records
    from clipflow.recipe import load_recipe

    recipe = load_recipe(a.recipe, json_object(a.overrides))
    root = Path(a.root) if a.root else Path(a.list).parent
    for record in frame_records(recipe, a.list, root, a.mode, a.seed, a.epoch):
        print(json.dumps(record))
    return 0


def cmd_splits(a: argparse.Namespace) -> int:
    from clipflow.data.splits import write_splits

    parts = write_splits(a.list, a.num_workers, a.seed, a.out_dir, a.fill, a.accumulate)
    slots = f" ({a.accumulate} slots of {len(parts[0]) // a.accumulate})" if a.accumulate > 1 else ""
    print(f"{len(parts)} worker lists of {len(parts[0])} videos each{slots} in {a.out_dir}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    defaults = config_defaults("data")
    synthetic, reencode = defaults["synthetic"], defaults["reencode"]
    in_reencode = {key: setting("data", "reencode", key) for key in ("short_side", "gop", "crf", "workers")}
    data = sub.add_parser("data", help="data sets").add_subparsers(dest="action", required=True)
    p = data.add_parser("synth", help="generate the synthetic motion set")
    p.add_argument("--out-dir", required=True)
    for name in ("num_train", "num_val", "seed", "min_frames", "max_frames", "short_side"):
        p.add_argument(f"--{name.replace('_', '-')}", type=setting("data", "synthetic", name), default=synthetic[name])
    p.add_argument("--workers", type=count, default=2)
    p.set_defaults(func=cmd_synth)
    p = data.add_parser("cifar-synth", help="generate a small learnable set in CIFAR-10's python format")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--num-train", type=count, default=500)
    p.add_argument("--num-val", type=count, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_cifar_synth)
    p = data.add_parser("cifar-index", help="list files and a manifest of a cifar-10-batches-py folder")
    p.add_argument("--root", required=True, help="the extracted cifar-10-batches-py folder")
    p.add_argument("--out-dir", required=True, help="train.lst, val.lst, classes.txt and manifest.json go here")
    p.set_defaults(func=cmd_cifar_index)
    p = data.add_parser("scan", help="decode every video once; write list files and a manifest")
    p.add_argument("--train-list", required=True)
    p.add_argument("--val-list", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--num-classes", type=count, default=None,
                   help="the recipe's model.num_classes, when it fixes it: labels must be in [0, num_classes), and a "
                   "class index must name as many (default: the data's)")  # fmt: skip
    p.add_argument(
        "--classes",
        default="",
        help="the class index, one name a line (line number - 1 = label); labels may then be names",
    )
    p.add_argument("--dataset", default="", help="the data set in words, for the manifest and the report")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--workers", type=count, default=2)
    p.add_argument("--decoder", choices=DECODERS, default=DECODERS[0],
                   help="the reader training will use (the recipe's data.decoder)")  # fmt: skip
    p.add_argument("--clip-span", type=count, default=0,
                   help="frames a clip's window spans (new_length x new_step): shorter videos are counted")  # fmt: skip
    p.add_argument("--short-videos", choices=config_enum("data", "short_videos"),
                   default=defaults["short_videos"], help="keep the shorter ones, or leave them out")  # fmt: skip
    p.set_defaults(func=cmd_scan)
    p = data.add_parser("lists", help="class folders, UCF101, HMDB51 or Something-Something v2 to the scan's lists")
    p.add_argument("--source", choices=LIST_SOURCES, required=True, help="the data set's form (data.source)")
    p.add_argument("--root", required=True, help="the videos (data.root)")
    p.add_argument("--annotations", default="", help="ucf101, hmdb51, ssv2: the folder of the published split files")
    p.add_argument("--split", type=setting("data", "ucf101", "split"), default=1, help="ucf101, hmdb51: 1, 2 or 3")
    folder = defaults["folder"]
    p.add_argument("--val-fraction", type=float, default=folder["val_fraction"],
                   help="folder: the share of each class that validates, between 0 and 1")  # fmt: skip
    p.add_argument("--seed", type=int, default=folder["seed"], help="folder: the split's seed")
    p.add_argument("--out-dir", required=True, help="train_labels.txt, val_labels.txt and classes.txt go here")
    p.set_defaults(func=cmd_lists)
    p = data.add_parser("kinetics", help="Kinetics annotation CSVs to the scan's 'path label' lists and classes.txt")
    p.add_argument("--train-csv", required=True, help="label,youtube_id,time_start,time_end,split")
    p.add_argument("--val-csv", required=True)
    p.add_argument("--root", required=True, help="the video folder: <label>/<id>_<start>_<end>.mp4 or flat")
    p.add_argument(
        "--classes",
        default="",
        help="an existing class index, one name a line, holding every label of both CSVs "
        "(default: the train CSV's labels sorted by name)",
    )
    p.add_argument("--out-dir", required=True, help="train_labels.txt, val_labels.txt and classes.txt go here")
    p.set_defaults(func=cmd_kinetics)
    p = data.add_parser("reencode", help="re-encode the videos of lists: one size, constant fps, fixed keyframes")
    p.add_argument("--list", action="append", required=True, help="a list file (repeat for several)")
    p.add_argument("--root", required=True, help="the folder the list paths are relative to")
    p.add_argument("--out-root", required=True, help="outputs go to the same relative paths here, as .mp4")
    p.add_argument("--out-list", action="append", default=[], help="per --list: a 'path label' list of the outputs")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--short-side", type=in_reencode["short_side"], default=reencode["short_side"],
                       help="scale the short side to this, keeping the aspect")  # fmt: skip
    shape.add_argument("--size", type=size, default=None, help="WIDTHxHEIGHT for every output, e.g. 340x256")
    p.add_argument("--fps", type=number, default=reencode["fps"])
    p.add_argument("--gop", type=in_reencode["gop"], default=reencode["gop"], help="a keyframe every this many frames")
    p.add_argument("--crf", type=in_reencode["crf"], default=reencode["crf"], help="x264 quality: 0 lossless to 51")
    p.add_argument("--preset", default=reencode["preset"], help="x264 preset")
    p.add_argument("--frame-step", type=count, default=1,
                   help="keep every this-many-th frame at --fps (output fps / step): a clip's stride")  # fmt: skip
    p.add_argument("--workers", type=in_reencode["workers"], default=reencode["workers"], help="videos encoded at once")
    p.set_defaults(func=cmd_reencode)
    p = data.add_parser("frames", help="print the frames and crop each clip of a recipe reads, a JSON line per video")
    p.add_argument("list", help="a scanned list file (path num_frames label)")
    p.add_argument("--recipe", required=True)
    p.add_argument("--overrides", default="{}", help="recipe overrides as JSON")
    p.add_argument("--mode", choices=["train", "val", "test"], default="train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epoch", type=count, default=1, help="training epoch (1-based, as the trainer counts)")
    p.add_argument("--root", default="", help="folder the list's paths are relative to (default: the list's)")
    p.set_defaults(func=cmd_frames)

    p = sub.add_parser("splits", help="one list per worker, all of the same length")
    p.add_argument("--list", required=True)
    p.add_argument("--num-workers", type=count, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--fill", choices=["wrap", "drop"], default="wrap", help="when the list does not divide")
    p.add_argument(
        "--accumulate",
        type=count,
        default=1,
        help="micro-batch slots per worker (the recipe's train.accumulate): each list holds that many parts",
    )
    p.set_defaults(func=cmd_splits)
