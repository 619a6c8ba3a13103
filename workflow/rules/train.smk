# Stage 4, train: the launcher starts the roles of the plan (back end ps: scheduler, servers and
# workers; ddp: the workers).
# Checkpoints go to results/<run>/checkpoints/, which is no declared output: a failed
# run keeps them and the next run resumes from the newest one that loads.
# What reruns train (docs/getting-started.md's table "What a changed setting reruns"): a changed setting it depends on, through
# train_settings; new splits, lists or recipe file. The cluster's files are ancient() once the run has its model:
# a host change alone remakes the cluster's files, not the model, and the next training that runs reads the new
# plan. Snakemake never judges a job below a rerun job through ancient() inputs only (it neither checks its params
# nor its missing outputs), hence the settings file, and plain cluster inputs while the model is missing.


rule train_settings:
    # what the trained model depends on, one `name=value` param each (clipflow.workflow_settings): a rule without
    # inputs, so Snakemake always compares its params, and the dry run's reason names the changed settings
    output:
        f"{RESULTS}/settings/train.txt",
    params:
        **{re.sub(r"\W", "_", name): line for name, line in train_settings(config, RECIPE).items()},
    log:
        f"{LOGS}/train_settings.log",
    run:
        write_settings(output[0], list(params), log[0])


rule train:
    input:
        settings=rules.train_settings.output,
        plan=once_trained(f"{RESULTS}/cluster/plan.json"),
        cluster=[once_trained(path) for path in cluster_ready()[1:] if path != STAGED],
        staged=[once_trained(path) for path in cluster_ready() if path == STAGED],
        splits=rules.splits.output,
        train_list=f"{INDEX}/train.lst",
        val=f"{INDEX}/val.lst",
        recipe=RECIPE_FILE,
        init_from=INIT_FROM,
    output:
        model=f"{RESULTS}/train/model_final.pt",
        history=f"{RESULTS}/train/metrics.jsonl",
    params:
        nodelist=slurm_nodelist(),
        overrides=OVERRIDES,
        backend=config["train"]["backend"],
        kvstore=config["train"]["kvstore"],
        on_servers="--update-on-kvstore" if config["train"]["update_on_kvstore"] else "",
        compression=config["train"]["gradient_compression"],
        seed=config["train"]["seed"],
        tensorboard=f"--tensorboard {RESULTS}/tensorboard" if config["train"]["tensorboard"] else "",
        root=data_root,
        splits=lambda wildcards, input: os.path.dirname(input.splits[0]),
        checkpoints=f"{RESULTS}/checkpoints",
        logs=f"{LOGS}/train",
        staged=staged_args(),
        on_notice=config["train"]["on_notice"],
        slurm_notice=config["cluster"]["slurm"]["notice_s"] if config["cluster"]["launcher"] == "slurm" else 0,
        policy=" ".join(
            f"--{name.replace('_', '-')} {config['train'][name]}"
            for name in policy_names()  # job.schema.yaml's list
            if config["train"][name] is not None
        ),
    resources:
        **TRAIN_RESOURCES,  # one Slurm job over the plan's nodes under workflow/profiles/slurm
    log:
        f"{LOGS}/train.log",
    benchmark:
        f"{BENCH}/train.tsv"
    conda:
        "../../environment.yml"
    shell:
        "{params.nodelist}python -m clipflow train launch --plan {input.plan:q} --log-dir {params.logs:q}"
        " --recipe {input.recipe:q} --overrides {params.overrides:q} --splits-dir {params.splits:q}"
        " --root {params.root:q} --checkpoint-root {params.checkpoints:q} --model-out {output.model:q}"
        " --metrics-out {output.history:q} --val-list {input.val:q} --train-list {input.train_list:q}"
        " --backend {params.backend} --kvstore {params.kvstore} {params.on_servers} {params.policy}"
        " --compression {params.compression[type]} --compression-threshold {params.compression[threshold]}"
        " --seed {params.seed} --on-notice {params.on_notice} --slurm-notice {params.slurm_notice}"
        " {params.tensorboard} {params.staged} 2>&1 | tee {log:q}"
