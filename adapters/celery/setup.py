"""Installs `loam_celery.pth` next to the package in site-packages (decision 0029): the
start-up hook that registers kombu's `loam` transport alias, so a Celery app needs only
its URLs. Everything else is declared in pyproject.toml.

setuptools has no declarative way to put a file at the root of site-packages, so two
commands are extended: `build_py` (regular wheels) and `editable_wheel` (`pip install
-e`, which builds its wheel without build_py's outputs)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = Path(__file__).parent / "loam_celery.pth"


class BuildPyWithStartupHook(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(str(PTH), str(Path(self.build_lib) / PTH.name), preserve_mode=False)


class _StrategyWithStartupHook:
    """Wraps the editable install's strategy: its files, plus the hook."""

    def __init__(self, strategy) -> None:
        self.strategy = strategy

    def __call__(self, wheel, files, mapping) -> None:
        self.strategy(wheel, files, mapping)
        wheel.writestr(PTH.name, PTH.read_bytes())

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.strategy.__exit__(*exc)


class EditableWheelWithStartupHook(editable_wheel):
    def _select_strategy(self, name, tag, build_lib):
        return _StrategyWithStartupHook(super()._select_strategy(name, tag, build_lib))


setup(cmdclass={"build_py": BuildPyWithStartupHook, "editable_wheel": EditableWheelWithStartupHook})
