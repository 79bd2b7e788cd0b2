"""What a newcomer porting a real app still trips on (issue 35: queue names, schedules, a shadowing
folder), each as it happened, on real processes and a real redis-server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

import setqueue
import setqueue.aio

# -- a comma in a library queue name


@pytest.mark.parametrize("opener", [setqueue.open_queue, setqueue.aio.open_queue], ids=["blocking", "asyncio"])
def test_a_comma_in_a_library_queue_name_is_refused_with_the_list_to_pass(
    opener: Callable[..., Any], redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    """It used to open a group of queues and put the job in the first."""
    charges, emails = f"{queue_name}-charges", f"{queue_name}-emails"
    with pytest.raises(ValueError, match="has a comma") as refused:
        opener(redis_url, f"{charges},{emails}").enqueue(["zz-1"])
    assert str(refused.value).endswith(f"several queues are a list, open_queue(url, {[charges, emails]!r})")
    assert client.keys(f"setqueue:{{{queue_name}*") == []
    both = setqueue.open_queue(redis_url, [charges, emails])  # the list still opens both, as one
    assert both.enqueue(["zz-1"]) == 1 and [q.name for q in both.queues] == [charges, emails]
    both.close()
