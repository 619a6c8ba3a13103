"""CURVE encryption and authentication for every parameter-server socket.

Settings (read by :mod:`clipflow.ps.env`):

``CLIPFLOW_PS_SECURITY`` = ``curve`` | ``none`` | ``auto``
    ``auto`` (the default) is ``curve`` whenever DMLC_PS_ROOT_URI is not a loopback
    address and ``none`` on loopback (127.0.0.0/8, ::1, localhost).
``CLIPFLOW_PS_INSECURE`` = 0 (default) | 1
    ``none`` beyond loopback (a scheduler, or a server, on an address that is not a
    loopback one) is refused unless this is 1 too; then every node prints
    :func:`insecure_warning` when it starts. A separate variable, not a fourth value of
    CLIPFLOW_PS_SECURITY: ``none`` keeps meaning the same thing in the config, the plan and
    every node, and accepting the risk has to be done where the job is started, each time
    (it never travels inside a config file copied from elsewhere).
``CLIPFLOW_PS_KEYS`` = a key folder made by ``python -m clipflow ps keys DIR``
    (:func:`make_keys`). Copy the folder to every node of the job (it holds secrets:
    the folder is mode 700, the ``*.key_secret`` files mode 600).

The folder holds one *server* key pair for the whole job (``server.key``,
``server.key_secret``) and one or more *client* key pairs (``client.key``,
``client.key_secret``). Every binding socket (the scheduler's ROUTER, each server's
ROUTER) is a CURVE server with the server secret key; every connecting socket (all
DEALERs) is a CURVE client that knows the server public key and proves itself with
the client key pair. A ZAP handler (:class:`zmq.auth.thread.ThreadAuthenticator`) in
each binding process accepts only clients whose public key is one of the ``*.key``
files in the folder. A process with other keys cannot register, push or pull: its
handshake fails, and its heartbeat thread ends it with a message naming
CLIPFLOW_PS_KEYS (at once when the scheduler refused its client key, otherwise after
a few failed handshakes or the startup timeout). All traffic is encrypted.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from clipflow.errors import ClipflowError

SERVER = "server"
CLIENT = "client"
MAKE_HINT = "make one with `python -m clipflow ps keys DIR` and set CLIPFLOW_PS_KEYS=DIR on every node"
RISK = (
    "every parameter-server message would cross the network neither encrypted nor authenticated: anyone who "
    "can reach the job's ports could read its gradients and weights, and send it messages"
)


def insecure_refusal(setting: str, where: str, fix: str) -> str:
    """Why ``setting`` (security none) is refused for ``where`` (an address beyond loopback), and ``fix``."""
    return (
        f"{setting} with {where}, beyond loopback: {RISK}. {fix}; or, on a network you trust, set "
        "CLIPFLOW_PS_INSECURE=1 as well to accept that risk"
    )


def insecure_warning(root_uri: str, root_port: int) -> str:
    """What each node prints when it runs without security beyond loopback (CLIPFLOW_PS_INSECURE=1)."""
    return (
        f"warning: CLIPFLOW_PS_SECURITY=none beyond loopback (scheduler at {root_uri}:{root_port}), allowed by "
        "CLIPFLOW_PS_INSECURE=1: messages are neither encrypted nor authenticated; anyone who can reach the "
        "job's ports can read its gradients and weights, and send it messages"
    )


@dataclass(frozen=True)
class Keys:
    """The key material one process needs (Z85-encoded, as zmq wants it)."""

    folder: str
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes


def make_keys(folder: str | os.PathLike[str], client: str = CLIENT) -> Path:
    """Create a key folder (mode 700) with the job's server key pair and a client key pair.

    Existing key files are kept (so a second client pair can be added with another
    ``client`` name); returns the folder.
    """
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(stat.S_IRWXU)
    for name in (SERVER, client):
        if not (path / f"{name}.key_secret").exists():
            zmq.auth.create_certificates(path, name)
        (path / f"{name}.key_secret").chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path


def check_keys(folder: str) -> None:
    """Raise ClipflowError (naming CLIPFLOW_PS_KEYS) unless ``folder`` is a usable key folder."""
    load_keys(folder)


@lru_cache(maxsize=4)
def load_keys(folder: str) -> Keys:
    path = Path(folder)
    if not path.is_dir():
        raise ClipflowError(f"CLIPFLOW_PS_KEYS={folder} is not a folder: {MAKE_HINT}")
    try:
        server_public, server_secret = zmq.auth.load_certificate(path / f"{SERVER}.key_secret")
        client_public, client_secret = zmq.auth.load_certificate(path / f"{CLIENT}.key_secret")
    except (OSError, ValueError) as exc:
        raise ClipflowError(f"CLIPFLOW_PS_KEYS={folder} lacks a readable key pair ({exc}): {MAKE_HINT}") from None
    if server_secret is None or client_secret is None:
        raise ClipflowError(f"CLIPFLOW_PS_KEYS={folder}: the *.key_secret files hold no secret key: {MAKE_HINT}")
    return Keys(str(path), server_public, server_secret, client_public, client_secret)


def apply(sock: zmq.Socket, keys: Keys | None) -> None:
    """Make ``sock`` a CURVE server (ROUTER) or client (DEALER); nothing when ``keys`` is None."""
    if keys is None:
        return
    if sock.type == zmq.ROUTER:
        sock.curve_secretkey = keys.server_secret
        sock.curve_publickey = keys.server_public
        sock.curve_server = True
    else:
        sock.curve_secretkey = keys.client_secret
        sock.curve_publickey = keys.client_public
        sock.curve_serverkey = keys.server_public


def start_authenticator(ctx: zmq.Context, keys: Keys | None) -> ThreadAuthenticator | None:
    """In a binding process: a ZAP handler accepting the client public keys in the key folder."""
    if keys is None:
        return None
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=keys.folder)
    return auth


def stop_authenticator(auth: ThreadAuthenticator | None) -> None:
    if auth is not None:
        auth.stop()


def keys_for(security: str, keys_dir: str | None) -> Keys | None:
    """The keys a process uses for ``security`` (``curve`` or ``none``)."""
    if security != "curve":
        return None
    if keys_dir is None:
        raise ClipflowError(f"CURVE security needs CLIPFLOW_PS_KEYS: {MAKE_HINT}")
    return load_keys(keys_dir)
