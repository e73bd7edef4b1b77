"""Response helpers shared by the server modules: JSON, errors with X-Error-Code, file streaming."""

from __future__ import annotations

import re
import string
from typing import Iterator
from urllib.parse import quote

from starlette.responses import JSONResponse, Response, StreamingResponse

from ..storage import StorageError

CHUNK = 256 * 1024


def json_response(data, status: int = 200, headers: dict | None = None) -> Response:
    return JSONResponse(data, status_code=status, headers=headers)


# printable ASCII stays as it is (so the client's de-duplication of header and body still works);
# '%' and everything else is percent-encoded (UTF-8), which keeps the header decodable with unquote
_HEADER_SAFE = "".join(c for c in string.printable if c not in "%\t\n\r\x0b\x0c")


def header_message(message: str, limit: int = 500) -> str:
    """``message`` as an HTTP header value: one line, at most ``limit`` characters before encoding,
    percent-encoded (UTF-8) outside printable ASCII. Headers travel as Latin-1 at best, so a repo
    id or file name in any other script would otherwise turn the error itself into a 500."""
    return quote(" ".join(message.splitlines())[:limit], safe=_HEADER_SAFE)


def error_response(status: int, message: str, code: str | None = None, commit: str | None = None) -> Response:
    """JSON ``{"error": message}`` (the full text) with ``X-Error-Message`` (:func:`header_message`)."""
    headers = {"X-Error-Message": header_message(message)}
    if code:
        headers["X-Error-Code"] = code
    if commit:
        headers["X-Repo-Commit"] = commit
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def from_storage_error(e: StorageError) -> Response:
    return error_response(e.status, str(e), e.code, e.commit)


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None | str:
    """Return ``(start, end_inclusive)``, ``None`` for no/ignored range, or ``"unsatisfiable"``.

    Only single ranges are served (the Hub client never asks for more); multi-range requests get
    the whole file, which HTTP allows.
    """
    if not header:
        return None
    m = _RANGE.match(header.strip())
    if not m:
        return None
    a, b = m.groups()
    if a == "" and b == "":
        return None
    if a == "":  # suffix: last b bytes
        n = int(b)
        if n == 0:
            return "unsatisfiable"
        return max(size - n, 0), size - 1
    start = int(a)
    end = int(b) if b else size - 1
    if start >= size or end < start:
        return "unsatisfiable"
    return start, min(end, size - 1)


def iter_file(path, start: int, length: int, cut_after: int | None = None) -> Iterator[bytes]:
    """Stream ``length`` bytes from ``start``; ``cut_after`` drops the connection mid-body (fault test)."""
    sent = 0
    with open(path, "rb") as f:
        f.seek(start)
        while sent < length:
            n = min(CHUNK, length - sent)
            if cut_after is not None:
                n = min(n, cut_after - sent)
                if n <= 0:
                    raise ConnectionAbortedError("fault injection: truncated download")
            data = f.read(n)
            if not data:
                break
            sent += len(data)
            yield data


def file_response(path, size: int, headers: dict, range_header: str | None, head: bool,
                  cut_after: int | None = None) -> Response:
    headers = dict(headers)
    headers["Accept-Ranges"] = "bytes"
    rng = parse_range(range_header, size)
    if rng == "unsatisfiable":
        headers["Content-Range"] = f"bytes */{size}"
        return error_response(416, f"Range {range_header} not satisfiable for a {size}-byte file")
    status, start, length = 200, 0, size
    if isinstance(rng, tuple):
        start, end = rng
        length = end - start + 1
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    headers["Content-Length"] = str(length)
    if head:
        return Response(status_code=status, headers=headers, media_type="application/octet-stream")
    return StreamingResponse(iter_file(path, start, length, cut_after), status_code=status, headers=headers,
                             media_type="application/octet-stream")
