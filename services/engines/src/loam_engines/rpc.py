"""`EngineRpc`: the JobsService engine methods as `(ns, request) -> response` over the
`EngineRuns` facade. The queue core's CoreRpc hands them here (`CoreRpc(core,
engines=EngineRpc(...))`); parse and map only."""

from __future__ import annotations

from loam_common import validate
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_engines.service import EngineRuns


class EngineRpc:
    def __init__(self, engine_runs: EngineRuns) -> None:
        self.runs = engine_runs

    async def submit_engine_job(self, ns: str, req: J.SubmitEngineJobRequest) -> J.SubmitEngineJobResponse:
        if not req.HasField("job"):
            raise InvalidArgument("job", "is required")
        schedule = req.schedule if req.HasField("schedule") else None
        run, schedule_id = await self.runs.submit(ns, req.job, schedule)
        out = J.SubmitEngineJobResponse(schedule=schedule_id)
        if run is not None:
            out.run = run.id
            out.record.CopyFrom(run)
        return out

    async def control_engine_job(self, ns: str, req: J.ControlEngineJobRequest) -> J.ControlEngineJobResponse:
        validate.name("run", req.run)
        if not req.HasField("action") or not req.action.action:
            raise InvalidArgument("action.action", "is required")
        run = await self.runs.control(ns, req.run, req.action)
        return J.ControlEngineJobResponse(action=req.action.action, record=run)

    async def get_engine_run(self, ns: str, req: J.GetEngineRunRequest) -> J.GetEngineRunResponse:
        return J.GetEngineRunResponse(record=await self.runs.get(ns, req.run))

    async def list_engine_runs(self, ns: str, req: J.ListEngineRunsRequest) -> J.ListEngineRunsResponse:
        page, token = await self.runs.list(ns, req.page_size, req.page_token)
        return J.ListEngineRunsResponse(runs=page, next_page_token=token)

    async def list_engine_run_logs(
        self, ns: str, req: J.ListEngineRunLogsRequest
    ) -> J.ListEngineRunLogsResponse:
        lines, finished = await self.runs.logs(ns, req.run, req.after, req.limit, req.wait_ns)
        return J.ListEngineRunLogsResponse(lines=lines, finished=finished)
