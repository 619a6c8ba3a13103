# Stage 1, cluster: place the roles on the hosts; with the ssh launcher also authorise the
# job's key on every host, check every host, and sync the working folder.
# Host names and ports change the plan but never retrain: train reads these outputs as ancient().


# the plan is made where Snakemake runs, never as a job of its own: under workflow/profiles/slurm it names the nodes
# the train and evaluate jobs then ask for (a plan made inside a one-node job would be checked against that job)
localrules:
    cluster_plan,


rule cluster_plan:
    output:
        f"{RESULTS}/cluster/plan.json",
    params:
        launcher=CLUSTER["launcher"],
        hosts=hosts_arg(),
        ssh=ssh_args(),
        workers=NUM_WORKERS,
        servers=CLUSTER["num_servers"],
        port=CLUSTER["root_port"],
        timeout=CLUSTER["heartbeat_timeout"],
        security=CLUSTER["security"],
        placement=CLUSTER["placement"],
        python=CLUSTER["python"],
        workdir=CLUSTER["sync_dst_dir"],
    log:
        f"{LOGS}/cluster_plan.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow cluster plan --launcher {params.launcher} {params.hosts} {params.ssh}"
        " --num-workers {params.workers} --num-servers {params.servers} --root-port {params.port}"
        " --heartbeat-timeout {params.timeout} --security {params.security} --placement {params.placement}"
        " --python={params.python:q} --workdir={params.workdir:q} --out {output:q} > {log:q} 2>&1"


rule cluster_keys:
    output:
        f"{RESULTS}/cluster/keys.json",
    params:
        hosts=hosts_arg(),
        ssh=ssh_args(),
        key_type=CLUSTER["ssh_key_type"],
    log:
        f"{LOGS}/cluster_keys.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow cluster keys {params.hosts} {params.ssh} --key-type {params.key_type}"
        " --out {output:q} 2>&1 | tee {log:q}"


# checks, among the rest, that the data root is there on every host (after the data stage has made it) when the
# storage is shared, and decides the storage (cluster.storage auto: a marker in results/<run>/cluster)
rule cluster_check:
    input:
        plan=f"{RESULTS}/cluster/plan.json",
        authorised=f"{RESULTS}/cluster/keys.json",
        data=f"{INDEX}/manifest.json",
    output:
        f"{RESULTS}/cluster/checks.json",
    params:
        paths=lambda wildcards: " ".join(f"--path {shlex.quote(p)}" for p in [DATA_ROOT]),
        min_free=CLUSTER["min_free_gb"],
        storage=STORAGE_SETTING,
        marker=folder_of(0),
        links="--link-check" if CLUSTER["link_check"] else "--no-link-check",
        link_s=CLUSTER["link_check_s"],
        recipe=RECIPE_FILE,
        overrides=SHAPE_OVERRIDES,
        backend=config["train"]["backend"],
        kvstore=config["train"]["kvstore"],
    log:
        f"{LOGS}/cluster_check.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow cluster check --plan {input.plan:q} {params.paths} --min-free-gb {params.min_free}"
        " --storage {params.storage} --marker-dir {params.marker:q} {params.links} --link-check-s {params.link_s}"
        " --recipe {params.recipe:q} --overrides {params.overrides:q} --backend {params.backend}"
        " --kvstore {params.kvstore}"
        " --out {output:q} 2>&1 | tee {log:q}"


rule cluster_sync:
    input:
        checks=f"{RESULTS}/cluster/checks.json",
        plan=f"{RESULTS}/cluster/plan.json",
    output:
        f"{RESULTS}/cluster/synced.txt",
    params:
        dst=CLUSTER["sync_dst_dir"],
    log:
        f"{LOGS}/cluster_sync.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow cluster sync --plan {input.plan:q} --dst {params.dst:q} --stamp {output:q}"
        " 2>&1 | tee {log:q}"
