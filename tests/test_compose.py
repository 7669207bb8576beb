"""docker-compose.yml on paper: no Docker engine runs here, so the compose file is checked
by Debian's `docker-compose config` (when it is on PATH; `make compose-check` installs
it) and by reading the YAML: every Loam service is built from the one Dockerfile (the
engine runner from Dockerfile.engines, which adds Java and the engine environments), runs
a real `loam` service command against TiKV, and the gateway is the only published port
besides the engine runner's Spark Connect endpoint."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

#: the `loam` subcommands (DESIGN.md, issue 3); the compose services use the first five
SERVICE_COMMANDS = {"gateway", "queue-core", "sweeper", "relay", "engines"}
LOAM_COMMANDS = SERVICE_COMMANDS | {"dev", "jobs", "queues", "tokens"}
STORE = "tikv://pd:2379"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def loam_services(compose: dict) -> dict[str, dict]:
    return {n: s for n, s in compose["services"].items() if "build" in s}


def flags(command: list[str]) -> dict[str, str]:
    out, i = {}, 2
    while i < len(command):
        if command[i].startswith("--"):
            out[command[i]] = command[i + 1] if i + 1 < len(command) else ""
            i += 2
        else:
            i += 1
    return out


def test_store_images_are_pinned(compose):
    pd, tikv = compose["services"]["pd"], compose["services"]["tikv"]
    for svc, repo in ((pd, "pingcap/pd"), (tikv, "pingcap/tikv")):
        name, _, tag = svc["image"].partition(":")
        assert name == repo and re.fullmatch(r"v\d+\.\d+\.\d+", tag), svc["image"]
    assert pd["image"].split(":")[1] == tikv["image"].split(":")[1], "PD and TiKV on one version"
    assert "--pd=pd:2379" in tikv["command"]
    assert "--advertise-client-urls=http://pd:2379" in pd["command"]
    assert tikv["ulimits"]["nofile"]["soft"] >= 82920  # TiKV refuses to start below this


def test_every_service_runs_a_loam_command(compose):
    services = loam_services(compose)
    assert set(services) == SERVICE_COMMANDS
    for name, svc in services.items():
        command = svc["command"]
        assert isinstance(command, list) and command[0] == "loam", name
        assert command[1] in LOAM_COMMANDS, f"{name}: `loam {command[1]}` is not a loam command"
        assert command[1] == name, f"service {name} runs `loam {command[1]}`"


def test_one_dockerfile_and_tikv_for_all(compose):
    services = loam_services(compose)
    builds = {n: (s["build"]["context"], s["build"]["dockerfile"]) for n, s in services.items()}
    assert builds.pop("engines") == (".", "Dockerfile.engines")
    assert set(builds.values()) == {(".", "Dockerfile")}
    for dockerfile in (DOCKERFILE, ROOT / "Dockerfile.engines"):
        assert re.findall(r"^FROM (\S+)", dockerfile.read_text(), re.M) == ["python:3.12-slim"]
    tokens = set()
    for name, svc in services.items():
        env = svc["environment"]
        assert env["LOAM_STORE"] == STORE, name
        tokens.add(env["LOAM_INTERNAL_TOKEN"])
        assert {"pd", "tikv"} <= set(svc["depends_on"]), name
    assert len(tokens) == 1 and next(iter(tokens)).startswith("${LOAM_INTERNAL_TOKEN:?"), tokens


def test_gateway_is_the_only_public_port_and_has_auth(compose):
    services = compose["services"]
    published = {n for n, s in services.items() if s.get("ports")}
    assert published == {"gateway", "engines"}
    assert services["engines"]["ports"] == ["15002:15002"]  # Spark Connect; the proxy checks tokens
    gw = services["gateway"]
    f = flags(gw["command"])
    assert f["--host"] == "0.0.0.0"
    assert str(gw["environment"]["LOAM_AUTH"]).lower() == "on"
    core_port = flags(services["queue-core"]["command"])["--port"]
    assert f["--queue-cores"] == f"http://queue-core:{core_port}"
    assert str(services["engines"]["environment"]["LOAM_AUTH"]).lower() == "on"
    for name, svc in services.items():
        if name not in ("gateway", "engines") and "build" in svc:
            assert "LOAM_AUTH" not in svc["environment"], name


def _docker_compose(*args: str, token: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LOAM_INTERNAL_TOKEN"}
    if token is not None:
        env["LOAM_INTERNAL_TOKEN"] = token
    return subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="docker-compose not installed (make compose-check)"
)
def test_docker_compose_config_accepts_it():
    ok = _docker_compose("config", "-q", token="compose-check")
    assert ok.returncode == 0, ok.stderr
    # without the shared internal secret it refuses to start anything
    refused = _docker_compose("config", "-q", token=None)
    assert refused.returncode != 0 and "LOAM_INTERNAL_TOKEN" in refused.stderr


def _loam() -> str | None:
    exe = Path(sys.executable).parent / "loam"
    return str(exe) if exe.exists() else shutil.which("loam")


def test_service_flags_exist_in_the_cli(compose):
    """Once the CLI is wired, each compose flag must be one its subcommand accepts."""
    loam = _loam()
    if loam is None:
        pytest.skip("no loam executable")
    top = subprocess.run([loam, "--help"], capture_output=True, text=True, timeout=60)
    if top.returncode != 0:
        pytest.skip(f"loam CLI not wired yet: {top.stderr.strip() or top.stdout.strip()}")
    for name, svc in loam_services(compose).items():
        sub = svc["command"][1]
        help_ = subprocess.run([loam, sub, "--help"], capture_output=True, text=True, timeout=60)
        assert help_.returncode == 0, f"`loam {sub} --help`: {help_.stderr}"
        for flag in flags(svc["command"]):
            assert flag in help_.stdout, f"`loam {sub}` has no {flag} (used by service {name})"
