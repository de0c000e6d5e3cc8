"""Developer sessions: one test session per package (found by globbing), the
integration tests, the whole suite on each supported torch (``torch``), lint
and types. CI runs the README's test command instead (one environment for
everything, which is faster on 2 cores), then the default suite on 2.14.1."""

from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))
#: every torch conveyor supports and tests; 2.13.0 is the default (a CPU build on
#: this machine's disk), 2.14.1 a CUDA build on disk, 2.11.0 and 2.12.1 CUDA builds
#: from the registry (about 2.7 GB each); all run on CPU
TORCHES = ["2.11.0", "2.12.1", "2.13.0", "2.14.1"]
nox.options.reuse_existing_virtualenvs = True


def _install(session: nox.Session, *extra: str, torch: str = "2.13.0") -> None:
    session.install(f"torch=={torch}")  # pinned first: a range would pull a CUDA build
    # the packages editable, and the test tools from the meta-package's one list
    session.install(f"torch=={torch}", *(f"-e{ROOT / 'packages' / p}" for p in PACKAGES), f"-e{ROOT}[test]", *extra)


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    _install(session)
    session.run("pytest", "--runslow", f"packages/{package}/tests", *session.posargs)


@nox.session
def triton_aot(session: nox.Session) -> None:
    """The triton backend's tests with every kernel they launch compiled for
    sm_90 and sm_80 by the real Triton compiler (no GPU needed; about 0.3 s
    per kernel and target)."""
    _install(session)
    session.run("pytest", "--runslow", "--aot-check", "packages/triton_backend/tests", *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    _install(session)
    session.run("pytest", "--runslow", "tests", *session.posargs)


@nox.session
@nox.parametrize("torch", TORCHES)
def torch_version(session: nox.Session, torch: str) -> None:
    """The whole suite on one supported torch, in its own venv."""
    # Triton 3.6's interpreter (torch 2.11 and 2.12 pin it or 3.7) calls int() on
    # one-element arrays, which numpy 2.4 refuses
    _install(session, *(["numpy<2.4"] if torch < "2.13" else []), torch=torch)
    session.run("pytest", "--runslow", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "packages", "tests", "benchmarks", "noxfile.py")


@nox.session
def types(session: nox.Session) -> None:
    _install(session, "mypy")
    session.run("mypy", *(f"packages/{p}/src" for p in PACKAGES))
