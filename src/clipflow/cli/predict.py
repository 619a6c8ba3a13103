"""`clipflow predict VIDEO... (--run RUN | --model FILE)`: a trained video model's top classes for video files."""

from __future__ import annotations

import argparse
import json
import sys

from clipflow.cli.args import count
from clipflow.errors import ClipflowError


def cmd_predict(a: argparse.Namespace) -> int:
    """Answers every video (a table, or a JSON line each); 0 when all were read, 2 when any could not be."""
    from clipflow.evaluate.predict import model_path, predict
    from clipflow.train.device import worker_device

    answers = predict(a.videos, model_path(a.run, a.model), a.top, worker_device(), a.batch_size)
    for i, answer in enumerate(answers):
        if a.json:
            print(json.dumps(answer.as_json(), ensure_ascii=False))
        elif answer.error is not None:
            print(*answer.lines(), file=sys.stderr)
        else:
            print(*(["", *answer.lines()] if i else answer.lines()), sep="\n")
    return ClipflowError.exit_status if any(answer.error is not None for answer in answers) else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="the top classes of video files by a trained model, under the recipe's test protocol",
        description="Answers, for each video, its most probable classes with names and probabilities under the "
        "recipe's test protocol: the views (data.test_clips x data.test_crops) and their ensemble (the mean of "
        "their softmax probabilities) that `clipflow evaluate` scores. A video that cannot be read is named with "
        "the reason (on stderr, or as a JSON line with --json) and the others are still answered; the exit "
        "status is then 2. Class names come from the model file's recipe (model.classes, the data's class index), "
        "else the label numbers stand in.",
    )
    p.add_argument("videos", nargs="+", metavar="VIDEO", help="video files to answer for")
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--run", help="a run of the workflow here (config run:): its results/RUN/train/model_final.pt")
    model.add_argument("--model", metavar="FILE", help="a model file clipflow wrote (model_final.pt or best.pt)")
    p.add_argument("--json", action="store_true", help="one JSON object a video, a line each, instead of tables")
    p.add_argument("--top", type=count, default=5, metavar="K", help="classes a video, most probable first (default 5)")
    p.add_argument(
        "--batch-size",
        type=count,
        default=None,
        help="views a forward pass at most; a batch holds whole videos (default: the recipe's eval_batch_size)",
    )
    p.set_defaults(func=cmd_predict)
