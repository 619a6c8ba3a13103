# clipflow: distributed training of video models, end to end.
# `snakemake --cores 1 train_slowfast` runs the embedded default of config.yaml.
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, update_config

from clipflow.errors import ClipflowError
from clipflow.schemas import typed_command_line, validate

min_version("9.20")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


# Where the config enters, once: `--config` values inside a mapping arrive as strings (Snakemake reads them with
# YAML's BaseLoader), so they are typed here as config.yaml's would be, then the whole config is checked against
# its schema (types, ranges, names, no NaN or infinity) and its defaults filled in, before any rule reads it.
try:
    update_config(config, typed_command_line(workflow.config_settings.config))
    config.update(validate(config, "config.schema.yaml", "config"))
except ClipflowError as exc:
    raise WorkflowError(f"clipflow: {exc}")


include: "workflow/rules/common.smk"
include: "workflow/rules/cluster.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/splits.smk"
include: "workflow/rules/stage.smk"
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
