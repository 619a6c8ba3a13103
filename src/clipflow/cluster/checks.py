"""Host checks before a run: ssh, versions, data path, ports, free disk, storage; a table and a JSON file.

Each host is asked once, through one ssh session, to run a small probe with the
Python the roles will use (``cluster.python``). A host fails when:

* ssh does not work with the job's key (the message gives the ``ssh -vvv`` command);
* its Python, torch or clipflow version differs from the launching node's;
* a path the run reads (the data root, the split lists) does not exist there;
* a port a role must listen on is taken;
* it has less free disk than ``cluster.min_free_gb`` where the run writes.

The same probe decides the storage (``cluster.storage``, :mod:`clipflow.cluster.storage_decision`): the
launching node writes a marker with a fresh token where the run's files live; each host reads it and writes its
own reply beside it. Storage is shared when every host saw the token and every reply is seen here; otherwise each
host has its own disk (local). With local storage the data root need not exist on the hosts (the videos are
staged), so a missing one is no failure there.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from clipflow.cluster.allreduce import format_allreduce, measure_allreduce
from clipflow.cluster.links import LinkCheck, format_links, measure_links
from clipflow.cluster.prediction import PredictionInputs, format_prediction
from clipflow.cluster.storage_decision import StorageDecision, StorageMarker, decide_storage, judge_paths
from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.plan import Plan
from clipflow.hosts.remote_python import RemoteScriptError, run_remote_python
from clipflow.hosts.ssh import SshSettings, connect

PROBE = """
import json, os, platform, shutil, socket, sys
want = json.load(sys.stdin)
out = {"python": platform.python_version()}
for name in ("torch", "clipflow"):
    try:
        from importlib.metadata import version
        out[name] = version(name)
    except Exception as exc:
        out[name] = "missing (%s)" % type(exc).__name__
out["paths"] = {p: os.path.exists(p) for p in want["paths"]}
marker = want.get("marker")
if marker:
    seen, wrote, why = False, False, ""
    try:
        with open(marker["path"]) as fh:
            seen = fh.read() == marker["token"]
        why = "" if seen else "it holds another token"
    except OSError as exc:
        why = exc.strerror or str(exc)
    if seen:
        try:
            with open(marker["path"] + "." + marker["host"], "w") as fh:
                fh.write(marker["token"])
            wrote = True
        except OSError as exc:
            why = "cannot write beside it: " + (exc.strerror or str(exc))
    out["marker"] = {"seen": seen, "wrote": wrote, "why": why}
ports = {}
for port in want["ports"]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as zmq binds (clipflow.hosts.ports.port_free)
    try:
        s.bind(("", port)); ports[str(port)] = True
    except OSError:
        ports[str(port)] = False
    finally:
        s.close()
out["ports"] = ports
where = os.path.expanduser(want["disk"] or "~")
while not os.path.exists(where):
    where = os.path.dirname(where) or "/"
out["free_gb"] = round(shutil.disk_usage(where).free / 1e9, 1)
print("CLIPFLOW_REPLY " + json.dumps(out))
"""


@dataclass
class HostCheck:
    host: str
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)

    def fail(self, problem: str) -> None:
        self.ok = False
        self.problems.append(problem)


def local_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("torch", "clipflow"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "missing"
    return found


def check_host(
    host: Host,
    settings: SshSettings,
    python: str,
    paths: list[str],
    ports: list[int],
    disk_path: str = "",
    min_free_gb: float = 1.0,
    marker: dict[str, str] | None = None,
) -> HostCheck:
    """Run the probe on ``host``; every problem is recorded (none raised). ``marker`` (path, token, host): the
    storage marker the host looks for and answers (:mod:`clipflow.cluster.storage_decision`). The paths'
    existence is recorded as facts, judged by :func:`check_plan` once the storage is known."""
    check = HostCheck(str(host))
    want = {"paths": paths, "ports": ports, "disk": disk_path, "marker": marker}
    try:
        with connect(host, settings) as conn:
            facts = run_remote_python(conn, python, PROBE, want, 60)
    except ClipflowError as exc:
        check.fail(f"ssh: {exc}")
        return check
    except RemoteScriptError as exc:
        check.fail(f"cannot run {python} there ({exc.why}); set cluster.python to the Python the roles should use")
        return check
    check.facts = facts
    for name, here in local_versions().items():
        if facts.get(name) != here:
            check.fail(f"{name} {facts.get(name)} there, {here} on the launching node")
    for port, free in facts["ports"].items():
        if not free:
            check.fail(f"port {port} is in use there")
    if facts["free_gb"] < min_free_gb:
        check.fail(f"only {facts['free_gb']} GB free at {disk_path or '~'} (cluster.min_free_gb: {min_free_gb})")
    return check


def format_table(checks: list[HostCheck]) -> str:
    rows = [("host", "ok", "python", "torch", "clipflow", "free GB", "problems")]
    for c in checks:
        f = c.facts
        rows.append(
            (
                c.host,
                "yes" if c.ok else "NO",
                str(f.get("python", "-")),
                str(f.get("torch", "-")),
                str(f.get("clipflow", "-")),
                str(f.get("free_gb", "-")),
                "; ".join(c.problems) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows)


def write_checks(checks: list[HostCheck], path: str | Path, storage: StorageDecision | None = None,
                 links: LinkCheck | None = None) -> None:  # fmt: skip
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"ok": all(c.ok for c in checks), "launcher": local_versions(), "hosts": [asdict(c) for c in checks]}
    if storage is not None:
        data["storage"] = asdict(storage)
    if links is not None:
        data["links"] = links.to_dict()
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def failure_message(checks: list[HostCheck]) -> str | None:
    bad = [c for c in checks if not c.ok]
    if not bad:
        return None
    return "host checks failed: " + " | ".join(f"{c.host}: {'; '.join(c.problems)}" for c in bad)


def check_plan(plan: Plan, paths: list[str], min_free_gb: float, out: str | Path, log=print,
               storage: str = "", marker_dir: str | Path = "", link_seconds: float | None = None,
               predict: PredictionInputs | None = None, backend: str = "ps",
               kvstore: str = "dist_sync") -> list[HostCheck]:  # fmt: skip
    """Checks every host of ``plan`` (``paths`` as absolute paths there), logs the table, writes the checks to
    ``out``; raises ClipflowError naming each bad host and why. ``storage`` (cluster.storage: auto, shared or
    local; empty: not decided, the paths must exist on every host) is decided with a marker in ``marker_dir``,
    printed and recorded in ``out``; with local storage the paths need not exist on the hosts. Once every host
    passed, the links between them are measured for ``link_seconds`` each way (:mod:`clipflow.cluster.links`;
    None: skipped, cluster.link_check false), logged as a table and recorded under "links"; with ``predict`` (the
    recipe and the back end), the plan's step time on those links is predicted and recorded with them. Then one
    all-reduce across all the plan's workers with ``backend`` (ps: the ``kvstore`` mode) on the plan's own roles
    (:mod:`clipflow.cluster.allreduce`, the roles' logs beside ``out`` in ``allreduce_logs``), recorded with the
    links; a sum that fails is a note there, roles that cannot start at all a ClipflowError."""
    settings = plan.ssh_settings()
    paths = [str(Path(p).absolute()) for p in paths]
    checks = []
    with StorageMarker(marker_dir if storage else "") as marker:
        for index, host in enumerate(plan.host_list()):
            ports = [plan.root_port] if plan.runs_scheduler(host) else []
            checks.append(check_host(host, settings, plan.python, paths, ports, plan.workdir, min_free_gb,
                                     marker.request(index)))  # fmt: skip
        decision = decide_storage(storage, marker, checks) if storage else None
    for check in checks:  # without a storage decision the paths must exist, as with shared storage
        judge_paths(check, decision.mode if decision else "shared")
    if decision is not None:
        log(f"clipflow cluster: storage {decision.mode} ({decision.setting}): {decision.reason}")
    log(format_table(checks))
    problem = failure_message(checks)
    if problem:
        links = LinkCheck(False, "not measured: the host checks failed")
    elif link_seconds is None:
        links = LinkCheck(False, "skipped (cluster.link_check: false)")
    else:
        try:
            links = measure_links(plan, link_seconds, log)
            if predict is not None and links.measured:
                links.prediction = predict.predict(plan, [asdict(p) for p in links.pairs])
        except ClipflowError as exc:
            write_checks(checks, out, decision, LinkCheck(False, f"failed: {exc}", link_seconds))
            raise
    log(format_links(links))
    if links.measured:
        try:
            own_disks = decision is not None and decision.mode == "local"
            logs = Path(out).parent / "allreduce_logs"
            links.allreduce = measure_allreduce(plan, backend, kvstore, logs, own_disks=own_disks)
        except ClipflowError as exc:
            links.allreduce = {"backend": backend, "ok": False, "note": f"failed: {exc}"}
            write_checks(checks, out, decision, links)
            raise
        log(format_allreduce(links.allreduce))
    if links.prediction:
        log(format_prediction(links.prediction))
    write_checks(checks, out, decision, links)
    if problem:
        raise ClipflowError(problem)
    return checks
