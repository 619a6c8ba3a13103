"""`clipflow cluster plan|keys|check|sync|stage|unstage` and `clipflow launch` (MXNet launch.py's flags)."""

from __future__ import annotations

import argparse

from clipflow.cli.args import (
    at_least_zero,
    count,
    host_args,
    json_object,
    number_setting,
    port,
    seconds,
    ssh_args,
    ssh_settings,
)
from clipflow.errors import ClipflowError
from clipflow.schemas import config_defaults, config_enum


def cmd_plan(a: argparse.Namespace) -> int:
    from clipflow.hosts.plan import create_plan, plan_hosts, ssh_fields

    ssh = ssh_fields(a.launcher, ssh_settings(a), a.python, a.workdir)
    hosts = plan_hosts(a.hosts_file, a.hosts, a.launcher)
    plan = create_plan(a.out, a.launcher, hosts, a.num_workers, a.num_servers, a.root_port, a.heartbeat_timeout,
                       a.security, a.placement, ssh)  # fmt: skip
    print("\n".join(plan.summary()))
    print(f"plan written to {a.out}")
    return 0


def cmd_keys(a: argparse.Namespace) -> int:
    from clipflow.hosts.keys import authorize_hosts
    from clipflow.hosts.plan import plan_hosts

    authorize_hosts(plan_hosts(a.hosts_file, a.hosts), ssh_settings(a), a.key_type, a.out)
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    from clipflow.cluster.checks import check_plan
    from clipflow.hosts.plan import Plan

    if a.storage and not a.marker_dir:
        raise ClipflowError("--storage needs --marker-dir: the folder of the run's files, where the marker goes")
    predict = None
    if a.recipe:
        from clipflow.cluster.prediction import PredictionInputs, selected_backend
        from clipflow.recipe import load_recipe

        recipe = load_recipe(a.recipe, json_object(a.overrides))
        predict = PredictionInputs(recipe, selected_backend(a.backend, a.kvstore), a.compute_s)
    check_plan(Plan.read(a.plan), a.path, a.min_free_gb, a.out, storage=a.storage, marker_dir=a.marker_dir,
               link_seconds=a.link_check_s if a.link_check else None, predict=predict, backend=a.backend,
               kvstore=a.kvstore)  # fmt: skip
    return 0


def cmd_sync(a: argparse.Namespace) -> int:
    from clipflow.hosts.plan import Plan
    from clipflow.hosts.sync import sync_plan

    sync_plan(Plan.read(a.plan), a.src, a.dst, a.stamp)
    return 0


def cmd_stage(a: argparse.Namespace) -> int:
    from clipflow.cluster.stage import stage_data
    from clipflow.hosts.plan import Plan

    stage_data(Plan.read(a.plan), a.checks, a.index_dir, a.splits_dir, a.root, a.stage_dir, a.name, a.out)
    print(f"staged data written to {a.out}")
    return 0


def cmd_unstage(a: argparse.Namespace) -> int:
    from clipflow.cluster.stage import unstage
    from clipflow.hosts.plan import Plan

    unstage(Plan.read(a.plan), a.stage_dir, a.name)
    return 0


def env_pairs(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ClipflowError(f"--env {item!r}: expected NAME=VALUE with NAME a variable name")
        env[name] = value
    return env


def config_from_args(a: argparse.Namespace):
    """`clipflow launch`'s flags as a LaunchConfig (defaults as launch.py's: ssh with a hosts file, else local;
    as many servers as workers)."""
    from clipflow.hosts.plan import plan_hosts
    from clipflow.launch.start import LaunchConfig

    launcher = a.launcher or ("ssh" if a.hosts_file else "local")
    return LaunchConfig(
        num_workers=a.num_workers,
        num_servers=a.num_servers or a.num_workers,
        hosts=plan_hosts(a.hosts_file, "", launcher),
        launcher=launcher,
        ssh=ssh_settings(a),
        port=a.port,
        heartbeat_timeout=a.heartbeat_timeout,
        security=a.security,
        placement=a.placement,
        sync_dst_dir=a.sync_dst_dir,
        python=a.python,
        env=env_pairs(a.env),
        log_dir=a.log_dir,
        grace=a.grace,
        mxnet=a.mxnet,
    )


def cmd_launch(a: argparse.Namespace) -> int:
    """MXNet launch.py's job: start a scheduler, servers and workers running the command."""
    from clipflow.launch.start import launch_program

    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    return launch_program(config_from_args(a), command)


def register(sub: argparse._SubParsersAction) -> None:
    defaults = config_defaults("cluster")
    cluster = sub.add_parser("cluster", help="cluster preparation").add_subparsers(dest="action", required=True)
    p = cluster.add_parser("plan", help="place roles on hosts and check the ports")
    p.add_argument("--launcher", default=defaults["launcher"], choices=config_enum("cluster", "launcher"))
    host_args(p)
    p.add_argument("--num-workers", type=count, default=defaults["num_workers"])
    p.add_argument("--num-servers", type=count, default=defaults["num_servers"])
    p.add_argument("--root-port", type=port, default=defaults["root_port"])
    p.add_argument("--heartbeat-timeout", type=seconds, default=float(defaults["heartbeat_timeout"]))
    p.add_argument("--placement", default=defaults["placement"], choices=config_enum("cluster", "placement"))
    p.add_argument(
        "--security",
        default=defaults["security"],
        choices=config_enum("cluster", "security"),
        help="CURVE on every PS socket; auto: whenever the scheduler is not on loopback",
    )
    ssh_args(p)
    p.add_argument("--python", default="", help="ssh: the Python the roles run with on the hosts (default: this one)")
    p.add_argument("--workdir", default="", help="ssh: the roles' working folder on the hosts (default: this one)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_plan)
    p = cluster.add_parser("keys", help="make the job's ssh key and authorise it on every host")
    host_args(p)
    ssh_args(p)
    p.add_argument("--key-type", default=defaults["ssh_key_type"], choices=config_enum("cluster", "ssh_key_type"))
    p.add_argument("--out", default="", help="JSON report of what changed")
    p.set_defaults(func=cmd_keys)
    p = cluster.add_parser("check", help="check every host of a plan: ssh, versions, paths, ports, disk")
    p.add_argument("--plan", required=True)
    p.add_argument("--path", action="append", default=[], help="a path the run reads (repeat)")
    p.add_argument("--min-free-gb", type=at_least_zero, default=float(defaults["min_free_gb"]))
    p.add_argument("--storage", choices=config_enum("cluster", "storage"), default="",
                   help="decide cluster.storage with a marker in --marker-dir (default: no decision; the paths must "
                   "exist on every host)")  # fmt: skip
    p.add_argument("--marker-dir", default="", help="where the run's files live here (results/<run>/cluster)")
    p.add_argument("--link-check", default=defaults["link_check"], action=argparse.BooleanOptionalAction,
                   help="measure the links between every pair of hosts (cluster.link_check)")  # fmt: skip
    p.add_argument("--link-check-s", type=number_setting("cluster", "link_check_s"),
                   default=float(defaults["link_check_s"]), help="seconds each pair sends each way")  # fmt: skip
    p.add_argument("--recipe", default="", help="predict the step time of this recipe's model on the measured links")
    p.add_argument("--overrides", default="{}", help="JSON deep-merged into the recipe")
    p.add_argument("--backend", default=config_defaults("train")["backend"], choices=config_enum("train", "backend"),
                   help="the run's back end: the link check's all-reduce and the prediction use it")  # fmt: skip
    p.add_argument("--kvstore", default=config_defaults("train")["kvstore"],
                   choices=config_enum("train", "kvstore"))  # fmt: skip
    p.add_argument("--compute-s", type=seconds, default=None,
                   help="a worker's step compute time (default: timed here on random clips)")  # fmt: skip
    p.add_argument("--out", required=True, help="the checks as JSON")
    p.set_defaults(func=cmd_check)
    p = cluster.add_parser("sync", help="rsync the working folder to every host of a plan")
    p.add_argument("--plan", required=True)
    p.add_argument("--src", default=".")
    p.add_argument("--dst", required=True)
    p.add_argument("--stamp", default="", help="file written when every host is synced")
    p.set_defaults(func=cmd_sync)
    p = cluster.add_parser("stage", help="copy to each host the videos its workers read (local storage)")
    p.add_argument("--plan", required=True)
    p.add_argument("--checks", required=True, help="checks.json of clipflow cluster check (its storage decision)")
    p.add_argument("--index-dir", required=True, help="the scan's folder: videos.json, val.lst")
    p.add_argument("--splits-dir", required=True, help="the folder of worker{r}.lst")
    p.add_argument("--root", required=True, help="the data root the lists' paths are relative to")
    p.add_argument("--stage-dir", default=defaults["stage_dir"], help="the hosts' staging folder (absolute or ~/...)")
    p.add_argument("--name", required=True, help="the data set's folder under --stage-dir")
    p.add_argument("--out", required=True, help="staged.json: what each host holds")
    p.set_defaults(func=cmd_stage)
    p = cluster.add_parser("unstage", help="remove staged data from every host of a plan")
    p.add_argument("--plan", required=True)
    p.add_argument("--stage-dir", default=defaults["stage_dir"])
    p.add_argument("--name", default="", help="the data set's folder (default: every staged folder there)")
    p.set_defaults(func=cmd_unstage)

    p = sub.add_parser("launch", help="MXNet launch.py's flags: scheduler, servers and workers running a command")
    p.add_argument("-n", "--num-workers", type=count, required=True)
    p.add_argument("-s", "--num-servers", type=count, default=None, help="default: as many as workers")
    p.add_argument("-H", "--hostfile", dest="hosts_file", default="", help="[user@]host[:port] [slots=N] a line")
    p.add_argument(
        "--launcher", choices=config_enum("cluster", "launcher"), default="", help="default: ssh with -H, else local"
    )
    p.add_argument("--sync-dst-dir", default="", help="ssh: rsync this folder there first and run there")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for every role (repeat)")
    p.add_argument("--placement", default=defaults["placement"], choices=config_enum("cluster", "placement"))
    p.add_argument("--port", type=port, default=defaults["root_port"], help="the scheduler's port")
    p.add_argument("--heartbeat-timeout", type=seconds, default=float(defaults["heartbeat_timeout"]))
    p.add_argument("--security", default=defaults["security"], choices=config_enum("cluster", "security"))
    p.add_argument("--python", default="", help="ssh: the Python on the hosts (default: this one)")
    p.add_argument("--log-dir", default="logs/launch")
    p.add_argument("--grace", type=at_least_zero, default=10.0, help="seconds between SIGTERM and SIGKILL")
    p.add_argument(
        "--mxnet",
        action="store_true",
        help="run the command as the scheduler and the servers too, with DMLC_ROLE=scheduler or server, as MXNet's "
        "tools/launch.py does: for MXNet and GluonCV scripts (kvstore dist_sync/dist_async, which speak ps-lite). "
        "Named for the scripts it serves rather than for what it does, since that is what their users look for. "
        "Without it the scheduler and servers are clipflow's own. ps-lite traffic is not encrypted: beyond "
        "loopback it needs CLIPFLOW_PS_INSECURE=1",
    )
    ssh_args(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="the workers' command")
    p.set_defaults(func=cmd_launch)
