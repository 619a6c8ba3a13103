"""The job's ssh key: made on the launching node, authorised once on every host, modes fixed and reported.

Replaces the tutorials' ssh-keygen / ssh-copy-id / chmod routine:

* on the launching node, :func:`ensure_local_key` makes an ed25519 pair (rsa on request)
  when there is none, and fixes the modes ssh insists on (``~/.ssh`` 700, private key
  600: the "permissions are too open" refusal);
* on each host, :func:`authorize` logs in with the access the user already has
  (ssh-agent or the default keys in ``~/.ssh``), adds the public key to
  ``~/.ssh/authorized_keys`` once, and fixes the modes sshd's StrictModes insists on
  (home not writable by others, ``~/.ssh`` 700, ``authorized_keys`` 600); then logs in
  again with the job's key alone to prove it works.

Only the public key ever leaves the launching node. Every change is reported.
"""

from __future__ import annotations

import json
import shlex
import socket
import stat
import subprocess
from pathlib import Path

from clipflow.errors import ClipflowError
from clipflow.files import write_text_atomic
from clipflow.hosts.hostsfile import Host
from clipflow.hosts.ssh import SshSettings, connect, debug_command

KEY_TYPES = ("ed25519", "rsa")


def ensure_local_key(key: Path, kind: str = "ed25519") -> list[str]:
    """Make the key pair at ``key`` when there is none and fix the local modes; returns what it changed."""
    if kind not in KEY_TYPES:
        raise ClipflowError(f"cluster.ssh_key_type must be one of {', '.join(KEY_TYPES)}, not {kind!r}")
    changes = _fix_dir(key.parent)
    public = key.with_name(key.name + ".pub")
    if not key.exists():
        if public.exists():
            raise ClipflowError(
                f"{public} exists but its private key {key} does not: move the .pub away or fix the path"
            )
        _keygen(["-t", kind, *(["-b", "4096"] if kind == "rsa" else []), "-N", "", "-C", _comment(), "-f", str(key)])
        return [*changes, f"made a new {kind} key pair {key} (+ .pub)"]
    mode = stat.S_IMODE(key.stat().st_mode)
    if mode & 0o077:
        key.chmod(0o600)
        changes.append(f"{key} had mode {mode:o}, which ssh refuses ('permissions are too open'): now 600")
    body = _keygen(["-y", "-P", "", "-f", str(key)], what=f"{key} is not a private key clipflow can use unattended")
    if not public.exists():
        write_text_atomic(public, body.strip() + "\n")
        changes.append(f"wrote the missing public key {public}")
    return changes


def public_key(key: Path) -> str:
    """The ``type base64 [comment]`` line of the key's .pub file."""
    public = key.with_name(key.name + ".pub")
    try:
        line = public.read_text().strip()
    except OSError as exc:
        raise ClipflowError(f"cannot read the public key {public}: {exc.strerror}") from None
    if len(line.split()) < 2:
        raise ClipflowError(f"{public} is not an OpenSSH public key line")
    return line


def authorize(host: Host, settings: SshSettings) -> list[str]:
    """Add the job's public key to the host's authorized_keys (once) and fix modes; returns the changes.

    Raises ClipflowError naming the host when the first login fails, the home cannot be written,
    or the job's key does not work afterwards.
    """
    line = public_key(settings.key)
    with connect(host, settings, first_contact=True) as conn:
        result = conn.run(f"sh -c {shlex.quote(_authorize_script(line))}", hide=True, warn=True, in_stream=False)
    out = result.stdout.splitlines()
    failures = [x.removeprefix("FAIL ") for x in out if x.startswith("FAIL ")]
    if failures or result.exited != 0:
        reason = "; ".join(failures) or (result.stderr.strip() or f"exit status {result.exited}")
        raise ClipflowError(f"{host}: cannot authorise the job's key: {reason}")
    changes = [x.removeprefix("CHANGE ") for x in out if x.startswith("CHANGE ")]
    try:
        with connect(host, settings) as conn:
            conn.run("true", hide=True, in_stream=False)
    except ClipflowError:
        raise ClipflowError(
            f"{host}: the job's key was added but logging in with it still fails; "
            f"debug with: {debug_command(host, settings)}"
        ) from None
    return changes


def _authorize_script(line: str) -> str:
    """POSIX sh run on the host; prints CHANGE/FAIL lines. Matches an existing entry by type and key."""
    body = " ".join(line.split()[:2])
    return f"""
umask 077
h="$HOME"; s="$h/.ssh"; f="$s/authorized_keys"
[ -d "$h" ] || {{ echo "FAIL the home directory $h does not exist"; exit 3; }}
m=$(stat -c %a "$h")
case "$m" in *[2367]?|*[2367])
  chmod go-w "$h" && echo "CHANGE home $h had mode $m (writable by others, which sshd refuses): now not";;
esac
if [ ! -d "$s" ]; then
  e=$(mkdir "$s" 2>&1) || {{ echo "FAIL cannot create $s (is the home $h writable?): $e"; exit 3; }}
  echo "CHANGE created ~/.ssh (700)"
fi
m=$(stat -c %a "$s"); [ "$m" = 700 ] || {{ chmod 700 "$s" && echo "CHANGE ~/.ssh had mode $m: now 700"; }}
if [ ! -e "$f" ]; then
  e=$( {{ : > "$f"; }} 2>&1) || {{ echo "FAIL cannot create $f: $e"; exit 3; }}
  echo "CHANGE created ~/.ssh/authorized_keys (600)"
fi
m=$(stat -c %a "$f")
[ "$m" = 600 ] || {{ chmod 600 "$f" && echo "CHANGE ~/.ssh/authorized_keys had mode $m: now 600"; }}
if grep -qF -- {shlex.quote(body)} "$f"; then
  echo "KEPT the job's key is already authorised"
else
  if [ -s "$f" ] && [ -n "$(tail -c1 "$f")" ]; then echo >> "$f"; fi
  e=$( {{ printf '%s\\n' {shlex.quote(line)} >> "$f"; }} 2>&1) || {{ echo "FAIL cannot write $f: $e"; exit 3; }}
  echo "CHANGE added the job's key to ~/.ssh/authorized_keys"
fi
"""


def _fix_dir(ssh_dir: Path) -> list[str]:
    if not ssh_dir.exists():
        ssh_dir.mkdir(parents=True, mode=0o700)
        return [f"created {ssh_dir} (700)"]
    mode = stat.S_IMODE(ssh_dir.stat().st_mode)
    if ssh_dir.name == ".ssh" and mode != 0o700:
        ssh_dir.chmod(0o700)
        return [f"{ssh_dir} had mode {mode:o}: now 700"]
    return []


def _keygen(args: list[str], what: str = "ssh-keygen failed") -> str:
    try:
        done = subprocess.run(["ssh-keygen", "-q", *args], capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise ClipflowError("ssh-keygen is not installed (Debian: apt install openssh-client)") from None
    if done.returncode != 0:
        raise ClipflowError(f"{what}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _comment() -> str:
    return f"clipflow@{socket.gethostname()}"


def authorize_hosts(hosts: list[Host], settings: SshSettings, key_type: str, out: str | Path = "", log=print) -> dict:
    """The job's key made here when missing, then authorised on every host; what changed, logged a line a host
    and returned (also written to ``out`` as JSON when given)."""
    report: dict[str, object] = {"local": ensure_local_key(settings.key, key_type), "hosts": {}}
    for change in report["local"]:  # type: ignore[union-attr]
        log(f"clipflow cluster: here: {change}")
    for host in hosts:
        changes = authorize(host, settings)
        report["hosts"][str(host)] = changes  # type: ignore[index]
        log(f"clipflow cluster: {host}: " + ("; ".join(changes) if changes else "nothing to change"))
    report["pinned"] = settings.pinned
    if out:
        write_text_atomic(out, json.dumps(report, indent=2) + "\n")
    return report
