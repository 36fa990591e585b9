"""``GET /health``: the backends, the models and the index, as this server sees them now."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from crag.api.schemas import HealthOut
from crag.api.service import Service


def health_router(service: Service) -> APIRouter:
    router = APIRouter()

    @router.get("/health", summary="Backends, models and index", response_model=HealthOut)
    def health() -> dict[str, Any]:
        return service.health()

    return router
