# Settings every rule file uses, derived once from the validated config and the recipe.
import json
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from clipflow.errors import ClipflowError
from clipflow.recipe import load_recipe, recipe_path

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
DATA_DIR = DATA["dir"]
INDEX = f"{DATA_DIR}/index"
DATA_ROOT = DATA_DIR if DATA["source"] == "synthetic" else DATA["root"]
CLUSTER = config["cluster"]
NUM_WORKERS = CLUSTER["num_workers"]
OVERRIDES = json.dumps(config["overrides"], sort_keys=True)


SCAN_LOG = f"logs/data/scan_{DATA_DIR.replace(os.sep, '_')}.log"


def hosts_arg():
    """The plan's hosts: the hosts file, else the inline list (quoted for the shell)."""
    if CLUSTER["hosts_file"]:
        return f"--hosts-file {shlex.quote(CLUSTER['hosts_file'])}"
    return f"--hosts {shlex.quote(','.join(CLUSTER['hosts']))}"


def ssh_args():
    refuse = "" if CLUSTER["accept_new_host_keys"] else " --refuse-new-host-keys"
    return f"--ssh-key {shlex.quote(CLUSTER['ssh_key'])} --known-hosts {shlex.quote(CLUSTER['known_hosts'])}{refuse}"


def cluster_ready():
    """What train waits for: the plan; with ssh also the host checks and, with sync_dst_dir, the sync."""
    ready = [f"{RESULTS}/cluster/plan.json"]
    if CLUSTER["launcher"] == "ssh":
        ready.append(f"{RESULTS}/cluster/checks.json")
        if CLUSTER["sync_dst_dir"]:
            ready.append(f"{RESULTS}/cluster/synced.txt")
    return ready


def final_outputs():
    return [f"{RESULTS}/metrics.json", f"{RESULTS}/report/report.html"]


def raw_lists(wildcards):
    """The scan's input: the synthetic labels, or the user's lists."""
    if DATA["source"] == "synthetic":
        return {
            "train": f"{DATA_DIR}/train_labels.txt",
            "val": f"{DATA_DIR}/val_labels.txt",
            "classes": f"{DATA_DIR}/classes.txt",
        }
    if not DATA["train_list"] or not DATA["val_list"]:
        raise WorkflowError("clipflow: data.source is 'list' but data.train_list or data.val_list is empty")
    return {"train": DATA["train_list"], "val": DATA["val_list"]}


def data_root(wildcards):
    """The folder the list paths are relative to (a directory no rule declares for user data)."""
    return DATA_ROOT


def folder_of(name):
    """A param function: the folder of output `name`."""
    return lambda wildcards, output: os.path.dirname(output[name])
