"""``python -m devtools.screenshot``: sample databases, ``dagster dev`` and headless Chromium
produce PNGs of the asset graph, the fleet view and a per-database plot of the requested sizes that
are not blank nor covered by a dialog, and no process is left. Needs Debian's chromium (``make
screenshot`` installs it; CI does not), so it skips without it."""

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

from devtools.browser import CHROMIUM
from devtools.devserver import REPO, processes_with

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"{CHROMIUM} missing: apt-get install chromium"
    ),
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
        rows.append(
            bytes(
                line if bpp == 3 else b"".join(bytes(line[i : i + 3]) for i in range(0, stride, 4))
            )
        )
        prev = line
    return width, height, rows


def _not_blank_nor_covered(rows: list[bytes], top: int, left_px: int, what: str) -> None:
    pane = Counter(row[i : i + 3] for row in rows[top::4] for i in range(left_px * 3, len(row), 6))
    assert len(pane) > 100, f"only {len(pane)} colours in {what}: nothing rendered?"
    background, _ = pane.most_common(1)[0]
    assert min(background) >= 230, f"{what} mostly {tuple(background)}: covered by a dialog?"


def test_screenshots_of_the_asset_graph_the_fleet_view_and_a_trend(tmp_path: Path) -> None:
    out = tmp_path / "asset_graph.png"
    sizes = {
        "asset_graph.png": (1280, 1000),
        "fleet_view.png": (1600, 1000),
        "fleet_trend.png": (1400, 900),
    }
    width, height = sizes["asset_graph.png"]
    work = tmp_path / "tmp"  # TMPDIR of the script: in the environment of all it starts
    work.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "devtools.screenshot",
            "--out",
            str(out),
            "--width",
            str(width),
            "--height",
            str(height),
            "--fleet-size",
            "{}x{}".format(*sizes["fleet_view.png"]),
            "--trend-size",
            "{}x{}".format(*sizes["fleet_trend.png"]),
        ],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(work)},
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "/asset-groups" in done.stdout
    assert "/assets/slatedb_fleet?view=events" in done.stdout
    assert "scrolled to orders/l0_ssts" in done.stdout
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
    decoded = {}
    for name, size in sizes.items():
        got_w, got_h, rows = decode_png((tmp_path / name).read_bytes())
        assert (got_w, got_h) == size, name
        colours = {row[i : i + 3] for row in rows[::4] for i in range(0, len(row), 12)}
        assert len(colours) > 100, f"only {len(colours)} distinct colours in {name}: blank?"
        decoded[name] = rows
    # Right of the (hidden) navigation and the group tree: the graph; right of the event list:
    # the latest materialization; the plots: on the page's light background, not under a dialog.
    _not_blank_nor_covered(decoded["asset_graph.png"], height // 8, 600, "the graph pane")
    _not_blank_nor_covered(decoded["fleet_view.png"], 150, 700, "the fleet view")
    _not_blank_nor_covered(decoded["fleet_trend.png"], 150, 80, "the plots")
