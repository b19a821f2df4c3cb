"""``python -m devtools.screenshot``: sample databases, ``dagster dev`` and headless Chromium
produce a PNG of the asset graph of the requested size that is not blank, and no process is left.
Needs Debian's chromium (``make screenshot`` installs it; CI does not), so it skips without it."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
import warnings
import zlib
from collections import Counter
from pathlib import Path

import pytest

from devtools.devserver import REPO, processes_with
from devtools.screenshot import CHROMIUM

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} missing: apt-get install chromium"),
]


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered scanlines of an 8-bit, non-interlaced RGB or RGBA PNG
    (what Chromium writes), with the standard library only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in chunk {kind!r}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    assert header is not None, "no IHDR"
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    assert len(raw) == height * (stride + 1), "truncated image data"
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                up_left = prev[i - bpp] if i >= bpp else 0
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
                line[i] = (line[i] + pred) & 0xFF
            else:
                assert kind == 0, f"unknown filter {kind}"
        rows.append(bytes(line if bpp == 3 else b"".join(
            bytes(line[i : i + 3]) for i in range(0, stride, 4))))
        prev = line
    return width, height, rows


def test_screenshot_of_the_asset_graph(tmp_path: Path) -> None:
    out = tmp_path / "asset_graph.png"
    width, height = 1280, 1000
    work = tmp_path / "tmp"  # TMPDIR of the script: in the environment of all it starts
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "devtools.screenshot", "--out", str(out),
         "--width", str(width), "--height", str(height)],
        cwd=REPO, env={**os.environ, "TMPDIR": str(work)}, capture_output=True, text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "/asset-groups" in done.stdout
    assert "SIGKILL" not in done.stderr, done.stderr  # dagster dev stopped by itself
    assert processes_with(str(work)) == [], "processes left running (dagster dev or chromium)"
    # Cleanup of dagster dev's temporary directories can trail its exit; under a loaded CI
    # machine (2 cores, the whole slow suite) three were once still there when checked. Wait
    # for them; if some stay, report them as a warning (the processes' exit is asserted above).
    deadline = time.monotonic() + 60
    while list(work.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = sorted(p.name for p in work.iterdir())
    if left:
        warnings.warn(f"temporary directories left behind by dagster dev: {left}", stacklevel=1)
    got_w, got_h, rows = decode_png(out.read_bytes())
    assert (got_w, got_h) == (width, height)
    colours = {row[i : i + 3] for row in rows[::4] for i in range(0, len(row), 12)}
    assert len(colours) > 100, f"only {len(colours)} distinct colours: a blank page?"
    # The graph pane (right of the navigation and the group tree) has content, on the page's
    # light background: not a flat colour, and not greyed out under a dialog.
    pane = Counter(row[i : i + 3] for row in rows[height // 8 :: 4] for i in range(1800, len(row), 6))
    assert len(pane) > 100, f"only {len(pane)} colours in the graph pane: nothing rendered?"
    background, _ = pane.most_common(1)[0]
    assert min(background) >= 230, f"graph pane mostly {tuple(background)}: covered by a dialog?"
