"""``/index``: builds of the knowledge base, run as background jobs; ``/files``: what the index holds, per file;
``/scopes``: its knowledge bases (folders), with their counts."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from crag.api.http import INVALID, REMEDIES, ApiError, Json
from crag.api.schemas import ErrorOut, FilesOut, IndexRequest, JobCreated, JobOut, ScopesOut
from crag.api.service import Service
from crag.errors import said


def index_router(service: Service) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/index",
        summary="Start a build of the knowledge base",
        status_code=202,
        response_model=JobCreated,
        responses={409: {"model": ErrorOut, "description": "A build is already running."}, **INVALID},
    )
    def start_index(req: IndexRequest | None = None) -> Json:
        job = service.builds.start(req.rebuild if req else False)
        url = f"/index/{job.id}"
        return Json({"job": job.id, "status_url": url}, status_code=202, headers={"Location": url})

    @router.get(
        "/index/{job}",
        summary="Progress and per-file results of a build",
        response_model=JobOut,
        responses={404: {"model": ErrorOut, "description": "No such job in this server."}},
    )
    def index_status(job: str) -> dict[str, Any]:
        found = service.builds.get(job)
        if found is None:
            raise ApiError(
                404, "No build job with this id in this server (jobs live in memory): POST /index starts one."
            )
        return found.to_json() | {"error": said(found.error, found.remedy, REMEDIES) if found.error else None}

    @router.get(
        "/files",
        summary="The per-file manifest of the index",
        response_model=FilesOut,
        responses={409: {"model": ErrorOut, "description": "The index is damaged: rebuild it."}},
    )
    def files() -> dict[str, Any]:
        return service.files()

    @router.get(
        "/scopes",
        summary="The knowledge bases: folders of the files folder, with their counts",
        response_model=ScopesOut,
        responses={409: {"model": ErrorOut, "description": "The index is damaged: rebuild it."}},
    )
    def scopes() -> dict[str, Any]:
        return service.scopes()

    return router
