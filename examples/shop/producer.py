"""An asyncio producer (as in a FastAPI or aiohttp app): sends the shop's work and awaits the results on
one event loop, without threads and without blocking it.

    REDIS_URL=redis://localhost:6379/0 QUEUE_NAME=shop python -m examples.shop.producer
"""

from __future__ import annotations

import asyncio
import os

from examples.shop.tasks import charge_card, resize_image, send_email
from setqueue.aio import open_queue


async def main() -> int:
    url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
    async with open_queue(url, os.environ.get("QUEUE_NAME", "shop")) as q:
        # The order is the job's id: sending it twice is one job, one charge.
        order = await q.send(charge_card.options(id="order-1001"), "order-1001", 4999)
        again = await q.send(charge_card.options(id="order-1001"), "order-1001", 4999)
        receipt = await q.send(send_email, "ada@example.com", "Your receipt")
        images = [await q.send(resize_image, f"img/{n}.jpg", 640) for n in range(3)]
        welcome = await q.send("send_email", "bob@example.com", "Welcome")  # by name: nothing imported

        charged = await q.result(order, timeout=60)  # typed: dict[str, object], as charge_card returns
        print(f"charged {charged['charged_cents']} cents for {charged['order_id']} (sent twice: {not again.created})")
        sent = await q.result(receipt, timeout=60)
        print(f"email to {sent['to']}: {sent['status']}")
        resized = await asyncio.gather(*(q.result(image, timeout=60) for image in images))
        print("resized " + ", ".join(str(image["path"]) for image in resized))
        print(f"welcome email: {(await q.result(welcome, timeout=60))['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
