# Stage 2, data: generate the synthetic set (embedded default), take the user's lists, or make lists of a
# class-per-folder tree, of UCF101's, HMDB51's or Something-Something v2's split files, or of Kinetics annotation
# CSVs (all with their class index, classes.txt, in the data set's folder); optionally re-encode every video
# (data.reencode); then decode every video once with the recipe's decoder: list files with frame counts, a manifest,
# and each kept video's size, mtime and sha256 (videos.json). The first rule that reads the
# user's videos (the re-encode, else the scan) takes their folder's digest as a parameter: a
# video replaced, added or removed reruns it and what follows. Image recipes (CIFAR-10) index the python
# batches instead, the user's or generated ones (no videos.json).

if SOURCE == "synthetic":

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


if SOURCE == "kinetics":

    # `path label` lists relative to data.kinetics.root and the class index shared by both;
    # videos not on disk stay in the lists, and the scan lists each as a failure.
    rule data_kinetics:
        input:
            unpack(kinetics_inputs),
        output:
            train=f"{DATA_DIR}/train_labels.txt",
            val=f"{DATA_DIR}/val_labels.txt",
            classes=f"{DATA_DIR}/classes.txt",
        params:
            root=source_root,
            out=folder_of("train"),
            classes=lambda wc, input: input.get("classes", ""),
        log:
            f"logs/data/kinetics_{DATA_LOG_TAG}.log",
        conda:
            "../../environment.yml"
        shell:
            "python -m clipflow data kinetics --train-csv {input.train_csv:q} --val-csv {input.val_csv:q}"
            " --root {params.root:q} --classes={params.classes:q} --out-dir {params.out:q} > {log:q} 2>&1"


if SOURCE in LIST_SOURCES:

    # `path label` lists relative to data.root and their class index; the folder's listing or the published split
    # files are read again when a video or a split file changes (their folders' digests)
    rule data_lists:
        output:
            train=f"{DATA_DIR}/train_labels.txt",
            val=f"{DATA_DIR}/val_labels.txt",
            classes=f"{DATA_DIR}/classes.txt",
        params:
            flags=lists_flags(DATA),
            out=folder_of("train"),
            videos=user_videos_stamp,
            annotations=annotations_stamp,
        log:
            f"logs/data/lists_{DATA_LOG_TAG}.log",
        conda:
            "../../environment.yml"
        shell:
            "python -m clipflow data lists {params.flags} --out-dir {params.out:q} > {log:q} 2>&1"


if REENCODE["enabled"]:

    # The re-encoded videos go to {DATA_DIR}/reencoded/ (declared by no rule, like the checkpoints):
    # a killed or rerun re-encode keeps what is done and skips it (reencoded/reencode.jsonl).
    rule data_reencode:
        input:
            unpack(source_video_lists),
        output:
            train=f"{REENCODED}/train_labels.txt",
            val=f"{REENCODED}/val_labels.txt",
        params:
            root=source_root,
            out=folder_of("train"),
            spec=reencode_args(),
            videos=user_videos_stamp,
        threads: REENCODE["workers"]
        log:
            f"logs/data/reencode_{DATA_LOG_TAG}.log",
        conda:
            "../../environment.yml"
        shell:
            "python -m clipflow data reencode --list {input.train:q} --list {input.val:q} --root {params.root:q}"
            " --out-root {params.out:q} --out-list {output.train:q} --out-list {output.val:q} {params.spec}"
            " --workers {threads} > {log:q} 2>&1"


if SOURCE == "synthetic_cifar10":

    rule data_synthetic_cifar10:
        output:
            directory(SOURCE_ROOT),
        params:
            s=DATA["synthetic"],
        log:
            "logs/data/synthetic_cifar10.log",
        conda:
            "../../environment.yml"
        shell:
            "python -m clipflow data cifar-synth --out-dir {output:q} --num-train {params.s[num_train]}"
            " --num-val {params.s[num_val]} --seed {params.s[seed]} > {log:q} 2>&1"


if SOURCE in IMAGE_SOURCES:

    # the CIFAR-10 batches read in full once: a damaged file stops here, named; `file#row` lists
    rule data_cifar10_index:
        input:
            SOURCE_ROOT,
        output:
            train=f"{INDEX}/train.lst",
            val=f"{INDEX}/val.lst",
            manifest=f"{INDEX}/manifest.json",
        params:
            out=folder_of("train"),
        log:
            SCAN_LOG,
        conda:
            "../../environment.yml"
        shell:
            "python -m clipflow data cifar-index --root {input:q} --out-dir {params.out:q} > {log:q} 2>&1"


else:

    rule data_scan:
        input:
            unpack(raw_lists),
        output:
            train=f"{INDEX}/train.lst",
            val=f"{INDEX}/val.lst",
            manifest=f"{INDEX}/manifest.json",
            videos=f"{INDEX}/videos.json",
        params:
            root=data_root,
            out=folder_of("train"),
            num_classes=f"--num-classes {RECIPE['model']['num_classes']}" if "num_classes" in RECIPE["model"] else "",
            dataset=DATASET_NAME,
            classes=lambda wc, input: input.get("classes", ""),
            decoder=RECIPE["data"]["decoder"],
            videos=lambda wc: "" if REENCODE["enabled"] else user_videos_stamp(wc),
            span=CLIP_SPAN,
            short=DATA["short_videos"],
        threads: 2
        log:
            SCAN_LOG,
        conda:
            "../../environment.yml"
        shell:
            "python -m clipflow data scan --train-list {input.train:q} --val-list {input.val:q}"
            " --root {params.root:q} {params.num_classes} --dataset {params.dataset:q}"
            " --classes={params.classes:q} --out-dir {params.out:q} --workers {threads}"
            " --decoder {params.decoder} --clip-span {params.span} --short-videos {params.short} > {log:q} 2>&1"
