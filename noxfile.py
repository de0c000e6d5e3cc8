"""Developer sessions: one test session per package (found by globbing), the
integration tests, lint and types. CI runs the README's test command instead
(one environment for everything, which is faster on 2 cores)."""

from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.parent.name for p in ROOT.glob("packages/*/pyproject.toml"))
nox.options.reuse_existing_virtualenvs = True


def _install(session: nox.Session, *extra: str) -> None:
    session.install("torch==2.13.0")  # pinned first: a range would pull a CUDA build
    # the packages editable, and the test tools from the meta-package's one list
    session.install(*(f"-e{ROOT / 'packages' / p}" for p in PACKAGES), f"-e{ROOT}[test]", *extra)


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    _install(session)
    session.run("pytest", "--runslow", f"packages/{package}/tests", *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    _install(session)
    session.run("pytest", "--runslow", "tests", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "packages", "tests", "benchmarks", "noxfile.py")


@nox.session
def types(session: nox.Session) -> None:
    _install(session, "mypy")
    session.run("mypy", *(f"packages/{p}/src" for p in PACKAGES))
