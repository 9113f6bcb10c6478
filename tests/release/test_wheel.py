"""The release: ``python -m build`` makes an sdist and a wheel; the wheel installs in a clean
virtualenv and runs the README's quickstart against a server started from the same install,
with the C speedups, and without them (the ``.so`` removed, or ``AMPSCLIENT_PUREPYTHON=1``).

Selected with ``-m release`` (deselect with ``-m "not release"``): about a minute. The package
index is used for the build backend and the runtime dependencies (pip's cache is reused).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = [pytest.mark.release, pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART_URI = "tcp://127.0.0.1:9007/amps/json"


def run(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def source_tree(dest: Path) -> Path:
    """The project's files (tracked and new, not ignored, nothing built) copied to ``dest``."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in listed:
        path = ROOT / name
        if not name or name.endswith(".so") or "node_modules" in name or not path.is_file():
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dest


def quickstart() -> str:
    """The README's first python block."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks and QUICKSTART_URI in blocks[0]
    return blocks[0]


@contextmanager
def server(python: Path, bindir: Path, cwd: Path) -> Iterator[str]:
    """``ampsclient-server`` of the installed wheel on a free port; yields its tcp URI."""
    proc = subprocess.Popen(
        [str(bindir / "ampsclient-server"), "--tcp-port", "0", "--ws-port", "0"],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    found = threading.Event()
    lines: list[str] = []
    port: list[str] = []

    def reader() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            match = re.search(r"listening tcp://[^:]+:(\d+)", line)
            if match and not port:
                port.append(match.group(1))
                found.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        assert found.wait(60), "".join(lines)
        yield f"tcp://127.0.0.1:{port[0]}/amps/json"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        thread.join(5)


def test_wheel_installs_and_runs_in_a_clean_virtualenv(tmp_path: Path) -> None:
    src = source_tree(tmp_path / "src")
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--outdir", dist, src, cwd=tmp_path)
    wheels = list(dist.glob("ampsclient-*.whl"))
    sdists = list(dist.glob("ampsclient-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1

    from ampsclient import __version__

    assert wheels[0].name.startswith(f"ampsclient-{__version__}-")
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        entry_points = wheel.read(f"ampsclient-{__version__}.dist-info/entry_points.txt").decode()
    assert any(re.fullmatch(r"ampsclient/_speedups\..*\.so", n) for n in names), names
    assert any(re.fullmatch(r"ampsclient_server_stub/_speedups\..*\.so", n) for n in names), names
    assert "ampsclient/py.typed" in names
    assert "ampsclient_server_stub/admin/static/dashboard.html" in names
    assert not any(n.startswith("tests/") for n in names)
    assert "ampsclient = ampsclient.cli:main" in entry_points
    with tarfile.open(sdists[0]) as sdist:
        members = sdist.getnames()
    root = f"ampsclient-{__version__}"
    for name in (
        "ampsclient/_speedups.c",
        "ampsclient_server_stub/_speedups.c",
        "CHANGELOG.md",
        "LICENSE",
        "README.md",
    ):
        assert f"{root}/{name}" in members, name

    env_dir = tmp_path / "venv"
    run(sys.executable, "-m", "venv", env_dir, cwd=tmp_path)
    bindir = env_dir / "bin"
    python = bindir / "python"
    run(python, "-m", "pip", "install", "-q", wheels[0], cwd=tmp_path)

    work = tmp_path / "work"  # not the source tree: imports come from the installed wheel
    work.mkdir()
    where = run(python, "-c", "import ampsclient, sys; print(ampsclient.__file__)", cwd=work)
    package = Path(where.strip()).parent
    assert package.is_relative_to(env_dir), package
    assert run(bindir / "ampsclient", "--version", cwd=work).strip() == f"ampsclient {__version__}"

    check = "import ampsclient._accel as a; print(a.SPEEDUPS)"
    code = quickstart()
    with server(python, bindir, work) as uri:
        example = code.replace(QUICKSTART_URI, uri)
        # 1. with the C extension the wheel carries
        assert run(python, "-c", check, cwd=work).strip() == "True"
        out = run(python, "-c", example, cwd=work)
        assert '{"id": 1, "qty": 20}' in out
        # 2. forced pure Python
        pure = dict(os.environ, AMPSCLIENT_PUREPYTHON="1")
        assert run(python, "-c", check, cwd=work, env=pure).strip() == "False"
        assert '{"id": 1, "qty": 20}' in run(python, "-c", example, cwd=work, env=pure)
        # 3. the extension cannot load (removed): the same code falls back to pure Python
        for built in package.glob("_speedups*.so"):
            built.unlink()
        assert run(python, "-c", check, cwd=work).strip() == "False"
        assert '{"id": 1, "qty": 20}' in run(python, "-c", example, cwd=work)
        # and the command-line client of the install talks to the server
        pong = run(bindir / "ampsclient", "ping", "--server", uri, cwd=work)
        assert pong.startswith(f"pong from {uri}")
