# Stage 5, evaluate: the recipe's test protocol on the val list, split over the plan's workers, then the report.


rule evaluate:
    # Evaluation always runs on torch.distributed (the ddp launch of the plan's workers, gloo on CPUs,
    # NCCL on GPUs), whichever back end trained the model: with a ps plan only its workers start.
    input:
        model=rules.train.output.model,
        val=f"{INDEX}/val.lst",
        plan=ancient(f"{RESULTS}/cluster/plan.json"),
        staged=[ancient(path) for path in cluster_ready() if path == STAGED],
    output:
        f"{RESULTS}/metrics.json",
    params:
        nodelist=slurm_nodelist(),
        root=data_root,
        logs=f"{LOGS}/evaluate",
        staged=staged_args(),
    resources:
        **EVALUATE_RESOURCES,  # one Slurm job over the plan's nodes under workflow/profiles/slurm
    log:
        f"{LOGS}/evaluate.log",
    benchmark:
        f"{BENCH}/evaluate.tsv"
    conda:
        "../../environment.yml"
    shell:
        "{params.nodelist}python -m clipflow evaluate launch --plan {input.plan:q} --log-dir {params.logs:q}"
        " --model {input.model:q} --list {input.val:q} --root {params.root:q} --out {output:q} {params.staged}"
        " 2>&1 | tee {log:q}"


rule report:
    input:
        metrics=rules.evaluate.output,
        history=rules.train.output.history,
        manifest=f"{INDEX}/manifest.json",
        plan=ancient(f"{RESULTS}/cluster/plan.json"),
        checks=[ancient(path) for path in cluster_ready() if path.endswith("checks.json")],
        staged=[ancient(path) for path in cluster_ready() if path == STAGED],
        collected=rules.collect.output.manifest,
        recipe=RECIPE_FILE,  # with the lists: the reproduction audit (clipflow.report.audit)
        train_list=f"{INDEX}/train.lst",
        val_list=f"{INDEX}/val.lst",
    output:
        html=report(f"{RESULTS}/report/report.html", caption="../report/report.rst", category="Report"),
        curves=report(f"{RESULTS}/report/curves.png", caption="../report/curves.rst", category="Training"),
        throughput=report(f"{RESULTS}/report/throughput.png", caption="../report/throughput.rst", category="Training"),
        confusion=report(f"{RESULTS}/report/confusion.png", caption="../report/confusion.rst", category="Evaluation"),
    params:
        out=folder_of("html"),
        checks=lambda wildcards, input: f"--checks {shlex.quote(input.checks[0])}" if input.checks else "",
        staged=lambda wildcards, input: f"--staged {shlex.quote(input.staged[0])}" if input.staged else "",
        run=RUN,
        overrides=OVERRIDES,
    log:
        f"{LOGS}/report.log",
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow report --metrics {input.metrics:q} --history {input.history:q}"
        " --manifest {input.manifest:q} --plan {input.plan:q} {params.checks} {params.staged}"
        " --collected {input.collected:q}"
        " --recipe {input.recipe:q} --overrides {params.overrides:q}"
        " --train-list {input.train_list:q} --val-list {input.val_list:q}"
        " --results results --run {params.run:q}"
        " --out-dir {params.out:q} > {log:q} 2>&1"
