"""Where the Flink distribution is: the `apache-flink` wheel installed in its own
virtualenv (`make engines-flink` → `.engines/flink`), never in Loam's own. The wheel's
`pyflink` package directory is a full FLINK_HOME (bin/, conf/, lib/, opt/); the venv's
python runs PyFlink jobs' client code and Python workers; a JDK 17 runs the JVMs.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from loam_common.errors import Unavailable

VENV_ENV = "LOAM_FLINK_VENV"
DEFAULT_VENV = Path(".engines") / "flink"


class FlinkUnavailable(Unavailable):
    """No Flink distribution or no Java: say what to install."""


@dataclass(frozen=True)
class FlinkDistribution:
    venv: Path
    home: Path  # FLINK_HOME: the installed pyflink package
    python: Path  # the venv's interpreter, for PyFlink clients and workers
    java_home: Path
    version: str

    @property
    def python_jar(self) -> Path:
        """`opt/flink-python-<v>.jar`: PythonDriver, the entry point of PyFlink and SQL jobs."""
        return self.home / "opt" / f"flink-python-{self.version}.jar"

    @property
    def classpath(self) -> str:
        """What a DataStream job compiles against (`javac -cp`)."""
        return str(self.home / "lib" / "*")

    @classmethod
    def locate(cls, venv: str | os.PathLike[str] | None = None) -> FlinkDistribution:
        """The distribution in `venv`, else $LOAM_FLINK_VENV, else the nearest `.engines/flink`
        above the working directory or this source file."""
        path = Path(venv or os.environ.get(VENV_ENV) or _find_default_venv()).resolve()
        homes = sorted(path.glob("lib/python3*/site-packages/pyflink"))
        if not homes or not (homes[0] / "bin" / "jobmanager.sh").exists():
            raise FlinkUnavailable(
                f"no Flink distribution in {path}: run `make engines-flink` (installs apache-flink "
                f"into .engines/flink) or point {VENV_ENV} at a virtualenv that has it"
            )
        home = homes[0]
        dists = sorted((home / "lib").glob("flink-dist-*.jar"))
        if not dists:
            raise FlinkUnavailable(f"{home}/lib has no flink-dist jar: the apache-flink install is broken")
        version = dists[0].name[len("flink-dist-") : -len(".jar")]
        return cls(
            venv=path, home=home, python=path / "bin" / "python", java_home=_java_home(), version=version
        )


def _find_default_venv() -> Path:
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for d in (start, *start.parents):
            if (d / DEFAULT_VENV / "bin" / "python").exists():
                return d / DEFAULT_VENV
    return Path.cwd() / DEFAULT_VENV


def _java_home() -> Path:
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    if java is None:
        raise FlinkUnavailable(
            "no `java` on PATH and no JAVA_HOME: Flink needs a JDK 17 (apt-get install openjdk-17-jdk-headless)"
        )
    return Path(java).resolve().parent.parent
