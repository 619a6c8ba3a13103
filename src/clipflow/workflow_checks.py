"""What the workflow's config and its recipe say together, checked while Snakemake reads the Snakefile, before any
job: each alone is checked by its schema where it enters; these are the checks that need both, or the hosts."""

from __future__ import annotations

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host, hosts_from_config, read_hosts_file
from clipflow.hosts.plan import check_reachable, check_roles_per_host
from clipflow.hosts.slurm_resources import slurm_nodes
from clipflow.recipe import check_span
from clipflow.train.multigrid import check_multigrid


def check_config_with_recipe(config: dict, recipe: dict, recipe_name: str) -> None:
    """The synthetic set's videos hold the recipe's clip span (and its frame counts are in order); no host gets more
    roles than it could start (clipflow.hosts.plan.check_roles_per_host), before the rules are built for them; the
    plan's hosts can reach each other (by their names: the addresses are the plan's to find). ClipflowError naming
    the keys."""
    data, cluster = config["data"], config["cluster"]
    try:
        check_multigrid(recipe)
    except ClipflowError as exc:
        raise ClipflowError(f"recipe {recipe_name}: {exc}") from None
    if data["source"] == "synthetic":
        synthetic = data["synthetic"]
        if synthetic["min_frames"] > synthetic["max_frames"]:
            raise ClipflowError(
                f"config: data.synthetic.min_frames {synthetic['min_frames']} is larger than max_frames "
                f"{synthetic['max_frames']}; give min_frames <= max_frames"
            )
        what = f"recipe {recipe_name}" + (" with overrides" if config["overrides"] else "")
        check_span(recipe, synthetic["max_frames"], "of the synthetic set (data.synthetic.max_frames)", what)
    if cluster["storage"] == "local" and cluster["launcher"] != "ssh":
        raise ClipflowError(
            f"config: cluster.storage is local but cluster.launcher is {cluster['launcher']}: staging to hosts with "
            "their own disks goes over ssh; use launcher ssh, or storage shared (or auto)"
        )
    if cluster["storage"] == "local" and recipe["data"]["kind"] != "video":
        raise ClipflowError(
            f"config: cluster.storage is local, but recipe {recipe_name} trains on {recipe['data']['kind']}s: only "
            "videos are staged to hosts with their own disks; use storage shared (the data set on every host at the "
            "same path)"
        )
    hosts = _hosts(cluster)
    check_roles_per_host(hosts, cluster["num_workers"], cluster["num_servers"], cluster["placement"],
                         config["train"]["backend"])  # fmt: skip
    if cluster["launcher"] == "ssh":
        check_reachable(hosts, {host: host.host for host in hosts})


def _hosts(cluster: dict) -> list[Host]:
    """The hosts the plan will be made on: the hosts file or cluster.hosts (Slurm nodes with the slurm launcher)."""
    if cluster["launcher"] == "slurm":
        return slurm_nodes(cluster)
    if cluster["hosts_file"]:
        return read_hosts_file(cluster["hosts_file"])
    return hosts_from_config(cluster["hosts"])
