"""What the staging stage left for the stages after it: the storage of the run and, with local storage, where
each host's copy of the data set is (``staged.json``, written by `clipflow cluster stage`)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.textfile import read_json_object

FIX = "rerun the staging stage (clipflow cluster stage)"


@dataclass(frozen=True)
class Staged:
    storage: str  # shared | local
    roots: dict[str, str] = field(default_factory=dict)  # plan host -> the staged data root there (may start ~/)

    @property
    def local(self) -> bool:
        return self.storage == "local"

    def root(self) -> str:
        """The staged data root, the same path (maybe ``~/``-relative) on every host: the job names one root."""
        roots = set(self.roots.values())
        if len(roots) != 1:
            raise ClipflowError(f"staged data roots differ between the hosts ({sorted(roots)}); {FIX}")
        return roots.pop()

    def check_hosts(self, hosts: list[str], where: str) -> None:
        """Every host of the plan (``hosts``) has its data staged."""
        missing = [host for host in hosts if host not in self.roots]
        if missing:
            raise ClipflowError(f"{where}: no data staged on {', '.join(missing)} (the plan changed since?); {FIX}")


def staging_name(data_dir: str, root: str) -> str:
    """The staging folder of a data set on the hosts: the data folder's name and a digest of the videos' root
    here, so that every run of the same data (any recipe) shares it and two data sets never do."""
    digest = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:8]
    return f"{os.path.basename(os.path.normpath(data_dir)) or 'data'}-{digest}"


def read_staged(path: str | Path) -> Staged:
    data = read_json_object(path, "staging record", f"the JSON object `clipflow cluster stage` writes; {FIX}")
    storage = data.get("storage")
    if storage == "shared":
        return Staged("shared")
    hosts = data.get("hosts")
    if (
        storage != "local"
        or not isinstance(hosts, dict)
        or not all(isinstance(h, dict) and isinstance(h.get("root"), str) for h in hosts.values())
    ):
        raise ClipflowError(f"staging record {path}: not one `clipflow cluster stage` wrote (storage, hosts); {FIX}")
    return Staged("local", {host: facts["root"] for host, facts in hosts.items()})
