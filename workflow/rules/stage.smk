# Stage 3b, stage (ssh launcher, videos): with local storage (decided by the host checks), each host receives the
# videos of its workers' lists and its share of the val list in its staging folder (cluster.stage_dir, one folder
# per data set, reused by every run of the same data), each copy checked against the scan's sha256. With shared
# storage it only records that nothing is staged. Host placement never retrains: train reads it as ancient().

if CLUSTER["launcher"] == "ssh" and STAGES_VIDEOS:

    rule stage:
        input:
            plan=ancient(f"{RESULTS}/cluster/plan.json"),
            checks=f"{RESULTS}/cluster/checks.json",
            splits=rules.splits.output,
            val=f"{INDEX}/val.lst",
            videos=f"{INDEX}/videos.json",
        output:
            STAGED,
        params:
            index=lambda wildcards, input: os.path.dirname(input.val),
            splits=lambda wildcards, input: os.path.dirname(input.splits[0]),
            root=data_root,
            stage_dir=CLUSTER["stage_dir"],
            name=staging_name(DATA_DIR, DATA_ROOT),
        log:
            f"{LOGS}/stage.log",
        conda:
            "../../environment.yml"
        shell:
            "python -m clipflow cluster stage --plan {input.plan:q} --checks {input.checks:q}"
            " --index-dir {params.index:q} --splits-dir {params.splits:q} --root {params.root:q}"
            " --stage-dir {params.stage_dir:q} --name {params.name:q} --out {output:q} 2>&1 | tee {log:q}"
