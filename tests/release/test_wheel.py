"""The release (docs/release.md): ``python -m build`` makes an sdist and a wheel, once per module.

- the wheel holds ``py.typed`` for both packages and the three compiled extensions, and its tag
  is this interpreter's (``cp311-cp311-linux_x86_64``); ``auditwheel repair`` turns it into a
  ``manylinux`` wheel where auditwheel and patchelf are installed;
- the sdist installs in a clean virtualenv with no C compiler (``CC``/``CXX`` = ``/bin/false``)
  and runs pure Python: the speedups report absent, the README's quickstart publishes and
  receives through a server started from that virtualenv;
- the wheel installs in a clean virtualenv and its extensions load; the same quickstart runs
  with them, forced pure (``AMPSCLIENT_PUREPYTHON=1``) and with the ``.so`` removed.

Selected with ``-m release`` (deselect with ``-m "not release"``): about a minute on 2 cores.
The package index is used for the build backend and the runtime dependencies (pip's cache is
reused); the virtualenvs are made without ``--system-site-packages``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.release, pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART_URI = "tcp://127.0.0.1:9007/amps/json"


def run(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> str:
    # a clean install sees none of this checkout: another test in this worker (the Spark
    # session fixture) may have put the source tree on PYTHONPATH
    base = dict(os.environ if env is None else env)
    base.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=base,
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
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONUNBUFFERED": "1"},
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


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path
    version: str


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """``python -m build`` on a copy of the source tree (about 16 s): one sdist, one wheel."""
    tmp = tmp_path_factory.mktemp("build")
    src = source_tree(tmp / "src")
    out = tmp / "dist"
    run(sys.executable, "-m", "build", "--outdir", out, src, cwd=tmp)
    wheels = list(out.glob("ampsclient-*.whl"))
    sdists = list(out.glob("ampsclient-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    from ampsclient import __version__

    return Dist(wheels[0], sdists[0], __version__)


def clean_venv(where: Path) -> tuple[Path, Path]:
    """A new virtualenv (no system site-packages); returns its python and bin directory."""
    run(sys.executable, "-m", "venv", where, cwd=where.parent)
    bindir = where / "bin"
    return bindir / "python", bindir


SPEEDUPS = (
    "import ampsclient._accel as a, ampsclient_server_stub.accel as s, "
    "ampsclient_server_stub.queues.speedups as q; print(a.SPEEDUPS, s.SPEEDUPS, q.SPEEDUPS)"
)
EXTENSIONS = (
    r"ampsclient/_speedups\.cpython-\d+[^/]*\.so",
    r"ampsclient_server_stub/_speedups\.cpython-\d+[^/]*\.so",
    r"ampsclient_server_stub/queues/_queue_speedups\.cpython-\d+[^/]*\.so",
    r"ampsclient/spark/_json_speedups\.cpython-\d+[^/]*\.so",
)


def wheel_tag() -> str:
    """The tag ``bdist_wheel`` gives a CPython extension wheel here: cp311-cp311-linux_x86_64."""
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"{py}-{py}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"


def test_wheel_carries_types_extensions_and_its_tags(dist: Dist) -> None:
    v = dist.version
    assert dist.wheel.name == f"ampsclient-{v}-{wheel_tag()}.whl"
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = wheel.namelist()
        meta = wheel.read(f"ampsclient-{v}.dist-info/WHEEL").decode()
        entry_points = wheel.read(f"ampsclient-{v}.dist-info/entry_points.txt").decode()
    assert "ampsclient/py.typed" in names
    assert "ampsclient_server_stub/py.typed" in names
    for pattern in EXTENSIONS:
        assert any(re.fullmatch(pattern, n) for n in names), (pattern, names)
    assert f"Tag: {wheel_tag()}" in meta.splitlines()
    assert "Root-Is-Purelib: false" in meta.splitlines()
    assert "ampsclient_server_stub/admin/static/dashboard.html" in names
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    assert not any(n.endswith((".c", ".h")) for n in names)
    assert "ampsclient = ampsclient.cli:main" in entry_points
    assert "ampsclient-server = ampsclient_server_stub.__main__:main" in entry_points

    with tarfile.open(dist.sdist) as sdist:
        members = sdist.getnames()
    root = f"ampsclient-{v}"
    # the client's C speedups: every source file of the one module, and the header they share
    client_c = sorted(p.name for p in (ROOT / "ampsclient" / "_speedups_src").glob("*.[ch]"))
    assert "speedups.h" in client_c and "module.c" in client_c, client_c
    for name in (
        *(f"ampsclient/_speedups_src/{c}" for c in client_c),
        "ampsclient_server_stub/_speedups.c",
        "ampsclient_server_stub/queues/_queue_speedups.c",
        "ampsclient/spark/_json_speedups.c",
        "ampsclient/py.typed",
        "ampsclient_server_stub/py.typed",
        "setup.py",
        "pyproject.toml",
        "CHANGELOG.md",
        "LICENSE",
        "README.md",
    ):
        assert f"{root}/{name}" in members, name
    assert not any(m.endswith(".so") for m in members)
    assert not any(m.startswith(f"{root}/tests") for m in members)


def test_auditwheel_repair_gives_a_manylinux_wheel(dist: Dist, tmp_path: Path) -> None:
    auditwheel = shutil.which("auditwheel", path=str(Path(sys.executable).parent))
    if auditwheel is None:
        pytest.skip("auditwheel is not installed (pip install auditwheel)")
    if shutil.which("patchelf", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}") is None:
        pytest.skip("patchelf is not installed (pip install patchelf): auditwheel repair needs it")
    if not sys.platform.startswith("linux"):
        pytest.skip("manylinux wheels are for Linux")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    shown = run(auditwheel, "show", dist.wheel, cwd=tmp_path, env=env)
    match = re.search(r'platform tag:\s*"(manylinux_\d+_\d+_\w+)"', shown)
    if match is None:
        pytest.skip(f"auditwheel finds no manylinux tag for this machine's build:\n{shown}")
    tag = match.group(1)
    run(auditwheel, "repair", "--wheel-dir", tmp_path / "fixed", dist.wheel, cwd=tmp_path, env=env)
    fixed = list((tmp_path / "fixed").glob("*.whl"))
    assert len(fixed) == 1
    assert fixed[0].name.endswith(f"-{tag}.whl"), fixed[0].name
    with zipfile.ZipFile(fixed[0]) as wheel:
        names = wheel.namelist()
        meta = wheel.read(f"ampsclient-{dist.version}.dist-info/WHEEL").decode()
    assert any(line.startswith("Tag: ") and line.endswith(tag) for line in meta.splitlines())
    assert "ampsclient/py.typed" in names and "ampsclient_server_stub/py.typed" in names
    for pattern in EXTENSIONS:
        assert any(re.fullmatch(pattern, n) for n in names), pattern


def test_sdist_installs_without_a_compiler_and_runs_pure_python(dist: Dist, tmp_path: Path) -> None:
    python, bindir = clean_venv(tmp_path / "venv")
    nocc = dict(os.environ, CC="/bin/false", CXX="/bin/false")
    nocc.pop("AMPSCLIENT_PUREPYTHON", None)
    nocc.pop("AMPSCLIENT_NO_EXTENSIONS", None)
    run(python, "-m", "pip", "install", "-q", dist.sdist, cwd=tmp_path, env=nocc)

    work = tmp_path / "work"  # not the source tree: imports come from the install
    work.mkdir()
    where = run(python, "-c", "import ampsclient, sys; print(ampsclient.__file__)", cwd=work)
    site = Path(where.strip()).parent.parent
    assert site.is_relative_to(tmp_path / "venv"), site
    # nothing was compiled: no extension in the install, the speedups report absent
    assert not list(site.glob("ampsclient*/**/*.so"))
    env = dict(os.environ)
    env.pop("AMPSCLIENT_PUREPYTHON", None)
    assert run(python, "-c", SPEEDUPS, cwd=work, env=env).split() == ["False"] * 3
    assert run(bindir / "ampsclient", "--version", cwd=work).strip() == f"ampsclient {dist.version}"
    with server(python, bindir, work) as uri:
        out = run(python, "-c", quickstart().replace(QUICKSTART_URI, uri), cwd=work, env=env)
        assert '{"id": 1, "qty": 20}' in out


def test_wheel_installs_and_runs_in_a_clean_virtualenv(dist: Dist, tmp_path: Path) -> None:
    python, bindir = clean_venv(tmp_path / "venv")
    run(python, "-m", "pip", "install", "-q", dist.wheel, cwd=tmp_path)

    work = tmp_path / "work"  # not the source tree: imports come from the installed wheel
    work.mkdir()
    where = run(python, "-c", "import ampsclient, sys; print(ampsclient.__file__)", cwd=work)
    package = Path(where.strip()).parent
    assert package.is_relative_to(tmp_path / "venv"), package
    assert run(bindir / "ampsclient", "--version", cwd=work).strip() == f"ampsclient {dist.version}"

    env = dict(os.environ)
    env.pop("AMPSCLIENT_PUREPYTHON", None)
    check = "import ampsclient._accel as a; print(a.SPEEDUPS)"
    code = quickstart()
    # the wheel's three extensions load
    assert run(python, "-c", SPEEDUPS, cwd=work, env=env).split() == ["True"] * 3
    with server(python, bindir, work) as uri:
        example = code.replace(QUICKSTART_URI, uri)
        # 1. with the C extension the wheel carries
        assert run(python, "-c", check, cwd=work, env=env).strip() == "True"
        out = run(python, "-c", example, cwd=work, env=env)
        assert '{"id": 1, "qty": 20}' in out
        # 2. forced pure Python
        pure = dict(env, AMPSCLIENT_PUREPYTHON="1")
        assert run(python, "-c", check, cwd=work, env=pure).strip() == "False"
        assert '{"id": 1, "qty": 20}' in run(python, "-c", example, cwd=work, env=pure)
        # 3. the extension cannot load (removed): the same code falls back to pure Python
        for built in package.glob("_speedups*.so"):
            built.unlink()
        assert run(python, "-c", check, cwd=work, env=env).strip() == "False"
        assert '{"id": 1, "qty": 20}' in run(python, "-c", example, cwd=work, env=env)
        # and the command-line client of the install talks to the server
        pong = run(bindir / "ampsclient", "ping", "--server", uri, cwd=work)
        assert pong.startswith(f"pong from {uri}")
