"""One evaluate worker: ``clipflow evaluate worker --job FILE --rank R`` scores its share of the list and
gathers every worker's over torch.distributed (:func:`clipflow.evaluate.evaluate.evaluate`)."""

from __future__ import annotations

from pathlib import Path

from clipflow.evaluate.evaluate import evaluate
from clipflow.evaluate.job import EvalJob
from clipflow.evaluate.metrics import summary_line
from clipflow.train.comm import DDPConfig, run_in_group
from clipflow.train.worker import bootstrap


def run_eval_worker(job_path: str | Path, rank: int) -> int:
    """Worker ``rank`` of the evaluation in ``job_path``; rank 0 prints the summary. The exit status."""
    job = EvalJob.read(Path(job_path).expanduser()).expanded()  # a host's own folder may be named from ~
    job.check_rank(rank)
    device = bootstrap()

    def body(comm) -> None:
        metrics = evaluate(job.model, job.list, job.root, job.out, job.batch_size, comm, device)
        if metrics is not None:
            print(summary_line(metrics))

    return run_in_group("evaluate", DDPConfig.from_env(rank=rank), device, body)
