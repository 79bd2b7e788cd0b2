"""The shop's background work, declared as tasks. A worker serves them all:

    JOB_HANDLER=examples.shop.tasks:tasks python -m worker

Importing this module needs no Redis and runs nothing: a producer may import it for typed sends (its
calls are checked against these signatures), or send by name without importing it at all."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import PurePosixPath

from setqueue import PermanentJobError, Tasks, current_lease

tasks = Tasks()


@tasks.task(name="send_email", max_attempts=3)
def send_email(to: str, subject: str) -> dict[str, str]:
    """Send one email (here: pretend to); retried up to 3 times if the mail server fails."""
    if "@" not in to:
        raise PermanentJobError(f"not an email address: {to!r}")  # no retry makes it right
    return {"to": to, "subject": subject, "status": "sent"}


@tasks.task(name="resize_image", timeout=30)
async def resize_image(path: str, width: int) -> dict[str, object]:
    """Resize an image (here: pretend to, without blocking the worker's event loop); 30 s at most."""
    await asyncio.sleep(0.01)
    stem = PurePosixPath(path)
    return {"path": str(stem.with_name(f"{stem.stem}-{width}w{stem.suffix}")), "width": width}


@tasks.task(name="charge_card", max_attempts=1)
def charge_card(order_id: str, amount_cents: int) -> dict[str, object]:
    """Charge an order once: never retried (max_attempts=1); send it with the order as the job's id, so a
    second send of the same order is the same job, not a second charge."""
    if amount_cents <= 0:
        raise PermanentJobError(f"order {order_id}: the amount must be positive, got {amount_cents}")
    receipt = hashlib.sha256(f"{order_id}:{amount_cents}".encode()).hexdigest()[:12]
    return {"order_id": order_id, "charged_cents": amount_cents, "receipt": receipt, "job": current_lease().id}
