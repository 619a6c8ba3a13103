"""The user's text and JSON inputs read in one way: a file that cannot be read, a byte that is not UTF-8,
JSON that is not an object, each one :class:`~clipflow.errors.ClipflowError` naming the file and the line.

List files, hosts files, Kinetics CSVs, class indexes, and the trainer's files that ``status`` and the report
read all come here, so that none of them shows a ``UnicodeDecodeError``'s traceback or a ``TypeError`` of a
record that was not the object the reader wanted.
"""

from __future__ import annotations

import json
from pathlib import Path

from clipflow.errors import ClipflowError

UTF8_FIX = "save it as UTF-8 (for example: iconv -f latin1 -t utf-8 FILE > FILE.utf8)"
JSON_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false"}


def not_utf8(data: bytes, exc: UnicodeDecodeError, where: str, fix: str = UTF8_FIX) -> str:
    """The message for the first byte of ``data`` that is not UTF-8: its line, its column (in bytes), the fix."""
    start = exc.start
    line = data.count(b"\n", 0, start) + 1
    column = start - (data.rfind(b"\n", 0, start) + 1) + 1
    return f"{where} line {line}: byte 0x{data[start]:02x} at column {column} is not UTF-8 text; {fix}"


def decode(data: bytes, where: str, encoding: str = "utf-8", fix: str = UTF8_FIX) -> str:
    """``data`` as text (``utf-8`` or ``utf-8-sig``); a byte that is not UTF-8 is a ClipflowError naming
    ``where`` (the file), the line and the column, and ``fix``."""
    body = data[3:] if encoding == "utf-8-sig" and data.startswith(b"\xef\xbb\xbf") else data
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClipflowError(not_utf8(body, exc, where, fix)) from None


def named(what: str, path: Path | str) -> str:
    """``list file x.txt``, or the path alone when ``what`` is empty."""
    return f"{what} {path}" if what else str(path)


def read_bytes(path: Path, what: str) -> bytes:
    """The bytes of ``path``; a ClipflowError saying what is wrong with it (``what`` names its kind)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ClipflowError(f"{named(what, path)} does not exist") from None
    except IsADirectoryError:
        raise ClipflowError(f"{named(what, path)} is a folder, not a file") from None
    except PermissionError:
        raise ClipflowError(
            f"{named(what, path)} cannot be read: permission denied (check its mode and owner)"
        ) from None
    except OSError as exc:
        raise ClipflowError(f"{named(what, path)} cannot be read ({exc.strerror or exc})") from None


def read_text(path: str | Path, what: str, encoding: str = "utf-8", fix: str = UTF8_FIX) -> str:
    """The text of the file ``path``, a ``what`` (e.g. "list file"): a ClipflowError when it is missing, a
    folder, unreadable or not UTF-8, naming the line of the first bad byte (and ``fix``, what to do then)."""
    path = Path(path)
    return decode(read_bytes(path, what), named(what, path), encoding, fix)


def json_kind(value: object) -> str:
    """What a JSON value is, in words: "a list", "a string", "null", ..."""
    return "null" if value is None else JSON_KINDS.get(type(value), type(value).__name__)


def parse_object(text: str, where: str, expected: str, *, one_line: bool = False) -> dict:
    """``text`` as a JSON object; not JSON or not an object is a ClipflowError naming ``where`` (with the line
    of a syntax error, or with the text itself when it is ``one_line`` of a file) and ``expected``, what the
    object should be."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if one_line:
            raise ClipflowError(f"{where} is not JSON ({exc.msg}): {text[:80]!r}; expected {expected}") from None
        raise ClipflowError(f"{where} line {exc.lineno} is not JSON ({exc.msg}); expected {expected}") from None
    if not isinstance(value, dict):
        raise ClipflowError(f"{where} is JSON but not an object (it holds {json_kind(value)}); expected {expected}")
    return value


def read_json_object(path: str | Path, what: str, expected: str) -> dict:
    """The JSON object in the file ``path`` (a ``what``); see :func:`read_text` and :func:`parse_object`. JSON
    is UTF-8 (RFC 8259), so a byte that is not is named with ``expected`` as the fix."""
    path = Path(path)
    return parse_object(read_text(path, what, fix=f"expected {expected}"), named(what, path), expected)
