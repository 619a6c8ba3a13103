"""`clipflow evaluate launch`: the test protocol over a plan's workers, gathered with torch.distributed.

The inputs are checked once here (:func:`clipflow.evaluate.evaluate.check_inputs`), the job is written to the
log folder, and the plan's workers start from it (:mod:`clipflow.evaluate.worker`) on torch.distributed (gloo
on CPUs, NCCL on GPUs), whichever back end trained the model: with a ps plan only its workers run.
"""

from __future__ import annotations

from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.evaluate.evaluate import check_inputs
from clipflow.evaluate.job import JOB_FILE, EvalJob
from clipflow.files import check_output_dir
from clipflow.hosts.plan import Plan
from clipflow.launch.start import HostRun, job_command, launch_workers
from clipflow.made import Made


def launch_evaluation(plan_path: str, model: str, list_path: str, root: str, out: str, batch_size: int | None,
                      log_dir: str, grace: float, local: HostRun | None = None) -> int:  # fmt: skip
    """Evaluates ``model`` on ``list_path`` over the workers of the plan in ``plan_path``; rank 0 writes ``out``.
    The launcher's exit code. ``local``: the hosts have their own disks: the model and the list go to the
    evaluation's folder on every host, the workers read the staged videos, and rank 0's metrics.json comes home
    checked against its sha256."""
    plan = Plan.read(plan_path, launching=True)
    if not any(r.role == "worker" for r in plan.roles) or plan.num_workers < 1:
        raise ClipflowError(f"cluster plan {plan_path} has no workers to evaluate on; rerun the cluster stage")
    check_output_dir(log_dir, "--log-dir")  # the job file and the workers' logs go there
    Made(log_dir, "--log-dir").check([JOB_FILE])  # someone else's job.json there is refused rather than replaced
    check_inputs(model, list_path, root, batch_size, out)  # once here, rather than in every worker
    paths = (Path(p).absolute() for p in (model, list_path, root, out))  # as every host of the plan names them
    job = EvalJob(plan, *paths, batch_size)
    if local is not None:
        return evaluate_on_own_disks(job, local, log_dir, grace)
    command = job_command("evaluate", job.write(log_dir).absolute())
    return launch_workers(plan, command, "ddp", log_dir, grace, host_logs=False)


def evaluate_on_own_disks(job: EvalJob, local: HostRun, log_dir: str, grace: float) -> int:
    """The evaluation on hosts with their own disks, in ``<run folder>/evaluate`` there."""
    from clipflow.hosts.transfer import fetch_checked
    from clipflow.launch.push import open_remote, push_job_files

    local.staged.check_hosts(job.plan.role_hosts(), "evaluate launch")
    folder = f"{local.folder}/evaluate"
    remote = job.on_host(folder, local.staged.root())
    job_file = remote.write(log_dir)
    files = {f"{folder}/{JOB_FILE}": job_file, str(remote.model): job.model, str(remote.list): job.list}
    for name in ("classes.txt", "manifest.json"):  # the class names beside the list (clipflow.evaluate.classes)
        if (job.list.parent / name).is_file():
            files[f"{folder}/{name}"] = job.list.parent / name
    push_job_files(job.plan, folder, lambda host: files)
    command = job_command("evaluate", f"{folder}/{JOB_FILE}")
    code = launch_workers(job.plan, command, "ddp", log_dir, grace, host_logs=False, workdir=local.folder)
    if code == 0:
        where = open_remote(job.plan, job.plan.rank0_host())
        try:
            fetch_checked(where, str(remote.out), job.out)
        finally:
            where.close()
        print(f"clipflow: metrics.json came home from {where.host}: {job.out}")
    return code
