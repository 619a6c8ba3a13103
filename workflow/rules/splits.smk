# Stage 3, splits: one training list per worker, all of the same length.


rule splits:
    input:
        f"{INDEX}/train.lst",
    output:
        expand(f"{RESULTS}/splits/worker{{rank}}.lst", rank=range(NUM_WORKERS)),
    params:
        workers=NUM_WORKERS,
        seed=config["train"]["seed"],
        fill=RECIPE["data"]["split_fill"],
        accumulate=RECIPE["train"]["accumulate"],
        out=folder_of(0),
    log:
        f"{LOGS}/splits.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow splits --list {input:q} --num-workers {params.workers} --seed {params.seed}"
        " --fill {params.fill} --accumulate {params.accumulate}"
        " --out-dir {params.out:q} > {log:q} 2>&1"
