# clipflow: distributed training of video models, end to end.
# `snakemake --cores 1 train_slowfast` runs the embedded default of config.yaml.
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from clipflow.config_entry import entered_config
from clipflow.errors import ClipflowError

min_version("9.20")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


# Where the config enters, once (clipflow.config_entry): every value as the user typed it (the config files read
# again with YAML 1.2's numbers, the --config words typed by their schema), then the whole config checked against
# its schema (types, ranges, names, no NaN or infinity) with its defaults filled in, the Slurm time limit in
# minutes, before any rule reads it. The files in the order Snakemake merged them: this file's, then --configfile's.
_settings = workflow.config_settings
_cli_files = [str(f) for f in _settings.configfiles]
_own_files = [] if _settings.replace_workflow_config else [f for f in workflow.configfiles if str(f) not in _cli_files]
try:
    config.update(entered_config(config, [*_own_files, *_cli_files], _settings.config_args))
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
