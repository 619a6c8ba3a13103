# Stage 4b, collect: every role's own log from its host, and rank 0's final model, best.pt and newest
# checkpoint from worker 0's host, into results/<run>/collected/; each copy is checked against the
# sha256 its writer recorded, and manifest.json is written only when every one matches.


rule collect:
    input:
        model=rules.train.output.model,
        history=rules.train.output.history,
        plan=ancient(f"{RESULTS}/cluster/plan.json"),
        staged=[ancient(path) for path in cluster_ready() if path == STAGED],
    output:
        manifest=f"{RESULTS}/collected/manifest.json",
    params:
        logs=rules.train.params.logs,
        checkpoints=rules.train.params.checkpoints,
        backend=config["train"]["backend"],
        out=folder_of("manifest"),
        staged=staged_args(),
    log:
        f"{LOGS}/collect.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow collect --plan {input.plan:q} --log-dir {params.logs:q}"
        " --checkpoint-root {params.checkpoints:q} --model {input.model:q} --backend {params.backend}"
        " --out {params.out:q} {params.staged} 2>&1 | tee {log:q}"
