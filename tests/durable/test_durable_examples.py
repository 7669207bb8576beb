"""The spec's durable examples end to end, against a real `loam dev`: the Celery task
`charge` (acks_late, on loam://) resumes after kill -9 of its worker in the middle of
a step, on another worker, without repeating the steps that had finished (counted in
a side file). The BullMQ `sendCampaign` example is in adapters/durable's tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from durable_kit import counts_of, wait_for

HERE = Path(__file__).resolve().parent
CELERY = str(Path(sys.executable).with_name("celery"))

pytestmark = pytest.mark.timeout(120)


class CeleryWorker:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [CELERY, "-A", "charge_app", "worker", "-l", "INFO", "--pool", "solo", "-n", f"w-{uuid.uuid4().hex[:6]}@%h",
             "--without-mingle", "--without-gossip"],
            cwd=HERE, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_for(
            lambda: " ready." in log.read_text(errors="replace") or self.proc.poll() is not None, 30, "worker"
        )
        assert self.proc.poll() is None, log.read_text()

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        self.kill9()
        self._out.close()


def test_celery_charge_resumes_after_kill9_without_repeating_finished_steps(
    dev_server, tmp_path, monkeypatch
):
    ns = f"durable-celery-{uuid.uuid4().hex[:6]}"
    url = f"loam://127.0.0.1:{dev_server.port}/{ns}"
    marks = tmp_path / "marks"
    hold = Path(str(marks) + ".hold")
    hold.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "RESONATE_"))}
    env.update(LOAM_CELERY_URL=url, DURABLE_MARKS=str(marks), PYTHONPATH=str(HERE), PYTHONUNBUFFERED="1",
               LOAM_URL=dev_server.url, LOAM_NAMESPACE=ns)  # fmt: skip
    monkeypatch.setenv("LOAM_CELERY_URL", url)
    sys.path.insert(0, str(HERE))
    import charge_app

    charge_app.app.conf.update(broker_url=url, result_backend=url)
    workers = [CeleryWorker(env, tmp_path / "w1.log")]
    try:
        result = charge_app.charge_task.delay("order-7")
        wait_for(lambda: counts_of(marks).get("capture") == 1, 30, "capture to start")
        workers[0].kill9()  # mid-step: reserve finished, capture did not
        hold.unlink()
        workers.append(CeleryWorker(env, tmp_path / "w2.log"))
        assert result.get(timeout=60) == "receipt-hold-order-7"
        c = counts_of(marks)
        assert c == {"reserve": 1, "capture": 2, "send_receipt": 1}, c
    finally:
        for w in workers:
            w.stop()
