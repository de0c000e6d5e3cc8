"""One ``Config``, resolved from four layers (later wins):

1. defaults;
2. ``[tool.conveyor]`` in the nearest ``pyproject.toml`` (from the working
   directory upwards);
3. the environment: ``CONVEYOR_BACKEND``, ``CONVEYOR_ENABLE``,
   ``CONVEYOR_DISABLE`` (comma-separated stage names), ``CONVEYOR_AUTOLOAD``
   (``0`` turns off entry-point discovery), ``CONVEYOR_PLUGINS`` (allow-list of
   entry-point names), ``CONVEYOR_BLOCK_PLUGINS`` (block-list),
   ``CONVEYOR_DYNAMIC`` (``1``, ``0`` or ``auto``), ``CONVEYOR_CACHE`` (``0``
   turns off the persistent compile cache), ``CONVEYOR_CACHE_DIR`` (where it
   lives), ``CONVEYOR_PROGRESS`` (``0`` silences the progress lines of long
   compiles);
4. arguments to ``conveyor.compile(...)`` / ``torch.compile(..., options=...)``.

Per-stage options are tables keyed by stage name:
``[tool.conveyor.stages.triton]`` or ``compile(fn, stages={"triton": {...}})``.
Names are checked against the installed stages when a pipeline is built.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conveyor.errors import ConfigError


@dataclass(frozen=True)
class Config:
    """Resolved configuration.

    :ivar backend: the backend stage to use; ``None`` picks the installed
        backend that declares itself the default for the inputs' device type
        (``StageSpec.default_for``: triton for CUDA) and ``eager`` otherwise.
    :ivar enable: wrapper stages to switch on (those off by default).
    :ivar disable: stages to switch off.
    :ivar stages: per-stage option tables, by stage name.
    :ivar autoload: discover plugins through the ``conveyor`` entry-point group.
    :ivar plugins: if not ``None``, only these entry-point names are loaded.
    :ivar block_plugins: entry-point names never loaded.
    :ivar dynamic: symbolic sizes for ``conveyor.compile``: ``None`` (the
        default) compiles the first call static and, when a later call differs
        only in sizes, once more with those sizes symbolic; ``True`` is
        symbolic from the first call; ``False`` specializes on every size.
    :ivar cache: keep compiled programs on disk, so that another process
        compiling the same program skips the pipeline (``conveyor.runtime.disk_cache``).
    :ivar cache_dir: where; ``None`` is ``$XDG_CACHE_HOME/conveyor/programs``
        (``~/.cache/conveyor/programs``). A relative path in a
        ``pyproject.toml`` is relative to that file's folder.
    :ivar progress: a compile still running after a couple of seconds says
        on stderr which stage it is in (Note [Compile timings] in
        ``conveyor.protocol.timings``); ``False`` silences it.
    """

    backend: str | None = None
    enable: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()
    stages: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    autoload: bool = True
    plugins: tuple[str, ...] | None = None
    block_plugins: tuple[str, ...] = ()
    dynamic: bool | None = None
    cache: bool = True
    cache_dir: str | None = None
    progress: bool = True
    #: where each key was last set ("environment variable CONVEYOR_ENABLE", a pyproject.toml's path,
    #: "arguments"), for errors found later (an unknown stage name) to name it; not a setting
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        overlap = set(self.enable) & set(self.disable)
        if overlap:
            raise ConfigError(f"config: stages both enabled and disabled: {sorted(overlap)}")

    def merged(self, layer: Mapping[str, Any], source: str) -> Config:
        """This config overlaid with one layer of raw settings from ``source``."""
        valid = {f.name for f in dataclasses.fields(Config)} - {"sources"}
        unknown = sorted(set(layer) - valid)
        if unknown:
            raise ConfigError(
                f"config ({source}): unknown key(s) {unknown}; valid keys are {sorted(valid)}"
            )
        changes: dict[str, Any] = {}
        for key, value in layer.items():
            if key in ("enable", "disable", "block_plugins"):
                changes[key] = _names(value, key, source)
            elif key == "plugins":
                changes[key] = None if value is None else _names(value, key, source)
            elif key == "stages":
                if not isinstance(value, Mapping) or not all(
                    isinstance(v, Mapping) for v in value.values()
                ):
                    raise ConfigError(f"config ({source}): 'stages' must map stage names to option tables")
                combined = {k: dict(v) for k, v in self.stages.items()}
                for name, opts in value.items():
                    combined.setdefault(name, {}).update(opts)
                changes[key] = combined
            elif key == "backend":
                if value is not None and not isinstance(value, str):
                    raise ConfigError(f"config ({source}): 'backend' must be a stage name")
                changes[key] = value
            elif key in ("autoload", "cache", "progress"):
                changes[key] = _switch(value, key, source)
            elif key == "cache_dir":
                changes[key] = _cache_dir(value, source)
            elif key == "dynamic":
                changes[key] = _dynamic(value, source)
        # a later layer that enables a stage overrides an earlier disable and vice versa
        if "enable" in changes and "disable" not in changes:
            changes["disable"] = tuple(n for n in self.disable if n not in changes["enable"])
        if "disable" in changes and "enable" not in changes:
            changes["enable"] = tuple(n for n in self.enable if n not in changes["disable"])
        sources = {**self.sources, **{key: source for key in changes}}
        return dataclasses.replace(self, **changes, sources=sources)

    def source_of(self, key: str) -> str:
        """Where ``key`` was set, for an error message: ``" (from ...)"``, or nothing."""
        return f" (from {self.sources[key]})" if key in self.sources else ""

    def options_for(self, stage: str) -> Mapping[str, Any]:
        return self.stages.get(stage, {})


def _names(value: Any, key: str, source: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in (p.strip() for p in value.split(",")) if v]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"config ({source}): {key!r} must be a list of stage names")
    return tuple(value)


def _switch(value: Any, key: str, source: str) -> bool:
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"config ({source}): {key!r} must be 1/true/yes/on or 0/false/no/off, not {value!r}")
    if not isinstance(value, (bool, int)):
        raise ConfigError(f"config ({source}): {key!r} must be true or false, not {value!r}")
    return bool(value)


def _cache_dir(value: Any, source: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"config ({source}): 'cache_dir' must be a folder path, not {value!r}")
    path = Path(value).expanduser()
    if not path.is_absolute() and source.endswith("pyproject.toml"):
        path = Path(source).parent / path
    return str(path)


def _dynamic(value: Any, source: str) -> bool | None:
    if isinstance(value, str):
        words = {"1": True, "true": True, "0": False, "false": False, "auto": None, "none": None, "": None}
        if value.strip().lower() not in words:
            raise ConfigError(f"config ({source}): 'dynamic' must be true, false or auto, not {value!r}")
        return words[value.strip().lower()]
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"config ({source}): 'dynamic' must be true, false or None (auto), not {value!r}")
    return value


def pyproject_layer(start: Path | None = None) -> tuple[dict[str, Any], str]:
    """``[tool.conveyor]`` of the nearest pyproject.toml that has one."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            with candidate.open("rb") as fh:
                try:
                    data = tomllib.load(fh)
                except tomllib.TOMLDecodeError as exc:
                    raise ConfigError(f"config ({candidate}): not valid TOML: {exc}") from exc
            tool = data.get("tool", {})
            table = tool.get("conveyor") if isinstance(tool, dict) else None
            if table is not None and not isinstance(table, dict):
                raise ConfigError(
                    f"config ({candidate}): [tool.conveyor] must be a table (e.g. backend = \"eager\" under "
                    f"[tool.conveyor]), not a {type(table).__name__}: {table!r}"
                )
            if table is not None:
                return dict(table), str(candidate)
    return {}, "pyproject.toml"


_ENV = {
    "CONVEYOR_BACKEND": "backend",
    "CONVEYOR_ENABLE": "enable",
    "CONVEYOR_DISABLE": "disable",
    "CONVEYOR_AUTOLOAD": "autoload",
    "CONVEYOR_PLUGINS": "plugins",
    "CONVEYOR_BLOCK_PLUGINS": "block_plugins",
    "CONVEYOR_DYNAMIC": "dynamic",
    "CONVEYOR_CACHE": "cache",
    "CONVEYOR_CACHE_DIR": "cache_dir",
    "CONVEYOR_PROGRESS": "progress",
}


def resolve(
    overrides: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    start: Path | None = None,
) -> Config:
    """Defaults < pyproject.toml < environment < ``overrides``."""
    table, where = pyproject_layer(start)
    config = Config().merged(table, where)
    environ = os.environ if environ is None else environ
    for var, key in _ENV.items():  # one layer per variable: an error names it
        if var in environ:
            config = config.merged({key: environ[var]}, f"environment variable {var}")
    return config.merged(dict(overrides or {}), "arguments")
