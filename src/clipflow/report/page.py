"""The report page: ``report.html`` beside its figures, the figures also inside the page (data URIs)
so the one file shows everything wherever it is opened, Snakemake's report included.

Sections: the result against the references, the evaluation (clip and video level, per class,
confusion), the reproduction audit (with the recipe: its settings beside the published setup, validation
beside test, the lists' fingerprint), training curves, throughput (per worker, data against compute), scaling (when
finished runs of the same recipe with other worker counts sit beside this one under
``results/``), the cluster plan and host checks, the restarts (a timeline of the launcher's attempts), the
files collected from the hosts with their checksums, and the dataset manifest.
"""

from __future__ import annotations

import base64
import html
import itertools
import statistics
from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.files import check_output_dir, write_text_atomic
from clipflow.recipe import load_recipe
from clipflow.report import figures
from clipflow.report.audit import RunFacts, audit, list_print
from clipflow.report.compare import comparisons
from clipflow.report.history import read_history
from clipflow.report.scaling import scaling_points
from clipflow.report.tables import MAX_CONFUSION_CELLS, confusion_table, pairs, table
from clipflow.textfile import read_json_object
from clipflow.train.loader_sizing import LoaderChoice
from clipflow.train.restarts import read_attempts

OWN_FILES = (
    "report.html",
    "curves.png",
    "throughput.png",
    "confusion.png",
    "scaling.png",
    "restarts.png",
)  # all it writes
TITLE = "clipflow run "  # how every page it writes is titled: a report.html without it is not one of its own
CSS = """body{font-family:sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:4px 10px;text-align:left}
thead th{background:#f3f3f3}td{font-variant-numeric:tabular-nums}img{max-width:100%;height:auto;display:block}
table.confusion td{text-align:right;min-width:2.2em}.summary{font-size:1.2em}.caption{color:#555}"""


@dataclass(frozen=True)
class ReportInputs:
    metrics: Path  # evaluate's metrics.json
    history: Path  # the trainer's metrics.jsonl
    manifest: Path  # the data index's manifest.json
    plan: Path  # cluster/plan.json
    checks: Path | None = None  # cluster/checks.json (ssh launcher)
    results: Path | None = None  # the folder of all runs, for the scaling figure
    collected: Path | None = None  # collect's manifest.json: the files brought home, checksums verified
    staged: Path | None = None  # cluster/staged.json: the storage and the videos staged per host
    restarts: Path | None = None  # the launcher's restarts.jsonl (else the copy the collection manifest lists)
    recipe: Path | None = None  # the run's recipe file: with it the reproduction audit (clipflow.report.audit)
    overrides: dict | None = None  # the run's recipe overrides, merged into the recipe as training did
    train_list: Path | None = None  # the run's index lists (train.lst, val.lst): the audit's data set fingerprint
    val_list: Path | None = None


EXPECTED = {  # what each JSON input of the page is, for the message when it is not that
    "metrics file": "the JSON object the evaluate stage writes (metrics.json)",
    "dataset manifest": "the JSON object the data scan or cifar-index writes (manifest.json)",
    "cluster plan": "the JSON object clipflow cluster plan writes (plan.json)",
    "host checks": "the JSON object clipflow cluster check writes (checks.json)",
    "collection manifest": "the JSON object clipflow collect writes (collected/manifest.json)",
    "staging record": "the JSON object clipflow cluster stage writes (cluster/staged.json)",
}


def _read_json(path: Path, what: str) -> dict:
    """The JSON object of an input: missing, unreadable, not UTF-8, not JSON or not an object is a
    ClipflowError naming the file (and the line)."""
    return read_json_object(path, what, EXPECTED[what])


def _figure(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" data-file="{path.name}">'


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def chance(metrics: dict, manifest: dict) -> tuple[int, float] | None:
    """(classes, the top-1 of a guess in percent) of the data set: one class in as many as it has."""
    count = manifest.get("num_classes") or len(metrics.get("classes") or [])
    return (count, 100.0 / count) if count else None


def _summary(metrics: dict, manifest: dict) -> str:
    line = f"video top-1 <b>{100 * metrics['top1']:.2f}%</b>, top-5 {100 * metrics['top5']:.2f}%"
    rows = comparisons(metrics)
    first = next((r for r in rows if r.metric == "top-1" and r.reference is not None), None)
    if first is not None:
        line += (
            f" &mdash; reference {first.reference:.2f}% ({html.escape(first.source)}): {first.difference:+.2f} points"
        )
    guess = chance(metrics, manifest)
    data = html.escape(manifest.get("dataset") or "the scanned data set")
    on = f"<p>On {data}" + (
        f": {guess[0]} classes, chance (a guess) is {guess[1]:.1f}% top-1.</p>" if guess else ".</p>"
    )
    return f'<p class="summary">{line}</p>{on}'


def _evaluation(metrics: dict, out: Path) -> str:
    clip, video = metrics.get("clip") or {}, metrics.get("video") or {}
    rows = [
        ("recipe", metrics["recipe"]),
        ("list", metrics.get("split")),
        ("protocol", metrics.get("protocol")),
        ("videos (views each)", f"{metrics['num_videos']} ({metrics.get('num_views', 1)})"),
        ("evaluated by", f"{metrics.get('workers', 1)} worker(s)"),
        ("clip top-1 / top-5 (%)", f"{100 * clip['top1']:.2f} / {100 * clip['top5']:.2f}" if clip else None),
        (
            "video top-1 / top-5 (%)",
            f"{100 * video.get('top1', metrics['top1']):.2f} / {100 * video.get('top5', metrics['top5']):.2f}",
        ),  # fmt: skip
        ("loss (video level)", None if metrics.get("loss") is None else f"{metrics['loss']:.4f}"),
    ]
    parts = ["<h2>Evaluation</h2>", pairs(rows)]
    compared = comparisons(metrics)
    parts.append("<h3>Against the published results</h3>")
    if compared:
        header = ["metric", "this run (%)", "reference (%)", "difference (points)", "source", "reference protocol"]
        rows = [[c.metric, c.this_run, c.reference, None if c.difference is None else f"{c.difference:+.2f}",
                 c.source, c.protocol] for c in compared]  # fmt: skip
        parts.append(table(header, rows))
        parts.append(f'<p class="caption">This run: {html.escape(str(metrics.get("protocol")))}.</p>')
    else:
        parts.append("<p>The recipe carries no reference result.</p>")
    names = [str(n) for n in metrics.get("classes") or []]
    if metrics.get("per_class"):
        worst_first = sorted(metrics["per_class"], key=lambda c: (c["top1"] is None, c["top1"] or 0.0))
        parts += ["<h3>Per class (video top-1, worst first)</h3>",
                  table(["label", "class", "videos", "top-1 (%)"],
                        [[c["label"], c["name"], c["videos"], _pct(c["top1"])] for c in worst_first])]  # fmt: skip
    if metrics.get("confusion"):
        matrix = metrics["confusion"]
        names = names or [str(i) for i in range(len(matrix))]
        parts.append("<h3>Confusion matrix (video level)</h3>")
        parts.append(_figure(figures.plot_confusion(matrix, names, out / "confusion.png"), "confusion matrix"))
        if len(matrix) <= MAX_CONFUSION_CELLS:
            parts.append(confusion_table(matrix, names))
    return "".join(parts)


def _reproduction(inputs: ReportInputs, metrics: dict, history: list[dict], plan: dict) -> str:
    """The reproduction audit (clipflow.report.audit) as tables: the recipe beside its published setup, validation
    beside test, and the data set's fingerprint; nothing without the recipe."""
    if inputs.recipe is None:
        return ""
    recipe = load_recipe(str(inputs.recipe), inputs.overrides)
    lists = [list_print(split, path) for split, path in (("train", inputs.train_list), ("val", inputs.val_list))
             if path is not None]  # fmt: skip
    found = audit(recipe, RunFacts.of(plan, history), metrics, lists)
    source = found.source or "the recipe's reference names no setup (reference.setup)"
    differing = ", ".join(found.differing) or "none"
    parts = ["<h2>Reproduction audit</h2>",
             table(["setting", "this run", "published", "verdict"],
                   [[r.setting, r.this_run, r.published or "not published", r.verdict] for r in found.rows],
                   css="audit"),
             f'<p class="caption">Published setup: {html.escape(source)}. Differs from it: {html.escape(differing)}.'
             "</p>",
             "<h3>Validation and test</h3>",
             table(["protocol", "videos", "top-1 (%)"], [list(a) for a in found.accuracy])]  # fmt: skip
    if found.lists:
        parts += ["<h3>Data set fingerprint</h3>",
                  table(["list", "file", "videos", "sha256"],
                        [[p.split, p.path, p.videos, p.sha256] for p in found.lists])]  # fmt: skip
    return "".join(parts)


def _training(history: list[dict], out: Path) -> str:
    last = history[-1]
    last_val = next((h["val_top1"] for h in reversed(history) if "val_top1" in h), None)
    rows = [
        ("epochs", last["epoch"]),
        ("steps", last.get("step")),
        ("final training loss", last["loss"]),
        ("final training top-1 (%)", _pct(last.get("train_top1"))),
        ("last validation top-1 (%)", _pct(last_val)),
    ]
    return ("<h2>Training</h2>" + _figure(figures.plot_curves(history, out / "curves.png"), "training curves")
            + pairs(rows))  # fmt: skip


def _multigrid(history: list[dict]) -> str:
    """The multigrid run's cycle (clipflow.train.multigrid): one row per long-cycle stage as the epochs' records
    keep it, its epochs, clip shape, clips per worker, BatchNorm groups, lr factor, steps and seconds; nothing for
    a run without multigrid."""
    records = [h for h in history if isinstance(h.get("multigrid"), dict)]
    if not records:
        return ""
    rows: list[list[object]] = []
    for stage, group in itertools.groupby(records, key=lambda h: h["multigrid"].get("stage")):
        epochs = list(group)
        first, last = epochs[0]["epoch"], epochs[-1]["epoch"]
        shape = epochs[0]["multigrid"]
        stride = shape.get("stride") or [None, None]
        steps = sum(h["multigrid"].get("steps", 0) for h in epochs)
        rows.append([stage, f"{first}-{last}" if last != first else str(first),
                     f"{shape.get('frames')} x {shape.get('crop')}²", f"{stride[0]}-{stride[1]}", shape.get("clips"),
                     shape.get("bn_splits"), shape.get("lr_factor"), steps,
                     sum(h.get("epoch_time", 0.0) for h in epochs)])  # fmt: skip
    short = records[0]["multigrid"].get("short_cycle")
    caption = ("Multigrid training: the long cycle's stages, each a clip shape (fast-pathway frames x crop) with "
               "its clips per worker and step grown to keep a step's work, the lr times the same factor and "
               "BatchNorm over groups of the batch."
               + (" The short cycle also trains two smaller crops (short_cycle_factors of the recipe's) on as many "
                  "more clips, step by step; the crop and clips shown are the stage's own."
                  if short else ""))  # fmt: skip
    return ("<h2>Multigrid</h2>"
            + table(["stage", "epochs", "frames x crop", "stride", "clips / worker", "BatchNorm groups",
                     "lr factor", "steps", "seconds"], rows)
            + f'<p class="caption">{caption}</p>')  # fmt: skip


def _throughput(history: list[dict], out: Path) -> str:
    part = "<h2>Throughput</h2>" + _figure(figures.plot_throughput(history, out / "throughput.png"), "throughput")
    workers = history[-1].get("workers") or []
    if workers:
        ranks, data, compute = figures.time_split(history)
        whole = {r: 100 * figures.wait_share(d, c) for r, d, c in zip(ranks, data, compute, strict=True)}
        part += table(["worker", "clips/s (last epoch)", "data s", "compute s", "waiting for data (%)",
                       "waiting, whole run (%)", "loader"],
                      [[w["rank"], w["clips_per_s"], w["data_time"], w["step_time"],
                        100 * figures.wait_share(w["data_time"], w["step_time"]), whole.get(w["rank"]),
                        _loader(w.get("loader"))] for w in workers])  # fmt: skip
        part += ('<p class="caption">Waiting for data: the share of a worker\'s time spent waiting for its next '
                 "batch, data / (data + compute). Loader: each worker's loader processes, prefetch and decode threads, "
                 "as the recipe gives them or sized at its start from its measured decode and step times "
                 "(train.loader_workers auto).</p>")  # fmt: skip
    return part


def _loader(record: object) -> str | None:
    """A worker's loader as its epoch record keeps it (clipflow.train.loader_sizing), in words; None in a history
    from before it was recorded."""
    if not isinstance(record, dict):
        return None
    try:
        return LoaderChoice.from_record(record).describe()
    except (TypeError, ValueError):  # not the trainer's record
        return None


def _scaling(results: Path | None, recipe: str, batch_size: int | None, out: Path) -> str:
    points = scaling_points(results, recipe, batch_size) if results else []
    if len(points) < 2:
        return ""
    base = points[0]
    return ("<h2>Scaling</h2>" + _figure(figures.plot_scaling(points, out / "scaling.png"), "scaling")
            + table(["run", "workers", "clips/s", "speed-up", "efficiency (%)"],
                    [[p.run, p.workers, p.clips_per_s, p.speedup(base), 100 * p.efficiency(base)] for p in points])
            + f'<p class="caption">Finished runs under {html.escape(str(results))}/ of {html.escape(recipe)} at '
              f"{batch_size} clips per worker, the median clips/s (every worker's summed) of each run's epochs after "
              "the first. The report is made when its run ends: rerun it (snakemake -R report) after another run "
              "finishes.</p>")  # fmt: skip


def _cluster(plan: dict, checks: dict | None) -> str:
    roles = [[r["role"], r["rank"], r["host"]] for r in plan.get("roles", [])]
    facts = [(key, plan.get(key)) for key in ("launcher", "num_workers", "num_servers", "security")]
    part = "<h2>Cluster</h2>" + pairs(facts) + table(["role", "rank", "host"], roles)
    if checks:
        rows = [[h["host"], "ok" if h["ok"] else "FAILED", h.get("facts", {}).get("python"),
                 h.get("facts", {}).get("torch"), h.get("facts", {}).get("clipflow"), h.get("facts", {}).get("free_gb"),
                 "; ".join(h.get("problems") or [])] for h in checks.get("hosts", [])]  # fmt: skip
        part += "<h3>Host checks</h3>" + table(
            ["host", "result", "python", "torch", "clipflow", "free GB", "problems"], rows
        )
    return part


def _measured_step(history: list[dict]) -> float | None:
    """A worker's measured seconds a step: the per-worker batch over the median per-worker clips/s of the epochs
    after the first (as the scaling figure takes a run's speed), data loading included."""
    speeds = [h["clips_per_s"] / len(h["workers"]) for h in history if h.get("workers") and h.get("clips_per_s")]
    batch = history[-1].get("batch_size") if history else None
    if not speeds or not batch:
        return None
    return batch / statistics.median(speeds[1:] or speeds)


def _links(checks: dict | None, history: list[dict]) -> str:
    """The link check: each pair's bandwidth and latency, the likely straggler named, and the predicted step time
    per back end beside the measured one."""
    links = (checks or {}).get("links")
    if not links:
        return ""
    if not links.get("measured"):
        return f"<h3>Links</h3><p>{html.escape(str(links.get('note')))}</p>"
    slow = {(s["a"], s["b"]): s["why"] for s in links.get("straggler", [])}
    rows = [[f"{p['a']} <-> {p['b']}", p["gbit_s"], p["up_gbit_s"], p["down_gbit_s"], p["latency_ms"],
             f"likely straggler: {slow[(p['a'], p['b'])]}" if (p["a"], p["b"]) in slow else ""]
            for p in links.get("pairs", [])]  # fmt: skip
    part = "<h3>Links</h3>" + table(["pair", "Gbit/s", "a to b", "b to a", "latency ms (one way)", ""], rows)
    named = ", ".join(f"{a} <-> {b}" for a, b in slow) or "none: no pair far below the others"
    part += (f'<p class="caption">ZeroMQ TCP between every pair of hosts, {links.get("seconds")} s each way; the '
             f"likely straggler: {html.escape(named)}.</p>")  # fmt: skip
    part += _allreduce(links.get("allreduce"))
    prediction = links.get("prediction")
    if prediction:
        measured = _measured_step(history)
        compute = prediction["compute_s"]
        rows = []
        for name, b in prediction["backends"].items():
            this = name == prediction["uses"]
            rows.append([name + (" (this run)" if this else ""), b["step_s"], b["exchange_s"],
                         b["bytes_per_host"] / 1e6, b["efficiency"], measured if this else None,
                         compute / measured if this and measured else None])  # fmt: skip
        part += "<h3>Step time: predicted and measured</h3>" + table(
            ["back end", "predicted step s", "exchange s", "MB a host sends", "predicted efficiency",
             "measured step s", "measured efficiency"], rows)  # fmt: skip
        part += (f'<p class="caption">Predicted from the slowest host link ({prediction["gbit_s"]:.3g} Gbit/s, '
                 f"{prediction['latency_ms']:.3g} ms), {prediction['grad_bytes'] / 1e6:.1f} MB of gradient and "
                 f"{compute:.3g} s of compute a step (one worker, timed on the launching node), for "
                 f"{prediction['hosts']} hosts x {prediction['workers_per_host']} workers. The measured step is a "
                 "worker's batch over its clips/s (data loading included); its efficiency the same compute time "
                 "over it.</p>")  # fmt: skip
    return part


def _allreduce(figures: dict | None) -> str:
    """The link check's all-reduce across all workers: its seconds and bus bandwidth, or what went wrong."""
    if not figures:
        return ""
    what = f"{figures.get('backend')} {figures.get('mode', '')}".strip()
    if not figures.get("ok"):
        return f"<p>All-reduce across all workers ({html.escape(what)}): {html.escape(str(figures.get('note')))}</p>"
    rows = [[what, figures["workers"], figures["bytes"] / 1e6, figures["seconds"], figures["gbit_s"]]]
    part = table(["back end", "workers", "MB summed", "seconds", "bus Gbit/s"], rows)
    return part + (f'<p class="caption">One sum of {figures["bytes"] / 1e6:.3g} MB across all the workers on the '
                   f"run's own roles, the mean of {figures['rounds']} rounds after a warm-up; bus Gbit/s: the bytes x "
                   f"{figures['factor']:.3g} / seconds ({html.escape(figures['factor_of'])}).</p>")  # fmt: skip


def _storage(checks: dict | None, staged: dict | None) -> str:
    """The storage the host checks decided, and with local storage the bytes staged per host against the data
    set's total."""
    decision = (checks or {}).get("storage")
    if not decision:
        return ""
    part = "<h3>Storage</h3>" + pairs([("storage", f"{decision['mode']} ({decision['setting']})"),
                                       ("why", decision.get("reason"))])  # fmt: skip
    if staged and staged.get("storage") == "local":
        total, files = staged.get("total_bytes") or 0, staged.get("total_files")
        rows = [[host, h.get("root"), h.get("train_files"), h.get("val_files"), h.get("bytes"),
                 f"{100 * (h.get('bytes') or 0) / total:.1f}%" if total else None, h.get("copied_bytes")]
                for host, h in staged.get("hosts", {}).items()]  # fmt: skip
        part += (f"<p>Each host holds only the videos its workers read; the data set is {total} bytes in {files} "
                 "videos.</p>") + table(["host", "staged in", "train videos", "val videos", "bytes", "of the data set",
                                         "copied this time"], rows)  # fmt: skip
    return part


def _collected(collected: dict | None) -> str:
    if not collected:
        return ""
    rows = []
    for f in collected.get("files", []):
        process = "" if f.get("role") is None else f"{f['role']} {f['rank']}"
        verified = "yes" if f["verified"] else "NO"
        rows.append([f["host"], f["kind"], process, f["local"], f["bytes"], f["sha256"][:16], verified])
    header = ["host", "kind", "process", "file", "bytes", "sha256 (first 16)", "checksum verified"]
    return "<h2>Collected files</h2>" + table(header, rows)


def restarts_file(inputs: ReportInputs, collected: dict | None) -> Path | None:
    """The launcher's record of the attempts: --restarts, else the copy collection brought home, else none."""
    if inputs.restarts is not None:
        return inputs.restarts
    copies = [f["local"] for f in (collected or {}).get("files", []) if f.get("kind") == "restarts"]
    return Path(copies[0]) if copies else None


def _restarts(path: Path | None, out: Path) -> str:
    """The attempts of the run as a timeline and a table, when there was more than one or one failed."""
    if path is None:
        return ""
    if not path.is_file():
        raise ClipflowError(f"restarts record {path} is not there; give the launcher's restarts.jsonl or drop it")
    attempts = read_attempts(path)
    if len(attempts) < 2 and all(a["code"] == 0 for a in attempts):
        return ""
    zero = min(a["started"] for a in attempts)
    rows = [[a["attempt"], round(a["started"] - zero, 1), round(a["ended"] - zero, 1), a["workers"],
             ", ".join(a.get("hosts") or []), a.get("resumed_from") or "-", a["code"], a["cause"] or "finished",
             a.get("lost_s")] for a in attempts]  # fmt: skip
    header = ["attempt", "start (s)", "end (s)", "workers", "hosts", "resumed from", "exit", "cause", "lost (s)"]
    return ("<h2>Restarts</h2>" + _figure(figures.plot_restarts(attempts, out / "restarts.png"), "restarts timeline")
            + table(header, rows) + '<p class="caption">Each launch of the workers (train.max_restarts relaunches '
            "after a failure on the hosts that still answer); lost: from the newest checkpoint's save (or the "
            "attempt's start, when later) to the failure.</p>")  # fmt: skip


def _dataset(manifest: dict) -> str:
    unit = "images" if manifest.get("kind") == "image" else "videos"
    rows = [[split, s.get(unit), s.get("failed"), len(s.get("per_class") or {}),
             f"{s['frames_min']}-{s['frames_max']}" if "frames_min" in s else None,
             ", ".join(s.get("sizes") or [])] for split, s in manifest.get("splits", {}).items()]  # fmt: skip
    named = f"<p>{html.escape(manifest['dataset'])}</p>" if manifest.get("dataset") else ""
    part = "<h2>Dataset</h2>" + named + table(["split", unit, "failed", "classes", "frames", "sizes"], rows)
    short = {split: s["shorter_than_clip"] for split, s in manifest.get("splits", {}).items()
             if s.get("shorter_than_clip")}  # fmt: skip
    if short:
        kept = "kept: their clips repeat frames" if manifest.get("short_videos") != "leave_out" else "left out"
        counts = " and ".join(f"{n} {split}" for split, n in short.items())
        part += (f'<p class="caption">{counts} {unit} are shorter than a clip\'s window of {manifest["clip_span"]} '
                 f"frames ({kept}; data.short_videos).</p>")  # fmt: skip
    failures = manifest.get("failures") or []
    if failures:
        part += f"<h3>Left out ({len(failures)})</h3>" + table(
            ["path", "error"], [[f["path"], f["error"]] for f in failures[:50]]
        )
    return part


def check_out_dir(out_dir: str | Path) -> Path:
    """``out_dir`` as the report's folder, checked before any work: a folder (made when missing) that holds
    nothing but the report's own files, since they are replaced by name; a report.html there must be a page the
    report wrote. So ``--out-dir`` naming a run's folder, ``.`` or a folder of the user's own is refused, its
    files untouched. ClipflowError naming it and the way out."""
    out = check_output_dir(out_dir, "--out-dir")
    if not out.is_dir():
        return out
    others = sorted(p.name for p in out.iterdir() if p.name not in OWN_FILES)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise ClipflowError(
            f"--out-dir {out} holds files that are not the report's ({shown}): the report writes "
            f"{', '.join(OWN_FILES)} there, replacing any of those names, so give it a folder of its own "
            f"(e.g. --out-dir {out / 'report'}); nothing was changed"
        )
    page = out / "report.html"
    if page.exists() and not (page.is_file() and _is_own_page(page)):
        raise ClipflowError(
            f"--out-dir {out}: {page} is not a page clipflow report wrote (no <title>{TITLE}...); move it away "
            f"or name another folder (e.g. --out-dir {out / 'report'}); nothing was changed"
        )
    return out


def _is_own_page(page: Path) -> bool:
    """A report.html this command wrote: its head holds the title every such page has."""
    with page.open("rb") as fh:
        return f"<title>{TITLE}".encode() in fh.read(2000)


def write_report(inputs: ReportInputs, out_dir: str | Path, run: str = "") -> Path:
    """report.html and its figures (curves.png, throughput.png, confusion.png, scaling.png when it applies)."""
    out = check_out_dir(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = _read_json(inputs.metrics, "metrics file")
    for key in ("recipe", "top1", "top5", "num_videos"):
        if key not in metrics:
            raise ClipflowError(f"metrics file {inputs.metrics} has no {key!r}: is it the evaluate stage's output?")
    history = read_history(inputs.history)
    manifest = _read_json(inputs.manifest, "dataset manifest")
    plan = _read_json(inputs.plan, "cluster plan")
    checks = _read_json(inputs.checks, "host checks") if inputs.checks else None
    collected = _read_json(inputs.collected, "collection manifest") if inputs.collected else None
    staged = _read_json(inputs.staged, "staging record") if inputs.staged else None
    title = f"{TITLE}{run or metrics['recipe']}: {metrics['recipe']}"
    body = "".join([
        f"<h1>{html.escape(title)}</h1>",
        _summary(metrics, manifest),
        _evaluation(metrics, out),
        _reproduction(inputs, metrics, history, plan),
        _training(history, out),
        _multigrid(history),
        _throughput(history, out),
        _scaling(inputs.results, metrics["recipe"], history[-1].get("batch_size"), out),
        _cluster(plan, checks),
        _links(checks, history),
        _storage(checks, staged),
        _restarts(restarts_file(inputs, collected), out),
        _collected(collected),
        _dataset(manifest),
    ])  # fmt: skip
    page = (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{body}</body></html>\n")  # fmt: skip
    write_text_atomic(out / "report.html", page)
    return out / "report.html"
