# Settings every rule file uses, derived once from the validated config and the recipe.
import functools
import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from clipflow.cluster.prediction import shape_overrides
from clipflow.data.datasets.source import (
    LIST_SOURCES,
    annotations_of,
    check_source,
    dataset_dir,
    dataset_name,
    lists_flags,
)
from clipflow.hosts.slurm_partitions import check_partition
from clipflow.hosts.slurm_resources import job_resources
from clipflow.hosts.staged import staging_name
from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe, recipe_path
from clipflow.schemas import config_defaults, policy_names
from clipflow.workflow_checks import check_config_with_recipe
from clipflow.workflow_settings import train_settings, write_settings

# `python` in the rules is the interpreter running Snakemake (its venv or conda env).
shell.prefix(f"set -euo pipefail; export PATH={os.path.dirname(sys.executable)!r}:$PATH; ")

RECIPES_DIR = Path(workflow.basedir) / "recipes"
try:
    RECIPE = load_recipe(config["recipe"], config["overrides"], RECIPES_DIR)
    RECIPE_FILE = os.path.relpath(recipe_path(config["recipe"], RECIPES_DIR), workflow.basedir)
except ClipflowError as exc:
    raise WorkflowError(f"clipflow: {exc}")

RUN = config["run"]
RESULTS = f"results/{RUN}"
LOGS = f"logs/{RUN}"
BENCH = f"benchmarks/{RUN}"
DATA = config["data"]
SOURCE = DATA["source"]
try:
    check_source(DATA)  # what the source needs is set, before any rule
except ClipflowError as exc:
    raise WorkflowError(f"clipflow: {exc}")
DATA_DIR = dataset_dir(DATA)  # data.dir, else the data set's own folder under results/data/
DATASET_NAME = dataset_name(DATA)
INDEX = f"{DATA_DIR}/index"
KINETICS = DATA["kinetics"]
IMAGE_SOURCES = ("cifar10", "synthetic_cifar10")
if (SOURCE in IMAGE_SOURCES) != (RECIPE["data"]["kind"] == "image"):
    raise WorkflowError(
        f"clipflow: recipe {RECIPE['name']} trains on {RECIPE['data']['kind']}s but data.source is {SOURCE!r}; "
        + ("use data.source cifar10 or synthetic_cifar10" if SOURCE not in IMAGE_SOURCES else "use a video source")
    )
# the folder the source's list paths are relative to: the synthetic set's, the user's videos (data.root), the Kinetics
# videos, or the CIFAR-10 batches
SOURCE_ROOT = {
    "synthetic": DATA_DIR,
    "kinetics": KINETICS["root"],
    **{source: DATA["root"] for source in ("list", *LIST_SOURCES)},
    "cifar10": DATA["cifar10_dir"],
    "synthetic_cifar10": f"{DATA_DIR}/cifar-10-batches-py",
}[SOURCE]
REENCODE = DATA["reencode"]
REENCODED = f"{DATA_DIR}/reencoded"
if REENCODE["enabled"] and SOURCE in IMAGE_SOURCES:
    raise WorkflowError(f"clipflow: data.reencode is for videos; data.source {SOURCE!r} has images")
if REENCODE["enabled"]:
    from clipflow.data.reencode import ReencodeSpec  # imported only when used: it loads PyAV

    try:
        _size = [int(side) for side in REENCODE["size"].split("x")] if REENCODE["size"] else [None, None]
        # checked here, once: a bad setting stops the workflow before any job starts
        REENCODE_SPEC = ReencodeSpec(
            REENCODE["short_side"], *_size, REENCODE["fps"], REENCODE["gop"], REENCODE["crf"], REENCODE["preset"]
        )
        if REENCODE["match_recipe"]:  # only the frames the recipe's clips read, keyframes at their granularity
            REENCODE_SPEC = REENCODE_SPEC.matched_to_recipe(RECIPE)
    except ClipflowError as exc:
        raise WorkflowError(f"clipflow: data.reencode: {exc}")
# the folder the scanned lists' paths are relative to, which train and evaluate read the videos from
DATA_ROOT = REENCODED if REENCODE["enabled"] else SOURCE_ROOT
# a clip's window, 0 for images; with data.fit_step the shortest the fit may choose (step 1)
_STEP = 1 if RECIPE["data"].get("fit_step") else RECIPE["data"].get("new_step", 1)
CLIP_SPAN = RECIPE["data"].get("new_length", 0) * _STEP
TRAIN = config["train"]
if TRAIN["backend"] == "ddp":
    _ps_only = [
        f"train.{key}: {TRAIN[key]}"
        for key in ("kvstore", "update_on_kvstore")
        if TRAIN[key] != config_defaults("train")[key]
    ] + ([f"train.gradient_compression.type: {TRAIN['gradient_compression']['type']}"]
         if TRAIN["gradient_compression"]["type"] != "none" else [])
    if _ps_only:
        raise WorkflowError(
            f"clipflow: {', '.join(_ps_only)} is for the parameter server; train.backend ddp is synchronous "
            "all-reduce: leave it at its default or use train.backend: ps"
        )
CLUSTER = config["cluster"]
NUM_WORKERS = CLUSTER["num_workers"]
# storage (cluster.storage): the ssh host checks decide; videos are staged to hosts with their own disks, images
# (CIFAR-10) never are: their hosts must share the data (the check then insists on shared storage)
STAGES_VIDEOS = RECIPE["data"]["kind"] == "video"
STORAGE_SETTING = CLUSTER["storage"] if STAGES_VIDEOS else "shared"
STAGED = f"{RESULTS}/cluster/staged.json"
HOST_DIR = os.path.join(CLUSTER["job_dir"], RUN)  # the run's folder on each host with its own disk
OVERRIDES = json.dumps(config["overrides"], sort_keys=True)
# train.init_from (fine-tuning): the weights file is an input of train, so a new file reruns it
INIT_FROM = [RECIPE["train"]["init_from"]] if RECIPE["train"].get("init_from") else []
# what the cluster check's step prediction reads of them (model, clips, batch): nothing else reruns it
SHAPE_OVERRIDES = json.dumps(shape_overrides(config["overrides"]), sort_keys=True)


try:  # what the config and the recipe say together, before any job
    check_config_with_recipe(config, RECIPE, os.path.basename(RECIPE_FILE))
    # the Slurm jobs of train and evaluate (workflow/profiles/slurm): one job over the plan's nodes each; none
    # unless the launcher is slurm; the partition checked against the cluster's (sinfo) before any job
    TRAIN_RESOURCES = job_resources(CLUSTER, notice=True)
    EVALUATE_RESOURCES = job_resources(CLUSTER, notice=False)
    if CLUSTER["launcher"] == "slurm":
        check_partition(CLUSTER["slurm"]["partition"])
except ClipflowError as exc:
    raise WorkflowError(f"clipflow: {exc}")


DATA_LOG_TAG = DATA_DIR.replace(os.sep, "_")
SCAN_LOG = f"logs/data/scan_{DATA_LOG_TAG}.log"


def hosts_arg():
    """The plan's hosts: the hosts file, else the inline list (quoted for the shell)."""
    if CLUSTER["hosts_file"]:
        return f"--hosts-file {shlex.quote(CLUSTER['hosts_file'])}"
    return f"--hosts {shlex.quote(','.join(CLUSTER['hosts']))}"


def ssh_args():
    refuse = "" if CLUSTER["accept_new_host_keys"] else " --refuse-new-host-keys"
    return f"--ssh-key {shlex.quote(CLUSTER['ssh_key'])} --known-hosts {shlex.quote(CLUSTER['known_hosts'])}{refuse}"


def cluster_ready():
    """What train waits for: the plan; with ssh also the host checks, with sync_dst_dir the sync, and for videos
    the staging record (shared storage: nothing staged)."""
    ready = [f"{RESULTS}/cluster/plan.json"]
    if CLUSTER["launcher"] == "ssh":
        ready.append(f"{RESULTS}/cluster/checks.json")
        if CLUSTER["sync_dst_dir"]:
            ready.append(f"{RESULTS}/cluster/synced.txt")
        if STAGES_VIDEOS:
            ready.append(STAGED)
    return ready


def once_trained(path):
    """``ancient(path)`` once the run has its trained model and history, else ``path``: while they are missing
    (never made, or a failed train removed them) a remade cluster file must bring train along, since Snakemake would
    otherwise not look at train at all."""
    trained = all(os.path.exists(f"{RESULTS}/train/{name}") for name in ("model_final.pt", "metrics.jsonl"))
    return ancient(path) if trained else path


def slurm_nodelist():
    """Shell text that gives the rule back SLURM_JOB_NODELIST inside a Slurm job whose environment lost it (the Slurm
    executor plugin keeps only the job's id of the SLURM_* variables when it runs a rule), asked of Slurm itself; the
    slurm launcher plans and checks its roles' nodes against it. None for the other launchers."""
    if CLUSTER["launcher"] != "slurm":
        return ""
    return (
        'if [ -n "${SLURM_JOB_ID:-}" ] && [ -z "${SLURM_JOB_NODELIST:-}" ]; then export SLURM_JOB_NODELIST="$(squeue '
        '--noheader --jobs "$SLURM_JOB_ID" --format=%N)"; fi; '
    )


def staged_args():
    """`--staged FILE --host-dir DIR` for the stages that run on the hosts (with shared storage the file says so
    and they run as before); none without staging."""
    if CLUSTER["launcher"] != "ssh" or not STAGES_VIDEOS:
        return ""
    return f"--staged {shlex.quote(STAGED)} --host-dir {shlex.quote(HOST_DIR)}"


def final_outputs():
    return [f"{RESULTS}/metrics.json", f"{RESULTS}/report/report.html", f"{RESULTS}/collected/manifest.json"]


def source_lists(wildcards):
    """The source's lists, paths relative to SOURCE_ROOT, with their class index: the ones a rule makes in DATA_DIR
    (synthetic, kinetics, folder and the published data sets), or the user's (list), with data.classes when given."""
    if SOURCE != "list":
        return {
            "train": f"{DATA_DIR}/train_labels.txt",
            "val": f"{DATA_DIR}/val_labels.txt",
            "classes": f"{DATA_DIR}/classes.txt",
        }
    given = {"classes": DATA["classes"]} if DATA["classes"] else {}
    return {"train": DATA["train_list"], "val": DATA["val_list"], **given}


def raw_lists(wildcards):
    """The scan's input: the source's lists or, with data.reencode enabled, the lists of the re-encoded copies."""
    lists = source_lists(wildcards)
    if REENCODE["enabled"]:
        lists = {**lists, "train": f"{REENCODED}/train_labels.txt", "val": f"{REENCODED}/val_labels.txt"}
    return lists


def source_video_lists(wildcards):
    """What the re-encode reads: the source's train and val lists."""
    lists = source_lists(wildcards)
    return {"train": lists["train"], "val": lists["val"]}


def kinetics_inputs(wildcards):
    """The annotation CSVs, and the class index to keep when one is given."""
    inputs = {"train_csv": KINETICS["train_csv"], "val_csv": KINETICS["val_csv"]}
    if KINETICS["classes"]:
        inputs["classes"] = KINETICS["classes"]
    return inputs


def reencode_args():
    """The re-encode settings as `clipflow data reencode` flags."""
    shape = f"--size {REENCODE['size']}" if REENCODE["size"] else f"--short-side {REENCODE['short_side']}"
    spec = REENCODE_SPEC
    return (
        f"{shape} --fps {spec.fps} --frame-step {spec.frame_step} --gop {spec.keyframe_interval} --crf {spec.crf}"
        f" --preset {shlex.quote(spec.preset)}"
    )


def data_root(wildcards):
    """The folder the scanned list paths are relative to (a directory no rule declares)."""
    return DATA_ROOT


def source_root(wildcards):
    """The folder the source's list paths are relative to."""
    return SOURCE_ROOT


def user_videos_stamp(wildcards):
    """A param function: the digest of the user's video folder (clipflow.data.stamps), so that a video replaced,
    added or removed reruns the first rules that read the videos, and what follows; "" for the videos the
    workflow makes itself (data.source: synthetic), which are a rule's output."""
    return _videos_stamp()


@functools.cache
def _videos_stamp():
    """The folder walked once per Snakemake run, though the lists and the scan both take its digest."""
    from clipflow.data.stamps import folder_stamp

    return folder_stamp(SOURCE_ROOT, leave_out=DATA_DIR) if SOURCE in ("list", "kinetics", *LIST_SOURCES) else ""


def annotations_stamp(wildcards):
    """A param function: the digest of a published data set's split files (clipflow.data.stamps), so that a changed
    split file remakes the lists; "" for the other sources."""
    from clipflow.data.stamps import folder_stamp

    folder = annotations_of(DATA)
    return folder_stamp(folder) if folder else ""


def folder_of(name):
    """A param function: the folder of output `name`."""
    return lambda wildcards, output: os.path.dirname(output[name])
