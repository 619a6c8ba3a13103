"""Where the hosts read the data from: the storage decision the cluster check writes into checks.json.

``shared``: every host sees the data root at the same path (one file system), nothing is copied. ``local``: each
host reads its own copy, which ``clipflow cluster stage`` puts in a staging folder there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.textfile import read_json_object

MODES = ("shared", "local")
SETTINGS = ("auto", *MODES)
RERUN = "rerun the cluster check (clipflow cluster check, or snakemake --forcerun cluster_check)"


@dataclass(frozen=True)
class StorageDecision:
    setting: str  # auto | shared | local, as configured
    mode: str  # shared | local, as decided
    reason: str  # one line: why this mode


def read_storage(checks_path: str | Path) -> StorageDecision:
    """The "storage" entry of checks.json; missing or malformed is a ClipflowError naming the file and the fix."""
    path = Path(checks_path)
    data = read_json_object(path, "cluster checks", f"the JSON object clipflow cluster check writes; {RERUN}")
    entry = data.get("storage")
    if entry is None:
        raise ClipflowError(f"cluster checks {path} have no storage decision (written by an older check); {RERUN}")
    if not isinstance(entry, dict):
        raise ClipflowError(f"cluster checks {path}: storage must be an object, not {type(entry).__name__}; {RERUN}")
    setting, mode, reason = entry.get("setting"), entry.get("mode"), entry.get("reason", "")
    if setting not in SETTINGS or mode not in MODES or not isinstance(reason, str):
        raise ClipflowError(
            f"cluster checks {path}: storage {entry!r} is not a decision (setting one of {', '.join(SETTINGS)}, "
            f"mode one of {', '.join(MODES)}, a reason); {RERUN}"
        )
    return StorageDecision(setting, mode, reason)
