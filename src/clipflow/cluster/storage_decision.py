"""Shared or local storage: decided by the host checks, recorded in checks.json, read by the later stages.

``cluster.storage`` is ``shared`` (every host sees the folder the run is launched from, at the same path: NFS,
or a single machine), ``local`` (each host has its own disk: the videos are staged to it and the run's files
stay on it until collected) or ``auto``. For ``auto`` the launching node writes a marker holding a fresh token
in the run's own folder (:class:`StorageMarker`); every host's probe (:mod:`clipflow.cluster.checks`) reads it
and writes a reply beside it. Storage is shared only when every host read the token *and* every reply is seen
here: a host that sees the folder read-only, or a copy of it, is on a disk of its own. The stages after it read
the decision with :func:`clipflow.cluster.storage.read_storage`.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from clipflow.cluster.storage import SETTINGS, StorageDecision
from clipflow.errors import ClipflowError

MARKER_PREFIX = ".clipflow-storage-"


class StorageMarker:
    """The marker file the hosts look for (a context manager: the marker and the hosts' replies are removed on
    exit). With an empty ``folder`` it asks nothing (:meth:`request` is None)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).absolute() if folder else None
        self.token = secrets.token_hex(16)
        self.path = self.folder / f"{MARKER_PREFIX}{self.token[:12]}" if self.folder else None

    def __enter__(self) -> StorageMarker:
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(self.token)
            except OSError as exc:
                raise ClipflowError(
                    f"cannot write the storage marker in {self.folder} ({exc.strerror or exc}); the run's folder "
                    "must be writable here"
                ) from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.path is not None:
            for path in self.path.parent.glob(f"{self.path.name}*"):  # ours: the token is in every name
                path.unlink(missing_ok=True)

    def request(self, index: int) -> dict[str, str] | None:
        """What host ``index`` of the plan is asked to look for and answer."""
        if self.path is None:
            return None
        return {"path": str(self.path), "token": self.token, "host": f"h{index}"}

    def replied(self, index: int) -> bool:
        """Whether host ``index``'s reply is seen here, holding the token."""
        if self.path is None:
            return False
        reply = self.path.with_name(f"{self.path.name}.h{index}")
        try:
            return reply.read_text() == self.token
        except OSError:
            return False


def why_not_shared(index: int, facts: dict, marker: StorageMarker) -> str | None:
    """Why host ``index`` does not share the run's folder with this node (None: it does)."""
    answer = facts.get("marker") or {}
    if not answer.get("seen"):
        return f"it does not see {marker.path}" + (f" ({answer['why']})" if answer.get("why") else "")
    if not answer.get("wrote"):
        return f"it sees {marker.folder} but {answer.get('why') or 'cannot write there'}"
    if not marker.replied(index):
        return f"what it wrote in {marker.folder} does not appear here (its copy of the folder is its own)"
    return None


def decide_storage(setting: str, marker: StorageMarker, checks: list) -> StorageDecision:
    """The storage of the run from the hosts' answers (``checks``: :class:`clipflow.cluster.checks.HostCheck`,
    in the plan's host order). With ``shared`` set, a host that does not share the folder fails its check."""
    if setting not in SETTINGS:
        raise ClipflowError(f"cluster.storage must be one of {', '.join(SETTINGS)}, not {setting!r}")
    if setting == "local":
        return StorageDecision(setting, "local", "cluster.storage is local: the videos are staged to each host")
    answers = [(check, why_not_shared(i, check.facts, marker)) for i, check in enumerate(checks) if check.facts]
    apart = [(check, why) for check, why in answers if why]
    if setting == "shared":
        for check, why in apart:
            check.fail(f"cluster.storage is shared, but {why}: its disk is its own; set cluster.storage: local "
                       "(or auto) to stage the videos to each host")  # fmt: skip
        return StorageDecision(setting, "shared", "cluster.storage is shared")
    if not apart:
        return StorageDecision(setting, "shared", f"every host sees and writes {marker.folder}")
    reasons = "; ".join(f"{check.host}: {why}" for check, why in apart)
    return StorageDecision(setting, "local", f"not every host shares this folder ({reasons})")


def judge_paths(check, mode: str) -> None:
    """The paths the run reads must exist on every host with shared storage (``mode``); with local storage they
    are staged."""
    if mode == "shared":
        for path, exists in check.facts.get("paths", {}).items():
            if not exists:
                check.fail(f"{path} does not exist there")
