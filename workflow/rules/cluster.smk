# Stage 1, cluster: place the roles on the hosts and check the scheduler's port.
# Host names and ports change the plan but never retrain: train reads the plan as ancient().


rule cluster_plan:
    output:
        f"{RESULTS}/cluster/plan.json",
    params:
        launcher=CLUSTER["launcher"],
        hosts=",".join(CLUSTER["hosts"]),
        workers=NUM_WORKERS,
        servers=CLUSTER["num_servers"],
        port=CLUSTER["root_port"],
        timeout=CLUSTER["heartbeat_timeout"],
        security=CLUSTER["security"],
    log:
        f"{LOGS}/cluster_plan.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow cluster plan --launcher {params.launcher} --hosts {params.hosts:q}"
        " --num-workers {params.workers} --num-servers {params.servers} --root-port {params.port}"
        " --heartbeat-timeout {params.timeout} --security {params.security} --out {output:q} > {log:q} 2>&1"
