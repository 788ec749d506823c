"""Async views that use Django's Tasks API (aenqueue, aget_result) on our backend."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from tests.testapp import framework_tasks


async def multiply(request: HttpRequest) -> JsonResponse:
    result = await framework_tasks.multiply.aenqueue(int(request.GET["a"]), int(request.GET["b"]))
    return JsonResponse({"id": result.id, "status": result.status}, status=201)


async def result(request: HttpRequest, result_id: str) -> JsonResponse:
    found = await framework_tasks.multiply.aget_result(result_id)
    await found.arefresh()
    value = found.return_value if found.is_finished else None
    return JsonResponse({"status": found.status, "value": value, "attempts": found.attempts})
