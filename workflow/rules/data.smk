# Stage 2, data: generate the synthetic set (embedded default) or take the user's lists,
# then decode every video once with decord: list files with frame counts and a manifest.

if DATA["source"] == "synthetic":

    rule data_synthetic:
        output:
            videos=directory(f"{DATA_DIR}/videos"),
            train=f"{DATA_DIR}/train_labels.txt",
            val=f"{DATA_DIR}/val_labels.txt",
            classes=f"{DATA_DIR}/classes.txt",
        params:
            out=folder_of("train"),
            s=DATA["synthetic"],
        threads: 2
        log:
            "logs/data/synthetic.log",
        conda:
            "../../environment.yml"
        shell:
            "python -m clipflow data synth --out-dir {params.out:q} --num-train {params.s[num_train]}"
            " --num-val {params.s[num_val]} --seed {params.s[seed]} --min-frames {params.s[min_frames]}"
            " --max-frames {params.s[max_frames]} --short-side {params.s[short_side]}"
            " --workers {threads} > {log:q} 2>&1"


rule data_scan:
    input:
        unpack(raw_lists),
    output:
        train=f"{INDEX}/train.lst",
        val=f"{INDEX}/val.lst",
        manifest=f"{INDEX}/manifest.json",
    params:
        root=data_root,
        out=folder_of("train"),
        num_classes=RECIPE["model"]["num_classes"],
        classes=lambda wc, input: input.get("classes", ""),
    threads: 2
    log:
        SCAN_LOG,
    conda:
        "../../environment.yml"
    shell:
        "python -m clipflow data scan --train-list {input.train:q} --val-list {input.val:q}"
        " --root {params.root:q} --num-classes {params.num_classes}"
        " --classes {params.classes:q} --out-dir {params.out:q} --workers {threads} > {log:q} 2>&1"
