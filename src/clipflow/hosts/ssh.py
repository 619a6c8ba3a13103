"""ssh to the hosts: the job's key, host keys pinned in the project, and the OpenSSH options.

Cluster preparation and checks talk to hosts through fabric (paramiko); rsync and the
launcher use the OpenSSH client, because it streams a role's output as it comes. Both
read the same two files:

* the job's key pair, ``cluster.ssh_key`` (default ``~/.ssh/id_ed25519``), made and
  authorised on every host by :mod:`clipflow.hosts.keys`;
* the project's ``known_hosts`` (``cluster.known_hosts``, default ``.clipflow/known_hosts``).
  On first contact a host's key is pinned there and reported with its fingerprint
  (fabric's own default would accept any key without a word); with
  ``cluster.accept_new_host_keys: false`` an unknown host is refused instead. A host
  whose key changed is always refused, with the command to review and accept the new
  key. OpenSSH runs with ``StrictHostKeyChecking=yes`` against the same file.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from clipflow.errors import ClipflowError
from clipflow.hosts.hostsfile import Host

if TYPE_CHECKING:  # fabric and paramiko are imported where a connection is made: the launcher needs neither
    import paramiko
    from fabric import Connection


@dataclass
class SshSettings:
    """How to reach the hosts; ``pinned`` collects the host keys pinned by this process."""

    key: Path
    known_hosts: Path
    accept_new: bool = True
    connect_timeout: float = 10.0
    pinned: list[str] = field(default_factory=list)


def known_hosts_name(host: Host) -> str:
    """The name a host's key is filed under in known_hosts (OpenSSH's and paramiko's rule)."""
    return host.host if host.port == 22 else f"[{host.host}]:{host.port}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _PinOrRefuse:
    """paramiko's missing-host-key policy for an unknown host: pin its key in the project known_hosts and
    report it, or refuse it."""

    def __init__(self, settings: SshSettings, host: Host) -> None:
        self.settings = settings
        self.host = host

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        where = self.settings.known_hosts
        if not self.settings.accept_new:
            raise ClipflowError(
                f"{self.host}: its host key ({key.get_name()} {fingerprint(key)}) is not in {where}, and "
                "cluster.accept_new_host_keys is false. Compare it with the host's own "
                f"(`ssh-keygen -lf /etc/ssh/ssh_host_{key.get_name().removeprefix('ssh-')}_key.pub` there), then "
                f"add it: `ssh-keyscan -p {self.host.port} {self.host.host} >> {where}`"
            )
        client.get_host_keys().add(hostname, key.get_name(), key)
        where.parent.mkdir(parents=True, exist_ok=True)
        client.save_host_keys(str(where))
        note = f"{self.host}: pinned its host key {key.get_name()} {fingerprint(key)} in {where}"
        self.settings.pinned.append(note)
        print(f"clipflow cluster: {note}", flush=True)


def debug_command(host: Host, settings: SshSettings) -> str:
    """The ssh command a user can paste to see why a connection fails."""
    return shlex.join(["ssh", "-vvv", *ssh_options(host, settings), host.target, "true"])


def ssh_options(host: Host, settings: SshSettings) -> list[str]:
    """OpenSSH options: the job's key only, the project known_hosts only, strict host keys, no prompts."""
    return [
        "-p",
        str(host.port),
        "-i",
        str(settings.key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"UserKnownHostsFile={settings.known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={int(settings.connect_timeout)}",
        "-o",
        "ServerAliveInterval=5",
        "-o",
        "ServerAliveCountMax=3",
    ]


def ssh_argv(host: Host, settings: SshSettings, remote_command: str) -> list[str]:
    """``ssh [options] [user@]host -- remote_command`` (the caller quotes the remote command)."""
    return ["ssh", *ssh_options(host, settings), host.target, "--", remote_command]


def connect(host: Host, settings: SshSettings, first_contact: bool = False) -> Connection:
    """An open fabric connection. ``first_contact`` also tries the access the user already has
    (ssh-agent and the default keys in ~/.ssh); otherwise only the job's key is offered."""
    import paramiko
    from fabric import Connection

    kwargs: dict[str, object] = {"allow_agent": first_contact, "look_for_keys": first_contact}
    if settings.key.exists():
        kwargs["key_filename"] = [str(settings.key)]
    conn = Connection(
        host.host, user=host.user, port=host.port, connect_timeout=settings.connect_timeout, connect_kwargs=kwargs
    )
    if settings.known_hosts.exists():
        conn.client.load_host_keys(str(settings.known_hosts))
    conn.client.set_missing_host_key_policy(_PinOrRefuse(settings, host))
    try:
        conn.open()
    except paramiko.BadHostKeyException as exc:
        conn.close()
        raise ClipflowError(
            f"{host}: its host key changed: {settings.known_hosts} pins {fingerprint(exc.expected_key)}, "
            f"the host now shows {exc.key.get_name()} {fingerprint(exc.key)}. Connections to it are refused. If the "
            "host was reinstalled, check the new key on the host itself, then forget the old one with "
            f"`ssh-keygen -R {shlex.quote(known_hosts_name(host))} -f {settings.known_hosts}` and rerun; "
            "otherwise something may be intercepting the connection"
        ) from None
    except paramiko.AuthenticationException as exc:
        conn.close()
        offered = "the job's key, ssh-agent and ~/.ssh keys" if first_contact else f"the job's key {settings.key}"
        raise ClipflowError(
            f"{host}: the login was refused ({exc}; offered {offered}). Debug with: {debug_command(host, settings)}"
        ) from None
    except ClipflowError:
        conn.close()
        raise
    except (OSError, paramiko.SSHException, EOFError) as exc:
        conn.close()
        raise ClipflowError(
            f"{host}: cannot connect ({exc or type(exc).__name__}). Debug with: {debug_command(host, settings)}"
        ) from None
    return conn
