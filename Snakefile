# clipflow: distributed training of video models, end to end.
# `snakemake --cores 1 train_slowfast` runs the embedded default of config.yaml.
from snakemake.utils import min_version, validate

min_version("9.20")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


validate(config, "workflow/schemas/config.schema.yaml", set_default=True)


include: "workflow/rules/common.smk"
include: "workflow/rules/cluster.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/splits.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/evaluate.smk"


rule all:
    input:
        final_outputs(),
    default_target: True


rule train_slowfast:
    input:
        final_outputs(),
